/** Deno and Node behave alike behind src/runtime: thread failures, environment variables. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { projectRoot, test } from "../harness.ts";
import { SERVE_COMMANDS, spawnServe } from "../serve-process.ts";
import { spawnThread } from "../../src/runtime/threads.ts";
import { envVar } from "../../src/runtime/env.ts";
import { loadNativeAddon } from "../../src/runtime/native.ts";
import { openRandomAccess } from "../../src/runtime/fs.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";

/** The first error `fixture`'s thread reports, with its handler set only after `delayMs`. */
async function threadError(fixture: string, delayMs: number): Promise<Error> {
  const port = await spawnThread(new URL(`./fixtures/${fixture}`, import.meta.url));
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    // The thread fails long before the handler is set: the error must wait for it, not go unhandled.
    await new Promise((r) => setTimeout(r, delayMs));
    // The deadline only turns a hang into a failure: a thread's start (its module graph) can take
    // seconds on a loaded CI machine.
    return await new Promise<Error>((resolve, reject) => {
      port.onError(resolve);
      timer = setTimeout(() => reject(new Error(`${fixture}: no error reported in 60 s`)), 60_000);
    });
  } finally {
    clearTimeout(timer);
    await port.close();
  }
}

test("spawnThread() holds a thread's error at start until onError() is set, as one line naming the error's class", async () => {
  for (const [fixture, message] of [
    ["thread-throws.ts", /^RangeError: Thread fixture failed at start$/],
    ["thread-rejects.ts", /^TypeError: Thread fixture rejected at start$/],
    ["thread-bad-import.ts", /no-such-module-hunt5\.ts/],
  ] as const) {
    for (const delayMs of [300, 0]) {
      const e = await threadError(fixture, delayMs);
      assert.match(e.message, message, fixture);
      assert.equal(e.message.split("\n").length, 1, `one line: ${JSON.stringify(e.message)}`);
      // deno-lint-ignore no-control-regex
      assert.doesNotMatch(e.message, /\x1b\[/, "no terminal colours");
      assert.doesNotMatch(e.message, /^Uncaught/, "no runtime-specific prefix");
    }
  }
});

test("a thread that fails at start leaves one line on stderr, on Deno and Node alike", () => {
  for (const runtime of ["deno", "node"] as const) {
    const [cmd, serveArgs] = SERVE_COMMANDS[runtime];
    const r = spawnSync(cmd, [...serveArgs.slice(0, -1), `${projectRoot}/tests/runtime/fixtures/thread-failure-cli.ts`], {
      cwd: projectRoot, encoding: "utf8", timeout: 120_000, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" },
    });
    assert.equal(r.status, 0, `${runtime}: ${r.stderr}`);
    assert.equal(r.stderr, "worker w0 failed: RangeError: Thread fixture failed at start\n", runtime);
  }
});

test("cliArgs() and envVar() read the same on Deno and Node: spaces, =, empty values, and the \"--\" a task runner forwards", () => {
  const args = ["--model", "a b.gguf", "--stop=x = y", "", "--api-key", "k=v w"];
  for (const runtime of ["deno", "node"] as const) {
    const [cmd, serveArgs] = SERVE_COMMANDS[runtime];
    const fixture = `${projectRoot}/tests/runtime/fixtures/print-args.ts`;
    for (const [given, seen] of [[args, args], [["--", ...args], args], [["--", "--"], ["--"]]]) {
      const r = spawnSync(cmd, [...serveArgs.slice(0, -1), fixture, ...given], {
        cwd: projectRoot, encoding: "utf8", timeout: 120_000, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "", HUNT5_VALUE: " x=1 \"y\" " },
      });
      assert.equal(r.status, 0, r.stderr);
      // `deno task serve -- --port 1` hands the script its "--"; `npm run serve -- --port 1` does not.
      assert.deepEqual(JSON.parse(r.stdout), { args: seen, value: " x=1 \"y\" " }, `${runtime} ${JSON.stringify(given)}`);
    }
  }
});

test("envVar() answers undefined for a name no variable can have, on both runtimes", () => {
  for (const name of ["", "A=B", "NUL\0NAME"]) assert.equal(envVar(name), undefined, JSON.stringify(name));
  assert.equal(typeof envVar("PATH"), "string");
});

/** What `--backend auto` says under `runtime`, with WebGPU taken away when `hide`. */
function autoReason(runtime: "node" | "deno", hide: boolean): string {
  const [cmd, serveArgs] = SERVE_COMMANDS[runtime];
  const fixture = `${projectRoot}/tests/runtime/fixtures/auto-backend.ts`;
  const r = spawnSync(cmd, [...serveArgs.slice(0, -1), fixture], {
    cwd: projectRoot, encoding: "utf8", timeout: 120_000, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "", HIDE_WEBGPU: hide ? "1" : "" },
  });
  assert.equal(r.status, 0, r.stderr);
  return (JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { reason: string }).reason;
}

test("--backend auto picks the same backend on Deno and Node, and says why WebGPU is unavailable when it is", () => {
  const picked = (reason: string) => /^auto picked (\w+)|^(\w+)/.exec(reason)?.slice(1).find((s) => s);
  assert.equal(picked(autoReason("deno", false)), picked(autoReason("node", false)));
  const node = autoReason("node", true);
  assert.match(node, /^auto picked reference;/);
  assert.match(node, /webgpu \(could not start: WebGPU on Node needs the "webgpu" package \(Dawn\), which did not load: Cannot find package 'webgpu' \(hidden by the test\)\)/);
  const deno = autoReason("deno", true);
  assert.match(deno, /^auto picked reference;/);
  assert.match(deno, /webgpu \(could not start: This Deno has no WebGPU: navigator\.gpu is missing\)/);
});

test("loadNativeAddon() loads only a .node file, never runs another file as JavaScript, and reads a relative path from the working directory", () => {
  const dir = mkdtempSync(`${tmpdir()}/native-hunt5-`);
  try {
    const script = `${dir}/not-an-addon.cjs`;
    writeFileSync(script, "globalThis.nativeHunt5Ran = true; module.exports = {};");
    assert.throws(() => loadNativeAddon(script), (e: unknown) => e instanceof TypeError && e.message === `A Node-API addon is a ".node" file; got "${script}"`);
    assert.equal((globalThis as { nativeHunt5Ran?: boolean }).nativeHunt5Ran, undefined, "the script did not run");
    // A relative path is the user's (EVOLVING_CUDA_ADDON=build/x.node), not a package under this file's node_modules.
    assert.throws(() => loadNativeAddon("no-such-dir-hunt5/addon.node"), (e: unknown) => e instanceof Error && e.message.includes(`${process.cwd()}/no-such-dir-hunt5/addon.node`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve --workers 2 --transport threads gives the same seeded text on Deno and Node, and SIGINT ends either process with 0", async () => {
  const texts: string[] = [];
  for (const runtime of ["deno", "node"] as const) {
    const p = await spawnServe(runtime, ["--port", "0", "--backend", "reference", "--workers", "2", "--transport", "threads", "--kv-blocks", "64"]);
    try {
      const body = { model: "stories260K", prompt: "Once upon a time", max_tokens: 24, temperature: 0.8, seed: 7 };
      const r = await fetch(`${p.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      assert.equal(r.status, 200);
      texts.push((await r.json() as { choices: { text: string }[] }).choices[0].text);
      process.kill(p.child.pid!, "SIGINT");
      // Only a hang fails here: stopping two worker threads can take seconds on a loaded machine.
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise((res) => (timer = setTimeout(() => res("still running after 60 s"), 60_000)));
      const exited = await Promise.race([p.exited, timeout]);
      clearTimeout(timer);
      assert.equal(exited, 0, `${runtime}: ${p.stderr()}`);
      assert.match(p.stderr(), /serve: stopped\n/);
    } finally {
      if (p.child.exitCode === null) p.child.kill("SIGKILL");
    }
  }
  assert.ok(texts[0].length > 0);
  assert.equal(texts[1], texts[0], "Node's text is Deno's");
});

test("RandomAccessFile.read() refuses a position or length no file has, on both runtimes, instead of reading from wherever the file is", async () => {
  const dir = mkdtempSync(`${tmpdir()}/fs-hunt5-`);
  writeFileSync(`${dir}/eight.bin`, new Uint8Array([10, 11, 12, 13, 14, 15, 16, 17]));
  const f = await openRandomAccess(`${dir}/eight.bin`);
  try {
    assert.deepEqual([...await f.read(4, 2)], [14, 15]);
    // Node reads a negative, fractional or unsafe position as "from the current position": bytes from elsewhere.
    for (const [offset, length] of [[-1, 2], [-2, 2], [1.5, 2], [2 ** 53, 2], [NaN, 2], [Infinity, 2], [2, -1], [2, 1.5], [2 ** 53 - 2, 4]]) {
      await assert.rejects(f.read(offset, length), (e: unknown) => e instanceof RangeError && e.message.startsWith(`Cannot read ${length} bytes at byte ${offset} of "${dir}/eight.bin"`), `${offset}, ${length}`);
    }
    assert.deepEqual([...await f.read(6, 2)], [16, 17], "a refused read moves nothing");
    assert.deepEqual([...await f.read(8, 0)], []);
  } finally {
    await f.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

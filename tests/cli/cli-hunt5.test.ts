/**
 * Command-line mistakes as users make them: a flag given twice, a misspelled flag, an odd --host, a
 * port that is taken (learned before the model loads), a worker that cannot listen. One line, exit 2.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { projectRoot, test } from "../harness.ts";
import { spawnServe } from "../serve-process.ts";
import { ArgsError, type FlagSpecs, parseArgs } from "../../src/cli/args.ts";

const SPECS = {
  model: { kind: "string", help: "path" },
  port: { kind: "int", min: 0, help: "port" },
  "max-tokens": { kind: "int", min: 0, help: "count" },
  json: { kind: "boolean", help: "json" },
} satisfies FlagSpecs;

const LOADER = `${projectRoot}/node_modules/tsx/dist/loader.mjs`;

/** Runs a CLI under Node (tsx) or Deno and returns its exit code and stderr. */
function cli(script: string, args: string[], runtime: "node" | "deno" = "node", timeout = 60_000) {
  const [cmd, pre] = runtime === "node" ? ["node", ["--import", LOADER]] : [`${projectRoot}/node_modules/deno/deno`, ["run", "-A"]];
  const r = spawnSync(cmd, [...pre, `${projectRoot}/src/cli/${script}`, ...args], {
    cwd: projectRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, timeout,
  });
  return { status: r.status, stderr: r.stderr ?? "" };
}

function assertOneLine(r: { status: number | null; stderr: string }, message: RegExp): void {
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, message);
  assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
}

/** A port some other socket holds for the length of `fn`. */
async function withTakenPort(fn: (port: number) => void | Promise<void>): Promise<void> {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, "127.0.0.1", r));
  try {
    await fn((holder.address() as { port: number }).port);
  } finally {
    await new Promise<void>((r) => holder.close(() => r()));
  }
}

test("parseArgs() refuses a flag given twice with different values, quoting both", () => {
  assert.throws(() => parseArgs(["--port", "8000", "--port=8001"], SPECS), (e) =>
    e instanceof ArgsError && e.message === `Flag --port is given twice, as "8000" and "8001"; give it once`);
  assert.throws(() => parseArgs(["--model", "a.gguf", "--json", "--model", "b.gguf"], SPECS), /Flag --model is given twice, as "a\.gguf" and "b\.gguf"/);
  assert.throws(() => parseArgs(["--json", "--json=false"], SPECS), /Flag --json is given twice, as "true" and "false"/);
  // The same value twice says nothing contradictory.
  assert.deepEqual(parseArgs(["--port", "8000", "--port", "8000", "--json", "--json"], SPECS), { port: 8000, json: true });
});

test("parseArgs() suggests the flag a misspelled one was meant to be", () => {
  for (const [typo, meant] of [["--modle", "--model"], ["--Model", "--model"], ["--max_tokens", "--max-tokens"], ["--maxtokens", "--max-tokens"], ["--prot", "--port"]]) {
    assert.throws(() => parseArgs([typo, "1"], SPECS), (e) =>
      e instanceof ArgsError && e.message === `Unknown flag "${typo}"; did you mean ${meant}? (--help lists the flags)`, typo);
  }
  // Nothing close: the list of flags, as before.
  assert.throws(() => parseArgs(["--temperature", "1"], SPECS), (e) =>
    e instanceof ArgsError && e.message === `Unknown flag "--temperature"; known flags: --model, --port, --max-tokens, --json`);
});

test("serve CLI refuses a --host with a port, a scheme or a path, naming the flag, and takes a bracketed IPv6 address", () => {
  for (const [host, message] of [
    ["127.0.0.1:8000", /^serve: Flag --host takes a host name or IP address without a port, got "127\.0\.0\.1:8000"; give the port with --port$/m],
    ["http://localhost", /^serve: Flag --host takes a host name or IP address without a port, got "http:\/\/localhost"; give the port with --port$/m],
    ["local host", /^serve: Flag --host takes a host name or IP address, got "local host"$/m],
    ["[127.0.0.1]", /^serve: Flag --host takes a host name or IP address, got "\[127\.0\.0\.1\]"$/m],
  ] as const) {
    assertOneLine(cli("serve.ts", ["--host", host, "--port", "0", "--backend", "reference"]), message);
  }
  // A host name that does not resolve is learned before the model loads (the model here does not exist).
  assertOneLine(cli("serve.ts", ["--host", "no-such-host.invalid", "--port", "0", "--model", "/no/such/model.gguf"]),
    /^serve: Cannot listen on no-such-host\.invalid:0: .*ENOTFOUND/m);
});

test("serve CLI with --host [::1] listens on ::1", async () => {
  const { child, url, exited } = await spawnServe("node", ["--host", "[::1]", "--port", "0", "--backend", "reference", "--kv-blocks", "16"]);
  try {
    assert.match(url, /^http:\/\/\[::1\]:\d+$/);
    assert.equal((await fetch(`${url}/health`)).status, 200);
  } finally {
    child.kill("SIGKILL");
    await exited;
  }
});

for (const runtime of ["node", "deno"] as const) {
  test(`serve CLI under ${runtime} says a port is taken before it loads the model`, async () => {
    await withTakenPort((port) => {
      // The model does not exist: had it been loaded first, its error would have come instead.
      const r = cli("serve.ts", ["--port", String(port), "--model", "/no/such/model.gguf"], runtime);
      assertOneLine(r, new RegExp(`^serve: Cannot listen on 127\\.0\\.0\\.1:${port}: .*in use`, "im"));
    });
  });
}

test("worker CLI names --listen and the address when it cannot listen there, in one line", async () => {
  await withTakenPort((port) => {
    assertOneLine(cli("worker.ts", ["--listen", `127.0.0.1:${port}`], "node", 20_000), new RegExp(`^worker: Cannot listen on 127\\.0\\.0\\.1:${port} \\(--listen\\): .*in use`, "im"));
  });
  assertOneLine(cli("worker.ts", ["--listen", "no-such-host.invalid:0"], "node", 20_000), /^worker: Cannot listen on no-such-host\.invalid:0 \(--listen\): .*ENOTFOUND/m);
  assertOneLine(cli("worker.ts", ["--listen", "127.0.0.1:99999"], "node", 20_000), /^worker: Flag --listen: A worker address must be host:port, got "127\.0\.0\.1:99999"$/m);
  assertOneLine(cli("worker.ts", ["--nats", "127.0.0.1:4222", "--advertise", "nowhere"], "node", 20_000), /^worker: Flag --advertise: A worker address must be host:port, got "nowhere"$/m);
});

test("generate CLI refuses an empty --model as serve does, before any load", () => {
  assertOneLine(cli("generate.ts", ["--model=", "--backend", "reference"]), /^error: Flag --model needs a non-empty value, got ""$/m);
});

test("serve CLI refuses --kv-memory-fraction beside --kv-blocks instead of ignoring it", () => {
  assertOneLine(cli("serve.ts", ["--kv-blocks", "16", "--kv-memory-fraction", "0.1", "--port", "0", "--backend", "reference"]),
    /^serve: Flags --kv-blocks 16 and --kv-memory-fraction 0\.1 both size the KV cache; give one$/m);
});

test("serve and generate CLIs say an adapter or draft model file is missing before they load the model", () => {
  // The model does not exist either: had it been loaded first, its error would have come instead.
  const noModel = ["--model", "/no/such/model.gguf", "--backend", "reference"];
  assertOneLine(cli("serve.ts", [...noModel, "--port", "0", "--lora-modules", "pirate=/no/such/pirate.gguf"]),
    /^serve: --lora-modules "pirate": LoRA adapter not found: "\/no\/such\/pirate\.gguf"$/m);
  assertOneLine(cli("serve.ts", [...noModel, "--port", "0", "--speculative-config", '{"method": "draft_model", "model": "/no/such/draft.gguf", "num_speculative_tokens": 2}']),
    /^serve: The speculative draft model cannot be loaded: Model file not found: "\/no\/such\/draft\.gguf"$/m);
  assertOneLine(cli("generate.ts", [...noModel, "--lora", "/no/such/pirate.gguf"]), /^error: LoRA adapter not found: "\/no\/such\/pirate\.gguf"$/m);
});

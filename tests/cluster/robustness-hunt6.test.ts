/**
 * Cluster robustness: a worker thread that ends without a word (start fails naming it, on Deno and
 * Node alike, instead of waiting for good), and a reloaded LoRA adapter's worker-side name kept out of
 * what clients read.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { SERVE_COMMANDS } from "../serve-process.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Cluster } from "../../src/cluster/cluster.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import { RemoteEngine, RemoteWorkerError } from "../../src/cluster/remote-engine.ts";
import type { FromWorker, ToWorker, WorkerReport } from "../../src/cluster/worker-protocol.ts";
import { WORKER_START_TIMEOUT_VAR, workerStartTimeoutS } from "../../src/cluster/worker-start.ts";
import { LoraAdapterError, MAX_LORA_ADAPTERS } from "../../src/engine/engine-adapters.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { spawnThread, ThreadExitError, type ThreadPort } from "../../src/runtime/threads.ts";
import { greedy, model, modelPath, run, STORY } from "./fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/robustness-hunt6-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const loraPath = `${dir}/a.gguf`;
await writeFile(loraPath, loraGgufBytes(model.config, { seed: 61, rank: 4, alpha: 8, targets: [{ layer: 0, target: "wq" }], magnitude: 0.5 }));
const adapter = await loadLoraAdapter(loraPath, model.config);
/** The name the workers hold the first reload of "a" under (cluster-adapters.ts). */
const RELOADED = "a\u0000reload-1";

const fixture = (name: string) => new URL(`./thread-fixtures/${name}`, import.meta.url);

/** Rejects when `p` has not settled within `ms` (the bug: a start that waits for good). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

for (const [entry, how] of [["ends.ts", "its module ends"], ["closes.ts", "it closes itself"], ["exits.ts", "it calls process.exit(0)"]] as const) {
  test(`RemoteEngine.over() fails naming the worker when ${how} before it is ready`, async () => {
    const port = await spawnThread(fixture(entry));
    const start = RemoteEngine.over(port, "worker-3", { path: "model.gguf" }, "reference", {}, () => {});
    await within(
      assert.rejects(start, (e: unknown) => {
        assert.ok(e instanceof RemoteWorkerError, String(e));
        assert.equal(e.message, "Worker worker-3 could not start: its thread ended by itself (exit code 0) without an error, before it was ready");
        return true;
      }),
      10_000, `the start of a worker whose thread ${how}`,
    );
  });
}

test("spawnThread() reports a thread that ends by itself as a ThreadExitError, held until onError() is set, and nothing once the parent ends it", async () => {
  for (const entry of ["ends.ts", "closes.ts"]) {
    const port = await spawnThread(fixture(entry));
    await new Promise((r) => setTimeout(r, 300));
    const e = await within(new Promise<Error>((resolve) => port.onError(resolve)), 10_000, entry);
    assert.ok(e instanceof ThreadExitError, entry);
    assert.equal(e.exitCode, 0);
    await port.close();
  }
  const port = await spawnThread(fixture("mute.ts"));
  const heard: Error[] = [];
  port.onError((e) => heard.push(e));
  await new Promise((r) => setTimeout(r, 200));
  await port.close();
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(heard, [], "a thread the parent ends is no failure");
});

test("RemoteEngine.over() gives up on a worker silent past its start timeout, naming it, the model and how to wait longer", async () => {
  const port = await spawnThread(fixture("mute.ts"));
  const t0 = Date.now();
  await within(
    assert.rejects(RemoteEngine.over(port, "worker-1", { path: "big.gguf" }, "reference", {}, () => {}, { startTimeoutS: 0.3 }), (e: unknown) => {
      assert.ok(e instanceof RemoteWorkerError, String(e));
      assert.match(e.message, /^Worker worker-1 did not report ready: it was silent for 0\.3 s after being asked to load "big\.gguf", and reported no progress .*EVOLVING_WORKER_START_TIMEOUT_S/);
      return true;
    }),
    10_000, "a silent worker's start",
  );
  assert.ok(Date.now() - t0 >= 250);
});

test("workerStartTimeoutS() is generous by default, read from EVOLVING_WORKER_START_TIMEOUT_S, and refuses a value that is no wait", () => {
  const saved = process.env[WORKER_START_TIMEOUT_VAR];
  try {
    delete process.env[WORKER_START_TIMEOUT_VAR];
    assert.ok(workerStartTimeoutS() >= 600, "a large model's load fits the default");
    assert.equal(workerStartTimeoutS({ startTimeoutS: 5 }), 5);
    process.env[WORKER_START_TIMEOUT_VAR] = "90";
    assert.equal(workerStartTimeoutS(), 90);
    for (const bad of ["0", "-1", "soon", "Infinity"]) {
      process.env[WORKER_START_TIMEOUT_VAR] = bad;
      assert.throws(() => workerStartTimeoutS(), (e: unknown) => e instanceof RangeError && e.message.includes(`got "${bad}" (${WORKER_START_TIMEOUT_VAR})`), bad);
    }
    assert.throws(() => workerStartTimeoutS({ startTimeoutS: NaN }), RangeError);
  } finally {
    if (saved === undefined) delete process.env[WORKER_START_TIMEOUT_VAR];
    else process.env[WORKER_START_TIMEOUT_VAR] = saved;
  }
});

test("a worker thread that exits without an error once serving ends its requests with an error naming it, and leaves the worker down", async () => {
  const port = await spawnThread(fixture("serves-then-exits.ts"));
  const remote = await RemoteEngine.over(port, "worker-2", { path: modelPath }, "reference", { numBlocks: 32 }, () => {});
  const h = remote.submit(greedy(STORY, 4));
  const r = await within(h.result, 10_000, "the request of a worker that exited");
  assert.equal(r.finishReason, "abort");
  assert.equal(r.error, "Worker worker-2 stopped: its thread ended by itself (exit code 0) without an error");
  assert.equal(remote.alive, false);
  await remote.stop();
});

test("a CLI starting a worker whose thread exits silently reports it and exits, on Deno and Node alike", () => {
  for (const runtime of ["deno", "node"] as const) {
    const [cmd, serveArgs] = SERVE_COMMANDS[runtime];
    for (const entry of ["ends.ts", "exits.ts"]) {
      const r = spawnSync(cmd, [...serveArgs.slice(0, -1), `${projectRoot}/tests/cluster/thread-fixtures/start-cli.ts`, entry], {
        cwd: projectRoot, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" },
      });
      assert.equal(r.error, undefined, `${runtime} ${entry}: ${r.error?.message} (it hung)`);
      assert.equal(r.stderr, "serve: Worker worker-0 could not start: its thread ended by itself (exit code 0) without an error, before it was ready\n", `${runtime} ${entry}`);
      assert.equal(r.status, 2, `${runtime} ${entry}`);
    }
  }
});

test("after a reload, a worker's refusal of the adapter's request quotes the adapter's name, not the workers' own for it", async () => {
  const cl = createCluster(createReferenceBackend(), model, { workers: 1, planner: "none", engine: { numBlocks: 64 } });
  try {
    await cl.loadAdapter("a", adapter);
    await cl.replaceAdapter("a", adapter);
    // The worker lost it (as a worker whose load failed, or that restarted, would): it refuses the request itself.
    await cl.workers[0].engine.unloadAdapter(RELOADED);
    assert.throws(() => cl.submit({ ...greedy(STORY), adapter: "a" }), (e: unknown) => {
      assert.ok(e instanceof LoraAdapterError && e.notFound, String(e));
      assert.equal(e.message, 'The LoRA adapter "a" is not loaded');
      return true;
    });
  } finally {
    await cl.stop();
  }
});

/** A worker port the test answers by hand: ready at once, every adapter load and unload done; `submits` answers each request. */
function scriptedWorker(onSubmit: (m: Extract<ToWorker, { op: "submit" }>, reply: (m: FromWorker) => void) => void): ThreadPort {
  const idle = createEngine(createReferenceBackend(), model, { numBlocks: 16 });
  const state: WorkerReport = {
    stats: idle.stats(), queue: { waitingPrefillTokens: 0, oldestWaitS: 0, decoding: 0, prefilling: 0, waitingDecodes: 0 }, freeBlocks: 16, sessions: undefined,
    stepMixing: "mixed", finished: [], promptTokens: 0, generationTokens: 0, events: [], steps: [],
  };
  let toCluster: (m: FromWorker) => void = () => {};
  return {
    post(m) {
      const msg = m as ToWorker;
      const reply = (r: FromWorker) => queueMicrotask(() => toCluster(r));
      if (msg.op === "init") reply({ op: "ready", maxModelLen: 512, blockSize: 16, vocabSize: model.config.vocabSize, backend: "reference", fingerprint: "f", state });
      else if (msg.op === "submit") onSubmit(msg, reply);
      else if ("cid" in msg) reply({ op: "reply", cid: msg.cid });
    },
    onMessage: (fn) => (toCluster = fn as (m: FromWorker) => void),
    onError: () => {},
    close: () => Promise.resolve(),
  };
}

test("after a reload, a worker thread's later refusal and failure of the adapter's request quote the adapter's name", async () => {
  const seen: string[] = [];
  const port = scriptedWorker((m, reply) => {
    const name = m.req.adapter!;
    seen.push(name);
    if (seen.length === 1) reply({ op: "rejected", rid: m.rid, name: "LoraAdapterError", message: `The LoRA adapter "${name}" is not loaded`, notFound: true });
    else {
      reply({ op: "accepted", rid: m.rid });
      const result = { text: "", tokenIds: [], finishReason: "abort" as const, promptTokens: m.req.prompt.length, completionTokens: 0, cachedTokens: 0 };
      reply({ op: "result", rid: m.rid, result: { ...result, error: `RangeError: The LoRA adapter ${JSON.stringify(name)} failed in step 3` } });
    }
  });
  const remote = await RemoteEngine.over(port, "worker-0", { path: "model.gguf" }, "reference", {}, () => {});
  const cl = new Cluster([remote], { planner: null, bytesPerBlock: 1024 });
  try {
    await cl.loadAdapter("a", adapter);
    await cl.replaceAdapter("a", adapter);
    const refused = cl.submit({ ...greedy(STORY), adapter: "a" });
    const refusal = await refused.refusal;
    assert.ok(refusal instanceof LoraAdapterError && refusal.notFound, String(refusal));
    assert.equal(refusal.message, 'The LoRA adapter "a" is not loaded');
    const r = await refused.result;
    assert.equal(r.refused, refusal);
    assert.equal(r.error, 'LoraAdapterError: The LoRA adapter "a" is not loaded');
    const failed = await cl.submit({ ...greedy(STORY), adapter: "a" }).result;
    assert.equal(failed.error, 'RangeError: The LoRA adapter "a" failed in step 3');
    assert.deepEqual(seen, [RELOADED, RELOADED], "the workers were asked under their own name");
  } finally {
    await cl.stop();
  }
});

test("a reload while the workers hold the most adapters they can says why it cannot, and leaves the adapter serving", async () => {
  const cl = createCluster(createReferenceBackend(), model, { workers: 1, planner: "none", engine: { numBlocks: 64 } });
  try {
    await cl.loadAdapter("a", adapter);
    for (let i = 1; i < MAX_LORA_ADAPTERS; i++) await cl.loadAdapter(`b${i}`, adapter);
    await assert.rejects(cl.replaceAdapter("a", adapter), (e: unknown) => {
      assert.ok(e instanceof LoraAdapterError && !e.notFound, String(e));
      assert.equal(
        e.message,
        `The LoRA adapter "a" cannot be reloaded in place while the workers hold 64 adapters: a reload loads the new one beside the old one (which serves until every worker has the new one) and a worker holds at most 64; unload another adapter first, or unload "a" and load it again`,
      );
      return true;
    });
    assert.ok(cl.adapterNames().includes("a"));
    assert.equal((await run(cl, { ...greedy(STORY, 4), adapter: "a" })).result.completionTokens, 4, "the old one serves on");
    // With a slot free, the reload goes through.
    await cl.unloadAdapter(`b${MAX_LORA_ADAPTERS - 1}`);
    await cl.replaceAdapter("a", adapter);
    assert.equal((await run(cl, { ...greedy(STORY, 4), adapter: "a" })).result.completionTokens, 4);
  } finally {
    await cl.stop();
  }
});

/**
 * Cleanup hunt: a reload unloads the adapter it replaced when the last request that took it ends
 * (woken by that request's end, not by polling), never before; src/serve finds a cluster's
 * capabilities (its counters, an in-place reload) without its class; an in-process worker's token
 * gaps are seen through the stream's push observer.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Cluster } from "../../src/cluster/cluster.ts";
import { canReplaceAdapter, isClusterFront } from "../../src/cluster/cluster-front.ts";
import { reportTokenGaps } from "../../src/cluster/token-gaps.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateResult, RequestHandle, StreamDelta } from "../../src/engine/engine-types.ts";
import { AsyncQueue } from "../../src/engine/events.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { greedy, model, STORY } from "./fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/cleanup-hunt7-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const loraPath = `${dir}/a.gguf`;
await writeFile(loraPath, loraGgufBytes(model.config, { seed: 71, rank: 4, alpha: 8, targets: [{ layer: 0, target: "wq" }], magnitude: 0.5 }));
const adapter = await loadLoraAdapter(loraPath, model.config);
/** The name the worker holds the first reload of "a" under (cluster-adapters.ts). */
const RELOADED = "a\u0000reload-1";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits until `ok()` holds, failing with `what` after `ms`. */
async function until(what: string, ok: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(5);
  }
}

test("a reload unloads the adapter it replaced once the last request that took it has ended, and not before", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const worker = localWorkerEngine(engine);
  // Each request's result (what the cluster counts its end by) is held until the test lets it go.
  const gates: (() => void)[] = [];
  const submit = worker.submit;
  worker.submit = (req): RequestHandle => {
    const h = submit(req);
    const gate = new Promise<void>((r) => gates.push(r));
    return { id: h.id, stream: h.stream, cancel: () => h.cancel(), result: gate.then((): Promise<GenerateResult> => h.result) };
  };
  const cl = new Cluster([worker], { planner: null, bytesPerBlock: 1024 });
  try {
    await cl.loadAdapter("a", adapter);
    const reload = cl.replaceAdapter("a", adapter);
    // Taken before the swap: both run on the old adapter, which the worker holds as "a".
    const held = [cl.submit({ ...greedy(STORY, 4), adapter: "a" }), cl.submit({ ...greedy(STORY, 4), adapter: "a" })];
    await reload;
    assert.deepEqual(engine.adapterNames().sort(), ["a", RELOADED], "the worker holds both while the old one's requests run");
    // Done on the worker (their streams end), yet not ended for the cluster.
    for (const h of held) for await (const _ of h.stream);
    await sleep(60);
    assert.ok(engine.adapterNames().includes("a"), "the old adapter stays while both of its requests are in flight");
    gates[0]();
    await held[0].result;
    await sleep(60);
    assert.ok(engine.adapterNames().includes("a"), "the old adapter stays while its last request is in flight");
    gates[1]();
    await held[1].result;
    await until("the old adapter unloaded after its last request ended", () => !engine.adapterNames().includes("a"));
    assert.deepEqual(engine.adapterNames(), [RELOADED]);
    assert.deepEqual(cl.adapterNames(), ["a"], "the name serves on, as the new adapter");
  } finally {
    await cl.stop();
  }
});

test("a reload with no request on the old adapter unloads it at once", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const cl = new Cluster([localWorkerEngine(engine)], { planner: null, bytesPerBlock: 1024 });
  try {
    await cl.loadAdapter("a", adapter);
    await cl.replaceAdapter("a", adapter);
    await until("the old adapter unloaded", () => !engine.adapterNames().includes("a"), 1000);
    assert.deepEqual(engine.adapterNames(), [RELOADED]);
  } finally {
    await cl.stop();
  }
});

test("isClusterFront() and canReplaceAdapter() tell a cluster from one engine by what it offers", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 16 });
  const cl = new Cluster([], { planner: null, bytesPerBlock: 1024, shape: { maxModelLen: 512, blockSize: 16 } });
  try {
    assert.equal(isClusterFront(cl), true);
    assert.equal(canReplaceAdapter(cl), true);
    assert.equal(isClusterFront(engine), false);
    assert.equal(canReplaceAdapter(engine), false);
  } finally {
    await cl.stop();
    await engine.stop();
  }
});

test("reportTokenGaps() sees each token-bearing push as it happens, read or not, and leaves the stream as it was", async () => {
  const q = new AsyncQueue<StreamDelta>();
  const h: RequestHandle = { id: 0, stream: q, result: new Promise<GenerateResult>(() => {}), cancel: () => {} };
  const gaps: number[] = [];
  assert.equal(reportTokenGaps(h, { onTokenGap: (s) => gaps.push(s) }), h);
  q.push({ text: "a", tokenIds: [1] });
  assert.deepEqual(gaps, [], "the first token has no gap before it");
  await sleep(20);
  q.push({ text: "", tokenIds: [] });
  q.push({ text: "b", tokenIds: [2] });
  assert.equal(gaps.length, 1, "one gap, the text-only delta not counted");
  assert.ok(gaps[0] >= 0.015 && gaps[0] < 5, `the gap in seconds: ${gaps[0]}`);
  q.close();
  const read: number[] = [];
  for await (const d of q) read.push(...d.tokenIds);
  assert.deepEqual(read, [1, 2], "the stream still carries every delta");
});

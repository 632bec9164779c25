import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { startThreadCluster, warmUpWorkers } from "../../src/cluster/create-cluster.ts";
import { RemoteEngine, RemoteWorkerError } from "../../src/cluster/remote-engine.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { modelFingerprint } from "../../src/model/fingerprint.ts";
import { loadModel } from "../../src/model/load.ts";
import { createApp } from "../../src/serve/app.ts";
import { greedy, model, modelPath, oneEngine, run, STORY } from "./fixtures.ts";
import { eventually } from "../eventually.ts";

test("startThreadCluster() runs each worker's engine in a thread and moves a prefill's KV between threads", async () => {
  const expected = await oneEngine(greedy(STORY));
  const cl = await startThreadCluster(model, modelPath, "reference", {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: { numBlocks: 64 },
  });
  try {
    const { streamed, result } = await run(cl, greedy(STORY));
    assert.deepEqual(streamed, expected, "the thread pair streams what one engine generates");
    assert.equal(cl.counters.prefillHandoffs, 1);
    assert.equal(cl.counters.movedBlocks, Math.ceil(STORY.length / 16), "the prompt's blocks moved to the decode thread, its partial last block too");
    assert.equal(cl.workers[1].engine.stats().prefixHitTokens, STORY.length - 1, "the decode thread computed only the last prompt token again");
    assert.equal(result.cachedTokens, 0, "reported as cached: what was cached before the request (nothing)");
    // Parallel requests all complete, and the threads' reports reach the cluster's gauges.
    const many = await Promise.all(Array.from({ length: 6 }, (_, i) => run(cl, greedy([...STORY.slice(0, 10 + i), ...STORY.slice(20)], 8))));
    for (const m of many) assert.equal(m.result.completionTokens, 8);
    // (The threads' gauges come with their next reports: poll, with a deadline only against a hang.)
    await eventually(() => cl.stats().running + cl.stats().waiting, (n) => n === 0);
    assert.equal(cl.stats().kvUsedBlocks, 0, "every block is back once idle");
    assert.equal(cl.workers[0].engine.metrics.finished.get("prefill_done"), 7);
    const snap = cl.workers.map((w) => w.snapshot());
    assert.ok(snap[0].prefillTokens > 0 && snap[1].decodeTokens > 0, "step records crossed from the threads into the planner's windows");
  } finally {
    await cl.stop();
  }
});

test("startThreadCluster() with quantize has each worker thread load the model as the server quantized it", async () => {
  const quantized = await loadModel(modelPath, { quantize: "q8_0" });
  const cl = await startThreadCluster(quantized, modelPath, "reference", { workers: 1, planner: "none", quantize: "q8_0", engine: { numBlocks: 64 } });
  try {
    const w = cl.workers[0].engine as RemoteEngine;
    assert.equal(w.modelFingerprint, modelFingerprint(quantized));
    assert.notEqual(w.modelFingerprint, modelFingerprint(model));
    const e = createEngine(createReferenceBackend(), quantized, { numBlocks: 64 });
    try {
      assert.deepEqual((await run(cl, greedy(STORY))).streamed, (await run(e, greedy(STORY))).streamed);
    } finally {
      await e.stop();
    }
  } finally {
    await cl.stop();
  }
});

test("RemoteEngine.dropHandoff() lets go of the block a worker thread holds for a hand-off", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", { workers: 1, planner: "none", engine: { numBlocks: 64 } });
  try {
    const w = cl.workers[0].engine;
    const r = await w.submit({ ...greedy(STORY), maxTokens: 1, prefillOnly: true }).result;
    assert.equal(r.finishReason, "prefill_done");
    // The thread's gauges reach this side in its reports.
    const settle = (used: number) => eventually(() => w.stats().kvUsedBlocks, (n) => n === used);
    await settle(1);
    assert.equal(w.stats().kvUsedBlocks, 1, "the prefill holds the block its prompt ended in");
    w.dropHandoff(STORY.slice(0, 20));
    await new Promise((res) => setTimeout(res, 100));
    assert.equal(w.stats().kvUsedBlocks, 1, "a block is let go only for its own prompt");
    w.dropHandoff(STORY);
    await settle(0);
    assert.equal(w.stats().kvUsedBlocks, 0);
    assert.equal(await w.exportPrefix(STORY, true).then((p) => p?.tail ?? false), false, "nothing is held for a hand-off any more");
  } finally {
    await cl.stop();
  }
});

test("startThreadCluster() with warmUp has each worker thread warm its engine up before it serves, and leave nothing behind", async () => {
  const expected = await oneEngine(greedy(STORY, 8));
  const cl = await startThreadCluster(model, modelPath, "reference", { workers: 2, planner: "none", warmUp: true, engine: { numBlocks: 64, schedulerSteps: 2 } });
  try {
    for (const w of cl.workers) {
      assert.equal(typeof w.engine.warmUpMs, "number", `${w.engine.id} reported its warm-up`);
      const st = w.engine.stats();
      assert.deepEqual([st.kvUsedBlocks, st.prefixQueriedTokens, w.engine.metrics.promptTokens, w.engine.metrics.generationTokens], [0, 0, 0, 0]);
    }
    assert.equal(await warmUpWorkers(cl), Math.max(...cl.workers.map((w) => w.engine.warmUpMs!)), "the longest of the workers'");
    const results = await Promise.all(cl.workers.map(() => run(cl, greedy(STORY, 8))));
    for (const r of results) assert.deepEqual(r.streamed, expected);
  } finally {
    await cl.stop();
  }
});

test("Cluster routes around a worker thread that has stopped", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", { workers: 2, planner: "none", engine: { numBlocks: 64 } });
  try {
    assert.deepEqual(cl.workers.map((w) => w.engine.warmUpMs), [undefined, undefined], "no warm-up unless asked");
    await cl.workers[1].engine.stop();
    assert.equal(cl.workers[1].engine.alive, false);
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => run(cl, greedy(STORY.slice(0, 12 + i), 4))));
    for (const r of results) assert.equal(r.result.completionTokens, 4, r.result.error);
    // The thread's counters arrive with its next report, just after the results.
    const done = () => cl.workers[0].engine.metrics.finished.get("length") ?? 0;
    await eventually(done, (n) => n >= 4);
    assert.equal(done(), 4, "every request went to the live worker");
  } finally {
    await cl.stop();
  }
});

test("startThreadCluster() names a worker that cannot start", async () => {
  await assert.rejects(
    startThreadCluster(model, `${projectRoot}/models/missing.gguf`, "reference", { workers: 2, planner: "none" }),
    (e: unknown) => e instanceof RemoteWorkerError && /worker-\d could not start: .*missing\.gguf/.test(e.message),
  );
});

test("/health and evolving:worker_up follow a cluster's live workers: ok while one runs, 503 no_worker once none does", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", { workers: 2, planner: "none", engine: { numBlocks: 64 } });
  try {
    const app = createApp({ engine: cl, model, modelName: "stories260K" });
    const up = async () => [...(await (await app.request("/metrics")).text()).matchAll(/evolving:worker_up\{model_name="stories260K",worker="([^"]+)"\} (\d)/g)].map((m) => `${m[1]}=${m[2]}`);
    assert.equal((await app.request("/health")).status, 200);
    assert.deepEqual(await up(), [`${cl.workers[0].id}=1`, `${cl.workers[1].id}=1`]);
    await cl.workers[1].engine.stop();
    assert.equal((await app.request("/health")).status, 200, "one worker still serves");
    assert.deepEqual(await up(), [`${cl.workers[0].id}=1`, `${cl.workers[1].id}=0`]);
    await cl.workers[0].engine.stop();
    const health = await app.request("/health");
    assert.equal(health.status, 503);
    assert.deepEqual(await health.json(), { status: "no_worker" });
  } finally {
    await cl.stop();
  }
});

import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { startThreadCluster } from "../../src/cluster/create-cluster.ts";
import { RemoteWorkerError } from "../../src/cluster/remote-engine.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest, ServingEngine } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.", { addBos: true });
const greedy = (prompt: number[], maxTokens = 16): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });

async function run(s: ServingEngine, req: GenerateRequest) {
  const h = s.submit(req);
  const streamed: number[] = [];
  for await (const d of h.stream) streamed.push(...d.tokenIds);
  return { streamed, result: await h.result };
}

test("startThreadCluster() runs each worker's engine in a thread and moves a prefill's KV between threads", async () => {
  const single = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const expected = await run(single, greedy(STORY));
  await single.stop();
  const cl = await startThreadCluster(model, modelPath, "reference", {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, engine: { numBlocks: 64 },
  });
  try {
    const { streamed, result } = await run(cl, greedy(STORY));
    assert.deepEqual(streamed, expected.streamed, "the thread pair streams what one engine generates");
    assert.equal(cl.counters.prefillHandoffs, 1);
    assert.equal(result.cachedTokens, Math.floor((STORY.length - 1) / 16) * 16, "the decode thread started from the moved KV");
    // Parallel requests all complete, and the threads' reports reach the cluster's gauges.
    const many = await Promise.all(Array.from({ length: 6 }, (_, i) => run(cl, greedy([...STORY.slice(0, 10 + i), ...STORY.slice(20)], 8))));
    for (const m of many) assert.equal(m.result.completionTokens, 8);
    for (let i = 0; i < 100 && cl.stats().running + cl.stats().waiting > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(cl.stats().kvUsedBlocks, 0, "every block is back once idle");
    assert.equal(cl.workers[0].engine.metrics.finished.get("prefill_done"), 7);
    const snap = cl.workers.map((w) => w.snapshot());
    assert.ok(snap[0].prefillTokens > 0 && snap[1].decodeTokens > 0, "step records crossed from the threads into the planner's windows");
  } finally {
    await cl.stop();
  }
});

test("Cluster routes around a worker thread that has stopped", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", { workers: 2, planner: "none", engine: { numBlocks: 64 } });
  try {
    await cl.workers[1].engine.stop();
    assert.equal(cl.workers[1].engine.alive, false);
    const results = await Promise.all(Array.from({ length: 4 }, (_, i) => run(cl, greedy(STORY.slice(0, 12 + i), 4))));
    for (const r of results) assert.equal(r.result.completionTokens, 4, r.result.error);
    // The thread's counters arrive with its next report, just after the results.
    const done = () => cl.workers[0].engine.metrics.finished.get("length") ?? 0;
    for (let i = 0; i < 100 && done() < 4; i++) await new Promise((r) => setTimeout(r, 10));
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

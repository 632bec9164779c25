/**
 * vLLM's request-phase histograms (queue, prefill, inference), its per-step token histogram and its
 * max_tokens histogram, on an engine whose clock only moves inside a step (each step costs 100 ms),
 * so every phase has one exact value; then on a cluster, where a hand-off's queue is the prefill
 * worker's and a worker's queue-full refusal counts as the cluster's.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import { Engine } from "../../src/engine/engine.ts";
import type { Histogram } from "../../src/engine/engine-metrics.ts";
import { EngineOverloadedError } from "../../src/engine/engine-types.ts";
import type { StepRunner } from "../../src/engine/engine-runner.ts";
import { greedy, model, run, STORY } from "../cluster/fixtures.ts";

const STEP_MS = 100;

/** An engine over a runner that samples token 7 and advances the clock 100 ms per step. */
function steppedEngine(maxRunning: number): Engine {
  let ms = 0;
  const runner: StepRunner = {
    numBlocks: 64,
    blockSize: 16,
    run(entries) {
      ms += STEP_MS;
      return Promise.resolve({ ids: new Int32Array(entries.length).fill(7) });
    },
    close() {},
  };
  return new Engine({ runner, config: model.config, tokenizer: model.tokenizer, now: () => ms, scheduler: { maxRunning, maxBatchTokens: 64 } });
}

/** Count in the bucket whose bound is `le` (cumulative, as Prometheus reads it). */
const bucket = (h: Histogram, le: number) => h.counts[h.bounds.indexOf(le)];

test("EngineMetrics records queue, prefill and inference times of requests that waited their turn", async () => {
  const e = steppedEngine(1);
  const prompt = Array.from({ length: 8 }, (_, i) => 10 + i);
  const a = e.submit({ prompt, maxTokens: 3, temperature: 0, ignoreEos: true });
  const b = e.submit({ prompt: prompt.map((t) => t + 100), maxTokens: 2, temperature: 0, ignoreEos: true });
  const [ra, rb] = await Promise.all([a.result, b.result]);
  // a: planned at 0, first token after its prefill step (0.1 s), three steps in all (ends at 0.3 s).
  assert.equal(ra.queueS, 0);
  assert.equal(ra.firstTokenS, 0.1);
  // b waited for a's three steps; its prefill step then took 0.1 s and it ended one step later.
  assert.equal(rb.queueS, 0.3);
  assert.equal(rb.firstTokenS, 0.4);
  const m = e.metrics;
  assert.equal(m.queueTime.count, 2);
  assert.ok(Math.abs(m.queueTime.sum - 0.3) < 1e-9, `queue sum ${m.queueTime.sum}`);
  assert.ok(Math.abs(m.prefillTime.sum - 0.2) < 1e-9, `prefill sum ${m.prefillTime.sum}`);
  assert.ok(Math.abs(m.inferenceTime.sum - 0.5) < 1e-9, `inference sum ${m.inferenceTime.sum} (0.3 + 0.2)`);
  // The phases add up: queue + prefill = TTFT and queue + inference = end to end.
  assert.ok(Math.abs(m.queueTime.sum + m.prefillTime.sum - m.ttft.sum) < 1e-9);
  assert.ok(Math.abs(m.queueTime.sum + m.inferenceTime.sum - m.e2e.sum) < 1e-9);
  // Five steps: two 8-token prefills and three single-token decodes.
  assert.equal(m.iterationTokens.count, 5);
  assert.equal(m.iterationTokens.sum, 8 + 1 + 1 + 8 + 1);
  assert.equal(bucket(m.iterationTokens, 1), 3);
  assert.equal(bucket(m.iterationTokens, 8), 5);
  assert.equal(m.maxTokensParam.count, 2);
  assert.equal(m.maxTokensParam.sum, 5);
  await e.stop();
});

test("EngineMetrics leaves out the queue time of a request cancelled before it ran, and takes what the context leaves as its max_tokens", async () => {
  const e = steppedEngine(1);
  const prompt = Array.from({ length: 8 }, (_, i) => 10 + i);
  const a = e.submit({ prompt, maxTokens: 2, temperature: 0, ignoreEos: true });
  const c = e.submit({ prompt: prompt.map((t) => t + 50), temperature: 0, ignoreEos: true });
  c.cancel();
  const rc = await c.result;
  await a.result;
  assert.equal(rc.finishReason, "abort");
  assert.equal(rc.queueS, undefined, "it never ran");
  const m = e.metrics;
  assert.equal(m.e2e.count, 2, "both ended");
  assert.equal(m.queueTime.count, 1, "only the one that ran waited in the queue");
  assert.equal(m.inferenceTime.count, 1);
  assert.equal(m.maxTokensParam.sum, 2 + (e.maxModelLen - 8), "no max_tokens: the rest of the context");
  await e.stop();
});

test("Cluster metrics take a handed-off request's queue time from the prefill worker, so queue + prefill = TTFT", async () => {
  const cl = createCluster(createReferenceBackend(), model, {
    planner: "none", engine: { numBlocks: 64 }, workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 },
  });
  const { result } = await run(cl, greedy(STORY, 4));
  assert.equal(cl.counters.prefillHandoffs, 1, "the prompt went through the prefill worker");
  const pre = cl.workers[0].engine.metrics;
  assert.equal(pre.queueTime.count, 1);
  assert.equal(result.queueS, pre.queueTime.sum, "the result carries the prefill worker's wait, not the decode worker's");
  const m = cl.metrics;
  assert.equal(m.queueTime.count, 1);
  assert.equal(m.prefillTime.count, 1);
  assert.equal(m.inferenceTime.count, 1);
  assert.ok(Math.abs(m.queueTime.sum + m.prefillTime.sum - m.ttft.sum) < 1e-9, "queue + prefill = TTFT");
  assert.ok(m.inferenceTime.sum <= m.e2e.sum && m.inferenceTime.sum > 0);
  assert.equal(m.maxTokensParam.sum, 4);
  await cl.stop();
});

test("Cluster counts a worker's queue-full refusal in its rejected requests", async () => {
  const cl = createCluster(createReferenceBackend(), model, { planner: "none", engine: { numBlocks: 64, maxWaiting: 1 }, workers: 1 });
  const held = [cl.submit(greedy(STORY, 8))];
  let refused = 0;
  for (let i = 0; i < 4; i++) {
    try {
      held.push(cl.submit(greedy(STORY, 8)));
    } catch (e) {
      assert.ok(e instanceof EngineOverloadedError, String(e));
      refused++;
    }
  }
  assert.ok(refused > 0, "the worker's queue filled");
  assert.equal(cl.metrics.rejected, refused);
  await Promise.all(held.map((h) => h.result));
  await cl.stop();
});

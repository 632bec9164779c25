import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Cluster } from "../../src/cluster/cluster.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { NoWorkerError } from "../../src/engine/engine-types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { kvBytesPerBlock } from "../../src/engine/kv-cache.ts";
import { greedy, model, oneEngine, run, STORY } from "./fixtures.ts";

const shape = { maxModelLen: model.config.contextLength, blockSize: 16 };
const engine = (workerId: string) => localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId }));

test("Cluster.addWorker() lets a cluster that started empty serve, and refuses a mismatched worker", async () => {
  const cl = new Cluster([], { bytesPerBlock: kvBytesPerBlock(model.config), shape });
  assert.throws(() => cl.submit(greedy(STORY)), NoWorkerError, "no worker yet: a typed error, not a crash");
  assert.equal(cl.maxModelLen, shape.maxModelLen);
  cl.addWorker(engine("w-a"));
  assert.equal(cl.maxModelLen, cl.workers[0].engine.maxModelLen, "the limit is the workers' once there are some");
  const expected = await oneEngine(greedy(STORY));
  assert.deepEqual((await run(cl, greedy(STORY))).streamed, expected);
  assert.throws(() => cl.addWorker(engine("w-a")), /already in the cluster/);
  const odd = localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId: "w-odd", blockSize: 8 }));
  assert.throws(() => cl.addWorker(odd), /blocks of 8 tokens; the cluster's have 16/);
  await odd.stop();
  assert.equal(cl.counters.joined, 1);
  await cl.stop();
});

test("Cluster.removeWorker() drains a worker's requests, then routes a session's next turn elsewhere", async () => {
  const cl = new Cluster([engine("w-a"), engine("w-b")], { bytesPerBlock: kvBytesPerBlock(model.config), planner: null });
  const req = { ...greedy(STORY, 24), sessionId: "s1" };
  const first = cl.submit(req);
  const holder = cl.workers.find((w) => w.inFlight > 0)!;
  const other = cl.workers.find((w) => w !== holder)!;
  const removed = cl.removeWorker(holder.id, 10_000);
  // Draining: the request already there finishes in full; nothing new is sent to the worker.
  const meanwhile = await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  assert.equal(meanwhile.result.error, undefined);
  assert.equal(other.engine.stats().prefixHitTokens, 0, "the other worker recomputed: the holder was draining");
  const r = await first.result;
  assert.equal(r.error, undefined);
  assert.equal(r.completionTokens, 24);
  assert.equal(await removed, true);
  assert.deepEqual(cl.workers.map((w) => w.id), [other.id]);
  assert.equal(await cl.removeWorker(holder.id), false, "already gone");
  // The global index forgot the holder's blocks: the next turn is routed to (and hits on) the one left.
  const next = await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  assert.equal(next.result.error, undefined);
  assert.ok(next.result.cachedTokens > 0, "the remaining worker cached the prompt on the turn it served meanwhile");
  assert.equal(cl.counters.removed, 1);
  await cl.stop();
});

test("Cluster.removeWorker() without a drain takes the worker out at once and ends its requests", async () => {
  const cl = new Cluster([engine("w-a"), engine("w-b")], { bytesPerBlock: kvBytesPerBlock(model.config), planner: null });
  const h = cl.submit(greedy(STORY, 400));
  const holder = cl.workers.find((w) => w.inFlight > 0)!;
  assert.equal(await cl.removeWorker(holder.id), true);
  const r = await h.result;
  assert.ok(r.completionTokens < 400, "the request ended with its worker");
  const after = await run(cl, greedy(STORY, 4));
  assert.equal(after.result.error, undefined, "the cluster still serves on the other worker");
  await cl.stop();
});

test("Cluster.stats() keeps the counters of a worker that left, so they never go back, and drops its gauges", async () => {
  const cl = new Cluster([engine("w-a"), engine("w-b")], { bytesPerBlock: kvBytesPerBlock(model.config), planner: null });
  await Promise.all([0, 1, 2, 3].map((i) => run(cl, greedy(STORY.slice(0, 10 + i), 6))));
  assert.ok(cl.workers.every((w) => w.engine.stats().steps > 0), "both workers served");
  const before = cl.stats();
  assert.equal(await cl.removeWorker("w-b"), true);
  const after = cl.stats();
  for (const k of ["prefixQueriedTokens", "prefixHitTokens", "preemptions", "recomputedTokens", "steps", "specDrafts"] as const) {
    assert.ok(after[k] >= before[k], `${k} went back from ${before[k]} to ${after[k]} when a worker left`);
  }
  assert.equal(after.kvTotalBlocks, cl.workers[0].engine.stats().kvTotalBlocks, "the pool is the remaining worker's");
  await run(cl, greedy(STORY, 4));
  assert.ok(cl.stats().steps > after.steps);
  await cl.stop();
});

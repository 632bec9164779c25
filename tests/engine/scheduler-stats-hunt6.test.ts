/** Scheduler.stats() is a read: a /metrics scrape must not change the KV pool (hand-off holds go at plan time). */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool } from "../../kv/index.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { HandoffTails } from "../../src/engine/handoff-tails.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import { greedy, model, run, STORY } from "../cluster/fixtures.ts";
import { range } from "./scheduler-fixtures.ts";

/** A scheduler whose tail store holds one block for `prompt`'s end, kept at time 0 for 60 s; `clock.t` moves time. */
function heldTail() {
  const clock = { t: 0 };
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => clock.t, { maxBlocks: 4, ttlS: 60 });
  const [block] = pool.tryAllocate(1)!;
  tails.keep(range(6, 100), block);
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { maxBatchTokens: 64, watermarkBlocks: 0 });
  return { clock, pool, tails, sched };
}

test("Scheduler.stats() changes nothing: a hold past its TTL stays until the scheduler plans a step", () => {
  const { clock, pool, tails, sched } = heldTail();
  const before = sched.stats();
  const version = tails.version;
  assert.equal(before.kvUsedBlocks, 1);
  clock.t = 61;
  for (let i = 0; i < 3; i++) {
    assert.deepEqual(sched.stats(), before, "a read reports the same figures every time");
    assert.equal(tails.size, 1, "the expired hold is not let go by a read");
    assert.equal(pool.numUsedBlocks(), 1);
    assert.equal(tails.version, version, "nothing was kept, taken or let go");
  }
  // The scheduler's own work lets it go: an empty step, as an engine's loop plans, is enough.
  const plan = sched.schedule();
  assert.equal(plan.entries.length, 0);
  assert.equal(tails.size, 0);
  assert.equal(pool.numUsedBlocks(), 0);
  assert.equal(sched.stats().kvUsedBlocks, 0);
});

test("Scheduler.schedule() lets an expired hold go while sequences decode (no block allocated that step)", () => {
  const { clock, pool, tails, sched } = heldTail();
  sched.submit(1, range(3, 1));
  let plan = sched.schedule();
  sched.commit(plan, new Map([[1, 7]]));
  assert.equal(pool.numUsedBlocks(), 2, "the hold and the sequence's block");
  clock.t = 61;
  // The decode fits the block it has (4 tokens): nothing is allocated, yet the hold goes.
  plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => e.tokens.length), [1]);
  assert.equal(tails.size, 0);
  assert.equal(pool.numUsedBlocks(), 1);
  sched.commit(plan, new Map([[1, 8]]));
});

test("Engine.stats() read as /metrics does changes neither the pool nor the hand-off holds", async () => {
  const pre = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  await run(pre, { ...greedy(STORY), maxTokens: 1, prefillOnly: true });
  const prefix = await pre.exportPrefix(STORY, true);
  await pre.stop();
  assert.ok(prefix !== null && prefix.tail === true);
  let nowMs = 0;
  const dec = createEngine(createReferenceBackend(), model, { numBlocks: 64, now: () => nowMs });
  try {
    dec.importPrefix(prefix);
    const used = dec.pool.numUsedBlocks();
    nowMs = 61_000;
    // Read synchronously: the engine's loop gets no turn in between.
    const first = dec.stats();
    for (let i = 0; i < 3; i++) assert.deepEqual(dec.stats(), first);
    assert.equal(dec.pool.numUsedBlocks(), used, "the scrape let nothing go");
  } finally {
    await dec.stop();
  }
});

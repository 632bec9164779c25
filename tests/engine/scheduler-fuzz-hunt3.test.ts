/**
 * The scheduler and its KV block pool under seeded random operations (scheduler-fuzz-driver.ts: what
 * the operations are; scheduler-fuzz-checks.ts: the invariants checked after each), and the
 * regressions it found, minimized. SCHED_FUZZ_SEEDS and SCHED_FUZZ_OPS run more (seeds 1..N);
 * SCHED_FUZZ_SEED runs one seed alone, to reproduce a failure (each names its seed).
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool } from "../../kv/index.ts";
import { envVar } from "../../src/runtime/env.ts";
import { HandoffTails } from "../../src/engine/handoff-tails.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { StepPlan } from "../../src/engine/scheduler-types.ts";
import { runFuzz } from "./scheduler-fuzz-driver.ts";
import { make, range } from "./scheduler-fixtures.ts";

const one = envVar("SCHED_FUZZ_SEED");
const seeds = one !== undefined ? [Number(one)] : range(Number(envVar("SCHED_FUZZ_SEEDS") ?? 10), 1);
const ops = Number(envVar("SCHED_FUZZ_OPS") ?? 1200);

test(`Scheduler fuzz: ${ops} random operations per seed, seeds ${seeds[0]}..${seeds[seeds.length - 1]}, keep every invariant and drain`, () => {
  let requests = 0, preemptions = 0, hits = 0, lookaheads = 0;
  for (const seed of seeds) {
    const s = runFuzz(seed, ops);
    requests += s.requests;
    preemptions += s.preemptions;
    hits += s.prefixHitTokens;
    lookaheads += s.lookaheads;
    // FCFS admits in arrival order within a priority: only a scored prompt waiting for prompt rows
    // (passed over by design, so not counted), or a hand-off admitted in a decode step, lets a later one by.
    assert.ok(s.maxOvertakenFcfs <= 20, `Seed ${seed}: a waiting request was overtaken ${s.maxOvertakenFcfs} times under FCFS`);
  }
  // The runs did what they are for: requests, preemptions under KV pressure, prefix-cache hits, steps run ahead.
  assert.ok(requests > 100 * seeds.length && preemptions > 0 && hits > 0, `${requests} requests, ${preemptions} preemptions, ${hits} hit tokens`);
  assert.ok(seeds.length < 5 || lookaheads > seeds.length, `${lookaheads} steps looked ahead`);
});

/** Steps with a fixed sampled token per sequence. */
function step(sched: Scheduler): StepPlan {
  const plan = sched.schedule();
  if (plan.entries.length > 0) sched.commit(plan, new Map(plan.entries.filter((e) => e.sample).map((e) => [e.seqId, 9])));
  return plan;
}

test("Scheduler lets go of hand-off holds before it truncates a sequence the pool can hold (fuzz seed 31)", () => {
  const pool = new BlockPool({ numBlocks: 3, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 2, ttlS: 60 });
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { watermarkBlocks: 0 });
  // A prefill handed off: the block its prompt ended in stays held for the decode that is to come.
  sched.submit(1, range(5), { prefillOnly: true });
  step(sched);
  assert.equal(sched.get(1), undefined);
  assert.equal(tails.size, 1);
  // Alone, a sequence grows to fill the pool (KV of 12 tokens): the held block must not end it at 8.
  const seq = sched.submit(2, range(1, 50));
  for (let i = 0; i < 12; i++) assert.deepEqual(step(sched).truncated, [], `step ${i}`);
  assert.equal(seq.status, "running");
  assert.equal(seq.numComputed, 12);
  assert.equal(tails.size, 0, "the held block went back to the pool");
  assert.deepEqual(step(sched).truncated, [2], "past the pool it ends");
  assert.equal(pool.numFreeBlocks(), 3);
});

test("Scheduler recomputes a victim whose swapped KV could never come back under the watermark (fuzz seed 23)", () => {
  const { sched, pool } = make(2, 4, { preemption: "swap" });
  // Alone, X fills both blocks (8 tokens computed, a 9th pending); an urgent arrival preempts it.
  const x = sched.submit(1, range(3));
  while (x.numComputed < 8) step(sched);
  sched.submit(2, [7], { priority: -1 });
  const plan = step(sched);
  assert.deepEqual(plan.preempted, [1]);
  // Swapped, X would need 3 blocks to come back: it never could, and everything behind it would wait forever.
  assert.deepEqual(plan.swapOut, [], "X goes by recompute");
  sched.finish(2, "stop");
  const z = sched.submit(3, [5]);
  for (let i = 0; i < 20 && !sched.idle; i++) {
    for (const id of step(sched).entries.map((e) => e.seqId)) if (id === 3) sched.finish(3, "stop");
  }
  assert.equal(x.finishReason, "length", "X recomputed its 8 tokens and ran out of pool");
  assert.equal(z.finishReason, "stop", "the request behind X ran");
  assert.equal(pool.numFreeBlocks(), 2);
});

import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool } from "../../kv/index.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { SchedulerConfig, StepPlan } from "../../src/engine/scheduler-types.ts";

function make(numBlocks: number, cfg: Partial<SchedulerConfig> = {}) {
  const pool = new BlockPool({ numBlocks, blockSize: 4, clock: () => 0 });
  return { pool, sched: new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0, ...cfg }) };
}

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

function step(sched: Scheduler): StepPlan {
  const plan = sched.schedule();
  const m = new Map<number, number>();
  for (const e of plan.entries) if (e.sample) m.set(e.seqId, 50 + e.startPos);
  sched.commit(plan, m);
  return plan;
}

/** Two 6-token prompts in a 4-block pool: both run, then the second is preempted as they grow. */
function pressure(sched: Scheduler): StepPlan {
  sched.submit(1, range(6));
  sched.submit(2, range(6, 100));
  for (let i = 0; i < 20; i++) {
    const plan = step(sched);
    if (plan.preempted.length > 0) return plan;
  }
  throw new Error("no preemption happened");
}

test("Scheduler swap preemption plans a swap-out of the victim's KV and a swap-in at readmission", () => {
  const { sched, pool } = make(4, { preemption: "swap", swapSpaceBlocks: 4 });
  const plan = pressure(sched);
  assert.deepEqual(plan.preempted, [2]);
  assert.equal(plan.swapOut.length, 1);
  const out = plan.swapOut[0];
  assert.equal(out.seqId, 2);
  assert.equal(out.numTokens, 8, "6 prompt tokens and 2 outputs were computed");
  assert.equal(out.blockTable.length, 2);
  assert.equal(sched.stats().swapUsedBlocks, 2);
  let swapIn: StepPlan | undefined;
  for (let i = 0; i < 40 && !swapIn; i++) {
    const p = step(sched);
    const s1 = sched.get(1);
    if (s1 && s1.numOutput >= 6) sched.finish(1, "length");
    if (p.swapIn.length > 0) swapIn = p;
  }
  assert.ok(swapIn, "the victim came back by swap-in");
  assert.deepEqual(swapIn.swapIn.map((o) => [o.seqId, o.numTokens, o.blockTable.length]), [[2, 8, 2]]);
  const e = swapIn.entries.find((x) => x.seqId === 2)!;
  assert.equal(e.startPos, 8, "decoding resumes after the restored tokens");
  assert.deepEqual(e.blockTable.slice(0, 2), swapIn.swapIn[0].blockTable);
  sched.finish(2, "length");
  const st = sched.stats();
  assert.equal(st.recomputedTokens, 0);
  assert.equal(st.swapUsedBlocks, 0);
  assert.equal(st.swappedInBlocks, 2);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler swap preemption falls back to recompute when the swap space is full", () => {
  const { sched } = make(4, { preemption: "swap", swapSpaceBlocks: 1 });
  const plan = pressure(sched);
  assert.deepEqual(plan.preempted, [2]);
  assert.deepEqual(plan.swapOut, []);
  assert.equal(sched.stats().swapOuts, 0);
  assert.equal(sched.get(2)!.numComputed, 0, "the victim will prefill again");
});

test("Scheduler.finish() of a swapped-out sequence frees its swap space", () => {
  const { sched, pool } = make(4, { preemption: "swap" });
  pressure(sched);
  assert.equal(sched.stats().swapTotalBlocks, 4, "default swap space is the pool's size");
  assert.equal(sched.stats().swapUsedBlocks, 2);
  sched.abort(2);
  sched.finish(1, "length");
  assert.equal(sched.stats().swapUsedBlocks, 0);
  assert.equal(pool.numUsedBlocks(), 0);
  assert.ok(sched.idle);
});

test("Scheduler refuses an unknown preemption mode, quoting it", () => {
  assert.throws(() => make(4, { preemption: "evict" as "swap" }), /Unknown preemption mode "evict"/);
  assert.throws(() => make(4, { preemption: "swap", swapSpaceBlocks: -1 }), /got -1/);
});

import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { AGED_SHORT_FIRST } from "../../planner/prefill-order.ts";
import type { Scheduler } from "../../src/engine/scheduler.ts";
import type { StepPlan } from "../../src/engine/scheduler-types.ts";
import { fakeSample, make, range } from "./scheduler-fixtures.ts";

/** Plans and commits one step, finishing sequences that reached `maxTokens[id]` outputs. */
function step(sched: Scheduler, maxTokens: ReadonlyMap<number, number>): StepPlan {
  const plan = sched.schedule();
  if (plan.entries.length === 0) return plan; // nothing in flight to commit
  for (const seq of sched.commit(plan, fakeSample(plan))) {
    if (seq.numOutput >= (maxTokens.get(seq.id) ?? 1)) sched.finish(seq.id, "length");
  }
  return plan;
}

/** Ids in the order their first entry appears over `plans`. */
function firstSeen(plans: readonly StepPlan[]): number[] {
  const seen: number[] = [];
  for (const p of plans) for (const e of p.entries) if (!seen.includes(e.seqId)) seen.push(e.seqId);
  return seen;
}

test("Scheduler admits waiting sequences by priority, lower first, in queue order among equals", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 8, maxRunning: 1 });
  sched.submit(1, range(4), { priority: 1 });
  sched.submit(2, range(4, 10));
  sched.submit(3, range(4, 20), { priority: -2 });
  sched.submit(4, range(4, 30));
  const plans: StepPlan[] = [];
  while (!sched.idle) plans.push(step(sched, new Map()));
  assert.deepEqual(firstSeen(plans), [3, 2, 4, 1]);
  assert.equal(sched.stats().priorityPreemptions, 0, "nothing was running to preempt");
});

test("Scheduler puts priority before prefillOrder short-first, which orders each priority's own", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 12, maxRunning: 1, prefillOrder: AGED_SHORT_FIRST });
  sched.submit(1, range(3), { priority: 5 }); // the shortest, but the least urgent
  sched.submit(2, range(11, 10));
  sched.submit(3, range(6, 30));
  const plans: StepPlan[] = [];
  while (!sched.idle) plans.push(step(sched, new Map()));
  assert.deepEqual(firstSeen(plans), [3, 2, 1]);
});

test("Scheduler preempts the least urgent running sequence when KV runs out, even an older one", () => {
  const { sched, pool } = make(4, 2, { maxBatchTokens: 64 });
  sched.submit(1, range(3), { priority: 3 });
  sched.submit(2, range(3, 10));
  const max = new Map([[1, 4], [2, 4]]);
  const plans: StepPlan[] = [];
  while (!sched.idle) plans.push(step(sched, max));
  const pre = plans.flatMap((p) => p.preempted);
  assert.ok(pre.includes(1), `seq 1 (priority 3) was preempted (${JSON.stringify(pre)})`);
  assert.ok(!pre.includes(2), "the more urgent, newer sequence keeps its KV");
  assert.equal(sched.stats().priorityPreemptions, 0, "a KV-growth preemption is not counted as a priority one");
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler preempts a running sequence of a higher value for an urgent one when every slot is taken", () => {
  const { sched, pool } = make(64, 4, { maxBatchTokens: 64, maxRunning: 2 });
  sched.submit(1, range(5), { priority: 1 });
  sched.submit(2, range(5, 10), { priority: 2 });
  const max = new Map([[1, 6], [2, 6], [3, 2]]);
  step(sched, max);
  step(sched, max);
  sched.submit(3, range(5, 20), { priority: 0 });
  const plan = step(sched, max);
  assert.deepEqual(plan.preempted, [2], "the least urgent runner goes, and only it");
  assert.deepEqual(plan.entries.map((e) => e.seqId), [1, 3]);
  assert.equal(sched.get(2)!.status, "waiting");
  // Seq 2 comes back once seq 3 has ended, and recomputes what it had.
  const later: StepPlan[] = [];
  while (!sched.idle) later.push(step(sched, max));
  const back = later.findIndex((p) => p.entries.some((e) => e.seqId === 2));
  const end3 = later.findIndex((p) => p.entries.some((e) => e.seqId === 3) && sched.get(3) === undefined);
  assert.ok(back > end3, `seq 2 resumes (step ${back}) after seq 3 ends (step ${end3})`);
  assert.equal(sched.stats().priorityPreemptions, 1);
  assert.equal(sched.stats().preemptions, 1);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler preempts for priority only as many sequences as free the urgent one's first chunk", () => {
  // 8 blocks of 4: three 8-token runners of priority 1 take 3 blocks each once decoding, so 0 are free.
  const { sched } = make(9, 4, { maxBatchTokens: 64, maxRunning: 8 });
  for (const id of [1, 2, 3]) sched.submit(id, range(8, id * 100), { priority: 1 });
  const max = new Map([[1, 9], [2, 9], [3, 9], [4, 2]]);
  step(sched, max);
  step(sched, max);
  assert.equal(sched.numRunning, 3);
  // Four tokens need one block: one runner frees three.
  sched.submit(4, range(4, 900), { priority: -1 });
  const plan = step(sched, max);
  assert.deepEqual(plan.preempted, [3], "the newest of the least urgent");
  assert.ok(plan.entries.some((e) => e.seqId === 4), "the urgent one is admitted in the same step");
});

test("Scheduler does not preempt for priority when equal or more urgent sequences hold what the urgent one needs", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 64, maxRunning: 2 });
  sched.submit(1, range(5), { priority: -1 });
  sched.submit(2, range(5, 10), { priority: 0 });
  const max = new Map([[1, 4], [2, 4], [3, 2]]);
  step(sched, max);
  sched.submit(3, range(5, 20), { priority: 0 });
  const plan = step(sched, max);
  assert.deepEqual(plan.preempted, [], "an equal priority waits its turn");
  assert.equal(sched.get(3)!.status, "waiting");
  assert.equal(sched.stats().priorityPreemptions, 0);
});

test("Scheduler in the decode role never preempts for priority", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 64, maxRunning: 1, role: "decode", localPrefillLimit: 64 });
  sched.submit(1, range(5), { priority: 1 });
  step(sched, new Map([[1, 4]]));
  sched.submit(2, range(5, 10), { priority: -1 });
  assert.deepEqual(step(sched, new Map([[1, 4]])).preempted, []);
});

test("Scheduler with random priorities ends every request, returns every block, and preempts for priority only for more urgent ones (fast-check)", () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ len: fc.integer({ min: 1, max: 24 }), out: fc.integer({ min: 1, max: 8 }), priority: fc.integer({ min: -2, max: 2 }), at: fc.integer({ min: 0, max: 10 }) }), { minLength: 1, maxLength: 12 }),
      fc.integer({ min: 8, max: 24 }),
      fc.constantFrom("recompute" as const, "swap" as const),
      (reqs, blocks, preemption) => {
        const { sched, pool } = make(blocks, 4, { maxBatchTokens: 16, maxRunning: 3, preemption });
        const max = new Map<number, number>();
        for (let t = 0; t < 3000 && (t <= 10 || !sched.idle); t++) {
          reqs.forEach((r, id) => {
            if (r.at !== t || Math.ceil((r.len + 1) / 4) > blocks) return;
            sched.submit(id, range(r.len, 100 * id), { priority: r.priority });
            max.set(id, r.out);
          });
          const before = sched.stats().priorityPreemptions;
          const waitingBest = Math.min(...sched.waitingSequences.map((s) => s.priority));
          const plan = step(sched, max);
          if (sched.stats().priorityPreemptions > before) {
            for (const id of plan.preempted) assert.ok(reqs[id].priority > waitingBest, `seq ${id} (priority ${reqs[id].priority}) made room for a priority ${waitingBest}`);
          }
        }
        assert.ok(sched.idle, "every request ends");
        assert.equal(pool.numUsedBlocks(), 0, "every block is back in the pool");
      },
    ),
    { numRuns: 300, seed: 7 },
  );
});

test("Scheduler.queueState() splits the prefill queued by priority only when some sequence has one", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 8, maxRunning: 1 });
  sched.submit(1, range(10));
  sched.submit(2, range(6, 20));
  assert.equal(sched.queueState().prefillByPriority, undefined, "everyone at 0: no split");
  sched.submit(3, range(12, 40), { priority: 3 });
  sched.submit(4, range(5, 60), { priority: -1 });
  const q = sched.queueState();
  // Nothing cached yet: each prompt whole, 10 + 6 at 0, 12 at 3, 5 at -1.
  assert.deepEqual(q.prefillByPriority, [[-1, 5], [0, 16], [3, 12]]);
  assert.equal(q.waitingPrefillTokens, 5 + 16 + 12);
  sched.finish(3, "abort");
  sched.finish(4, "abort");
  assert.equal(sched.queueState().prefillByPriority, undefined, "the prioritized ones gone: no split again");
});

/** Split step mixing in the scheduler: prefill-only and decode-only steps taking turns, probes, and "mixed" unchanged. */
import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { SPLIT_PROBE_EVERY } from "../../src/engine/scheduler-mixing.ts";
import { BlockPool } from "../../kv/index.ts";
import { fakeSample, make, range } from "./scheduler-fixtures.ts";
import type { SchedulerConfig, StepPlan } from "../../src/engine/scheduler-types.ts";
import type { Sequence } from "../../src/engine/sequence.ts";

interface Req { at: number; prompt: number[]; out: number }

/** A planned step, with the sequences that were decoding (running, prompt done) when it was planned. */
interface Step { plan: StepPlan; decoding: number[] }

/** Runs requests submitted at given steps until idle; returns each step with who was decoding then. */
function run(cfg: Partial<SchedulerConfig>, reqs: readonly Req[], blocks = 256, bs = 4): { steps: Step[]; pool: BlockPool } {
  const { sched, pool } = make(blocks, bs, cfg);
  const seqs: Sequence[] = [];
  const steps: Step[] = [];
  for (let i = 0; i < 5000; i++) {
    reqs.forEach((r, id) => { if (r.at === i) seqs.push(sched.submit(id, r.prompt)); });
    if (sched.idle && reqs.every((r) => r.at <= i)) break;
    const decoding = seqs.filter((s) => s.status === "running" && !s.inPrefill).map((s) => s.id);
    const plan = sched.schedule();
    steps.push({ plan, decoding });
    if (plan.entries.length === 0) continue;
    for (const seq of sched.commit(plan, fakeSample(plan))) if (seq.numOutput >= reqs[seq.id].out) sched.finish(seq.id, "length");
  }
  assert.ok(sched.idle, "every request ends");
  return { steps, pool };
}

const kind = (p: StepPlan) => p.numPrefillTokens > 0 ? (p.numDecodeTokens > 0 ? "M" : "P") : p.numDecodeTokens > 0 ? "D" : "-";
const shape = (steps: Step[]) => steps.map((s) => s.plan.entries.map((e) => [e.seqId, e.startPos, e.tokens.length]));

/**
 * Checks split mixing's rules over a run: while sequences decode, a step carrying prefill is
 * prefill-only except every SPLIT_PROBE_EVERY-th such step (mixed), and is followed by a step that
 * decodes; no decoding sequence waits more than one step. Returns how many steps were of each kind.
 */
function checkSplit(steps: Step[], budgetCoversDecodes: boolean): Record<string, number> {
  let chunks = 0;
  const count: Record<string, number> = { P: 0, D: 0, M: 0, "-": 0 };
  let waited = new Map<number, number>(); // decoding sequence → plans in a row it did not decode in
  steps.forEach(({ plan, decoding }, i) => {
    count[kind(plan)]++;
    if (decoding.length > 0 && plan.numPrefillTokens > 0) {
      chunks++;
      // A prefill step may still admit a preempted sequence whose KV comes back whole (swap or
      // prefix cache) and so only decodes; the decodes already running wait for their own step.
      if (chunks % SPLIT_PROBE_EVERY !== 0) assert.ok(plan.entries.every((e) => !decoding.includes(e.seqId)), `step ${i}: chunk ${chunks} runs without the decodes`);
      const next = steps[i + 1];
      if (next && next.decoding.length > 0) {
        assert.ok(next.plan.numPrefillTokens === 0 && next.plan.entries.every((e) => next.decoding.includes(e.seqId)), `step ${i + 1}: the decodes' own step follows a chunk`);
      }
    }
    if (budgetCoversDecodes) {
      const ran = new Set(plan.entries.map((e) => e.seqId));
      const now = new Map<number, number>();
      for (const id of decoding) {
        if (plan.preempted.includes(id)) continue;
        const w = ran.has(id) ? 0 : (waited.get(id) ?? 0) + 1;
        assert.ok(w <= 1, `step ${i}: sequence ${id} has waited ${w} plans to decode`);
        now.set(id, w);
      }
      waited = now;
    }
  });
  return count;
}

test("Scheduler split mixing alternates a prefill-only step and a decode-only step while both kinds of work exist", () => {
  // Seq 0 decodes for a long time; seq 1's 40-token prompt arrives at step 2 and is chunked by 8.
  const reqs: Req[] = [{ at: 0, prompt: range(3), out: 20 }, { at: 2, prompt: range(40, 100), out: 2 }];
  const split = run({ maxBatchTokens: 8, stepMixing: "split" }, reqs).steps;
  const mixed = run({ maxBatchTokens: 8 }, reqs).steps;
  assert.equal(split.map((s) => kind(s.plan)).join(""), "PDPDPDPDPDPD" + "D".repeat(13));
  assert.deepEqual(shape(split).slice(2, 6), [[[1, 0, 8]], [[0, 4, 1]], [[1, 8, 8]], [[0, 5, 1]]], "the chunk gets the whole budget, the decode its own step");
  assert.equal(mixed.map((s) => kind(s.plan)).join(""), "PD" + "M".repeat(6) + "D".repeat(12), "mixed packs the decode beside each chunk");
  checkSplit(split, true);
});

test("Scheduler split mixing mixes every 16th chunk (a probe)", () => {
  // A 200-token prompt in chunks of 8 (25 chunks) next to a sequence that decodes throughout.
  const reqs: Req[] = [{ at: 0, prompt: range(2), out: 80 }, { at: 1, prompt: range(200, 300), out: 1 }];
  const { steps } = run({ maxBatchTokens: 8, stepMixing: "split" }, reqs);
  const chunkKinds = steps.filter((s) => s.plan.numPrefillTokens > 0 && s.decoding.length > 0).map((s) => kind(s.plan)).join("");
  assert.equal(chunkKinds, "P".repeat(15) + "M" + "P".repeat(9) + "P".repeat(chunkKinds.length - 25));
  assert.equal(chunkKinds.length, 26, "25 chunks of 8, the 16th of 7 beside the decode");
  checkSplit(steps, true);
});

test("Scheduler split mixing plans a lone prefill or lone decode workload exactly as mixed does", () => {
  // Prefill only: prompts that end at their first token. Decode only: every prompt fits step 0.
  const prefills: Req[] = [0, 0, 1, 3, 3, 6].map((at, i) => ({ at, prompt: range(5 + 7 * i, 50 * i), out: 1 }));
  const decodes: Req[] = [3, 9, 4, 12].map((out, i) => ({ at: 0, prompt: range(4 + i, 50 * i), out }));
  for (const [name, reqs, budget] of [["prefill", prefills, 16], ["decode", decodes, 64]] as const) {
    const split = run({ maxBatchTokens: budget, stepMixing: "split" }, reqs).steps.map((s) => s.plan);
    const mixed = run({ maxBatchTokens: budget }, reqs).steps.map((s) => s.plan);
    assert.equal(JSON.stringify(split), JSON.stringify(mixed), `${name}-only workload`);
  }
});

test("Scheduler stepMixing 'mixed' plans as the scheduler did before step mixing existed", () => {
  // Recorded from the scheduler before this option (chunked prefill beside decodes, a prefix hit, the
  // budget shared). It also matched plan for plan, stats included, in 2000 random workloads (roles,
  // preemption, swap, aborts, short-first) checked once against the old code.
  const reqs: Req[] = [{ at: 0, prompt: range(3), out: 4 }, { at: 1, prompt: range(13, 50), out: 2 }, { at: 1, prompt: range(9), out: 2 }];
  for (const cfg of [{}, { stepMixing: "mixed" as const }]) {
    const steps = run({ maxBatchTokens: 6, ...cfg }, reqs).steps;
    assert.deepEqual(shape(steps), [
      [[0, 0, 3]], [[0, 3, 1], [1, 0, 5]], [[0, 4, 1], [1, 5, 5]], [[0, 5, 1], [1, 10, 3], [2, 4, 2]], [[1, 13, 1], [2, 6, 3]], [[2, 9, 1]],
    ]);
  }
});

test("Scheduler split mixing keeps its rules and invariants under random workloads, preemption, swap, prefix hits and short-first (fast-check)", () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ at: fc.integer({ min: 0, max: 30 }), len: fc.integer({ min: 1, max: 40 }), out: fc.integer({ min: 1, max: 12 }), shared: fc.boolean() }), { minLength: 1, maxLength: 10 }),
      fc.integer({ min: 10, max: 40 }),
      fc.integer({ min: 4, max: 40 }),
      fc.constantFrom("recompute", "swap"),
      fc.boolean(),
      (raw, blocks, budget, preemption, shortFirst) => {
        const reqs: Req[] = raw.map((r, id) => ({ at: r.at, prompt: r.shared ? range(Math.min(r.len, 24)) : range(r.len, 100 * (id + 1)), out: r.out }))
          .filter((r) => Math.ceil((r.prompt.length + 1) / 4) <= blocks);
        if (reqs.length === 0) return;
        const cfg: Partial<SchedulerConfig> = {
          maxBatchTokens: budget, maxRunning: 4, preemption, stepMixing: "split",
          ...(shortFirst ? { prefillOrder: { order: "short-first", agingTokensPerS: 0 } } : {}),
        };
        const { steps, pool } = run(cfg, reqs, blocks);
        for (const { plan } of steps) assert.ok(plan.numTokens <= budget);
        checkSplit(steps, budget >= 4);
        assert.equal(pool.numUsedBlocks(), 0, "every block is back in the pool");
      },
    ),
    { numRuns: 300, seed: 7 },
  );
});

test("Scheduler step mixing can be switched between steps and rejects unknown modes", () => {
  const { sched } = make(64, 4, { maxBatchTokens: 8 });
  assert.equal(sched.stepMixing, "mixed");
  sched.submit(1, range(3));
  let plan = sched.schedule();
  sched.commit(plan, fakeSample(plan));
  sched.submit(2, range(30, 100));
  sched.stepMixing = "split";
  plan = sched.schedule();
  assert.equal(kind(plan), "P");
  sched.commit(plan, fakeSample(plan));
  sched.stepMixing = "mixed";
  plan = sched.schedule();
  assert.equal(kind(plan), "M");
  assert.throws(() => (sched.stepMixing = "both" as never), /Unknown step mixing "both"; choose mixed or split/);
  assert.throws(() => make(8, 4, { stepMixing: "alternate" as never }), /Unknown step mixing "alternate"/);
});

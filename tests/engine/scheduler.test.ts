import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { BlockPool } from "../../kv/index.ts";
import { countKvEvents, poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import { fakeSample, make, range } from "./scheduler-fixtures.ts";
import type { SchedulerConfig, StepPlan } from "../../src/engine/scheduler-types.ts";
import { stepShapeOf } from "../../src/engine/step-record.ts";

/** Runs steps until idle, finishing each sequence after `maxTokens[id]` outputs; returns the plans. */
function drain(sched: Scheduler, maxTokens: Map<number, number>, limit = 1000): StepPlan[] {
  const plans: StepPlan[] = [];
  for (let i = 0; i < limit && !sched.idle; i++) {
    const plan = sched.schedule();
    plans.push(plan);
    for (const seq of sched.commit(plan, fakeSample(plan))) {
      if (seq.numOutput >= (maxTokens.get(seq.id) ?? 1)) sched.finish(seq.id, "length");
    }
  }
  assert.ok(sched.idle, "scheduler drained");
  return plans;
}

test("Scheduler.schedule() chunks a long prompt under the token budget", () => {
  const { sched } = make(16, 4, { maxBatchTokens: 8 });
  sched.submit(1, range(20));
  const plans = drain(sched, new Map([[1, 3]]));
  assert.deepEqual(plans.map((p) => p.entries.map((e) => [e.startPos, e.tokens.length, e.sample])), [
    [[0, 8, false]], [[8, 8, false]], [[16, 4, true]], [[20, 1, true]], [[21, 1, true]],
  ]);
  assert.deepEqual(plans.map((p) => p.numPrefillTokens), [8, 8, 4, 0, 0]);
});

test("Scheduler.schedule() feeds a scored prompt at most maxPromptLogprobRows tokens per step, the others as usual", () => {
  const { sched } = make(32, 4, { maxBatchTokens: 16, maxPromptLogprobRows: 5 });
  sched.submit(1, range(12), { wholePrompt: true });
  sched.submit(2, range(6, 50), { wholePrompt: true });
  sched.submit(3, range(9, 80));
  const plans = drain(sched, new Map([[1, 2], [2, 1], [3, 1]]));
  // Step 1: sequence 1 takes the five prompt rows, so 2 waits and 3 overtakes it with the budget left.
  assert.deepEqual(plans[0].entries.map((e) => [e.seqId, e.tokens.length]), [[1, 5], [3, 9]]);
  for (const p of plans) {
    const scored = p.entries.filter((e) => e.seqId !== 3 && e.prefill).reduce((n, e) => n + e.tokens.length, 0);
    assert.ok(scored <= 5, `step ${p.step} feeds ${scored} scored prompt tokens`);
  }
  const fed = (id: number) => plans.flatMap((p) => p.entries.filter((e) => e.seqId === id && e.prefill).map((e) => e.tokens.length));
  assert.deepEqual(fed(1), [5, 5, 2]);
  assert.deepEqual(fed(2), [3, 3], "sequence 2 gets what sequence 1 leaves of each step's rows");
});

test("Scheduler.schedule() feeds one sequence at most longPrefillTokenThreshold tokens per step, the budget's rest to others", () => {
  const { sched } = make(32, 4, { maxBatchTokens: 16, longPrefillTokenThreshold: 6 });
  sched.submit(1, range(20));
  sched.submit(2, range(8, 30));
  sched.submit(3, range(3, 50));
  const plans = drain(sched, new Map([[1, 2], [2, 2], [3, 2]]));
  // Step 1: 6 + 6 + 3 of 16; without the limit sequence 1 would take all 16.
  assert.deepEqual(plans[0].entries.map((e) => [e.seqId, e.tokens.length]), [[1, 6], [2, 6], [3, 3]]);
  const fed = (id: number) => plans.flatMap((p) => p.entries.filter((e) => e.seqId === id && e.prefill).map((e) => e.tokens.length));
  assert.deepEqual(fed(1), [6, 6, 6, 2]);
  assert.deepEqual(fed(2), [6, 2]);
  assert.throws(() => make(32, 4, { longPrefillTokenThreshold: 0 }), /Invalid long prefill token threshold 0/);
});

test("Scheduler.schedule() marks a prompt's one-token last chunk as prefill, and stepShapeOf() counts it so", () => {
  const { sched } = make(16, 4, { maxBatchTokens: 8 });
  sched.submit(1, range(17));
  const plans = drain(sched, new Map([[1, 2]]));
  // 8 + 8 + 1 prompt tokens, then one decode: the third step is a one-token prefill chunk.
  assert.deepEqual(plans.map((p) => p.entries.map((e) => [e.tokens.length, e.prefill])), [[[8, true]], [[8, true]], [[1, true]], [[1, false]]]);
  assert.deepEqual(plans.map((p) => stepShapeOf(p.entries)).map((s) => [s.prefillTokens, s.decodeSeqs]), [[8, 0], [8, 0], [1, 0], [0, 1]]);
  // Its attention pairs are the 17th token's: 16 cached positions plus itself.
  assert.equal(stepShapeOf(plans[2].entries).prefillAttnPairs, 17);
});

test("Scheduler.schedule() batches decodes with a newly admitted prefill chunk", () => {
  const { sched } = make(32, 4, { maxBatchTokens: 6 });
  sched.submit(1, range(3));
  let plan = sched.schedule();
  sched.commit(plan, fakeSample(plan));
  sched.submit(2, range(10, 50));
  plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.tokens.length]), [[1, 1], [2, 5]]);
  assert.equal(plan.numTokens, 6);
  assert.equal(plan.numDecodeTokens, 1);
});

test("Scheduler prefix hits skip cached blocks and usage counts them", () => {
  const { sched, pool } = make(32, 4);
  sched.submit(1, range(18));
  drain(sched, new Map([[1, 2]]));
  const b = sched.submit(2, [...range(16), 77, 78, 79]);
  const plan = sched.schedule();
  assert.equal(b.numCachedPrompt, 16);
  assert.deepEqual(plan.entries.map((e) => [e.startPos, e.tokens]), [[16, [77, 78, 79]]]);
  // A prompt that is entirely cached still computes its last token (its logits are needed).
  sched.commit(plan, fakeSample(plan));
  sched.finish(2, "stop");
  const c = sched.submit(3, range(16));
  const p3 = sched.schedule();
  assert.equal(c.numCachedPrompt, 12);
  assert.deepEqual(p3.entries[0].tokens, [12, 13, 14, 15]);
  sched.commit(p3, fakeSample(p3));
  sched.finish(3, "stop");
  assert.equal(pool.numUsedBlocks(), 0);
  assert.equal(sched.stats().prefixHitTokens, 28);
});

test("Scheduler admits by free KV blocks and waits for blocks to come back", () => {
  const { sched, pool } = make(6, 4, { maxBatchTokens: 64 });
  sched.submit(1, range(16));
  sched.submit(2, range(16, 100));
  const plan = sched.schedule();
  // Seq 1 takes 4 blocks for its whole prompt; seq 2 gets only what is left (2 blocks = 8 tokens).
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.tokens.length]), [[1, 16], [2, 8]]);
  sched.commit(plan, fakeSample(plan));
  sched.finish(1, "stop");
  drain(sched, new Map([[2, 2]]));
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler preempts the newest sequence by recompute when KV runs out", () => {
  const { sched, pool } = make(4, 2, { maxBatchTokens: 64 });
  sched.submit(1, range(3));
  sched.submit(2, range(3, 10));
  const plans = drain(sched, new Map([[1, 4], [2, 4]]));
  const pre = plans.flatMap((p) => p.preempted);
  assert.ok(pre.includes(2), `seq 2 was preempted (${JSON.stringify(pre)})`);
  assert.ok(!pre.includes(1), "the oldest sequence keeps its KV");
  // After preemption seq 2 restarts from position 0 (or a cached prefix), then completes.
  const restart = plans.findIndex((p) => p.preempted.length > 0);
  const again = plans.slice(restart + 1).flatMap((p) => p.entries).find((e) => e.seqId === 2);
  assert.ok(again && again.tokens.length > 1, "seq 2 recomputes its tokens");
  assert.equal(sched.stats().preemptions >= 1, true);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler.abort() frees blocks now, or at commit when the step is in flight", () => {
  const { sched, pool } = make(16, 4);
  sched.submit(1, range(10));
  sched.submit(2, range(10, 20));
  sched.submit(3, range(5));
  const plan = sched.schedule();
  sched.abort(2);
  assert.ok(pool.numUsedBlocks() > 0);
  const got = sched.commit(plan, fakeSample(plan));
  assert.deepEqual(got.map((s) => s.id), [1, 3]);
  sched.abort(1);
  sched.abort(3);
  assert.ok(sched.idle);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler roles: decode admits only cached prompts, prefill stops after the first token", () => {
  const pre = make(16, 4, { role: "prefill" });
  pre.sched.submit(1, range(9));
  const plan = pre.sched.schedule();
  const done = pre.sched.commit(plan, fakeSample(plan));
  assert.equal(done[0].finishReason, "prefill_done");
  assert.ok(pre.sched.idle);
  const dec = make(16, 4, { role: "decode", localPrefillLimit: 2 });
  dec.sched.submit(1, range(9));
  assert.equal(dec.sched.schedule().entries.length, 0, "an uncached 9-token prompt is not prefilled");
  dec.sched.submit(2, range(2, 50));
  assert.deepEqual(dec.sched.schedule().entries.map((e) => e.seqId), [2]);
});

test("Scheduler decode role: a sequence preempted there recomputes the prompt its cache lost instead of waiting forever", () => {
  // One pool: a mixed scheduler caches both prompts, then a decode-role one serves them from it.
  const pool = new BlockPool({ numBlocks: 8, blockSize: 4, clock: () => 0 });
  const warm = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0 });
  const a = range(9, 10), b = range(9, 40);
  warm.submit(1, a);
  warm.submit(2, b);
  while (!warm.idle) {
    const plan = warm.schedule();
    for (const seq of warm.commit(plan, fakeSample(plan))) warm.finish(seq.id, "length");
  }
  const dec = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0, role: "decode", localPrefillLimit: 2 });
  dec.submit(3, a);
  dec.submit(4, b);
  // 3 grows to the whole pool: 4 is preempted and every block of its prompt is evicted meanwhile.
  const want = new Map([[3, 22], [4, 14]]);
  const outputs = new Map<number, number>();
  for (let step = 0; step < 200 && !dec.idle; step++) {
    const plan = dec.schedule();
    assert.ok(plan.entries.length > 0, `step ${step} plans nothing while ${dec.waitingSequences.map((s) => s.id).join(", ")} waits on an idle worker`);
    for (const seq of dec.commit(plan, fakeSample(plan))) {
      if (seq.numOutput < want.get(seq.id)!) continue;
      outputs.set(seq.id, seq.numOutput);
      dec.finish(seq.id, "length");
    }
  }
  assert.ok(dec.stats().preemptions > 0, "the pool forced a preemption");
  assert.deepEqual([...outputs].sort(), [[3, 22], [4, 14]]);
  assert.ok(dec.stats().recomputedTokens > 0);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler keeps its invariants under random workloads (fast-check)", () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ len: fc.integer({ min: 1, max: 30 }), out: fc.integer({ min: 1, max: 8 }), shared: fc.boolean(), abortAt: fc.integer({ min: -1, max: 6 }) }), { minLength: 1, maxLength: 12 }),
      fc.integer({ min: 8, max: 24 }),
      fc.integer({ min: 2, max: 40 }),
      (reqs, blocks, budget) => {
        const { sched, pool } = make(blocks, 4, { maxBatchTokens: budget, maxRunning: 5 });
        const maxTokens = new Map<number, number>();
        reqs.forEach((r, id) => {
          const prompt = r.shared ? range(Math.min(r.len, 20)) : range(r.len, 100 * (id + 1));
          if (Math.ceil((prompt.length + 1) / 4) > blocks) return;
          sched.submit(id, prompt);
          maxTokens.set(id, r.out);
        });
        for (let step = 0; step < 2000 && !sched.idle; step++) {
          const plan = sched.schedule();
          assert.ok(plan.numTokens <= budget);
          for (const e of plan.entries) assert.ok(e.blockTable.length * 4 >= e.startPos + e.tokens.length, "blocks cover the chunk");
          reqs.forEach((r, id) => { if (r.abortAt === step) sched.abort(id); });
          for (const seq of sched.commit(plan, fakeSample(plan))) {
            if (seq.numOutput >= maxTokens.get(seq.id)!) sched.finish(seq.id, "length");
          }
        }
        assert.ok(sched.idle, "every request ends");
        assert.equal(pool.numUsedBlocks(), 0, "every block is back in the pool");
      },
    ),
    { numRuns: 300, seed: 42 },
  );
});

test("Scheduler admits the least uncached prompt first under prefillOrder short-first", () => {
  // A cached session prefix (as after a tool call) and two newcomers: a cold prompt queued first,
  // shorter than the continuation queued last (20 vs 27 tokens) but with more uncached work (20 vs 3),
  // and room for only one prompt per step.
  const session = range(24, 100);
  const setup = make(64, 4, { maxBatchTokens: 8, maxRunning: 1 });
  setup.sched.submit(1, session);
  drain(setup.sched, new Map([[1, 1]]));
  const cold = range(20, 500), continuation = [...session, 7, 8, 9];
  const order = (cfg: Partial<SchedulerConfig>): number[] => {
    // Same pool (the session's prefix is cached there), a fresh scheduler per order.
    const sched = new Scheduler(poolBlockManager(setup.pool), { watermarkBlocks: 0, maxBatchTokens: 8, maxRunning: 1, ...cfg });
    sched.submit(2, cold);
    sched.submit(3, continuation);
    const first = sched.schedule().entries.map((e) => e.seqId);
    for (const id of [2, 3]) sched.finish(id, "abort");
    return first;
  };
  assert.deepEqual(order({}), [2], "FCFS admits the cold prompt queued first");
  assert.deepEqual(order({ prefillOrder: { order: "short-first", agingTokensPerS: 0 } }), [3], "the continuation has 3 uncached tokens");
});

test("Scheduler ages waiting sequences under prefillOrder short-first", () => {
  let now = 0;
  const { sched } = make(64, 4, { maxBatchTokens: 8, maxRunning: 1, prefillOrder: { order: "short-first", agingTokensPerS: 10 } });
  const aged = new Scheduler(poolBlockManager(new BlockPool({ numBlocks: 64, blockSize: 4, clock: () => 0 })), {
    watermarkBlocks: 0, maxBatchTokens: 8, maxRunning: 1, prefillOrder: { order: "short-first", agingTokensPerS: 10 },
  }, () => now);
  for (const s of [sched, aged]) s.submit(1, range(40)); // 40 uncached tokens, queued at t = 0
  now = 5; // 5 s later at 10 tokens/s: 50 tokens of credit, more than the 36-token difference
  for (const s of [sched, aged]) s.submit(2, range(4, 900));
  assert.deepEqual(sched.schedule().entries.map((e) => e.seqId), [2], "without a clock, no credit: the short one goes first");
  assert.deepEqual(aged.schedule().entries.map((e) => e.seqId), [1], "the long one has waited long enough");
});

/** A scheduler whose KV layer versions its prefix cache by counting the pool's KV events, with its probes counted. */
function versioned(numBlocks: number, cfg: Partial<SchedulerConfig>, clock: () => number) {
  const count = countKvEvents();
  const pool = new BlockPool({ numBlocks, blockSize: 4, clock: () => 0, events: count.sink });
  const kv = poolBlockManager(pool, count.count);
  const probe = kv.cachedPrefixTokens;
  let probes = 0;
  kv.cachedPrefixTokens = (tokens) => {
    probes++;
    return probe(tokens);
  };
  return { pool, sched: new Scheduler(kv, { watermarkBlocks: 0, ...cfg }, clock), probes: () => probes };
}

/**
 * queueState()'s waiting gauges worked out afresh, as it did before it kept them: every waiting
 * prompt probed now (plus the rest of running prompts), the oldest first-queue time among the waiting.
 */
function freshQueueGauges(sched: Scheduler, pool: BlockPool, queuedAt: ReadonlyMap<number, number>, now: number) {
  let tokens = 0;
  for (const seq of sched.waitingSequences) tokens += seq.tokens.length - (seq.numSwapped > 0 ? seq.numSwapped : pool.cachedPrefixTokens(seq.tokens.slice(0, -1)));
  for (const id of queuedAt.keys()) {
    const seq = sched.get(id);
    if (seq?.status === "running" && seq.inPrefill) tokens += Math.max(0, seq.promptLength - seq.numComputed);
  }
  const oldest = Math.min(...sched.waitingSequences.map((seq) => queuedAt.get(seq.id)!));
  return {
    waitingPrefillTokens: tokens,
    oldestWaitS: oldest === Infinity ? 0 : now - oldest,
    waitingDecodes: sched.waitingSequences.filter((seq) => seq.numOutput > 0).length,
  };
}

/** Writes `tokens` (whole blocks) into `pool`'s prefix cache from outside any scheduler, as a host-tier restore or another worker's prefix does. */
function importPrefix(pool: BlockPool, tokens: readonly number[]): void {
  const have = pool.matchPrefix(tokens);
  const fresh = pool.tryAllocate(tokens.length / 4 - have.blockIds.length) ?? [];
  let parent = have.blockIds.at(-1) ?? null;
  for (const [i, id] of fresh.entries()) {
    const b = have.blockIds.length + i;
    if (pool.commitBlock(id, parent, tokens.slice(b * 4, b * 4 + 4)) === null) break;
    parent = id;
  }
  pool.release([...have.blockIds, ...fresh]);
}

test("Scheduler.queueState() stays exact through admissions, cancels, preemptions and outside cache changes, probing only after the cache changes (fast-check)", () => {
  const op = fc.oneof(
    { arbitrary: fc.record({ kind: fc.constant("submit" as const), base: fc.integer({ min: 0, max: 2 }), len: fc.integer({ min: 1, max: 26 }), out: fc.integer({ min: 1, max: 16 }) }), weight: 2 },
    { arbitrary: fc.record({ kind: fc.constant("step" as const) }), weight: 5 },
    { arbitrary: fc.record({ kind: fc.constant("cancel" as const), pick: fc.nat() }), weight: 1 },
    { arbitrary: fc.record({ kind: fc.constant("import" as const), base: fc.integer({ min: 0, max: 2 }) }), weight: 1 },
  );
  fc.assert(
    fc.property(fc.array(op, { minLength: 10, maxLength: 80, size: "max" }), fc.constantFrom(8, 14), fc.boolean(), fc.boolean(), (ops, blocks, shortFirst, swap) => {
      const cfg: Partial<SchedulerConfig> = {
        maxBatchTokens: 8, maxRunning: 3, preemption: swap ? "swap" : "recompute", swapSpaceBlocks: 6,
        prefillOrder: shortFirst ? { order: "short-first", agingTokensPerS: 2 } : undefined,
      };
      let now = 0;
      const clock = () => now;
      const { sched, pool, probes } = versioned(blocks, cfg, clock);
      // The same requests on a scheduler that probes every time (no cache version): the same plans.
      const twinPool = new BlockPool({ numBlocks: blocks, blockSize: 4, clock: () => 0 });
      const twin = new Scheduler(poolBlockManager(twinPool), { watermarkBlocks: 0, ...cfg }, clock);
      const live: number[] = [];
      const queuedAt = new Map<number, number>();
      const outputs = new Map<number, number>();
      let nextId = 0;
      const check = (when: string) => {
        const q = sched.queueState();
        const { waitingPrefillTokens, oldestWaitS, waitingDecodes } = q;
        assert.deepEqual({ waitingPrefillTokens, oldestWaitS, waitingDecodes }, freshQueueGauges(sched, pool, queuedAt, now), when);
        assert.deepEqual(q, twin.queueState(), when);
        const before = probes();
        sched.queueState();
        assert.equal(probes(), before, `${when}: a second queueState() with nothing changed probes nothing`);
      };
      for (const o of ops) {
        now += 0.25; // queue ages (oldestWaitS) and aging credit move on
        if (o.kind === "submit") {
          // Prompts of one base share up to 12 leading tokens, so prefix hits come and go.
          const prompt = [...range(Math.min(o.len, 12), 100 * o.base), ...range(Math.max(0, o.len - 12), 1000 + 50 * nextId)];
          for (const s of [sched, twin]) s.submit(nextId, prompt);
          outputs.set(nextId, o.out);
          queuedAt.set(nextId, now);
          live.push(nextId++);
        } else if (o.kind === "cancel" && live.length > 0) {
          const [id] = live.splice(o.pick % live.length, 1);
          for (const s of [sched, twin]) s.abort(id);
        } else if (o.kind === "import") {
          for (const p of [pool, twinPool]) importPrefix(p, range(8, 100 * o.base));
        } else if (o.kind === "step") {
          const plan = sched.schedule();
          const twinPlan = twin.schedule();
          assert.deepEqual(plan, twinPlan, "the kept probes order admission as fresh ones do");
          check("after planning");
          if (plan.entries.length === 0) continue;
          for (const seq of sched.commit(plan, fakeSample(plan))) if (seq.numOutput >= outputs.get(seq.id)!) sched.finish(seq.id, "length");
          for (const seq of twin.commit(twinPlan, fakeSample(twinPlan))) if (seq.numOutput >= outputs.get(seq.id)!) twin.finish(seq.id, "length");
        }
        check(`after ${o.kind}`);
      }
    }),
    { numRuns: 200, seed: 7 },
  );
});

test("Scheduler readmits a sequence preempted past the pool less the watermark, its prefix cached, once nothing runs", () => {
  // Pool of 4 blocks, 2 kept as headroom at admission. B grows to 10 tokens while A runs, is
  // preempted with two full blocks cached, and then needs a third: its hit took the room the
  // watermark leaves, so before the fix no token of it ever fitted again (the fuzz's seed 558).
  const { sched } = make(4, 4, { watermarkBlocks: 2, maxBatchTokens: 16 });
  sched.submit(1, range(1, 10));
  sched.submit(2, range(7, 20));
  let preempted = false;
  for (let i = 0; i < 20 && !preempted; i++) {
    const plan = sched.schedule();
    preempted = plan.preempted.includes(2);
    if (plan.entries.length > 0) sched.commit(plan, fakeSample(plan));
  }
  assert.ok(preempted);
  assert.equal(sched.get(2)!.tokens.length, 10);
  sched.finish(1, "stop");
  const plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.startPos, e.tokens.length]), [[2, 8, 2]], "its cached 8 tokens and the 2 after them");
});

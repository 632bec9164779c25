/**
 * The scheduler fuzz test's driver: random operations on a {@link FuzzWorld} (submits with shared
 * prefixes, sessions, priorities and hand-offs; steps with a fake forward that writes every fed token
 * into its block; cancellations at any point, mid-step included; tool waits; speculative drafts and
 * jump-forward tokens; steps that look ahead (multi-step decoding); clock jumps; step-mixing switches), the invariants checked after each, then a
 * drain in which every request must end and the pool must come back whole.
 */
import { SeededRng } from "../../kv/index.ts";
import { SchedulerCapacityError, type StepPlan } from "../../src/engine/scheduler-types.ts";
import type { FinishReason, SequenceHints } from "../../src/engine/sequence.ts";
import { checkContent, checkPlan, checkPool, checkQueueState } from "./scheduler-fuzz-checks.ts";
import { drawShape, type FuzzRequest, type FuzzSummary, FuzzWorld } from "./scheduler-fuzz-world.ts";

export type { FuzzSummary };

const VOCAB = 24;

/** Runs `ops` random operations from `seed`, then drains; throws FuzzInvariantError on a violation. */
export function runFuzz(seed: number, ops: number): FuzzSummary {
  const rng = new SeededRng(seed);
  const w = new FuzzWorld(seed, drawShape(rng));
  const d = new Driver(w, rng);
  for (let i = 0; i < ops; i++) d.randomOp(i);
  d.drain();
  return d.summary(ops);
}

class Driver {
  private nextId = 1;
  private refused = 0;
  private readonly families: number[][];
  /** Prompts worth sending again: earlier prompts (hand-offs) and finished transcripts (next turns). */
  private readonly again: { tokens: number[]; hints: SequenceHints }[] = [];
  private readonly sessionIds = ["a", "b", "c", "d"];
  private readonly aborted = new Set<number>();
  private readonly bs: number;
  private readonly maxPrompt: number;
  private handoffs = 0;
  private drafts = 0;
  private lookaheads = 0;
  private truncated = 0;

  constructor(private readonly w: FuzzWorld, private readonly rng: SeededRng) {
    this.bs = w.shape.blockSize;
    this.maxPrompt = (w.shape.numBlocks - (w.sched.config.watermarkBlocks)) * this.bs;
    this.families = Array.from({ length: 4 }, () => Array.from({ length: this.maxPrompt + 2 * this.bs }, () => rng.int(0, VOCAB - 1)));
  }

  randomOp(i: number): void {
    const r = this.rng.next();
    const what = r < 0.3 ? "submit" : r < 0.78 ? "step" : r < 0.82 ? "abort" : r < 0.85 ? "tool" : r < 0.87 ? "time" : r < 0.89 ? "mixing"
      : r < 0.92 ? "extend" : r < 0.96 ? "propose" : r < 0.99 ? "gauges" : "duplicate";
    try {
      this.op(what);
    } catch (e) {
      if (e instanceof Error && !e.message.startsWith(`Seed ${this.w.seed}`)) e.message = `Seed ${this.w.seed}, op ${i} (${what}), step ${this.w.step}: ${e.message}`;
      throw e;
    }
    checkPool(this.w);
    checkContent(this.w, true);
  }

  private op(what: string): void {
    const { w, rng } = this;
    const pickLive = (f: (id: number) => boolean = () => true) => {
      const ids = [...w.live].filter(f);
      return ids.length === 0 ? undefined : ids[rng.int(0, ids.length - 1)];
    };
    const running = (id: number) => w.reqs.get(id)!.seq.status === "running";
    switch (what) {
      case "submit": return this.submit();
      case "step": return void this.step(true);
      case "abort": {
        const id = pickLive();
        if (id !== undefined) this.cancel(id);
        return;
      }
      case "tool": return w.sessions?.waitsOnTool(this.sessionIds[rng.int(0, 3)], `tool${rng.int(0, 2)}`, w.now);
      case "time": w.now += [0.5, 3, 10, 70][rng.int(0, 3)]; return;
      case "mixing": w.sched.stepMixing = w.sched.stepMixing === "split" ? "mixed" : "split"; return;
      case "extend": {
        const id = pickLive((x) => running(x) && !w.reqs.get(x)!.seq.inPrefill && w.reqs.get(x)!.seq.numPending === 1);
        if (id === undefined) return;
        const req = w.reqs.get(id)!;
        // The engine forces at most what max tokens leave (and so stays within its context length).
        const n = Math.min(rng.int(1, 3), req.maxTokens - req.seq.numOutput);
        if (n <= 0) return;
        w.sched.extend(id, Array.from({ length: n }, () => rng.int(0, VOCAB - 1)));
        if (req.seq.numOutput >= req.maxTokens) this.end(id, "length");
        return;
      }
      case "propose": {
        const id = pickLive((x) => running(x) && !w.reqs.get(x)!.seq.inPrefill);
        if (id === undefined) return;
        // As the engine: a draft never runs past max tokens (and so past the context length).
        const req = w.reqs.get(id)!;
        const n = Math.min(rng.int(1, 4), req.maxTokens - req.seq.numOutput - 1);
        if (n > 0) w.sched.propose(id, Array.from({ length: n }, () => rng.int(0, VOCAB - 1)));
        return;
      }
      case "gauges": return checkQueueState(w);
      case "duplicate": {
        const id = pickLive();
        if (id === undefined) return;
        const seq = w.reqs.get(id)!.seq;
        let threw = false;
        try {
          w.sched.submit(id, [1, 2, 3]);
        } catch (e) {
          threw = e instanceof RangeError;
        }
        if (!threw || w.sched.get(id) !== seq) w.fail(`submitting live id ${id} again was not refused with a RangeError`);
      }
    }
  }

  /** A new request: a family's prefix plus a tail, a hand-off's prompt again, or a session's next turn. */
  private submit(): void {
    const { w, rng, bs } = this;
    const id = this.nextId++;
    const r = rng.next();
    let tokens: number[];
    let hints: SequenceHints = {};
    if (r < 0.25 && this.again.length > 0) {
      const prev = this.again[rng.int(0, this.again.length - 1)];
      tokens = [...prev.tokens];
      hints = { ...prev.hints };
      if (rng.next() < 0.5) tokens.push(...Array.from({ length: rng.int(1, 2 * bs) }, () => rng.int(0, VOCAB - 1)));
    } else {
      const long = rng.next();
      const len = long < 0.7 ? rng.int(1, 4 * bs) : long < 0.96 ? rng.int(1, this.maxPrompt) : rng.int(this.maxPrompt - 1, this.maxPrompt + 2 * bs);
      const fam = this.families[rng.int(0, 3)];
      const shared = rng.int(0, len);
      tokens = [...fam.slice(0, shared), ...Array.from({ length: len - shared }, () => rng.int(0, VOCAB - 1))];
      if (rng.next() < 0.5) hints.sessionId = this.sessionIds[rng.int(0, 3)];
      if (rng.next() < 0.3) hints.priority = [-1, 1, 2][rng.int(0, 2)];
      if (rng.next() < 0.1) hints.cacheRoot = rng.int(1, 2);
      const kind = rng.next();
      if (kind < 0.12) hints.prefillOnly = true;
      else if (kind < 0.18) hints.promptOnly = true;
      else if (kind < 0.23) hints.wholePrompt = true;
    }
    if (tokens.length === 0) tokens.push(0);
    const need = Math.ceil((tokens.length + (hints.promptOnly ? 0 : 1)) / bs);
    const fits = need <= w.shape.numBlocks - w.sched.config.watermarkBlocks;
    let seq;
    try {
      seq = w.sched.submit(id, tokens, hints);
    } catch (e) {
      if (!(e instanceof SchedulerCapacityError) || fits) throw e;
      if (!e.message.includes(`${tokens.length} tokens`)) w.fail(`refusal "${e.message}" does not quote the prompt's length ${tokens.length}`);
      if (w.sched.get(id) !== undefined) w.fail(`refused request ${id} is known to the scheduler`);
      this.refused++;
      return;
    }
    if (!fits) w.fail(`a prompt of ${tokens.length} tokens needing ${need} blocks was accepted`);
    const room = w.shape.bounded ? this.maxPrompt - tokens.length : Infinity;
    if (room <= 0 && !hints.promptOnly) w.fail(`a prompt of ${tokens.length} tokens leaving no room for output was accepted`);
    const maxTokens = hints.prefillOnly || hints.promptOnly ? 1 : Math.min(room, [1, 2, 4, 8, 40][rng.int(0, 4)]);
    w.reqs.set(id, { seq, maxTokens, submittedAt: w.step, overtaken: 0 });
    w.live.add(id);
    if (hints.sessionId !== undefined) w.sessions?.started(hints.sessionId, w.now);
    if (hints.prefillOnly && rng.next() < 0.7) this.again.push({ tokens, hints: { ...hints, prefillOnly: false } });
  }

  /** Cancels a request as the engine does (an entry of the step in flight ends at its commit). */
  private cancel(id: number): void {
    this.aborted.add(id);
    const seq = this.w.reqs.get(id)!.seq;
    this.w.sched.abort(id);
    if (seq.status === "finished") this.ended(id);
    else if (!seq.abortRequested) this.w.fail(`abort of sequence ${id} neither ended it nor was noted`);
  }

  /** Ends a live request for a reason the engine decides (EOS, max tokens, an embedding's one row). */
  private end(id: number, reason: FinishReason): void {
    const seq = this.w.reqs.get(id)!.seq;
    if (seq.hints.sessionId !== undefined) this.w.sessions?.ended(seq.hints.sessionId, this.w.now);
    this.w.sched.finish(id, reason);
    this.ended(id, true);
  }

  /** Notes a request the scheduler ended (or `end` did), with what the engine does after. */
  private ended(id: number, sessionDone = false): void {
    const { w } = this;
    const req = w.reqs.get(id)!;
    if (req.seq.status !== "finished" || !req.seq.finishReason) w.fail(`sequence ${id} was to end but is ${req.seq.status}`);
    if (w.sched.get(id) !== undefined) w.fail(`finished sequence ${id} is still known to the scheduler`);
    req.reason = req.seq.finishReason;
    if (req.reason === "abort" && !this.aborted.has(id)) w.fail(`sequence ${id} ended as aborted, never cancelled`);
    w.live.delete(id);
    w.host.delete(id);
    if (!sessionDone && req.seq.hints.sessionId !== undefined) w.sessions?.ended(req.seq.hints.sessionId, w.now);
    if (req.reason !== "abort" && req.seq.hints.sessionId !== undefined && this.again.length < 64) {
      this.again.push({ tokens: [...req.seq.tokens], hints: { sessionId: req.seq.hints.sessionId, cacheRoot: req.seq.hints.cacheRoot } });
    }
  }

  /** Plans, runs and commits one step; `chaos` allows cancellations and submissions mid-step. */
  step(chaos: boolean): StepPlan {
    const { w, rng, bs } = this;
    w.now += 0.05;
    w.step++;
    const holds = w.tailHeld.size;
    const plan = w.sched.schedule();
    this.noteAdmissions(plan);
    checkPlan(w, plan);
    this.truncated += plan.truncated.length;
    for (const e of plan.entries) if (e.draft) this.drafts++;
    for (const id of plan.truncated) {
      const seq = w.reqs.get(id)!.seq;
      if (Math.ceil(seq.tokens.length / bs) <= w.shape.numBlocks) w.fail(`sequence ${id} of ${seq.tokens.length} tokens truncated though the pool holds it (${holds} hand-off holds)`);
      this.ended(id);
    }
    const ahead = this.lookAhead(plan);
    w.forward(plan, ahead);
    checkPool(w);
    if (plan.entries.length === 0) return plan;
    if (chaos && rng.next() < 0.06) this.cancel(plan.entries[rng.int(0, plan.entries.length - 1)].seqId);
    if (chaos && rng.next() < 0.1) this.submit();
    const sampled = new Map<number, number>();
    const accepted = new Map<number, number[]>();
    for (const e of plan.entries) {
      if (!e.sample) continue;
      const more = ahead.get(e.seqId);
      if (more) {
        sampled.set(e.seqId, more[more.length - 1]);
        accepted.set(e.seqId, more.slice(0, -1));
        continue;
      }
      sampled.set(e.seqId, rng.int(0, VOCAB - 1));
      if (e.draft) accepted.set(e.seqId, e.tokens.slice(e.tokens.length - e.draft, e.tokens.length - e.draft + rng.int(0, e.draft)));
    }
    const out = w.sched.commit(plan, sampled, accepted);
    for (const e of plan.entries) if (w.live.has(e.seqId) && w.reqs.get(e.seqId)!.seq.status === "finished") this.ended(e.seqId);
    for (const seq of out) {
      if (!w.live.has(seq.id)) continue;
      const req = w.reqs.get(seq.id)!;
      if (seq.hints.promptOnly || rng.next() < 0.1) this.end(seq.id, "stop");
      else if (seq.numOutput >= req.maxTokens) this.end(seq.id, "length");
    }
    return plan;
  }

  /**
   * Multi-step decoding, now and then: a plan of plain decodes looks ahead 1 to 4 steps (never past a
   * request's max tokens, and only while nothing waits that could be admitted, as the engine's loop),
   * as many as the pool grants. Each entry's tokens, sampled in order: the steps feed all but the last.
   */
  private lookAhead(plan: StepPlan): Map<number, number[]> {
    const { w, rng } = this;
    const plain = plan.entries.length > 0 && plan.entries.every((e) => !e.prefill && e.sample && !e.draft && e.tokens.length === 1);
    // As the engine's loop: only while nothing waits that could be admitted.
    const blocked = w.sched.waitingSequences.length > 0 && !w.sched.admitsNone;
    if (!plain || plan.swapIn.length + plan.swapOut.length > 0 || blocked || rng.next() >= 0.3) return new Map();
    let k = rng.int(1, 4);
    for (const e of plan.entries) {
      const req = w.reqs.get(e.seqId)!;
      k = Math.min(k, req.maxTokens - req.seq.numOutput - 1);
    }
    const granted = k <= 0 ? 0 : w.sched.lookAhead(plan, k);
    if (granted === 0) return new Map();
    if (granted > k) w.fail(`lookAhead granted ${granted} steps of ${k} asked`);
    this.lookaheads++;
    return new Map(plan.entries.map((e) => [e.seqId, Array.from({ length: granted + 1 }, () => rng.int(0, VOCAB - 1))]));
  }

  /** First admissions: earlier, equally urgent requests still waiting were overtaken. */
  private noteAdmissions(plan: StepPlan): void {
    const { w } = this;
    for (const e of plan.entries) {
      const req = w.reqs.get(e.seqId)!;
      if (req.admittedAt !== undefined) continue;
      req.admittedAt = w.step;
      if (req.seq.promptHandedOff) this.handoffs++;
      for (const id of w.live) {
        const other = w.reqs.get(id)!;
        // A scored prompt waiting for a step with prompt rows left is passed over by design (scheduler-queue.ts admit).
        if (other.admittedAt === undefined && other.seq.arrival < req.seq.arrival && other.seq.priority <= req.seq.priority && !other.seq.hints.wholePrompt) other.overtaken++;
      }
    }
  }

  /** Steps without new work until idle; every request must end, and the pool come back whole. */
  drain(): void {
    const { w } = this;
    const limit = w.step + 200 + [...w.live].reduce((a, id) => a + 4 * (w.reqs.get(id)!.seq.tokens.length + 50), 0);
    let stalled = 0;
    while (!w.sched.idle) {
      if (w.step > limit) w.fail(`drain did not finish: live [${[...w.live].map((id) => `${id}:${w.reqs.get(id)!.seq.status}`)}]`);
      const plan = this.step(false);
      checkPool(w);
      checkContent(w, true);
      if (plan.entries.length + plan.preempted.length + plan.truncated.length > 0) stalled = 0;
      else {
        // An engine sleeps until a hand-off hold expires; a scheduler with nothing to do and work waiting is stuck.
        w.now += 1;
        if (++stalled > 10) w.fail(`no progress for ${stalled} plans with [${[...w.live]}] live and ${w.tailHeld.size} hand-off holds`);
      }
    }
    if (w.live.size > 0) w.fail(`idle with [${[...w.live]}] live`);
    for (const [id, req] of w.reqs) if (!req.reason) w.fail(`request ${id} never ended`);
    w.tails?.clear();
    checkPool(w);
    if (w.pool.numFreeBlocks() !== w.shape.numBlocks) w.fail(`${w.shape.numBlocks - w.pool.numFreeBlocks()} blocks still in use after the drain`);
    const all = w.pool.tryAllocate(w.shape.numBlocks);
    if (all === null) return w.fail(`cached blocks are not all evictable after the drain`);
    w.pool.release(all);
    if (w.pool.numCachedBlocks() !== 0) w.fail(`${w.pool.numCachedBlocks()} blocks stayed cached after every block was reallocated`);
  }

  summary(ops: number): FuzzSummary {
    const { w } = this;
    const reasons: Record<string, number> = {};
    let maxOvertakenFcfs = 0;
    const fcfs = w.sched.config.prefillOrder === undefined;
    for (const req of w.reqs.values() as Iterable<FuzzRequest>) {
      reasons[req.reason!] = (reasons[req.reason!] ?? 0) + 1;
      if (fcfs) maxOvertakenFcfs = Math.max(maxOvertakenFcfs, req.overtaken);
    }
    const st = w.sched.stats();
    return {
      ops, steps: w.step, requests: w.reqs.size, refused: this.refused, reasons, preemptions: st.preemptions, swapOuts: st.swapOuts,
      prefixHitTokens: st.prefixHitTokens, priorityPreemptions: st.priorityPreemptions, swappedInBlocks: st.swappedInBlocks,
      handoffs: this.handoffs, drafts: this.drafts, lookaheads: this.lookaheads, truncated: this.truncated, maxOvertakenFcfs,
    };
  }
}

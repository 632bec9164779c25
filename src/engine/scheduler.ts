/**
 * Continuous batching with chunked prefill under a per-step token budget (vLLM v1's shape):
 * running sequences first (decode tokens and unfinished prefill chunks), preempting the newest
 * running sequence when KV runs out (by recompute, or by swap to host memory while the swap space
 * has room), then admission of waiting sequences while budget and free blocks last: FCFS, or least
 * uncached work first (config.prefillOrder; the waiting queue and admission are scheduler-queue.ts).
 * Request priorities (vLLM's: lower first) come before both orders: admitted first, preempted last,
 * and a waiting sequence that cannot get in preempts running ones of a higher value.
 * Prefix-cache hits at admission skip their tokens. With config.stepMixing "split", prefill chunks
 * and decodes take turns in separate steps instead of sharing one (every 16th chunk still mixes).
 * Pure CPU logic.
 */
import { tailBlockIndex } from "./handoff-tails.ts";
import type { KvBlockManager } from "./scheduler-kv.ts";
import {
  DEFAULT_SCHEDULER_CONFIG, type QueueState, SchedulerCapacityError, type SchedulerConfig, type SchedulerStats, type StepEntry, type StepMixing,
  type StepPlan, type SwapOp,
} from "./scheduler-types.ts";
import { StepMixer, type StepWork } from "./scheduler-mixing.ts";
import { type StateRestore, WaitingQueue } from "./scheduler-queue.ts";
import { SwapSpace } from "./scheduler-swap.ts";
import { checkpointChunk, checkpointLimit, type StateCheckpoints } from "./state-checkpoints.ts";
import { spanChunk } from "./atomic-spans.ts";
import { TableViews } from "./scheduler-tables.ts";
import { lookAheadBlocks, queueStateOf } from "./scheduler-state.ts";
import { type FinishReason, Sequence, type SequenceHints } from "./sequence.ts";

/** The scheduler of one worker. */
export class Scheduler {
  readonly config: SchedulerConfig;
  private readonly seqs = new Map<number, Sequence>();
  /** Sequences with a priority other than 0 (queueState splits its queue by priority only while there are some). */
  private prioritized = 0;
  private readonly waiting: WaitingQueue;
  private running: Sequence[] = [];
  private inFlight: StepPlan | undefined;
  /** The last plan's admission stopped for want of KV blocks (false where it preempted and admitted nothing). */
  private admissionStoppedOnKv = false;
  private arrivals = 0;
  private stepNo = 0;
  private preemptions = 0;
  private priorityPreemptions = 0;
  private recomputed = 0;
  private rollbacks = 0;
  private refed = 0;
  private readonly swap: SwapSpace;
  private readonly mixer: StepMixer;
  /** The block tables plans hand out, copied only when they change. */
  private readonly tables = new TableViews();

  /**
   * `clock` (seconds) only ages waiting sequences under config.prefillOrder; FCFS never reads it.
   * `checkpoints`: a Gated DeltaNet model's state checkpoints, its only way to a prefix hit;
   * `restoreState`: what brings one back from host memory at admission (state-offload.ts).
   */
  constructor(
    private readonly kv: KvBlockManager, config: Partial<SchedulerConfig> = {}, clock: () => number = () => 0, private readonly checkpoints?: StateCheckpoints,
    restoreState?: StateRestore,
  ) {
    this.config = { ...DEFAULT_SCHEDULER_CONFIG, ...config };
    const mode = this.config.preemption;
    const cap = this.config.longPrefillTokenThreshold;
    if (cap !== undefined && (!Number.isInteger(cap) || cap < 1)) throw new RangeError(`Invalid long prefill token threshold ${cap}; give a positive whole number of tokens`);
    if (mode !== "recompute" && mode !== "swap") throw new RangeError(`Unknown preemption mode "${mode}"; choose recompute or swap`);
    this.swap = new SwapSpace(mode === "swap" ? this.config.swapSpaceBlocks ?? kv.totalBlocks : 0, kv.blockSize, kv.totalBlocks - this.config.watermarkBlocks);
    this.mixer = new StepMixer(this.config.stepMixing ?? "mixed");
    this.waiting = new WaitingQueue(kv, this.config, this.swap, clock, checkpoints, restoreState);
  }

  /** New state checkpoints were written (states moved here): each waiting prompt holds the one it would resume from (scheduler-queue.ts). */
  refreshCheckpointHolds(): void {
    this.waiting.refreshHolds();
  }

  /** The current step mixing: config.stepMixing until set (an engine deciding online sets it between steps). */
  get stepMixing(): StepMixing {
    return this.mixer.mode;
  }

  set stepMixing(mixing: StepMixing) {
    this.mixer.mode = mixing;
  }

  /** Queues a request. Throws SchedulerCapacityError when its prompt cannot fit the pool at all. */
  submit(id: number, prompt: readonly number[], hints: SequenceHints = {}): Sequence {
    if (this.seqs.has(id)) throw new RangeError(`Sequence id ${id} is already in use`);
    // Room for the prompt and the first generated token's KV, unless nothing is generated.
    const need = Math.ceil((prompt.length + (hints.promptOnly ? 0 : 1)) / this.kv.blockSize);
    if (need > this.kv.totalBlocks - this.config.watermarkBlocks) {
      throw new SchedulerCapacityError(`Prompt of ${prompt.length} tokens needs ${need} KV blocks; the pool has ${this.kv.totalBlocks}`);
    }
    const seq = new Sequence(id, prompt, this.arrivals++, hints, this.config.reasoningTokens);
    this.seqs.set(id, seq);
    if (hints.priority) this.prioritized++;
    this.waiting.push(seq);
    return seq;
  }

  /** The sequence with this id, if it is still known. */
  get(id: number): Sequence | undefined {
    return this.seqs.get(id);
  }

  /** Sequences waiting for admission, in queue order. */
  get waitingSequences(): readonly Sequence[] {
    return this.waiting.sequences;
  }

  /** Sequences running (prefilling or decoding). */
  get numRunning(): number {
    return this.running.length;
  }

  /**
   * True when no waiting sequence can get in before a running one ends (blocks and slots are freed
   * only then): every running slot is taken (`maxRunning`), or the last plan's admission stopped for
   * want of free KV blocks; never while a sequence carries a priority that could preempt one.
   */
  get admitsNone(): boolean {
    return this.prioritized === 0 && (this.running.length >= this.config.maxRunning || this.admissionStoppedOnKv);
  }

  /** True when nothing waits or runs. */
  get idle(): boolean {
    return this.waiting.length === 0 && this.running.length === 0;
  }

  /** Plans the next step. Only one step may be in flight: call `commit` before planning again. */
  schedule(): StepPlan {
    if (this.inFlight) throw new Error(`Step ${this.inFlight.step} is still in flight`);
    // Hand-off blocks held past their TTL go back here, where the scheduler works (stats() only reads).
    this.kv.pruneHandoffTails?.();
    const plan = this.mixer.next(() => this.running.some((s) => !s.inPrefill), (work) => this.plan(work));
    plan.step = this.stepNo++;
    if (plan.entries.length > 0) this.inFlight = plan;
    return plan;
  }

  /**
   * Running sequences first (those `work` takes), preempting the newest when KV runs out, then
   * admission (unless decodes only). A plan with nothing in it has changed nothing but admission probes.
   */
  private plan(work: StepWork): StepPlan {
    const bs = this.kv.blockSize;
    let budget = this.config.maxBatchTokens;
    let promptRows = this.config.maxPromptLogprobRows ?? Infinity;
    const perSequence = this.config.longPrefillTokenThreshold ?? Infinity;
    let drafting = this.config.maxDraftingSequences ?? Infinity;
    // What a sequence may feed this step: at most the per-sequence limit; a scored prompt also counts
    // against the prompt-row limit.
    const room = (seq: Sequence) => Math.min(perSequence, seq.hints.wholePrompt && seq.inPrefill ? Math.min(budget, promptRows) : budget);
    const entries: StepEntry[] = [];
    const preempted: number[] = [];
    const truncated: number[] = [];
    const swapOut: SwapOp[] = [];
    const swapIn: SwapOp[] = [];
    let prefill = 0;
    const add = (seq: Sequence, n: number, drafted = 0, restore?: number) => {
      const start = seq.numComputed;
      const tokens = seq.tokens.slice(start, start + n);
      if (drafted > 0) tokens.push(...seq.draft.slice(0, drafted));
      // A prefill chunk ending where the prompt's last whole block ends keeps the state there, and so
      // does a decode ending a block (the sequence's one decode checkpoint moves on to it), one that
      // feeds several tokens past its prompt too (forced tokens, a draft's taken tokens fed again).
      const cps = this.checkpoints;
      const id = !cps ? undefined : !decoding(seq)
        ? checkpointChunk(checkpointLimit(seq), start, n, bs, seq.branchCheckpoint).atBoundary ? cps.reserve(seq.tokens.slice(0, start + n), seq.hints.sessionId, seq.hints.cacheRoot ?? null) : undefined
        : drafted === 0 && (start + n) % bs === 0 ? cps.reserveDecode(seq.id, start + n, seq.hints.sessionId, seq.hints.cacheRoot ?? null) : undefined;
      const checkpoint = id === undefined ? undefined : { id, after: start + n };
      entries.push({
        seqId: seq.id, tokens, startPos: start, blockTable: this.tables.of(seq), sample: start + n === seq.tokens.length, prefill: seq.inPrefill,
        ...(drafted > 0 ? { draft: drafted } : {}),
        ...(restore !== undefined ? { restore } : {}),
        ...(checkpoint !== undefined ? { checkpoint } : {}),
      });
      if (seq.inPrefill) prefill += n;
      if (seq.hints.wholePrompt && seq.inPrefill) promptRows -= n;
      budget -= n + drafted;
    };

    // Most urgent first (a stable sort: admission order among equals, all of it when nobody sets a
    // priority), so the loop below serves them first and its victims, from the end, are the least urgent.
    const p0 = this.running[0]?.priority;
    if (this.running.some((s) => s.priority !== p0)) this.running.sort((a, b) => a.priority - b.priority);
    // A decode step admits no prompt, and a decode worker takes its prompts from prefill workers.
    const demoted = work === "decode" || this.config.role === "decode" ? [] : this.preemptForPriority(budget, swapOut);
    for (const seq of demoted) preempted.push(seq.id);
    let pressed = false;

    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const seq = this.running[i];
      if (work !== "all" && seq.inPrefill !== (work === "prefill")) continue;
      const most = Math.min(seq.numPending, room(seq));
      // A Gated DeltaNet model's prefill chunk stops where its prompt's last whole block ends (a checkpoint).
      const chunk = this.checkpoints && seq.inPrefill ? checkpointChunk(checkpointLimit(seq), seq.numComputed, most, bs, seq.branchCheckpoint).n : most;
      // A chunk never cuts an image whose rows attend both ways (atomic-spans.ts).
      const n = seq.inPrefill ? spanChunk(seq.hints.atomicSpans, seq.numComputed, chunk, seq.numPending) : chunk;
      if (n === 0) continue;
      // A decode verifies its draft in the same step while the budget lasts; a draft never preempts.
      // It follows every pending token (one, or forced tokens, or a draft's taken tokens fed again).
      let drafted = !decoding(seq) || n !== seq.numPending || drafting === 0 ? 0 : Math.min(seq.draft.length, budget - n, perSequence - n);
      let extra = Math.ceil((seq.numComputed + n + drafted) / bs) - seq.blockTable.length;
      let got = extra > 0 ? this.kv.allocate(extra) : [];
      if (got === null && drafted > 0) {
        drafted = 0;
        extra = Math.ceil((seq.numComputed + n) / bs) - seq.blockTable.length;
        got = extra > 0 ? this.kv.allocate(extra) : [];
      }
      while (got === null) {
        // Blocks held for hand-offs yet to come go before any running sequence does: losing one costs
        // its hand-off a block of prompt computed again, a preemption a whole context (or a swap).
        if (this.kv.releaseHandoffTails?.()) { got = this.kv.allocate(extra); continue; }
        if (this.running.length === 1) {
          // Alone and still out of blocks: the pool can never hold this sequence, so it ends here.
          this.finish(seq.id, "length");
          truncated.push(seq.id);
          break;
        }
        const victim = this.running[this.running.length - 1];
        this.preempt(victim, swapOut);
        pressed = true;
        preempted.push(victim.id);
        if (victim === seq) break;
        got = this.kv.allocate(extra);
      }
      if (got === null) break;
      seq.blockTable.push(...got);
      if (drafted > 0) drafting--;
      add(seq, n, drafted);
    }

    // Out of KV for the running ones: nothing new comes in. Priority's victims wait out this step.
    if (!pressed) this.waiting.admit(this.running, () => budget, room, (seq, n, restore) => add(seq, n, 0, restore), swapIn, work, demoted.length > 0 ? new Set(demoted) : undefined);
    // A preempted sequence's blocks are free again next step: that is no stop on KV.
    this.admissionStoppedOnKv = !pressed && this.waiting.stoppedOnKv;

    const numTokens = entries.reduce((a, e) => a + e.tokens.length, 0);
    return { step: -1, entries, numTokens, numPrefillTokens: prefill, numDecodeTokens: numTokens - prefill, preempted, truncated, swapOut, swapIn };
  }

  /**
   * Priority preemption (vLLM's under its priority policy): when the most urgent waiting sequence
   * cannot get in (every slot taken, or too few free blocks for its first chunk of at most `tokens`),
   * running sequences with a higher priority value go, least urgent and newest first, as few as make
   * room; none go when all of them would not. Call with `running` in priority order.
   */
  private preemptForPriority(tokens: number, swapOut: SwapOp[]): Sequence[] {
    if (this.running.length === 0) return [];
    const want = this.waiting.urgent(this.running[this.running.length - 1].priority, tokens);
    if (want === null) return [];
    const free = this.kv.numAvailable() - this.config.watermarkBlocks;
    // How many from the end must go: their blocks counted as freed (a block another sequence shares
    // stays taken, so this can over-count; the urgent one then waits for the next step's try).
    let k = 0;
    let freed = 0;
    const fits = () => this.running.length - k < this.config.maxRunning && free + freed >= want.blocks;
    while (!fits() && k < this.running.length && this.running[this.running.length - 1 - k].priority > want.seq.priority) {
      freed += this.running[this.running.length - 1 - k].blockTable.length;
      k++;
    }
    if (k === 0 || !fits()) return [];
    const out = this.running.slice(this.running.length - k).reverse();
    for (const seq of out) this.preempt(seq, swapOut);
    this.priorityPreemptions += k;
    return out;
  }

  /** Frees a running sequence's blocks; in swap mode its computed KV goes to host memory when it fits. */
  private preempt(seq: Sequence, swapOut: SwapOp[]): void {
    const op = this.swap.swapOut(seq); // recompute mode has no swap space, so this is null there
    if (op) swapOut.push(op);
    this.kv.release(seq.blockTable, seq.hints);
    seq.blockTable = [];
    seq.numComputed = 0;
    seq.numCommittedBlocks = 0;
    seq.draft = [];
    seq.promptHandedOff = false;
    seq.preemptions++;
    this.preemptions++;
    seq.status = "waiting";
    this.running.splice(this.running.indexOf(seq), 1);
    this.waiting.requeue(seq);
  }

  /**
   * Records a finished step: advances computed tokens, registers newly full blocks in the prefix
   * cache and appends sampled tokens (`sampled` maps seqId → token for entries with `sample`).
   * An entry with a draft first appends the draft tokens `accepted` names (a prefix of its draft,
   * none when absent), then its sampled token (an entry that looked ahead: `accepted` names the
   * `lookahead` tokens its steps fed, then its last sample); the KV written for the rest is left to be overwritten,
   * and blocks past the sequence's end go back to the pool. Returns the sequences that received
   * tokens. Aborts that arrived mid-step take effect here. `rollBack` (a model whose recurrent state
   * ran through the whole draft): an entry whose draft was not all taken gets its state put back to
   * before the step by it, and computes the step's fed and taken tokens again with its next one.
   */
  commit(plan: StepPlan, sampled: ReadonlyMap<number, number>, accepted?: ReadonlyMap<number, readonly number[]>, rollBack?: (seqId: number) => void): Sequence[] {
    if (this.inFlight !== plan) throw new Error(`Step ${plan.step} is not the step in flight`);
    this.inFlight = undefined;
    const bs = this.kv.blockSize;
    const out: Sequence[] = [];
    // The step's checkpoints are written, but for sequences that failed (or were cancelled) in it; the
    // others settle once their tokens are in (a decode's may have been sampled in this step).
    for (const e of plan.entries) {
      const seq = this.seqs.get(e.seqId);
      if (e.checkpoint !== undefined && (!seq || seq.status !== "running" || seq.abortRequested)) this.checkpoints?.drop(e.checkpoint.id);
    }
    for (const e of plan.entries) {
      const seq = this.seqs.get(e.seqId);
      if (!seq || seq.status !== "running") continue;
      if (seq.abortRequested) {
        this.finish(seq.id, "abort");
        continue;
      }
      // Positions computed before (and lost to a recompute preemption) are counted as recomputed.
      this.recomputed += Math.max(0, Math.min(seq.maxComputed, e.startPos + e.tokens.length) - e.startPos);
      const drafted = e.draft ?? 0;
      const ahead = e.lookahead ?? 0;
      const taken = drafted > 0 || ahead > 0 ? accepted?.get(seq.id) ?? [] : [];
      if (ahead > 0 && taken.length !== ahead) {
        throw new Error(`Step ${plan.step} gives sequence ${seq.id} ${taken.length} fed tokens; it looked ahead ${ahead}`);
      }
      if (drafted > 0) {
        const draft = e.tokens.slice(e.tokens.length - drafted);
        if (taken.length > drafted || taken.some((t, j) => t !== draft[j])) {
          throw new Error(`Step ${plan.step} accepts tokens [${taken.join(", ")}] that do not begin sequence ${seq.id}'s draft [${draft.join(", ")}]`);
        }
      }
      // Any draft was for the tokens before this step (one left out of it for budget or blocks too).
      if (seq.draft.length > 0) seq.draft = [];
      if (rollBack !== undefined && drafted > 0 && taken.length < drafted) {
        // Computed again from the step's start with the next step (not counted as recomputed: no
        // preemption lost it, so maxComputed stays where it was).
        rollBack(seq.id);
        this.rollbacks++;
        this.refed += e.tokens.length - drafted + taken.length;
      } else {
        seq.numComputed += e.tokens.length - drafted + taken.length;
        seq.maxComputed = Math.max(seq.maxComputed, seq.numComputed);
      }
      for (const t of taken) seq.append(t);
      const full = Math.floor(seq.numComputed / bs);
      if (full > seq.numCommittedBlocks) {
        this.kv.commit(seq.tokens, seq.blockTable, seq.numCommittedBlocks, full, seq.hints, seq.promptLength, seq.reasoning);
        seq.numCommittedBlocks = full;
      }
      if (e.sample) {
        const tok = sampled.get(seq.id);
        if (tok === undefined) throw new Error(`Step ${plan.step} has no sampled token for sequence ${seq.id}`);
        seq.append(tok);
        out.push(seq);
        // Blocks taken for rejected draft tokens beyond the sequence's end (never registered) go back.
        const keep = Math.ceil(seq.tokens.length / bs);
        if (drafted > 0 && seq.blockTable.length > keep) {
          this.kv.release(seq.blockTable.splice(keep), seq.hints);
          this.tables.changed(seq);
        }
        if ((this.config.role === "prefill" || seq.hints.prefillOnly) && seq.numOutput === 1) this.finish(seq.id, "prefill_done");
      }
      if (e.checkpoint) {
        const { id, after } = e.checkpoint;
        if (seq.tokens.length >= after) this.checkpoints?.settle(id, seq.tokens.slice(0, after));
        else this.checkpoints?.drop(id);
      }
    }
    return out;
  }

  /**
   * Multi-step decoding: lets each entry of `plan`, the step in flight, run `steps` more one-token
   * steps after its sample, each fed the token the one before sampled (StepEntry.lookahead), or as
   * many as the pool's free blocks above the watermark hold the KV of (a full pool still leaves the
   * slots of the entries' last blocks); nobody is preempted for it. Only for
   * a plan of plain decodes (each feeds its one pending token and samples). A sequence's first token
   * comes alone (its time to first token; on a prefill worker, or for a hand-off, it ends the
   * sequence), so a plan holding one — a handed-off prompt's last token is fed as a decode — and a
   * prefill worker's plans get none. Returns the steps granted, at most `steps` (0: nothing changed).
   */
  lookAhead(plan: StepPlan, steps: number): number {
    if (this.inFlight !== plan) throw new Error(`Step ${plan.step} is not the step in flight`);
    if (steps <= 0 || this.config.role === "prefill") return 0;
    const bs = this.kv.blockSize;
    const seqs = plan.entries.map((e) => {
      const seq = this.seqs.get(e.seqId);
      if (!seq || e.prefill || !e.sample || e.draft || e.tokens.length !== 1) throw new Error(`Step ${plan.step} has an entry (sequence ${e.seqId}) that is not a plain decode: it cannot look ahead`);
      return seq;
    });
    if (seqs.some((seq) => seq.numOutput === 0 || seq.hints.prefillOnly)) return 0;
    const room = this.kv.numAvailable() - this.config.watermarkBlocks;
    const ahead = lookAheadBlocks(plan.entries.map((e, i) => ({ startPos: e.startPos, tableLength: seqs[i].blockTable.length })), bs, room, steps);
    if (ahead.steps === 0) return 0;
    steps = ahead.steps;
    const need = ahead.need;
    const total = need.reduce((a, b) => a + b, 0);
    const got = total > 0 ? this.kv.allocate(total) : [];
    if (got === null) return 0;
    let at = 0;
    plan.entries.forEach((e, i) => {
      if (need[i] > 0) {
        seqs[i].blockTable.push(...got.slice(at, at + need[i]));
        at += need[i];
        e.blockTable = this.tables.of(seqs[i]);
      }
      e.lookahead = steps;
      // The decode checkpoint moves to the last block the entry's steps end, if one is past its own.
      const last = Math.floor((e.startPos + 1 + steps) / bs) * bs;
      if (this.checkpoints && last > e.startPos + 1) {
        const id = this.checkpoints.reserveDecode(seqs[i].id, last, seqs[i].hints.sessionId, seqs[i].hints.cacheRoot ?? null);
        if (id !== undefined) e.checkpoint = { id, after: last };
        else delete e.checkpoint;
      }
    });
    return steps;
  }

  /** Ends a sequence and frees its KV blocks (cached full blocks stay evictable in the prefix cache). */
  finish(id: number, reason: FinishReason): void {
    const seq = this.seqs.get(id);
    if (!seq || seq.status === "finished") return;
    if (seq.status === "running") {
      this.running.splice(this.running.indexOf(seq), 1);
      this.waiting.forget(seq);
    } else {
      this.waiting.remove(seq);
      // A handed-off prompt that ends before it ran lets go of the last block held for it.
      const tail = seq.numOutput === 0 && seq.preemptions === 0 ? this.kv.takeHandoffTail?.(seq.tokens, seq.hints.cacheRoot) ?? null : null;
      if (tail !== null) this.kv.release([tail]);
    }
    // A finished prefill keeps the block its prompt ended in for the hand-off (handoff-tails.ts): only
    // a prefill-only request is handed off (the prefill role alone ends at the first token, and a
    // block kept for it would only sit in the pool until its hold ran out).
    const tailAt = tailBlockIndex(seq.promptLength, this.kv.blockSize);
    const handedOff = reason === "prefill_done" && seq.hints.prefillOnly === true;
    if (handedOff && this.kv.keepHandoffTail && seq.numComputed >= seq.promptLength && tailAt < seq.blockTable.length) {
      this.kv.keepHandoffTail(seq.tokens.slice(0, seq.promptLength), seq.blockTable[tailAt], seq.hints.cacheRoot);
      this.kv.release(seq.blockTable.filter((_, i) => i !== tailAt), seq.hints);
    } else this.kv.release(seq.blockTable, seq.hints);
    this.swap.drop(seq);
    this.checkpoints?.disown(id);
    seq.blockTable = [];
    seq.status = "finished";
    seq.finishReason = reason;
    if (seq.hints.priority) this.prioritized--;
    this.seqs.delete(id);
  }

  /**
   * Appends tokens to a running sequence between steps without sampling them (jump-forward decoding:
   * text its output grammar forces). The next steps compute their KV as a chunk, as a recompute
   * would, and sample after the last.
   */
  extend(id: number, tokens: readonly number[]): void {
    const seq = this.seqs.get(id);
    if (!seq || seq.status !== "running") throw new Error(`Sequence ${id} is not running`);
    if (this.inFlight?.entries.some((e) => e.seqId === id)) throw new Error(`Sequence ${id} is part of step ${this.inFlight.step}, still in flight`);
    seq.draft = [];
    for (const t of tokens) seq.append(t);
  }

  /**
   * Proposes tokens to follow a decoding sequence (speculative decoding): its next step feeds them
   * after its pending tokens, budget and free blocks allowing, and `commit` takes the accepted ones.
   * Replaces an earlier proposal; ignored unless the sequence decodes (past its prompt: {@link decoding}).
   */
  propose(id: number, draft: readonly number[]): void {
    const seq = this.seqs.get(id);
    if (!seq || seq.status !== "running" || !decoding(seq)) return;
    if (this.inFlight?.entries.some((e) => e.seqId === id)) throw new Error(`Sequence ${id} is part of step ${this.inFlight.step}, still in flight`);
    seq.draft = [...draft];
  }

  /**
   * Drops the step in flight without committing it (the engine's loop failed before its commit): its
   * sequences end ("abort") and their blocks go back, so a step can be planned again.
   */
  abandonStep(): void {
    const plan = this.inFlight;
    if (!plan) return;
    this.inFlight = undefined;
    for (const e of plan.entries) {
      if (e.checkpoint !== undefined) this.checkpoints?.drop(e.checkpoint.id);
      this.finish(e.seqId, "abort");
    }
  }

  /** Cancels a request; if it is part of the step in flight its blocks are freed at `commit`. */
  abort(id: number): void {
    const seq = this.seqs.get(id);
    if (!seq) return;
    const busy = this.inFlight?.entries.some((e) => e.seqId === id) ?? false;
    if (busy) seq.abortRequested = true;
    else this.finish(id, "abort");
  }

  /**
   * What waits and runs now, for a planner's snapshot and a router (called per routed request):
   * the waiting part is kept by the queue between prefix-cache changes, the running part is at
   * most `maxRunning` sequences.
   */
  queueState(): QueueState {
    return queueStateOf(this.running, this.waiting, this.prioritized);
  }

  /** Gauges and counters for metrics; a read that changes nothing (a hand-off hold past its TTL goes at the next `schedule`). */
  stats(): SchedulerStats {
    return {
      waiting: this.waiting.length,
      running: this.running.length,
      kvUsedBlocks: this.kv.numUsed(),
      kvTotalBlocks: this.kv.totalBlocks,
      prefixQueriedTokens: this.waiting.prefixQueried,
      prefixHitTokens: this.waiting.prefixHit,
      preemptions: this.preemptions,
      priorityPreemptions: this.priorityPreemptions,
      ...this.swap.stats(),
      recomputedTokens: this.recomputed,
      specStateRollbacks: this.rollbacks,
      specRefedTokens: this.refed,
      steps: this.stepNo,
    };
  }
}

/**
 * Whether a sequence decodes: one token pending after its first output (or a handed-off prompt's last
 * token), or several past its prompt (forced tokens appended by jump-forward, or a draft's taken tokens
 * to feed again after its state was put back). Such a step may verify a draft after them, and ending a
 * block it moves the sequence's decode checkpoint on.
 */
function decoding(seq: Sequence): boolean {
  return !seq.inPrefill || seq.numComputed >= seq.promptLength;
}

/**
 * The waiting side of a Scheduler: sequences queued for admission (new ones last, preempted ones
 * first), when each was first queued (for aging), admission by priority and then in FCFS or
 * least-uncached-work order (config.prefillOrder), and the queue gauges a cluster's router reads
 * for every request it routes.
 *
 * Those gauges need each waiting prompt's uncached tokens, which takes a prefix-cache probe (hashing
 * the prompt). The probes are kept per sequence and summed incrementally as sequences join and
 * leave the queue, for as long as the KV layer's `cacheVersion` stays the same; any change to the
 * prefix cache (a commit, an eviction, a prefix written in from host memory or another worker) drops
 * them, and the next reader probes again. No approximation is taken: the numbers are what probing
 * every waiting prompt on every call gave. A step that commits or evicts a block moves the version,
 * so the first reader after such a step still probes the queue once (as short-first admission does
 * anyway); the calls after it, until the next change, cost nothing. A KV layer without
 * `cacheVersion` is probed on every call.
 */
import { spanChunk } from "./atomic-spans.ts";
import { prefillOrder } from "../../planner/prefill-order.ts";
import { tailBlockIndex } from "./handoff-tails.ts";
import type { KvBlockManager } from "./scheduler-kv.ts";
import type { StepWork } from "./scheduler-mixing.ts";
import type { SchedulerConfig, SwapOp } from "./scheduler-types.ts";
import type { SwapSpace } from "./scheduler-swap.ts";
import type { Sequence } from "./sequence.ts";
import { checkpointChunk, checkpointLimit, type StateCheckpoints } from "./state-checkpoints.ts";

/**
 * Brings a state kept in host memory (state-offload.ts) for `seq` back into a device checkpoint: the
 * longest within its first `limit` tokens that reaches past `beyond` (its longest device checkpoint's
 * end), written into a checkpoint none of `avoid` (this step's restores); its id and length, or undefined.
 */
export type StateRestore = (seq: Sequence, limit: number, beyond: number, avoid: ReadonlySet<number>) => { id: number; length: number } | undefined;

/** The waiting sequences' part of a `QueueState`. */
export interface WaitingGauges {
  /** Tokens of waiting sequences that neither the prefix cache nor swap space holds. */
  uncachedTokens: number;
  /** Age (s) of the oldest waiting sequence (0 when none waits). */
  oldestWaitS: number;
  /** Preempted sequences waiting to resume decoding. */
  waitingDecodes: number;
}

/** A scheduler's waiting queue and admission. */
export class WaitingQueue {
  private seqs: Sequence[] = [];
  /** When each live sequence was first queued (s on `clock`; kept across preemption), for aging. */
  private readonly queuedAt = new Map<Sequence, number>();
  /** Uncached tokens of sequences probed while the prefix cache was at `probedVersion`. */
  private readonly probed = new Map<Sequence, number>();
  private probedVersion: number | undefined;
  /** The state checkpoint each waiting sequence would resume from, and what lets go of it (StateCheckpoints.hold). */
  private readonly holds = new Map<Sequence, { id: number; release: () => void }>();
  /** Sum of `probed` over every waiting sequence, or undefined until all are probed again. */
  private uncachedSum: number | undefined;
  private decodes = 0;
  /** Whether the last admission stopped at a sequence for want of free KV blocks. */
  private kvStopped = false;
  /** Earliest first-queued time of a waiting sequence (Infinity: none), or undefined until recomputed. */
  private oldestAt: number | undefined = Infinity;
  /** Prompt tokens looked up in the prefix cache at first admission, and how many hit. */
  prefixQueried = 0;
  prefixHit = 0;

  constructor(
    private readonly kv: KvBlockManager, private readonly config: SchedulerConfig, private readonly swap: SwapSpace,
    private readonly clock: () => number, private readonly checkpoints?: StateCheckpoints, private readonly restoreState?: StateRestore,
  ) {}

  /**
   * Where a prompt with a prefix-cache hit starts computing: at the hit's end, or for a Gated DeltaNet
   * model at the longest state checkpoint within the hit (0 without one), which `restore` names. Such
   * a prompt keeps the whole hit in its table and computes again the positions past the checkpoint
   * into those cached blocks (the same keys and values, up to rounding): were they released, it would
   * compute them into blocks of its own, which the cache refuses as duplicates, and nothing it commits
   * after them would be cached.
   */
  private checkpointed(seq: Sequence, probe: number[], avoid: ReadonlySet<number>): { from: number; restore?: number } {
    const bs = this.kv.blockSize;
    if (!this.checkpoints || probe.length === 0) return { from: probe.length * bs };
    const cp = this.checkpoints.longest(seq.tokens, probe.length * bs, seq.hints.cacheRoot ?? null);
    // A longer state in host memory comes back into a device checkpoint, written before this step's forward.
    const back = this.restoreState?.(seq, probe.length * bs, cp?.length ?? 0, avoid);
    const best = back ?? cp;
    return best ? { from: best.length, restore: best.id } : { from: 0 };
  }

  /** Waiting sequences, in queue order. */
  get sequences(): readonly Sequence[] {
    return this.seqs;
  }

  /** How many sequences wait. */
  get length(): number {
    return this.seqs.length;
  }

  /** Queues a new sequence last. */
  push(seq: Sequence): void {
    this.queuedAt.set(seq, this.clock());
    this.seqs.push(seq);
    this.joined(seq);
  }

  /** Queues a preempted sequence first; it keeps its first queue time, so aging counts from there. */
  requeue(seq: Sequence): void {
    this.seqs.unshift(seq);
    this.joined(seq);
  }

  /** Takes a waiting sequence that ended out of the queue and forgets it. */
  remove(seq: Sequence): void {
    this.seqs.splice(this.seqs.indexOf(seq), 1);
    this.left(seq);
    this.queuedAt.delete(seq);
  }

  /** Forgets a running sequence that ended. */
  forget(seq: Sequence): void {
    this.queuedAt.delete(seq);
  }

  /** The waiting sequences' gauges (exact; probes only what the prefix cache changed since last asked). */
  /** Each waiting sequence with its uncached tokens (as {@link gauges} sums them). */
  uncachedBySequence(): [Sequence, number][] {
    this.sync();
    return this.seqs.map((s) => [s, this.uncached(s)]);
  }

  gauges(): WaitingGauges {
    this.sync();
    if (this.uncachedSum === undefined) this.uncachedSum = this.seqs.reduce((a, s) => a + this.uncached(s), 0);
    if (this.oldestAt === undefined) this.oldestAt = this.seqs.reduce((a, s) => Math.min(a, this.queuedAt.get(s) ?? Infinity), Infinity);
    const oldestWaitS = this.oldestAt === Infinity ? 0 : Math.max(0, this.clock() - this.oldestAt);
    return { uncachedTokens: this.uncachedSum, oldestWaitS, waitingDecodes: this.decodes };
  }

  /**
   * Admission in {@link admissionOrder} into `running`: stops at the first sequence that does not
   * fit (no overtaking; `skip` is passed over), except in the decode role and past a scored prompt
   * (`room` 0: the step's prompt log-probability rows are spent). A swapped-out sequence gets fresh blocks for its
   * saved KV (pushed onto `swapIn`). A handed-off prompt whose last block this worker holds
   * (handoff-tails.ts) starts with all but its last token computed, as a decode: `work` "decode"
   * admits only those, "prefill" all others, "all" every sequence. A Gated DeltaNet model's prompt
   * holds its whole hit but computes from the longest state checkpoint within it (`add`'s `restore`;
   * {@link checkpointed}), from 0 without one.
   */
  admit(
    running: Sequence[], budget: () => number, room: (seq: Sequence) => number, add: (seq: Sequence, n: number, restore?: number) => void, swapIn: SwapOp[], work: StepWork = "all",
    skip?: ReadonlySet<Sequence>,
  ): void {
    this.kvStopped = false;
    // A decode step admits only handed-off prompts; without one waiting, skip the ordering too.
    // Which waiting prompts count as decodes, probed once per step that tells them apart.
    const handed = work === "all" ? null : new Set(this.seqs.filter((s) => this.handedOff(s)));
    if (work === "decode" && handed!.size === 0) return;
    const bs = this.kv.blockSize;
    const order = this.admissionOrder();
    const admitted = new Set<Sequence>();
    // Checkpoints this step's prompts restore from: a state brought back from host memory is written over none of them.
    const restoring = new Set<number>();
    for (let o = 0; o < order.length && budget() > 0 && running.length < this.config.maxRunning; o++) {
      const seq = this.seqs[order[o]];
      if (handed !== null && handed.has(seq) !== (work === "decode")) continue;
      // Preempted by priority in this step: it would only take back what the urgent one was given.
      if (skip?.has(seq)) continue;
      // A scored prompt waits for a step with prompt rows left; the others may still come in.
      if (room(seq) === 0) continue;
      // Never serve the last token from cache: its logits are needed, so at least one token is computed.
      // Swapped KV is restored whole into fresh blocks: no prefix probe, nothing shared.
      const swapped = seq.numSwapped;
      // A sequence asking for its prompt's log probabilities computes every prompt row: no hit taken.
      const hit = swapped > 0 || seq.hints.wholePrompt ? [] : this.kv.acquirePrefix(seq.tokens.slice(0, -1), seq.hints);
      const { from, restore } = this.checkpointed(seq, hit, restoring);
      // The hit reaching the last block is the cached run a held last block needs (handedOff's probe).
      const tail = swapped > 0 || seq.hints.wholePrompt || hit.length !== tailBlockIndex(seq.tokens.length, bs) || !isFresh(seq) ? null : this.kv.takeHandoffTail?.(seq.tokens, seq.hints.cacheRoot) ?? null;
      // A block held for it behind a run evicted since is of no use: the prompt is prefilled as any
      // other, so it goes now (else it stays held, and counted in use, until another hand-off comes).
      if (tail === null && swapped === 0 && !seq.hints.wholePrompt && isFresh(seq) && hit.length < tailBlockIndex(seq.tokens.length, bs)) {
        const stale = this.kv.takeHandoffTail?.(seq.tokens, seq.hints.cacheRoot) ?? null;
        if (stale !== null) this.kv.release([stale]);
      }
      const held = tail === null ? hit : [...hit, tail];
      const cached = swapped > 0 ? swapped : tail !== null ? seq.tokens.length - 1 : from;
      // A handed-off prompt's last token is computed again as a decode is, whatever the role allows.
      const uncachedPrompt = tail !== null ? 0 : Math.max(0, seq.promptLength - cached);
      // The limit is for prompts arriving here. A sequence preempted here recomputes here whatever its
      // cache lost meanwhile: no other worker will hand it back, so refusing it would strand it.
      if (this.config.role === "decode" && isFresh(seq) && uncachedPrompt > this.config.localPrefillLimit) {
        this.kv.release(held);
        continue;
      }
      // The watermark is headroom for running sequences to grow into: with none running it holds back
      // nothing. (A sequence preempted after growing past the pool less the watermark, its prefix
      // cached, could otherwise never come back: its hit takes all the room and no token fits.)
      const free = this.kv.numAvailable() - (running.length === 0 ? 0 : this.config.watermarkBlocks);
      const most = Math.min(seq.tokens.length - cached, room(seq), (held.length + free) * bs - cached);
      // Cached blocks past the checkpoint resumed from: a prefix computed before without a checkpoint
      // at its end (a prompt others share). This prompt keeps one there on its way.
      seq.branchCheckpoint = this.checkpoints && swapped === 0 && tail === null && hit.length * bs > cached ? hit.length * bs : undefined;
      const chunk = this.checkpoints ? checkpointChunk(checkpointLimit(seq), cached, most, bs, seq.branchCheckpoint).n : most;
      // A chunk never cuts an image whose rows attend both ways (atomic-spans.ts); its blocks are found below like any chunk's.
      const n = spanChunk(seq.hints.atomicSpans, cached, chunk, seq.tokens.length - cached);
      const got = n > 0 ? this.kv.allocate(Math.max(0, Math.ceil((cached + n) / bs) - held.length)) : null;
      if (got === null) {
        this.kv.release(hit);
        if (tail !== null) this.kv.keepHandoffTail!(seq.tokens, tail, seq.hints.cacheRoot);
        this.kvStopped = true;
        break;
      }
      admitted.add(seq);
      seq.blockTable = [...held, ...got];
      seq.numComputed = cached;
      seq.numCommittedBlocks = hit.length;
      seq.promptHandedOff = tail !== null;
      seq.status = "running";
      if (swapped > 0) swapIn.push(this.swap.swapIn(seq, got));
      if (seq.preemptions === 0) {
        seq.numCachedPrompt = Math.min(cached, seq.promptLength);
        this.prefixQueried += seq.promptLength;
        this.prefixHit += seq.numCachedPrompt;
      }
      running.push(seq);
      if (restore !== undefined) {
        this.checkpoints!.touch(restore);
        restoring.add(restore);
      }
      add(seq, n, restore);
    }
    if (admitted.size === 0) return;
    this.seqs = this.seqs.filter((s) => !admitted.has(s));
    for (const s of admitted) this.left(s);
  }

  /**
   * Whether the last {@link admit} stopped at a sequence whose first chunk found too few free KV
   * blocks (no overtaking: nothing behind it came in either).
   */
  get stoppedOnKv(): boolean {
    return this.kvStopped;
  }

  /**
   * True when `seq` is a fresh prompt whose last block this worker holds from a hand-off, behind a
   * cached run of every block before it (so admission can take it: a run cut short by an eviction
   * leaves the prompt to be prefilled as any other).
   */
  private handedOff(seq: Sequence, cached?: number): boolean {
    // The cheap checks first: with no block held (every step of a worker that takes no hand-offs), no probe.
    if (!isFresh(seq) || seq.hints.wholePrompt || !(this.kv.hasHandoffTail?.(seq.tokens, seq.hints.cacheRoot) ?? false)) return false;
    return (cached ?? this.kv.cachedPrefixTokens(seq.tokens.slice(0, -1), seq.hints.cacheRoot)) === tailBlockIndex(seq.tokens.length, this.kv.blockSize) * this.kv.blockSize;
  }

  /**
   * The first waiting sequence, in admission order, whose priority is below `than` (more urgent), and
   * the free KV blocks its first chunk of at most `tokens` tokens takes beyond what the prefix cache or
   * a hand-off holds for it; null when none is that urgent. For preempting by priority: what admitting
   * it would need.
   */
  urgent(than: number, tokens: number): { seq: Sequence; blocks: number } | null {
    if (!this.seqs.some((s) => s.priority < than)) return null;
    const seq = this.seqs[this.admissionOrder().find((i) => this.seqs[i].priority < than)!];
    this.sync();
    const left = this.uncached(seq);
    const cached = seq.tokens.length - left;
    const end = cached + Math.min(left, tokens);
    const bs = this.kv.blockSize;
    // Swapped KV comes back into fresh blocks; a prefix hit's blocks are the cache's own.
    return { seq, blocks: Math.ceil(end / bs) - (seq.numSwapped > 0 ? 0 : Math.floor(cached / bs)) };
  }

  /**
   * Indices of the queue in admission order: by priority (lower first), and within one priority in
   * queue order unless config.prefillOrder says otherwise.
   */
  private admissionOrder(): number[] {
    const o = this.config.prefillOrder;
    let order: number[];
    if (o === undefined || o.order === "fcfs" || this.seqs.length < 2) order = this.seqs.map((_, i) => i);
    else {
      const now = this.clock();
      this.sync();
      order = prefillOrder(this.seqs.map((seq) => ({ left: this.uncached(seq), enqueuedAt: this.queuedAt.get(seq) ?? now })), now, o);
    }
    // A stable sort: equal priorities keep the order above (all of them, when nobody sets one).
    const p0 = this.seqs[0]?.priority;
    if (this.seqs.some((s) => s.priority !== p0)) order.sort((a, b) => this.seqs[a].priority - this.seqs[b].priority);
    return order;
  }

  /**
   * Tokens of a waiting sequence that neither swap space nor the prefix cache holds (its last token
   * is never served from cache), probed once per prefix-cache version. Call `sync` first.
   */
  private uncached(seq: Sequence): number {
    let n = this.probed.get(seq);
    if (n === undefined) {
      const probe = seq.numSwapped > 0 ? seq.numSwapped : seq.hints.wholePrompt ? 0 : this.kv.cachedPrefixTokens(seq.tokens.slice(0, -1), seq.hints.cacheRoot);
      // A Gated DeltaNet model's hit reaches only as far as a state checkpoint.
      const cached = this.checkpoints && seq.numSwapped === 0 ? this.checkpoints.longest(seq.tokens, probe, seq.hints.cacheRoot ?? null)?.length ?? 0 : probe;
      n = this.handedOff(seq, cached) ? 1 : seq.tokens.length - cached;
      this.probed.set(seq, n);
    }
    return n;
  }

  /**
   * Drops every probe when the prefix cache changed since they were made (always, without a
   * `cacheVersion`). A waiting sequence's own tokens and swapped KV do not change while it waits,
   * so the cache is the only thing a probe depends on.
   */
  private sync(): void {
    const v = this.kv.cacheVersion?.();
    if (v !== undefined && v === this.probedVersion) return;
    this.probed.clear();
    this.probedVersion = v;
    this.uncachedSum = undefined;
  }

  /** Holds the longest state checkpoint `seq` would resume from now, in place of the one it held. */
  private holdCheckpoint(seq: Sequence): void {
    if (!this.checkpoints || seq.numSwapped > 0 || seq.hints.wholePrompt) return;
    const cp = this.checkpoints.longest(seq.tokens, seq.tokens.length - 1, seq.hints.cacheRoot ?? null);
    const had = this.holds.get(seq);
    if (had?.id === cp?.id) return;
    had?.release();
    this.holds.delete(seq);
    if (cp) this.holds.set(seq, { id: cp.id, release: this.checkpoints.hold(cp.id) });
  }

  /** New checkpoints were written (states moved here): each waiting sequence holds the longest it would resume from now. */
  refreshHolds(): void {
    for (const seq of this.seqs) this.holdCheckpoint(seq);
  }

  /**
   * Counts a sequence that joined the queue in the kept gauges (probing it now keeps the sum whole),
   * and holds the state checkpoint it would resume from, so that no step takes it before it is admitted.
   */
  private joined(seq: Sequence): void {
    this.holdCheckpoint(seq);
    if (seq.numOutput > 0) this.decodes++;
    if (this.oldestAt !== undefined) this.oldestAt = Math.min(this.oldestAt, this.queuedAt.get(seq) ?? Infinity);
    this.sync();
    if (this.uncachedSum !== undefined) this.uncachedSum += this.uncached(seq);
  }

  /** Takes a sequence that left the queue out of the kept gauges. */
  private left(seq: Sequence): void {
    this.holds.get(seq)?.release();
    this.holds.delete(seq);
    if (seq.numOutput > 0) this.decodes--;
    if (this.oldestAt !== undefined && (this.queuedAt.get(seq) ?? Infinity) <= this.oldestAt) this.oldestAt = undefined;
    this.sync();
    if (this.uncachedSum !== undefined) this.uncachedSum -= this.probed.get(seq)!;
    this.probed.delete(seq);
  }
}

/** Nothing generated, never preempted, nothing swapped: a prompt as it came (or was handed off). */
function isFresh(seq: Sequence): boolean {
  return seq.numOutput === 0 && seq.preemptions === 0 && seq.numSwapped === 0;
}

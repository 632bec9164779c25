/**
 * One simulated worker (an engine on a GPU group): its KV pool, its prefill queue and its decode
 * batch. Decode progress is kept as a per-worker step counter so a step costs O(1) whatever the
 * batch size: a sequence's tokens = steps since it joined; finishes come off a min-heap.
 */
import type { BlockPool } from "../../kv/block-pool.ts";
import type { RetentionPolicy } from "../../kv/retention.ts";
import type { TierCache } from "../../kv/tiers.ts";
import type { RouteCandidate } from "../../planner/routers.ts";
import { StepWindow } from "../../planner/step-window.ts";
import type { Role, WorkerState, WorkerSnapshot } from "../../planner/types.ts";
import type { CostModel } from "./cost-model.ts";
import type { ReqState } from "./request.ts";

/** Prefill work queued on a worker. */
export interface PrefillJob {
  req: ReqState;
  /** Tokens still to compute, and the position the next chunk starts at. */
  left: number;
  pos: number;
  /** Device blocks held for this request on this worker (matched prefix first). */
  blocks: number[];
  /** Blocks of the prompt that were already cached here (matched or fetched). */
  cachedBlocks: number;
  /** True when this worker also decodes the request afterwards. */
  local: boolean;
  /** Not before this time (host fetch or incoming prefix transfer). */
  readyAt: number;
  enqueuedAt: number;
}

/** A decoding sequence. */
export interface DecodeSeq {
  req: ReqState;
  blocks: number[];
  joinStep: number;
  joinClock: number;
  finishStep: number;
  attendedAtJoin: number;
}

/** A simulated worker. */
export class SimWorker {
  role: Role;
  state: WorkerState;
  readyAt = 0;
  /** KV transfers on their way to this worker. */
  inflightKv = 0;
  readonly queue: PrefillJob[] = [];
  readonly decoding = new Set<DecodeSeq>();
  /** Sequences whose KV is arriving or waiting for free blocks here. */
  readonly incoming: { req: ReqState; blocks: number; cachedBlocks: number[]; prefillWorker: SimWorker }[] = [];
  /** Sequences that became ready to decode while a step was running; they join at its end. */
  readonly pendingJoin: { req: ReqState; blocks: number[] }[] = [];
  /** Requests waiting for KV memory before their prefill can be queued here. */
  readonly admitWait: { req: ReqState; local: boolean; delayS: number; extraCached: number; since: number }[] = [];
  /** Finished remote prefills whose KV waits for room on this (decode) worker. */
  readonly kvWait: { from: SimWorker; job: PrefillJob }[] = [];
  /** Ready sequences waiting for a decode slot (batch at its maximum). */
  readonly decodeWait: { req: ReqState; blocks: number[] }[] = [];
  /** Handed-off sequences in the batch whose first token the next decode step samples. */
  readonly awaitingFirst: ReqState[] = [];
  private finishHeap: DecodeSeq[] = [];
  steps = 0;
  clock = 0;
  attendedSum = 0; // Σ (attended context at join − joinStep·density) over decoding seqs
  busy = false;
  version = 0;
  macro: { start: number; stepS: number; k: number; prefill: PrefillJob[]; prefillTokens: number[]; decode: boolean; pairs: number; attn: number } | null = null;
  queuedTokens = 0;
  activeBlocks = 0;
  /** The last step was a prefill-only step of a worker separating prefill from decode steps. */
  lastStepPrefillOnly = false;
  /** Steps started outside the decodes' turn while separating steps (every SPLIT_PROBE_EVERY-th mixes; stepping.ts). */
  splitProbe = 0;
  /** The planner snapshot's step fields over the current window, and the speed estimates routers use. */
  readonly window: StepWindow;

  /** This worker as routers see it; placement.ts refreshes the fields before each routing call. */
  readonly routeView: RouteCandidate;

  /** Creates a worker. */
  constructor(
    readonly id: string, readonly index: number, readonly rack: number, role: Role, state: WorkerState,
    readonly pool: BlockPool, readonly host: TierCache | undefined, readonly cost: CostModel,
    /** The pool's retention policy (told when a session moves away with its prefix). */
    readonly retention?: RetentionPolicy,
  ) {
    this.role = role;
    this.state = state;
    this.window = new StepWindow(1 / cost.stepTime({ prefillTokens: 8192, prefillAttnPairs: cost.prefillPairs(4096, 8192), decodeSeqs: 0, decodeAttnTokens: 0 }) * 8192);
    this.routeView = {
      id, role, overlapDevice: 0, overlapHost: 0, queuedPrefillTokens: 0, activeBlocks: 0, decodeBatch: 0,
      decodeQueue: 0, memoryQueue: 0, prefillRate: this.prefillRate, decodeStepS: 0, rack,
    };
  }

  /** Prefill tokens per second of prefill-carrying step (EWMA; the cost model's full chunk until measured). */
  get prefillRate(): number {
    return this.window.prefillRate;
  }

  /** Seconds per decode-carrying step (EWMA). */
  get decodeStepEwma(): number {
    return this.window.decodeStepS;
  }

  /** Decoding sequences. */
  get batch(): number {
    return this.decoding.size;
  }

  /** Adds a decoding sequence that has `remaining` tokens to produce. */
  addDecode(req: ReqState, blocks: number[], remaining: number, ctx: number): DecodeSeq {
    if (req.firstToken < 0) this.awaitingFirst.push(req);
    const d = this.cost.model.attnDensity >= 1 ? 1 : this.cost.model.attnDensity;
    const seq: DecodeSeq = {
      req, blocks, joinStep: this.steps, joinClock: this.clock, finishStep: this.steps + remaining,
      attendedAtJoin: this.cost.attended(ctx) - this.steps * d,
    };
    this.decoding.add(seq);
    this.attendedSum += seq.attendedAtJoin;
    this.activeBlocks += blocks.length;
    this.heapPush(seq);
    return seq;
  }

  /** Σ attended context over the decode batch right now. */
  decodeAttended(): number {
    const d = this.cost.model.attnDensity >= 1 ? 1 : this.cost.model.attnDensity;
    return this.attendedSum + this.decoding.size * this.steps * d;
  }

  /** Steps until the next sequence finishes (Infinity when none decode). */
  stepsToNextFinish(): number {
    return this.finishHeap.length === 0 ? Infinity : this.finishHeap[0].finishStep - this.steps;
  }

  /** Removes and returns sequences finished at the current step count. */
  popFinished(): DecodeSeq[] {
    const out: DecodeSeq[] = [];
    while (this.finishHeap.length > 0 && this.finishHeap[0].finishStep <= this.steps) {
      const s = this.heapPop();
      this.decoding.delete(s);
      this.attendedSum -= s.attendedAtJoin;
      this.activeBlocks -= s.blocks.length;
      out.push(s);
    }
    return out;
  }

  /** Metrics of the last window, then resets the window. */
  snapshot(now: number): WorkerSnapshot {
    const head = this.queue[0];
    const snap: WorkerSnapshot = {
      id: this.id, role: this.role, state: this.state, waitingPrefillTokens: this.queuedTokens,
      queueDelayS: head === undefined ? 0 : now - head.enqueuedAt, decodeBatch: this.decoding.size,
      waitingDecodes: this.decodeWait.length + this.kvWait.length + this.pendingJoin.length,
      kvUsage: this.pool.numUsedBlocks() / Math.max(1, this.pool.numBlocks),
      waitingForMemory: this.admitWait.length,
      ...this.window.take(),
    };
    return snap;
  }

  private heapPush(s: DecodeSeq): void {
    const h = this.finishHeap;
    h.push(s);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p].finishStep <= s.finishStep) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = s;
  }

  private heapPop(): DecodeSeq {
    const h = this.finishHeap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const r = l + 1;
        const c = r < h.length && h[r].finishStep < h[l].finishStep ? r : l;
        if (h[c].finishStep >= last.finishStep) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    return top;
  }
}

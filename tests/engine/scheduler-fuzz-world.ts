/**
 * The world of the scheduler fuzz test (scheduler-fuzz-hunt3.test.ts): a Scheduler on a real kv/
 * BlockPool (LRU or agent-aware retention, hand-off tails, a versioned prefix cache), drawn from a
 * seed, and a model of what every block holds. The KV manager the scheduler sees is wrapped: each
 * allocation marks its blocks' contents unknown, each prefix hit and each commit is checked against
 * the tokens the blocks really hold (written by the fake forward), and hand-off holds are counted,
 * so every reference in the pool can be accounted for.
 */
import { type BlockHasher, BlockPool, LruPolicy, type RetentionPolicy, SeededRng } from "../../kv/index.ts";
import { EngineSessions } from "../../src/engine/engine-sessions.ts";
import { HandoffTails } from "../../src/engine/handoff-tails.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { countKvEvents, poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { KvBlockManager } from "../../src/engine/scheduler-kv.ts";
import type { SchedulerConfig, StepPlan } from "../../src/engine/scheduler-types.ts";
import { checkContent } from "./scheduler-fuzz-checks.ts";
import type { FinishReason, Sequence } from "../../src/engine/sequence.ts";

/** A violated invariant (the message names the seed and the operation). */
export class FuzzInvariantError extends Error {
  override name = "FuzzInvariantError";
}

/** One submitted (and accepted) request, as the driver follows it. */
export interface FuzzRequest {
  seq: Sequence;
  maxTokens: number;
  /** Arrival step, first admission step (undefined while never admitted). */
  submittedAt: number;
  admittedAt?: number;
  /** Later arrivals of the same or lower urgency admitted before it while it waited unadmitted. */
  overtaken: number;
  reason?: FinishReason;
}

/** What one run did, for the test's report and its starvation bound. */
export interface FuzzSummary {
  ops: number;
  steps: number;
  requests: number;
  refused: number;
  reasons: Record<string, number>;
  preemptions: number;
  swapOuts: number;
  prefixHitTokens: number;
  priorityPreemptions: number;
  swappedInBlocks: number;
  /** Prompts admitted with their hand-off block, steps that verified a draft, sequences truncated. */
  handoffs: number;
  drafts: number;
  /** Steps that looked ahead (multi-step decoding). */
  lookaheads: number;
  truncated: number;
  /** Most later arrivals of equal or lower urgency admitted before one waiting request (FCFS runs only). */
  maxOvertakenFcfs: number;
}

/** The drawn shape of one run. */
export interface FuzzShape {
  blockSize: number;
  numBlocks: number;
  config: Partial<SchedulerConfig>;
  agentRetention: boolean;
  versioned: boolean;
  tails: { maxBlocks: number; ttlS: number } | undefined;
  /**
   * Requests kept within the pool as the engine keeps them (prompt plus output at most its maxModelLen,
   * the pool less the watermark); otherwise sequences may outgrow the pool and be truncated.
   */
  bounded: boolean;
  /** A hasher that collides often, so the prefix index's token and parent checks carry the cache. */
  weakHash: boolean;
}

/** Chained block hashes in 0..12: different blocks share one all the time. */
const weakHash: BlockHasher = (parent, tokens) => {
  let h = (parent ?? 0) * 31;
  for (let i = 0; i < tokens.length; i++) h += tokens[i];
  return h % 13;
};

/** Draws a run's shape from `rng`. */
export function drawShape(rng: SeededRng): FuzzShape {
  const blockSize = [1, 2, 4, 4, 8][rng.int(0, 4)];
  const numBlocks = rng.int(4, 40);
  const pick = <T>(xs: readonly T[]): T => xs[rng.int(0, xs.length - 1)];
  const config: Partial<SchedulerConfig> = {
    maxBatchTokens: pick([1, 3, 8, 16, 32, 64, 256]),
    maxRunning: pick([1, 2, 3, 4, 8, 64]),
    watermarkBlocks: Math.min(numBlocks - 2, pick([0, 0, 1, 2])),
    preemption: rng.next() < 0.5 ? "swap" : "recompute",
    role: rng.next() < 0.15 ? "prefill" : "mixed",
    stepMixing: rng.next() < 0.4 ? "split" : "mixed",
  };
  if (config.preemption === "swap" && rng.next() < 0.6) config.swapSpaceBlocks = rng.int(0, numBlocks);
  if (rng.next() < 0.4) config.prefillOrder = { order: "short-first", agingTokensPerS: pick([20, 200]) };
  if (rng.next() < 0.4) config.maxPromptLogprobRows = rng.int(1, 16);
  const tails = rng.next() < 0.8 ? { maxBlocks: rng.int(0, Math.max(1, numBlocks >> 2)), ttlS: pick([0.5, 2, 5]) } : undefined;
  const world = { blockSize, numBlocks, config, agentRetention: rng.next() < 0.5, versioned: rng.next() < 0.8, tails, weakHash: rng.next() < 0.3, bounded: rng.next() < 0.7 };
  // Drawn last, so the earlier draws of a seed stay what they were.
  if (rng.next() < 0.3) config.longPrefillTokenThreshold = rng.int(1, 12);
  return world;
}

/** Scheduler, pool and the content model of one fuzz run. */
export class FuzzWorld {
  now = 0;
  step = 0;
  readonly pool: BlockPool;
  readonly sched: Scheduler;
  readonly sessions: EngineSessions | undefined;
  readonly tails: HandoffTails | undefined;
  readonly kv: KvBlockManager;
  /** What each block holds per offset (undefined: unknown since its allocation). */
  readonly content: (number | undefined)[][];
  /** Blocks allocated in the step being planned: their old contents are unknown once swap-outs copied them. */
  readonly pendingReset: number[] = [];
  /** Hand-off holds per block. */
  readonly tailHeld = new Map<number, number>();
  /** Swapped-out KV per sequence id, as copied out of the device blocks. */
  readonly host = new Map<number, (number | undefined)[]>();
  readonly reqs = new Map<number, FuzzRequest>();
  readonly live = new Set<number>();

  constructor(readonly seed: number, readonly shape: FuzzShape) {
    const { blockSize, numBlocks } = shape;
    this.sessions = shape.agentRetention ? new EngineSessions(30) : undefined;
    const policy: RetentionPolicy = this.sessions?.policy ?? new LruPolicy();
    const events = shape.versioned ? countKvEvents() : undefined;
    this.pool = new BlockPool({ numBlocks, blockSize, clock: () => this.now, policy, events: events?.sink, ...(shape.weakHash ? { hasher: weakHash } : {}) });
    this.content = Array.from({ length: numBlocks }, () => new Array<number | undefined>(blockSize).fill(undefined));
    const release = (ids: number[]) => {
      for (const id of ids) this.untail(id);
      this.pool.release(ids);
    };
    this.tails = shape.tails && new HandoffTails(release, () => this.now, shape.tails);
    this.kv = this.wrap(poolBlockManager(this.pool, events?.count, this.tails));
    this.sched = new Scheduler(this.kv, shape.config, () => this.now);
  }

  /** Fails with the seed, the step and `what`. */
  fail(what: string): never {
    throw new FuzzInvariantError(`Seed ${this.seed}, step ${this.step}: ${what}`);
  }

  private untail(id: number): void {
    const n = this.tailHeld.get(id) ?? 0;
    if (n === 0) this.fail(`hand-off store let go of block ${id}, which it did not hold`);
    if (n === 1) this.tailHeld.delete(id);
    else this.tailHeld.set(id, n - 1);
  }

  /** The token at position `p` of a sequence whose block table is `table`, per the content model. */
  held(table: readonly number[], p: number): number | undefined {
    const bs = this.shape.blockSize;
    const b = table[Math.floor(p / bs)];
    return b === undefined ? undefined : this.content[b][p % bs];
  }

  private wrap(base: KvBlockManager): KvBlockManager {
    const bs = base.blockSize;
    const check = (blocks: readonly number[], tokens: readonly number[], from: number, what: string) => {
      for (let b = from; b < blocks.length; b++) {
        for (let o = 0; o < bs; o++) {
          const want = tokens[b * bs + o];
          if (this.content[blocks[b]][o] !== want) this.fail(`${what}: block ${blocks[b]} (#${b}) holds ${this.content[blocks[b]][o]} at offset ${o}, the tokens say ${want}`);
        }
      }
    };
    return {
      ...base,
      allocate: (n) => {
        const got = base.allocate(n);
        if (got !== null) this.pendingReset.push(...got);
        return got;
      },
      acquirePrefix: (tokens, hints) => {
        const probed = base.cachedPrefixTokens(tokens, hints.cacheRoot);
        const got = base.acquirePrefix(tokens, hints);
        if (got.length * bs !== probed) this.fail(`prefix hit of ${got.length} blocks where the probe said ${probed} tokens`);
        check(got, tokens, 0, "prefix hit");
        return got;
      },
      commit: (tokens, blockIds, from, to, hints, promptLength, reasoning) => {
        check(blockIds.slice(0, to), tokens, from, `commit of blocks ${from}..${to - 1}`);
        base.commit(tokens, blockIds, from, to, hints, promptLength, reasoning);
      },
      ...(base.keepHandoffTail
        ? {
          keepHandoffTail: (prompt: readonly number[], id: number, root?: number) => {
            this.tailHeld.set(id, (this.tailHeld.get(id) ?? 0) + 1);
            base.keepHandoffTail!(prompt, id, root);
          },
          takeHandoffTail: (prompt: readonly number[], root?: number) => {
            const id = base.takeHandoffTail!(prompt, root);
            if (id !== null) {
              this.untail(id);
              // A taken block holds the prompt's last block: all of it but the last token is reused as computed.
              const start = Math.floor((prompt.length - 1) / bs) * bs;
              for (let p = start; p < prompt.length - 1; p++) {
                if (this.content[id][p % bs] !== prompt[p]) this.fail(`hand-off block ${id} holds ${this.content[id][p % bs]} at position ${p}, the prompt ${prompt[p]}`);
              }
            }
            return id;
          },
        }
        : {}),
    };
  }

  /**
   * The runner's part of a step: swap-outs read the victims' blocks before anything else writes them,
   * then swap-ins, then the forward writes every fed token into its block (never changing a shared or
   * cached one); an entry that looks ahead also writes the tokens its steps feed (`ahead`: the
   * tokens it samples, in order, the last of them not fed).
   */
  forward(plan: StepPlan, ahead?: ReadonlyMap<number, readonly number[]>): void {
    const bs = this.shape.blockSize;
    for (const op of plan.swapOut) {
      const seq = this.reqs.get(op.seqId)!.seq;
      const kv = Array.from({ length: op.numTokens }, (_, p) => this.held(op.blockTable, p));
      if (kv.some((t, p) => t !== seq.tokens[p])) this.fail(`swap-out of ${op.seqId} copies [${kv}], its tokens are [${seq.tokens.slice(0, op.numTokens)}]`);
      this.host.set(op.seqId, kv);
    }
    for (const b of this.pendingReset.splice(0)) this.content[b].fill(undefined);
    for (const op of plan.swapIn) {
      const kv = this.host.get(op.seqId);
      if (!kv || kv.length !== op.numTokens) return this.fail(`swap-in of ${op.seqId} for ${op.numTokens} tokens, host holds ${kv?.length}`);
      kv.forEach((t, p) => (this.content[op.blockTable[Math.floor(p / bs)]][p % bs] = t));
      this.host.delete(op.seqId);
    }
    checkContent(this, false);
    for (const e of plan.entries) {
      const fed = e.lookahead ? [...e.tokens, ...ahead!.get(e.seqId)!.slice(0, e.lookahead)] : e.tokens;
      fed.forEach((t, k) => {
        const p = e.startPos + k, b = e.blockTable[Math.floor(p / bs)];
        if (this.content[b][p % bs] !== t && (this.pool.refCount(b) > 1 || this.pool.hashOf(b) !== null)) {
          this.fail(`sequence ${e.seqId} overwrites position ${p} in shared or cached block ${b}`);
        }
        this.content[b][p % bs] = t;
      });
    }
  }
}

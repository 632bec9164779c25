/**
 * Host-memory tier under a worker's device KV cache (vLLM's CPU offload, Dynamo's KVBM): a cached
 * block the retention policy evicts is copied to host memory instead of being lost, and a prompt
 * that continues its device prefix with blocks held here gets them written back before it is
 * admitted, so it recomputes only what neither tier holds. The agent-aware policy decides what leaves
 * the device; the host tier keeps the most recently used blocks (kv/tiers.ts `TierCache`). A session
 * waiting on a tool gets its blocks back shortly before its predicted return (prefetch).
 */
import {
  type BlockHash, type BlockMeta, type BlockPool, chainHashes, type EvictedBlock, type KvEventSink, prefetchStartTime, type SessionTracker, TierCache,
} from "../../kv/index.ts";
import type { StepRunner } from "./engine-runner.ts";
import { concatKv, type HostKv, hostKvBytes } from "./kv-copy.ts";
import { importPrefix } from "./prefix-transfer.ts";
import type { Sequence } from "./sequence.ts";

/** Seconds before a tool-waiting session's predicted return that its blocks are prefetched. */
const PREFETCH_LEAD_S = 1;
/**
 * Seconds an idle session's last turn is remembered for a tool wait marked late: the server marks it
 * after parsing the finished answer, a worker process hears of it over IPC, and the loop steps on meanwhile.
 */
const IDLE_GRACE_S = 30;
/** Sessions whose last turn is remembered for prefetch at most (oldest forgotten first). */
const MAX_REMEMBERED_TURNS = 4096;
/**
 * Tokens of remembered turns at least, in all (oldest forgotten first): each turn keeps its whole
 * context, so 4096 agent sessions of 32k tokens would hold 1 GB of token ids. A prefetch cannot
 * restore more than the tier holds, so the bound is 4 × the tier's tokens, and at least 2^20 tokens
 * (8 MB): ids cost 8 bytes a token against KB of KV per token, under 1% of the tier's memory.
 */
const MIN_REMEMBERED_TOKENS = 2 ** 20;

/** One offloaded block's KV: on its way to the host, then there. */
interface HostBlock {
  kv: HostKv | undefined;
  failed: boolean;
}

/** Counters of a host tier. */
export interface KvOffloadStats {
  /** Blocks held in host memory now. */
  hostBlocks: number;
  hostCapacityBlocks: number;
  /** Bytes those blocks' KV takes in host memory (copies still on their way not counted). */
  hostBytes: number;
  /** Blocks copied to host memory, and written back to the device, since start. */
  offloadedBlocks: number;
  restoredBlocks: number;
  /** Of the restored blocks, those written back ahead of a tool-waiting session's predicted return. */
  prefetchedBlocks: number;
}

/** A worker's host KV tier. */
export class HostKvOffload {
  private readonly tier: TierCache;
  private readonly blocks = new Map<number, HostBlock>();
  private offloaded = 0;
  private restored = 0;
  private prefetched = 0;
  /** Bytes of the held copies that have arrived. */
  private bytes = 0;
  /** Each session's last turn (prompt and output), most recently ended last: what a prefetch restores. */
  private readonly lastTurn = new Map<string, { tokens: number[]; root?: BlockHash; endedAt: number }>();
  /** Tokens the remembered turns hold, and the most they may (see {@link MIN_REMEMBERED_TOKENS}). */
  private rememberedTokens = 0;
  private readonly maxRememberedTokens: number;
  /** Sequences already given their host blocks, with their preemption count then. */
  private readonly tried = new WeakMap<Sequence, number>();

  constructor(
    private readonly runner: StepRunner, private readonly blockSize: number, readonly capacityBlocks: number,
    workerId: string, private readonly clock: () => number, events?: KvEventSink, private readonly onError: (e: unknown) => void = () => {},
  ) {
    if (!runner.readBlocks || !runner.writeBlocks) throw new RangeError("KV offload needs a runner that can copy KV blocks to and from host memory");
    if (!Number.isInteger(capacityBlocks) || capacityBlocks < 1) throw new RangeError(`The host KV tier needs at least 1 block, got ${capacityBlocks}`);
    this.maxRememberedTokens = Math.max(MIN_REMEMBERED_TOKENS, 4 * capacityBlocks * blockSize);
    this.tier = new TierCache({ tier: "host", capacityBlocks, bandwidthBytesPerS: 0, latencyS: 0 }, workerId, (e) => {
      // Entries the tier drops past its capacity free their bytes.
      if (e.kind === "removed") for (const h of e.hashes) this.drop(h);
      events?.(e);
    });
  }

  /** The pool's `onEvict`: copies the leaving block out while its KV is still intact. */
  evicted(b: EvictedBlock): void {
    const entry: HostBlock = { kv: undefined, failed: false };
    this.drop(b.hash);
    this.blocks.set(b.hash, entry);
    this.runner.readBlocks!([b.blockId]).then((kv) => {
      // A copy that arrives after the tier dropped (or replaced) its block is not kept.
      if (this.blocks.get(b.hash) !== entry) return;
      entry.kv = kv;
      this.bytes += hostKvBytes(kv);
    }, () => (entry.failed = true));
    this.tier.offload(b.hash, { parentHash: b.parentHash, tokens: b.tokens, meta: b.meta }, this.clock());
    this.offloaded++;
  }

  /**
   * Writes back the blocks of `tokens`' prefix that continue its device prefix from this tier (those
   * whose copy has reached the host), as cached blocks ranked under `meta`. Returns how many it
   * wrote and whether a needed copy was still on its way (worth another try later); a write that
   * fails is reported to `onError` and counts as none.
   */
  restore(pool: BlockPool, tokens: readonly number[], meta?: BlockMeta, maxBlocks = Infinity, root?: BlockHash): { restored: number; pending: boolean } {
    const bs = this.blockSize;
    const onDevice = pool.cachedPrefixTokens(tokens, Infinity, root ?? null) / bs;
    const { kv, pending } = this.continuation(tokens, onDevice, root);
    if (kv === null) return { restored: 0, pending };
    const prefix = { tokens: tokens.slice(0, onDevice * bs + kv.numTokens), blockSize: bs, kv, firstBlock: onDevice, ...(root === undefined ? {} : { root }) };
    let restored: number;
    try {
      restored = importPrefix(pool, this.runner, prefix, meta, maxBlocks);
    } catch (e) {
      // A failed write-back (the device's error) restores nothing: importPrefix gave its blocks back,
      // and the prompt computes what the host held, as without a host tier.
      this.onError(e);
      return { restored: 0, pending: false };
    }
    this.restored += restored;
    return { restored, pending };
  }

  /**
   * The KV this tier holds for `tokens`' full blocks from block `fromBlock` on, contiguously and
   * chained to the block before (tokens and parent links verified), stopping at a copy still on its
   * way to the host (`pending`). Reading it uses the blocks: they become the most recently used.
   * A peer pulling a session's prefix gets it after the device blocks (Engine.exportPrefix).
   */
  continuation(tokens: readonly number[], fromBlock: number, root?: BlockHash): { kv: HostKv | null; pending: boolean } {
    const bs = this.blockSize;
    const hashes = chainHashes(tokens, bs, undefined, root ?? null);
    if (fromBlock >= hashes.length) return { kv: null, pending: false };
    const found = this.tier.matchContinuation(fromBlock > 0 ? hashes[fromBlock - 1] : root ?? null, hashes.slice(fromBlock), (i) => tokens.slice((fromBlock + i) * bs, (fromBlock + i + 1) * bs));
    let ready = 0;
    let pending = false;
    for (; ready < found; ready++) {
      const b = this.blocks.get(hashes[fromBlock + ready]);
      if (b?.kv === undefined) {
        pending = b !== undefined && !b.failed;
        break;
      }
    }
    if (ready === 0) return { kv: null, pending };
    return { kv: concatKv(hashes.slice(fromBlock, fromBlock + ready).map((h) => this.blocks.get(h)!.kv!)), pending };
  }

  /** Before a step is planned: prefetches for tool-waiting sessions (agent retention only), then restores for waiting sequences. */
  beforeStep(pool: BlockPool, waiting: readonly Sequence[], tracker: SessionTracker | undefined, now: number): void {
    if (tracker) this.prefetch(pool, tracker, now);
    this.restoreWaiting(pool, waiting);
  }

  /**
   * Restores host blocks for waiting sequences before a step is planned: each sequence once per
   * admission attempt (again after a preemption), and again while a copy it needs is on its way.
   */
  restoreWaiting(pool: BlockPool, waiting: readonly Sequence[]): void {
    for (const seq of waiting) {
      if (this.tried.get(seq) === seq.preemptions) continue;
      // The last token is always computed (its logits are needed), as in the scheduler's prefix match.
      const sid = seq.hints.sessionId;
      const { pending } = this.restore(pool, seq.tokens.slice(0, -1), sid === undefined ? undefined : { sessionId: sid }, Infinity, seq.hints.cacheRoot);
      if (!pending) this.tried.set(seq, seq.preemptions);
    }
  }

  /** A session's turn ended with these tokens (prompt and output): what its next turn will resend. */
  turnEnded(sessionId: string, tokens: readonly number[], root?: BlockHash): void {
    this.forgetTurn(sessionId);
    this.lastTurn.set(sessionId, { tokens: [...tokens], root, endedAt: this.clock() });
    this.rememberedTokens += tokens.length;
    // The newest turn stays, however long: it is the likeliest to come back.
    while (this.lastTurn.size > 1 && (this.lastTurn.size > MAX_REMEMBERED_TURNS || this.rememberedTokens > this.maxRememberedTokens)) {
      this.forgetTurn(this.lastTurn.keys().next().value!);
    }
  }

  /** Turns remembered for prefetch, and the tokens they hold. */
  get remembered(): { turns: number; tokens: number } {
    return { turns: this.lastTurn.size, tokens: this.rememberedTokens };
  }

  private forgetTurn(sessionId: string): void {
    const turn = this.lastTurn.get(sessionId);
    if (turn === undefined) return;
    this.rememberedTokens -= turn.tokens.length;
    this.lastTurn.delete(sessionId);
  }

  /**
   * Prefetch: a session waiting on a tool whose predicted return is less than `PREFETCH_LEAD_S` away
   * gets its last turn's blocks written back from host memory now, so its next turn does not wait
   * for them (kv/tiers.ts `prefetchStartTime`). It may take at most the pool's free and evictable
   * blocks past a quarter of the pool (what it evicts moves to host memory in turn). Sessions that
   * came back or were forgotten are dropped, and idle ones once no tool wait was marked within
   * `IDLE_GRACE_S` of their turn's end.
   */
  prefetch(pool: BlockPool, tracker: SessionTracker, now: number): void {
    for (const [sid, { tokens, root, endedAt }] of this.lastTurn) {
      const status = tracker.status(sid);
      if (status === "idle" && now - endedAt <= IDLE_GRACE_S) continue;
      if (status !== "waiting-tool") {
        this.forgetTurn(sid);
        continue;
      }
      if (now < prefetchStartTime(tracker.predictedReturnTime(sid, now), 0, now, PREFETCH_LEAD_S)) continue;
      const room = pool.numFreeBlocks() - Math.ceil(pool.numBlocks / 4);
      if (room > 0) this.prefetched += this.restore(pool, tokens, { sessionId: sid }, room, root).restored;
      this.forgetTurn(sid);
    }
  }

  /** Milliseconds until the next prefetch is due (undefined when none is waiting). */
  nextPrefetchMs(tracker: SessionTracker, now: number): number | undefined {
    let next = Infinity;
    for (const sid of this.lastTurn.keys()) {
      if (tracker.status(sid) === "waiting-tool") next = Math.min(next, tracker.predictedReturnTime(sid, now) - PREFETCH_LEAD_S);
    }
    return next === Infinity ? undefined : Math.max(0, (next - now) * 1000);
  }

  /** Forgets a held block's copy. */
  private drop(hash: BlockHash): void {
    const kv = this.blocks.get(hash)?.kv;
    if (kv) this.bytes -= hostKvBytes(kv);
    this.blocks.delete(hash);
  }

  stats(): KvOffloadStats {
    return { hostBlocks: this.tier.size, hostCapacityBlocks: this.capacityBlocks, hostBytes: this.bytes, offloadedBlocks: this.offloaded, restoredBlocks: this.restored, prefetchedBlocks: this.prefetched };
  }
}

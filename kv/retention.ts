/**
 * Retention policies decide which free-but-cached block to evict when a new block is needed.
 * The block pool owns the blocks; a policy only orders the evictable ones.
 */
import { LruList } from "./lru-list.ts";
import type { BlockHash, BlockMeta } from "./types.ts";

/** A cached block whose reference count fell to zero: it may be reused by a later prefix hit, or evicted. */
export interface EvictableBlock {
  id: number;
  hash: BlockHash;
  meta: BlockMeta;
  /** Position of the block in its chain (0 = first block), so policies can prefer dropping tails. */
  depth: number;
}

/** Orders evictable blocks. Implementations are pure and take time as an argument. */
export interface RetentionPolicy {
  /** A block became evictable (cached, reference count 0). `block` is reused by the caller: copy what you keep. */
  add(block: EvictableBlock, now: number): void;
  /** A block stopped being evictable (reused by a prefix hit, or dropped by the pool). */
  remove(id: number): void;
  /** Picks and forgets the next victim; undefined when nothing is evictable. */
  evict(now: number): number | undefined;
  /** Number of evictable blocks tracked. */
  readonly size: number;
  /**
   * The session now continues on another worker, which received its prefix (optional): its blocks
   * here are a stale copy, worth little. Policies without a notion of sessions ignore it.
   */
  sessionMoved?(sessionId: string, now: number): void;
  /**
   * What a block of `sessionId` at chain depth `depth` would be worth here if it were cached now, on
   * the policy's own scale (optional; a prefetch asks before it brings blocks back from host memory).
   */
  blockValue?(sessionId: string, depth: number, now: number): number;
  /**
   * Evictable blocks ranked strictly below `value` (they would all go before a block worth `value`),
   * counted up to `max` (optional; with {@link blockValue}, what a prefetch may displace).
   */
  evictableBelow?(value: number, now: number, max: number): number;
  /** Ranks afresh at the next eviction, so it follows the scores {@link evictableBelow} just used (optional). */
  rerank?(): void;
}

/**
 * Least recently used, as vLLM's automatic prefix caching: the block freed longest ago goes first;
 * a sequence's blocks are freed tail first, so among blocks freed together the tail goes first.
 */
export class LruPolicy implements RetentionPolicy {
  private readonly order = LruList.forBlockHashes<true>();

  /** Marks the block as the most recently used evictable one. */
  add(block: EvictableBlock, _now: number): void {
    this.order.set(block.id, true);
  }

  /** Forgets a block. */
  remove(id: number): void {
    this.order.delete(id);
  }

  /** Evicts the least recently used block. */
  evict(_now: number): number | undefined {
    return this.order.shift();
  }

  /** Number of evictable blocks. */
  get size(): number {
    return this.order.size;
  }
}

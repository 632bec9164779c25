/**
 * Retention policies decide which free-but-cached block to evict when a new block is needed.
 * The block pool owns the blocks; a policy only orders the evictable ones.
 */
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
  /** A block became evictable (cached, reference count 0). */
  add(block: EvictableBlock, now: number): void;
  /** A block stopped being evictable (reused by a prefix hit, or dropped by the pool). */
  remove(id: number): void;
  /** Picks and forgets the next victim; undefined when nothing is evictable. */
  evict(now: number): number | undefined;
  /** Number of evictable blocks tracked. */
  readonly size: number;
}

/**
 * Least recently used, as vLLM's automatic prefix caching: the block freed longest ago goes first;
 * a sequence's blocks are freed tail first, so among blocks freed together the tail goes first.
 */
export class LruPolicy implements RetentionPolicy {
  // A Map iterates in insertion order: re-inserting moves a block to the most-recent end.
  private readonly order = new Map<number, true>();

  /** Marks the block as the most recently used evictable one. */
  add(block: EvictableBlock, _now: number): void {
    this.order.delete(block.id);
    this.order.set(block.id, true);
  }

  /** Forgets a block. */
  remove(id: number): void {
    this.order.delete(id);
  }

  /** Evicts the least recently used block. */
  evict(_now: number): number | undefined {
    for (const id of this.order.keys()) {
      this.order.delete(id);
      return id;
    }
    return undefined;
  }

  /** Number of evictable blocks. */
  get size(): number {
    return this.order.size;
  }
}

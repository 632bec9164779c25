/**
 * What the scheduler needs from the KV block layer. The pure implementation lives in `kv/`
 * (block pool, prefix index, retention); `kvBlockManager()` in scheduler-kv-adapter.ts wraps it.
 * Keeping this seam small lets the scheduler be tested against the real pool without a model.
 */
import type { ReasoningPositions } from "./reasoning-spans.ts";
import type { SequenceHints } from "./sequence.ts";

/** Block accounting and prefix caching as seen by the scheduler. */
export interface KvBlockManager {
  /** Tokens per block. */
  readonly blockSize: number;
  /** Blocks in the pool. */
  readonly totalBlocks: number;
  /** Blocks that can be handed out now: free ones plus cached ones nobody references. */
  numAvailable(): number;
  /** Blocks referenced by at least one sequence. */
  numUsed(): number;
  /**
   * The longest cached run of full blocks that prefixes `tokens` (tokens compared, not only
   * hashes); takes one reference on each returned block.
   */
  acquirePrefix(tokens: readonly number[], hints: SequenceHints): number[];
  /** Tokens of the longest cached run of full blocks that prefixes `tokens` (in cache namespace `root`, SequenceHints.cacheRoot), taking nothing. */
  cachedPrefixTokens(tokens: readonly number[], root?: number): number;
  /**
   * A number that changes whenever the prefix cache gains or loses a block, whoever changes it
   * (commits, evictions, prefixes written in from host memory or another worker). Lets the scheduler
   * reuse `cachedPrefixTokens` answers until it changes; absent, it probes anew every time.
   */
  cacheVersion?(): number;
  /** `n` fresh blocks, each with one reference, or null (and nothing taken) when fewer are available. */
  allocate(n: number): number[] | null;
  /**
   * Registers blocks `from..to-1` of a sequence (full, KV computed) in the prefix cache.
   * `tokens` holds at least `to * blockSize` tokens of the sequence; `blockIds` is its block table.
   * Tokens at positions ≥ `promptLength` were generated: a block holding any of them is an output block,
   * and a reasoning block when `reasoning` says one of its positions is reasoning.
   */
  commit(
    tokens: readonly number[], blockIds: readonly number[], from: number, to: number, hints: SequenceHints, promptLength: number,
    reasoning?: ReasoningPositions,
  ): void;
  /**
   * Drops one reference from each block; unreferenced cached blocks become evictable. With `hints`,
   * a block this call leaves unreferenced is counted in that sequence's session from now on.
   */
  release(blockIds: readonly number[], hints?: SequenceHints): void;
  /**
   * Holds `blockId` (its reference passing to the holder) as the block `prompt` ended in, for a hand-off
   * of that prompt's KV to another worker (handoff-tails.ts). Absent: the block is released.
   */
  keepHandoffTail?(prompt: readonly number[], blockId: number, root?: number): void;
  /** Takes the block held for exactly `prompt`'s end (its reference passing to the caller), or null. */
  takeHandoffTail?(prompt: readonly number[], root?: number): number | null;
  /** True when a block is held for exactly `prompt`'s end. */
  hasHandoffTail?(prompt: readonly number[], root?: number): boolean;
  /** Lets go of every block held for a hand-off (a sequence alone needs them); true when any was held. */
  releaseHandoffTails?(): boolean;
  /**
   * Lets go of the blocks held for hand-offs past their hold (the scheduler calls it as it plans each
   * step; the counts above only read, so a metrics scrape changes nothing).
   */
  pruneHandoffTails?(): void;
}

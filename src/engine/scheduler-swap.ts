/**
 * Host swap space as the scheduler sees it: a budget in blocks and which sequences hold how much.
 * Only accounting; the worker's runner moves the bytes (kv-swap.ts) when a plan says so.
 */
import type { SchedulerStats, SwapOp } from "./scheduler-types.ts";
import type { Sequence } from "./sequence.ts";

/** Swap-space accounting and counters of one scheduler. */
export class SwapSpace {
  private readonly held = new Map<number, number>();
  private used = 0;
  swapOuts = 0;
  swappedOutBlocks = 0;
  swappedInBlocks = 0;

  /**
   * `readmitBlocks`: the most blocks a waiting sequence can be admitted into (the pool less the
   * watermark). Swapped KV comes back whole, with room for the next token: a victim that has outgrown
   * that could never come back (and, first in the queue, would hold up everyone behind it).
   */
  constructor(readonly totalBlocks: number, private readonly blockSize: number, private readonly readmitBlocks = Infinity) {
    if (!Number.isInteger(totalBlocks) || totalBlocks < 0) throw new RangeError(`Swap space must be a whole number of blocks, got ${totalBlocks}`);
  }

  /** Blocks in use. */
  get usedBlocks(): number {
    return this.used;
  }

  /**
   * Reserves room for `seq`'s computed KV and returns the copy to run, or null when the sequence
   * has nothing computed, the space is full or the KV could not come back (the caller then recomputes).
   */
  swapOut(seq: Sequence): SwapOp | null {
    const blocks = Math.ceil(seq.numComputed / this.blockSize);
    if (blocks === 0 || this.used + blocks > this.totalBlocks) return null;
    if (Math.ceil((seq.numComputed + 1) / this.blockSize) > this.readmitBlocks) return null;
    this.held.set(seq.id, blocks);
    this.used += blocks;
    this.swapOuts++;
    this.swappedOutBlocks += blocks;
    seq.numSwapped = seq.numComputed;
    return { seqId: seq.id, blockTable: seq.blockTable.slice(0, blocks), numTokens: seq.numComputed };
  }

  /** Frees `seq`'s room and returns the copy back into `blockTable` (its leading blocks). */
  swapIn(seq: Sequence, blockTable: readonly number[]): SwapOp {
    const blocks = this.held.get(seq.id) ?? 0;
    const op = { seqId: seq.id, blockTable: blockTable.slice(0, blocks), numTokens: seq.numSwapped };
    this.swappedInBlocks += blocks;
    this.drop(seq);
    return op;
  }

  /** Swap counters and gauges for SchedulerStats. */
  stats(): Pick<SchedulerStats, "swapOuts" | "swappedOutBlocks" | "swappedInBlocks" | "swapUsedBlocks" | "swapTotalBlocks"> {
    const { swapOuts, swappedOutBlocks, swappedInBlocks, used: swapUsedBlocks, totalBlocks: swapTotalBlocks } = this;
    return { swapOuts, swappedOutBlocks, swappedInBlocks, swapUsedBlocks, swapTotalBlocks };
  }

  /** Forgets `seq`'s swapped KV (it finished or was cancelled while swapped out). */
  drop(seq: Sequence): void {
    this.used -= this.held.get(seq.id) ?? 0;
    this.held.delete(seq.id);
    seq.numSwapped = 0;
  }
}

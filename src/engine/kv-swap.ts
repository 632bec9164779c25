/**
 * Moves a preempted sequence's KV between the paged device cache and host memory (swap
 * preemption), with the slot copies of kv-copy.ts.
 */
import type { Backend } from "../backend/types.ts";
import type { PagedKv } from "../model/forward.ts";
import { type HostKv, readSlots, slotsOf, writeSlots } from "./kv-copy.ts";
import type { SwapOp } from "./scheduler-types.ts";

/** Thrown when KV is restored for a sequence that has none saved, or with a different length. */
export class KvSwapError extends Error {
  override name = "KvSwapError";
}

/** Host-side swap store of one worker's paged KV cache. */
export class HostKvSwap {
  private readonly saved = new Map<number, Promise<HostKv>>();

  constructor(private readonly backend: Backend, private readonly kv: PagedKv) {}

  /** Sequences whose KV is held on the host. */
  get size(): number {
    return this.saved.size;
  }

  /**
   * Copies `op`'s slots out of every layer. The gathers are enqueued before this returns, so a
   * forward enqueued afterwards may reuse the blocks; the bytes arrive on the host later.
   */
  save(op: SwapOp): void {
    const done = readSlots(this.backend, this.kv, slotsOf(op.blockTable, op.numTokens, this.kv.blockSize));
    // A failed copy surfaces at restore; keep it from becoming an unhandled rejection meanwhile.
    done.catch(() => {});
    this.saved.set(op.seqId, done);
  }

  /** Writes the saved KV of `op.seqId` into `op`'s slots and forgets it. */
  async restore(op: SwapOp): Promise<void> {
    const pending = this.saved.get(op.seqId);
    if (!pending) throw new KvSwapError(`No swapped KV is held for sequence ${op.seqId}`);
    this.saved.delete(op.seqId);
    const kv = await pending;
    if (kv.numTokens !== op.numTokens) {
      throw new KvSwapError(`Sequence ${op.seqId} swapped out ${kv.numTokens} tokens of KV but ${op.numTokens} are being restored`);
    }
    writeSlots(this.backend, this.kv, slotsOf(op.blockTable, op.numTokens, this.kv.blockSize), kv);
  }

  /** Drops a sequence's saved KV (it ended while swapped out). */
  discard(seqId: number): void {
    this.saved.delete(seqId);
  }
}

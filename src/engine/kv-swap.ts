/**
 * Moves a sequence's KV between the paged device cache and host memory with existing backend ops:
 * a layer's cache [numBlocks, blockSize, kvHeads, headDim] is viewed as rows of one slot each,
 * `gatherRows` + `download` save the sequence's slots, `upload` + `kvWrite` restore them elsewhere.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { PagedKv } from "../model/forward.ts";
import type { SwapOp } from "./scheduler-types.ts";

/** One sequence's KV on the host: per layer, [numTokens, kvHeads * headDim] for K and for V. */
interface SavedKv {
  numTokens: number;
  k: Float32Array[];
  v: Float32Array[];
}

/** Thrown when KV is restored for a sequence that has none saved, or with a different length. */
export class KvSwapError extends Error {
  override name = "KvSwapError";
}

/** Flat cache slots of positions 0..numTokens-1 over a block table. */
export function swapSlots(op: SwapOp, blockSize: number): Int32Array {
  const slots = new Int32Array(op.numTokens);
  for (let p = 0; p < op.numTokens; p++) slots[p] = op.blockTable[Math.floor(p / blockSize)] * blockSize + (p % blockSize);
  return slots;
}

/** Host-side swap store of one worker's paged KV cache. */
export class HostKvSwap {
  private readonly saved = new Map<number, Promise<SavedKv>>();
  private readonly kvHeads: number;
  private readonly headDim: number;

  constructor(private readonly backend: Backend, private readonly kv: PagedKv) {
    const shape = kv.k[0]?.shape ?? [kv.numBlocks, kv.blockSize, 0, 0];
    this.kvHeads = shape[2];
    this.headDim = shape[3];
  }

  /** Sequences whose KV is held on the host. */
  get size(): number {
    return this.saved.size;
  }

  /**
   * Copies `op`'s slots out of every layer. The gathers are enqueued before this returns, so a
   * forward enqueued afterwards may reuse the blocks; the bytes arrive on the host later.
   */
  save(op: SwapOp): void {
    const b = this.backend;
    const rows = this.kv.numBlocks * this.kv.blockSize;
    const width = this.kvHeads * this.headDim;
    const idx = b.upload(swapSlots(op, this.kv.blockSize), [op.numTokens]);
    const gathered: Tensor[] = [];
    for (let l = 0; l < this.kv.k.length; l++) {
      gathered.push(b.gatherRows(b.reshape(this.kv.k[l], [rows, width]), idx));
      gathered.push(b.gatherRows(b.reshape(this.kv.v[l], [rows, width]), idx));
    }
    b.free(idx);
    const done = (async (): Promise<SavedKv> => {
      try {
        const host = await Promise.all(gathered.map((t) => b.download(t) as Promise<Float32Array>));
        return { numTokens: op.numTokens, k: host.filter((_, i) => i % 2 === 0), v: host.filter((_, i) => i % 2 === 1) };
      } finally {
        for (const t of gathered) b.free(t);
      }
    })();
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
    const b = this.backend;
    const shape = [op.numTokens, this.kvHeads, this.headDim];
    const slots = b.upload(swapSlots(op, this.kv.blockSize), [op.numTokens]);
    for (let l = 0; l < this.kv.k.length; l++) {
      const k = b.upload(kv.k[l], shape);
      const v = b.upload(kv.v[l], shape);
      b.kvWrite(k, v, this.kv.k[l], this.kv.v[l], slots);
      b.free(k);
      b.free(v);
    }
    b.free(slots);
  }

  /** Drops a sequence's saved KV (it ended while swapped out). */
  discard(seqId: number): void {
    this.saved.delete(seqId);
  }
}

/**
 * Per-layer paged KV cache allocation and a minimal free-list block allocator, enough for
 * `generate`. The scheduler's prefix-caching block pool lives in kv/.
 */
import type { Backend } from "../backend/types.ts";
import type { ModelConfig } from "../model/config.ts";
import type { PagedKv } from "../model/forward.ts";

/** Default tokens per KV block. */
export const DEFAULT_BLOCK_SIZE = 16;

/** Thrown when a sequence needs more KV blocks than are free. */
export class KvCapacityError extends Error {
  override name = "KvCapacityError";
}

/** Allocates zeroed K and V caches for every layer of `config`. */
export function allocatePagedKv(
  backend: Backend,
  config: ModelConfig,
  numBlocks: number,
  blockSize = DEFAULT_BLOCK_SIZE,
): PagedKv {
  if (!Number.isInteger(numBlocks) || numBlocks <= 0) throw new RangeError(`Invalid KV block count ${numBlocks}`);
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`Invalid KV block size ${blockSize}`);
  const max = backend.info.maxHeadDim;
  if (max !== undefined && config.headDim > max) {
    throw new RangeError(`The ${backend.info.name} backend's attention takes heads of up to ${max} dims; this model's KV heads have ${config.headDim}`);
  }
  const shape = [numBlocks, blockSize, config.numKvHeads, config.headDim];
  const k = [];
  const v = [];
  for (let i = 0; i < config.numLayers; i++) {
    k.push(backend.zeros(shape, "f32"));
    v.push(backend.zeros(shape, "f32"));
  }
  return { k, v, numBlocks, blockSize };
}

/** Frees every layer's caches. */
export function freePagedKv(backend: Backend, kv: PagedKv): void {
  for (const t of [...kv.k, ...kv.v]) backend.free(t);
}

/** Bytes one block occupies across all layers (K and V, f32). */
export function kvBytesPerBlock(config: ModelConfig, blockSize = DEFAULT_BLOCK_SIZE): number {
  return 2 * config.numLayers * blockSize * config.numKvHeads * config.headDim * 4;
}

/** A free list of block ids; blocks are handed out lowest id first. */
export class BlockAllocator {
  private readonly free: number[];

  constructor(readonly numBlocks: number) {
    this.free = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  }

  /** Blocks not currently allocated. */
  get available(): number {
    return this.free.length;
  }

  /** Takes `count` blocks, or throws KvCapacityError without taking any. */
  allocate(count: number): number[] {
    if (count > this.free.length) {
      throw new KvCapacityError(`Need ${count} KV blocks but only ${this.free.length} of ${this.numBlocks} are free`);
    }
    const out: number[] = [];
    for (let i = 0; i < count; i++) out.push(this.free.pop()!);
    return out;
  }

  /** Grows `table` so it covers `tokens` positions of `blockSize`. */
  ensure(table: number[], tokens: number, blockSize: number): void {
    const need = Math.ceil(tokens / blockSize) - table.length;
    if (need > 0) table.push(...this.allocate(need));
  }

  /** Returns blocks to the free list. */
  release(blocks: readonly number[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) this.free.push(blocks[i]);
  }
}

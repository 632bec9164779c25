/**
 * Copies KV between a paged device cache and host memory with existing backend ops: a layer's cache
 * [numBlocks, blockSize, kvHeads, headDim] is viewed as rows of one slot each; `gatherRows` +
 * `download` read slots out, `upload` + `kvWrite` write them in. Swap preemption (kv-swap.ts) and
 * moving a cached prefix between workers (prefix-transfer.ts) both use it.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { PagedKv } from "../model/forward.ts";

/** KV of some cache slots on the host: per layer, [numTokens, kvHeads * headDim] for K and for V. */
export interface HostKv {
  numTokens: number;
  k: Float32Array[];
  v: Float32Array[];
}

/** Flat cache slots of positions 0..numTokens-1 over a block table. */
export function slotsOf(blockTable: readonly number[], numTokens: number, blockSize: number): Int32Array {
  const slots = new Int32Array(numTokens);
  for (let p = 0; p < numTokens; p++) slots[p] = blockTable[Math.floor(p / blockSize)] * blockSize + (p % blockSize);
  return slots;
}

function kvWidth(kv: PagedKv): [heads: number, dim: number] {
  const shape = kv.k[0]?.shape ?? [kv.numBlocks, kv.blockSize, 0, 0];
  return [shape[2], shape[3]];
}

/**
 * Reads `slots` out of every layer. The gathers are enqueued before this returns, so a forward
 * enqueued afterwards may overwrite those slots; the bytes arrive on the host later.
 */
export function readSlots(backend: Backend, kv: PagedKv, slots: Int32Array): Promise<HostKv> {
  const [heads, dim] = kvWidth(kv);
  const rows = kv.numBlocks * kv.blockSize;
  const idx = backend.upload(slots, [slots.length]);
  const gathered: Tensor[] = [];
  for (let l = 0; l < kv.k.length; l++) {
    gathered.push(backend.gatherRows(backend.reshape(kv.k[l], [rows, heads * dim]), idx));
    gathered.push(backend.gatherRows(backend.reshape(kv.v[l], [rows, heads * dim]), idx));
  }
  backend.free(idx);
  return (async (): Promise<HostKv> => {
    try {
      const host = await Promise.all(gathered.map((t) => backend.download(t) as Promise<Float32Array>));
      return { numTokens: slots.length, k: host.filter((_, i) => i % 2 === 0), v: host.filter((_, i) => i % 2 === 1) };
    } finally {
      for (const t of gathered) backend.free(t);
    }
  })();
}

/** Writes `data` (its first `slots.length` tokens, from token `offset`) into `slots` of every layer. */
export function writeSlots(backend: Backend, kv: PagedKv, slots: Int32Array, data: HostKv, offset = 0): void {
  const [heads, dim] = kvWidth(kv);
  const width = heads * dim;
  const n = slots.length;
  const shape = [n, heads, dim];
  const idx = backend.upload(slots, [n]);
  for (let l = 0; l < kv.k.length; l++) {
    const k = backend.upload(data.k[l].subarray(offset * width, (offset + n) * width), shape);
    const v = backend.upload(data.v[l].subarray(offset * width, (offset + n) * width), shape);
    backend.kvWrite(k, v, kv.k[l], kv.v[l], idx);
    backend.free(k);
    backend.free(v);
  }
  backend.free(idx);
}

/** Consecutive blocks' KV as one run (per layer, tokens in order). */
export function concatKv(parts: readonly HostKv[]): HostKv {
  return {
    numTokens: parts.reduce((a, p) => a + p.numTokens, 0),
    k: parts[0].k.map((_, l) => concatF32(parts.map((p) => p.k[l]))),
    v: parts[0].v.map((_, l) => concatF32(parts.map((p) => p.v[l]))),
  };
}

function concatF32(arrays: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(arrays.reduce((a, x) => a + x.length, 0));
  let o = 0;
  for (const a of arrays) {
    out.set(a, o);
    o += a.length;
  }
  return out;
}

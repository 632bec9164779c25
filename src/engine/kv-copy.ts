/**
 * Copies KV between a paged device cache and host memory with existing backend ops: a layer's cache
 * [numBlocks, blockSize, kvHeads, headDim] is viewed as rows of one slot each; `gatherRows` +
 * `download` read slots out, `upload` + `kvWrite` write them in. Swap preemption (kv-swap.ts) and
 * moving a cached prefix between workers (prefix-transfer.ts) both use it.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { PagedKv } from "../model/forward.ts";

/**
 * KV of some cache slots on the host: per layer, [numTokens, kvHeads * headDim] for K and for V, as
 * f32 whatever the cache's dtype. Where a layer's keys and values share one cache (MLA), `v[l]` is
 * the same array as `k[l]`.
 */
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
 * Reads `slots` out of every layer, widened to f32 (an f16 cache's rows are read with `embedding`,
 * which takes any weight dtype; f16 → f32 → f16 is exact, so a round trip loses nothing). A cache
 * shared by keys and values (MLA) is read once: the result's `v[l]` is its `k[l]`. The gathers are
 * enqueued before this returns, so a forward enqueued afterwards may overwrite those slots; the
 * bytes arrive on the host later.
 */
export function readSlots(backend: Backend, kv: PagedKv, slots: Int32Array): Promise<HostKv> {
  const [heads, dim] = kvWidth(kv);
  const rows = kv.numBlocks * kv.blockSize;
  const idx = backend.upload(slots, [slots.length]);
  const gather = (cache: Tensor): Tensor => {
    const table = backend.reshape(cache, [rows, heads * dim]);
    return cache.dtype === "f32" ? backend.gatherRows(table, idx) : backend.embedding(table, idx);
  };
  const gathered: Tensor[] = [];
  for (let l = 0; l < kv.k.length; l++) {
    gathered.push(gather(kv.k[l]));
    if (kv.v[l] !== kv.k[l]) gathered.push(gather(kv.v[l]));
  }
  backend.free(idx);
  return (async (): Promise<HostKv> => {
    try {
      const host = await Promise.all(gathered.map((t) => backend.download(t) as Promise<Float32Array>));
      const k: Float32Array[] = [];
      const v: Float32Array[] = [];
      let i = 0;
      for (let l = 0; l < kv.k.length; l++) {
        k.push(host[i++]);
        v.push(kv.v[l] === kv.k[l] ? k[l] : host[i++]);
      }
      return { numTokens: slots.length, k, v };
    } finally {
      for (const t of gathered) backend.free(t);
    }
  })();
}

/**
 * Writes `data` (its first `slots.length` tokens, from token `offset`) into `slots` of every layer,
 * rounded to the cache's dtype.
 */
export function writeSlots(backend: Backend, kv: PagedKv, slots: Int32Array, data: HostKv, offset = 0): void {
  const [heads, dim] = kvWidth(kv);
  const width = heads * dim;
  const n = slots.length;
  const shape = [n, heads, dim];
  const idx = backend.upload(slots, [n]);
  for (let l = 0; l < kv.k.length; l++) {
    const k = backend.upload(data.k[l].subarray(offset * width, (offset + n) * width), shape);
    // One shared cache takes the keys once (they hold the values).
    const v = kv.v[l] === kv.k[l] ? k : backend.upload(data.v[l].subarray(offset * width, (offset + n) * width), shape);
    backend.kvWrite(k, v, kv.k[l], kv.v[l], idx);
    backend.free(k);
    if (v !== k) backend.free(v);
  }
  backend.free(idx);
}

/** Consecutive blocks' KV as one run (per layer, tokens in order). */
export function concatKv(parts: readonly HostKv[]): HostKv {
  const k = parts[0].k.map((_, l) => concatF32(parts.map((p) => p.k[l])));
  // A shared cache's values are its keys (readSlots): keep them one array.
  const shared = (l: number) => parts.every((p) => p.v[l] === p.k[l]);
  return {
    numTokens: parts.reduce((a, p) => a + p.numTokens, 0),
    k,
    v: parts[0].v.map((_, l) => shared(l) ? k[l] : concatF32(parts.map((p) => p.v[l]))),
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

/**
 * Copies KV between a paged device cache and host memory with existing backend ops: a layer's cache
 * [numBlocks, blockSize, kvHeads, headDim] is viewed as rows of one slot each; `gatherRows` +
 * `download` read slots out, `upload` + `kvWrite` write them in. Swap preemption (kv-swap.ts) and
 * moving a cached prefix between workers (prefix-transfer.ts) both use it.
 */
import { f16BitsToF32Array, f32ArrayToF16Bits } from "../backend/half-float.ts";
import type { Backend, Tensor } from "../backend/types.ts";
import type { PagedKv } from "../model/forward.ts";

/** One layer's K or V on the host: f32 values, or IEEE half bits (HostKv.dtype says which). */
export type HostKvArray = Float32Array | Uint16Array;

/**
 * KV of some cache slots on the host: per layer, [numTokens, kvHeads * headDim] for K and for V, in
 * the cache's dtype — an f16 cache's copies are half bits (`Uint16Array`), half the host memory and
 * half the bytes a peer is sent of f32; an f8_e4m3 cache's are half bits too where f16 holds its values
 * exactly (else f32). Where a layer's keys and values share one cache (MLA),
 * `v[l]` is the same array as `k[l]`.
 */
export type HostKv =
  | { numTokens: number; dtype: "f32"; k: Float32Array[]; v: Float32Array[] }
  | { numTokens: number; dtype: "f16"; k: Uint16Array[]; v: Uint16Array[] };

/** Bytes the host copy holds (a shared cache's array counted once). */
export function hostKvBytes(kv: HostKv): number {
  let bytes = 0;
  for (const a of new Set<HostKvArray>([...kv.k, ...kv.v])) bytes += a.byteLength;
  return bytes;
}

/** The first `numTokens` tokens of `kv` (views, not copies). */
export function headOfKv(kv: HostKv, numTokens: number): HostKv {
  const cut = <T extends HostKvArray>(a: T) => a.subarray(0, (a.length / kv.numTokens) * numTokens) as T;
  // A shared cache's values stay its keys' array.
  const part = <T extends HostKvArray>(x: { k: T[]; v: T[] }) => {
    const k = x.k.map(cut);
    return { k, v: x.v.map((a, l) => (a === x.k[l] ? k[l] : cut(a))) };
  };
  return kv.dtype === "f32" ? { numTokens, dtype: "f32", ...part(kv) } : { numTokens, dtype: "f16", ...part(kv) };
}

/** Flat cache slots of positions 0..numTokens-1 over a block table. */
export function slotsOf(blockTable: readonly number[], numTokens: number, blockSize: number): Int32Array {
  const slots = new Int32Array(numTokens);
  for (let p = 0; p < numTokens; p++) slots[p] = blockTable[Math.floor(p / blockSize)] * blockSize + (p % blockSize);
  return slots;
}

/** Layer `l`'s KV heads and head size (Gemma 4's sliding layers' differ from its others'). */
function kvWidth(kv: PagedKv, l = 0): [heads: number, dim: number] {
  const shape = kv.k[l]?.shape ?? [kv.numBlocks, kv.blockSize, 0, 0];
  return [shape[2], shape[3]];
}

/**
 * Reads `slots` out of every layer in the cache's dtype (an f16 cache's rows are gathered with
 * `embedding`, which takes any weight dtype and gives f32, then packed back to half bits on the host:
 * f16 → f32 → f16 is exact, so a round trip loses nothing). A cache shared by keys and values (MLA)
 * is read once: the result's `v[l]` is its `k[l]`. The gathers are enqueued before this returns, so
 * a forward enqueued afterwards may overwrite those slots; the bytes arrive on the host later.
 */
export function readSlots(backend: Backend, kv: PagedKv, slots: Int32Array): Promise<HostKv> {
  const rows = kv.numBlocks * kv.blockSize;
  const widthOf = (cache: Tensor) => cache.shape[2] * cache.shape[3];
  if ((kv.dtype ?? "f32") === "f16" && backend.downloadHalfRows && kv.k.every((c) => widthOf(c) % 2 === 0)) return readHalfSlots(backend, kv, slots, rows);
  const idx = backend.upload(slots, [slots.length]);
  const gather = (cache: Tensor): Tensor => {
    const table = backend.reshape(cache, [rows, widthOf(cache)]);
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
      const numTokens = slots.length;
      if ((kv.dtype ?? "f32") === "f32") return { numTokens, dtype: "f32", ...perLayer(kv, host) };
      // An f8_e4m3 cache's rows come back as the values its blocks hold (written back, they encode to
      // the same values: its power-of-two scales make the encoding idempotent, quant-blocks-fp8.ts):
      // as half bits when f16 holds every one exactly (4 significant bits within f16's range, which
      // KV values keep to), else as f32.
      if (kv.dtype === "f8_e4m3") {
        const halves = exactHalves(host);
        return halves ? { numTokens, dtype: "f16", ...perLayer(kv, halves) } : { numTokens, dtype: "f32", ...perLayer(kv, host) };
      }
      return { numTokens, dtype: "f16", ...perLayer(kv, host.map((a) => f32ArrayToF16Bits(a))) };
    } finally {
      for (const t of gathered) backend.free(t);
    }
  })();
}

/** `arrays` as half bits when every value survives the round trip through f16 exactly, else undefined. */
function exactHalves(arrays: readonly Float32Array[]): Uint16Array[] | undefined {
  const out: Uint16Array[] = [];
  for (const a of arrays) {
    const halves = f32ArrayToF16Bits(a);
    const back = f16BitsToF32Array(halves);
    for (let i = 0; i < a.length; i++) if (!Object.is(back[i], a[i])) return undefined;
    out.push(halves);
  }
  return out;
}

/** Arrays read layer by layer (keys, then values unless the layer's cache is shared) as keys and values per layer. */
function perLayer<T extends HostKvArray>(kv: PagedKv, arrays: readonly T[]): { k: T[]; v: T[] } {
  const k: T[] = [];
  const v: T[] = [];
  let i = 0;
  for (let l = 0; l < kv.k.length; l++) {
    k.push(arrays[i++]);
    v.push(kv.v[l] === kv.k[l] ? k[l] : arrays[i++]);
  }
  return { k, v };
}

/** readSlots of an f16 cache on a backend that downloads half bits (Backend.downloadHalfRows): no f32 on the way. */
async function readHalfSlots(backend: Backend, kv: PagedKv, slots: Int32Array, rows: number): Promise<HostKv> {
  const idx = backend.upload(slots, [slots.length]);
  try {
    const read = (cache: Tensor) => backend.downloadHalfRows!(backend.reshape(cache, [rows, cache.shape[2] * cache.shape[3]]), idx);
    const pending: Promise<Uint16Array>[] = [];
    for (let l = 0; l < kv.k.length; l++) {
      pending.push(read(kv.k[l]));
      if (kv.v[l] !== kv.k[l]) pending.push(read(kv.v[l]));
    }
    return { numTokens: slots.length, dtype: "f16", ...perLayer(kv, await Promise.all(pending)) };
  } finally {
    backend.free(idx);
  }
}

/**
 * Writes `data` (its first `slots.length` tokens, from token `offset`) into `slots` of every layer,
 * rounded to the cache's dtype (half bits are widened to f32 for the upload: exact; into an f16 cache
 * on a backend with `writeHalfRows` they go as they are).
 */
export function writeSlots(backend: Backend, kv: PagedKv, slots: Int32Array, data: HostKv, offset = 0): void {
  const n = slots.length;
  const idx = backend.upload(slots, [n]);
  const widthOf = (l: number) => kvWidth(kv, l)[0] * kvWidth(kv, l)[1];
  if (data.dtype === "f16" && (kv.dtype ?? "f32") === "f16" && backend.writeHalfRows && kv.k.every((_, l) => widthOf(l) % 2 === 0)) {
    // Half bits into an f16 cache, word for word: no f32 on the way.
    const tableRows = kv.numBlocks * kv.blockSize;
    for (let l = 0; l < kv.k.length; l++) {
      const width = widthOf(l);
      backend.writeHalfRows(backend.reshape(kv.k[l], [tableRows, width]), idx, data.k[l].subarray(offset * width, (offset + n) * width));
      if (kv.v[l] !== kv.k[l]) backend.writeHalfRows(backend.reshape(kv.v[l], [tableRows, width]), idx, data.v[l].subarray(offset * width, (offset + n) * width));
    }
    backend.free(idx);
    return;
  }
  const rows = (a: HostKvArray, width: number) => {
    const part = a.subarray(offset * width, (offset + n) * width);
    return part instanceof Float32Array ? part : f16BitsToF32Array(part);
  };
  for (let l = 0; l < kv.k.length; l++) {
    const [heads, dim] = kvWidth(kv, l);
    const width = heads * dim;
    const shape = [n, heads, dim];
    const k = backend.upload(rows(data.k[l], width), shape);
    // One shared cache takes the keys once (they hold the values).
    const v = kv.v[l] === kv.k[l] ? k : backend.upload(rows(data.v[l], width), shape);
    backend.kvWrite(k, v, kv.k[l], kv.v[l], idx);
    backend.free(k);
    if (v !== k) backend.free(v);
  }
  backend.free(idx);
}

/**
 * Consecutive blocks' KV as one run (per layer, tokens in order), in the parts' dtype; parts of
 * different dtypes (none arise within one worker) are joined as f32.
 */
export function concatKv(parts: readonly HostKv[]): HostKv {
  const numTokens = parts.reduce((a, p) => a + p.numTokens, 0);
  if (parts.every((p) => p.dtype === "f16")) {
    const halves = parts as readonly Extract<HostKv, { dtype: "f16" }>[];
    return { numTokens, dtype: "f16", ...concatLayers(halves, (n) => new Uint16Array(n)) };
  }
  return { numTokens, dtype: "f32", ...concatLayers(parts.map(asF32), (n) => new Float32Array(n)) };
}

/** `kv` with f32 arrays (half bits widened; a shared cache stays one array). */
export function asF32(kv: HostKv): Extract<HostKv, { dtype: "f32" }> {
  if (kv.dtype === "f32") return kv;
  const k = kv.k.map((a) => f16BitsToF32Array(a));
  return { numTokens: kv.numTokens, dtype: "f32", k, v: kv.v.map((a, l) => (a === kv.k[l] ? k[l] : f16BitsToF32Array(a))) };
}

function concatLayers<T extends HostKvArray>(parts: readonly { k: T[]; v: T[] }[], alloc: (n: number) => T): { k: T[]; v: T[] } {
  const join = (arrays: readonly T[]): T => {
    const out = alloc(arrays.reduce((a, x) => a + x.length, 0));
    let o = 0;
    for (const a of arrays) {
      // Both kinds hold numbers; `set` copies within one kind here.
      (out as HostKvArray).set(a as never, o);
      o += a.length;
    }
    return out;
  };
  const k = parts[0].k.map((_, l) => join(parts.map((p) => p.k[l])));
  // A shared cache's values are its keys (readSlots): keep them one array.
  const shared = (l: number) => parts.every((p) => p.v[l] === p.k[l]);
  return { k, v: parts[0].v.map((_, l) => (shared(l) ? k[l] : join(parts.map((p) => p.v[l])))) };
}

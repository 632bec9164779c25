/**
 * Reference paged KV write and paged causal attention with GQA over a ragged batch.
 */
import { type AttentionBatch, BackendShapeError } from "../types.ts";
import { f16ToF32, f32ToF16 } from "../half-float.ts";
import { checkAttentionIndices, checkIndexRange, expectAttentionOptions } from "../shape-checks.ts";
import { softmaxRow } from "./elementwise.ts";
import { asRef, expectRank, f32Tensor, fmt, type RefTensor } from "./storage.ts";

function expectCaches(kCache: RefTensor, vCache: RefTensor): [number, number, number, number] {
  expectRank(kCache, 4, "key cache", ["f32", "f16"]);
  expectRank(vCache, 4, "value cache", ["f32", "f16"]);
  if (kCache.shape.some((d, i) => d !== vCache.shape[i]) || kCache.dtype !== vCache.dtype) {
    throw new BackendShapeError(
      `Key cache ${fmt(kCache.shape)} ${kCache.dtype} and value cache ${fmt(vCache.shape)} ${vCache.dtype} differ`,
    );
  }
  const [numBlocks, blockSize, kvHeads, headDim] = kCache.shape;
  return [numBlocks, blockSize, kvHeads, headDim];
}

/** Writes k, v [n, kvHeads, headDim] into the caches at flat slots [n]. Mutates the caches. */
export function kvWrite(k: RefTensor, v: RefTensor, kCache: RefTensor, vCache: RefTensor, slots: RefTensor): void {
  const [numBlocks, blockSize, kvHeads, headDim] = expectCaches(kCache, vCache);
  expectRank(k, 3, "kvWrite keys", ["f32"]);
  expectRank(v, 3, "kvWrite values", ["f32"]);
  expectRank(slots, 1, "kvWrite slots", ["i32"]);
  if (kCache.storage === vCache.storage && k.storage !== v.storage) {
    throw new BackendShapeError("kvWrite into one cache shared by keys and values needs the values to be the keys");
  }
  const n = slots.shape[0];
  for (const [t, what] of [[k, "keys"], [v, "values"]] as const) {
    if (t.shape[0] !== n || t.shape[1] !== kvHeads || t.shape[2] !== headDim) {
      throw new BackendShapeError(
        `kvWrite ${what} ${fmt(t.shape)} do not fit slots ${fmt(slots.shape)} and cache ${fmt(kCache.shape)}`,
      );
    }
  }
  const row = kvHeads * headDim;
  const capacity = numBlocks * blockSize;
  const ks = k.f32, vs = v.f32, kc = kCache.f32, vc = vCache.f32, sl = slots.i32;
  // Every slot is checked before any row is written, so a refused call leaves the caches as they were.
  checkIndexRange(sl, capacity, "KV slot");
  for (let i = 0; i < n; i++) {
    const s = sl[i];
    kc.set(ks.subarray(i * row, (i + 1) * row), s * row);
    vc.set(vs.subarray(i * row, (i + 1) * row), s * row);
    if (kCache.dtype === "f16") {
      // Round to nearest even as ggml's f32 → f16 copy does: from ±65520 on a value is ±inf, NaN stays NaN.
      for (const c of kc === vc ? [kc] : [kc, vc]) for (let j = s * row; j < (s + 1) * row; j++) c[j] = f16ToF32(f32ToF16(c[j]));
    }
  }
}

/** Paged causal attention, with an optional sliding window and sinks (see Backend.pagedAttention). */
export function pagedAttention(
  q: RefTensor,
  kCache: RefTensor,
  vCache: RefTensor,
  batch: AttentionBatch,
  scale: number,
  options?: { window?: number; sinks?: RefTensor },
): RefTensor {
  const [numBlocks, blockSize, kvHeads, headDim] = expectCaches(kCache, vCache);
  expectRank(q, 3, "attention queries", ["f32"]);
  const [n, heads, qDim] = q.shape;
  if (qDim !== headDim || heads % kvHeads !== 0) {
    throw new BackendShapeError(`Attention queries ${fmt(q.shape)} do not fit cache ${fmt(kCache.shape)}`);
  }
  const window = expectAttentionOptions(options, heads);
  const sinks = options?.sinks?.f32;
  const seqT = asRef(batch.tokenSeq, "tokenSeq");
  const posT = asRef(batch.tokenPos, "tokenPos");
  const tablesT = asRef(batch.blockTables, "blockTables");
  expectRank(seqT, 1, "tokenSeq", ["i32"]);
  expectRank(posT, 1, "tokenPos", ["i32"]);
  expectRank(tablesT, 2, "blockTables", ["i32"]);
  if (seqT.shape[0] !== n || posT.shape[0] !== n) {
    throw new BackendShapeError(`tokenSeq ${fmt(seqT.shape)} and tokenPos ${fmt(posT.shape)} must have ${n} rows`);
  }
  const [numSeqs, maxBlocks] = tablesT.shape;
  const group = heads / kvHeads;
  const row = kvHeads * headDim;
  const qs = q.f32, kc = kCache.f32, vc = vCache.f32;
  const seqs = seqT.i32, poss = posT.i32, tables = tablesT.i32;
  checkAttentionIndices(seqs, poss, tables, { numSeqs, maxBlocks, blockSize, numBlocks, maxContext: batch.maxContext, window });
  const out = new Float32Array(n * heads * headDim);
  for (let t = 0; t < n; t++) {
    const seq = seqs[t];
    const pos = poss[t];
    // Positions first..pos are visible; only their blocks are read.
    const first = window > 0 ? Math.max(0, pos - window + 1) : 0;
    const len = pos + 1 - first;
    // Base offset (in floats) of each visible position's KV row.
    const rowBase = new Int32Array(len);
    for (let i = 0; i < len; i++) {
      const p = first + i;
      const block = tables[seq * maxBlocks + Math.floor(p / blockSize)];
      rowBase[i] = (block * blockSize + (p % blockSize)) * row;
    }
    // Query heads that share a KV head go four at a time (the rest two, then one), each K and V row read once for them;
    // every head's dots and sums keep their own order, so each output has the bits of one head alone.
    for (let g = 0; g < kvHeads; g++) {
      const kvOff = g * headDim;
      let h = g * group;
      const end = h + group;
      for (; h + 4 <= end; h += 4) attendFour(qs, kc, vc, out, rowBase, len, (t * heads + h) * headDim, kvOff, headDim, scale, sinks, h);
      for (; h + 2 <= end; h += 2) attendTwo(qs, kc, vc, out, rowBase, len, (t * heads + h) * headDim, kvOff, headDim, scale, sinks, h);
      for (; h < end; h++) attendOne(qs, kc, vc, out, rowBase, len, (t * heads + h) * headDim, kvOff, headDim, scale, sinks?.[h]);
    }
  }
  return f32Tensor(out, q.shape);
}

/** One query head (its row at `qb`) over the visible positions' K and V rows (`rowBase` + `kvOff`). */
function attendOne(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, len: number,
  qb: number, kvOff: number, headDim: number, scale: number, sink: number | undefined,
): void {
  const scores = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const kb = rowBase[i] + kvOff;
    let dot = 0;
    for (let d = 0; d < headDim; d++) dot += qs[qb + d] * kc[kb + d];
    scores[i] = dot;
  }
  const weights = softmaxRow(scores, 0, len, scale, sink);
  // Position by position, each V row read along its length; each dimension sums its positions in order, in f64.
  const acc = new Float64Array(headDim);
  for (let i = 0; i < len; i++) {
    const w = weights[i];
    const vb = rowBase[i] + kvOff;
    for (let d = 0; d < headDim; d++) acc[d] += w * vc[vb + d];
  }
  for (let d = 0; d < headDim; d++) out[qb + d] = acc[d];
}

/** Four query heads h..h+3 of one token (rows from `qb`, `headDim` apart) that share a KV head: {@link attendOne} for each. */
function attendFour(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, len: number,
  qb: number, kvOff: number, headDim: number, scale: number, sinks: Float32Array | undefined, h: number,
): void {
  const q1 = qb + headDim, q2 = q1 + headDim, q3 = q2 + headDim;
  const s0 = new Float64Array(len), s1 = new Float64Array(len), s2 = new Float64Array(len), s3 = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const kb = rowBase[i] + kvOff;
    let d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (let d = 0; d < headDim; d++) {
      const kv = kc[kb + d];
      d0 += qs[qb + d] * kv;
      d1 += qs[q1 + d] * kv;
      d2 += qs[q2 + d] * kv;
      d3 += qs[q3 + d] * kv;
    }
    s0[i] = d0;
    s1[i] = d1;
    s2[i] = d2;
    s3[i] = d3;
  }
  const w0 = softmaxRow(s0, 0, len, scale, sinks?.[h]), w1 = softmaxRow(s1, 0, len, scale, sinks?.[h + 1]);
  const w2 = softmaxRow(s2, 0, len, scale, sinks?.[h + 2]), w3 = softmaxRow(s3, 0, len, scale, sinks?.[h + 3]);
  const a0 = new Float64Array(headDim), a1 = new Float64Array(headDim), a2 = new Float64Array(headDim), a3 = new Float64Array(headDim);
  for (let i = 0; i < len; i++) {
    const x0 = w0[i], x1 = w1[i], x2 = w2[i], x3 = w3[i];
    const vb = rowBase[i] + kvOff;
    for (let d = 0; d < headDim; d++) {
      const v = vc[vb + d];
      a0[d] += x0 * v;
      a1[d] += x1 * v;
      a2[d] += x2 * v;
      a3[d] += x3 * v;
    }
  }
  for (let d = 0; d < headDim; d++) {
    out[qb + d] = a0[d];
    out[q1 + d] = a1[d];
    out[q2 + d] = a2[d];
    out[q3 + d] = a3[d];
  }
}

/** Two query heads h, h+1 of one token that share a KV head (a group of two, or what four left): {@link attendOne} for each. */
function attendTwo(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, len: number,
  qb: number, kvOff: number, headDim: number, scale: number, sinks: Float32Array | undefined, h: number,
): void {
  const q1 = qb + headDim;
  const s0 = new Float64Array(len), s1 = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const kb = rowBase[i] + kvOff;
    let d0 = 0, d1 = 0;
    for (let d = 0; d < headDim; d++) {
      const kv = kc[kb + d];
      d0 += qs[qb + d] * kv;
      d1 += qs[q1 + d] * kv;
    }
    s0[i] = d0;
    s1[i] = d1;
  }
  const w0 = softmaxRow(s0, 0, len, scale, sinks?.[h]), w1 = softmaxRow(s1, 0, len, scale, sinks?.[h + 1]);
  const a0 = new Float64Array(headDim), a1 = new Float64Array(headDim);
  for (let i = 0; i < len; i++) {
    const x0 = w0[i], x1 = w1[i];
    const vb = rowBase[i] + kvOff;
    for (let d = 0; d < headDim; d++) {
      const v = vc[vb + d];
      a0[d] += x0 * v;
      a1[d] += x1 * v;
    }
  }
  for (let d = 0; d < headDim; d++) {
    out[qb + d] = a0[d];
    out[q1 + d] = a1[d];
  }
}

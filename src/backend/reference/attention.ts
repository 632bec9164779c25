/**
 * Reference paged KV write and paged causal attention with GQA over a ragged batch.
 */
import { type AttentionBatch, BackendShapeError, type RopeSpec } from "../types.ts";
import { rope } from "./linear.ts";
import { f16ToF32, f32ToF16 } from "../half-float.ts";
import { fp8KvFits, roundToFp8Blocks } from "../quant-blocks-fp8.ts";

/** The KV cache dtypes the reference takes (f16 and f8_e4m3 held as f32, rounded as they are written). */
const KV_DTYPES = ["f32", "f16", "f8_e4m3"] as const;
import { attentionSoftcap, checkAttentionIndices, checkIndexRange, expectAttentionOptions } from "../shape-checks.ts";
import { softmaxRow } from "./elementwise.ts";
import { asRef, expectRank, f32Tensor, fmt, type RefTensor } from "./storage.ts";

function expectCaches(kCache: RefTensor, vCache: RefTensor): [number, number, number, number] {
  expectRank(kCache, 4, "key cache", KV_DTYPES);
  expectRank(vCache, 4, "value cache", KV_DTYPES);
  if (kCache.shape.some((d, i) => d !== vCache.shape[i]) || kCache.dtype !== vCache.dtype) {
    throw new BackendShapeError(
      `Key cache ${fmt(kCache.shape)} ${kCache.dtype} and value cache ${fmt(vCache.shape)} ${vCache.dtype} differ`,
    );
  }
  const [numBlocks, blockSize, kvHeads, headDim] = kCache.shape;
  if (kCache.dtype === "f8_e4m3" && !fp8KvFits(kvHeads, headDim)) {
    throw new BackendShapeError(`An f8_e4m3 KV cache needs rows of whole 32-value blocks and heads of a multiple of 4 dims, got cache ${fmt(kCache.shape)}`);
  }
  return [numBlocks, blockSize, kvHeads, headDim];
}

/**
 * rope(q) in place, and kvWrite of rope(k) and v (Backend.rotateAndWriteKv): the same values as the
 * three ops one after another. Mutates q and the caches.
 */
export function rotateAndWriteKv(
  q: RefTensor, k: RefTensor, v: RefTensor, positions: RefTensor, spec: RopeSpec, kCache: RefTensor, vCache: RefTensor, slots: RefTensor,
): void {
  if (kCache === vCache) throw new BackendShapeError("rotateAndWriteKv needs separate key and value caches");
  const factors = spec.freqFactors === undefined ? undefined : asRef(spec.freqFactors, "rope freqFactors");
  const qr = rope(q, positions, spec.theta, spec.layout, spec.rotaryDim, factors);
  const kr = rope(k, positions, spec.theta, spec.layout, spec.rotaryDim, factors);
  if (q.shape[0] !== k.shape[0] || q.shape[2] !== k.shape[2]) {
    throw new BackendShapeError(`rotateAndWriteKv queries ${fmt(q.shape)} do not fit keys ${fmt(k.shape)}`);
  }
  kvWrite(kr, v, kCache, vCache, slots);
  q.f32.set(qr.f32);
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
    } else if (kCache.dtype === "f8_e4m3") {
      // Each 32 values of the row as their f8_e4m3 block holds them.
      for (const c of kc === vc ? [kc] : [kc, vc]) roundToFp8Blocks(c, s * row, row);
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
  options?: { window?: number; sinks?: RefTensor; softcap?: number },
): RefTensor {
  const [numBlocks, blockSize, kvHeads, headDim] = expectCaches(kCache, vCache);
  expectRank(q, 3, "attention queries", ["f32"]);
  const [n, heads, qDim] = q.shape;
  if (qDim !== headDim || heads % kvHeads !== 0) {
    throw new BackendShapeError(`Attention queries ${fmt(q.shape)} do not fit cache ${fmt(kCache.shape)}`);
  }
  const window = expectAttentionOptions(options, heads);
  const cap = attentionSoftcap(options);
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
  const firstOf = (pos: number) => (window > 0 ? Math.max(0, pos - window + 1) : 0);
  for (let t = 0; t < n;) {
    // A run: tokens of one sequence at non-decreasing positions that all see from the same first
    // position (a prefill chunk without a window cut). Its tokens' visible rows are prefixes of its last
    // token's, so the row offsets are found once, and query rows of several tokens share each K and V read.
    const seq = seqs[t];
    const first = firstOf(poss[t]);
    let r = 1;
    while (t + r < n && seqs[t + r] === seq && poss[t + r] >= poss[t + r - 1] && firstOf(poss[t + r]) === first) r++;
    const maxLen = poss[t + r - 1] + 1 - first;
    // Base offset (in floats) of each visible position's KV row; only the visible blocks are read.
    const rowBase = new Int32Array(maxLen);
    for (let i = 0; i < maxLen; i++) {
      const p = first + i;
      const block = tables[seq * maxBlocks + Math.floor(p / blockSize)];
      rowBase[i] = (block * blockSize + (p % blockSize)) * row;
    }
    // The run's (token, query head) pairs of each KV group, token by token, four at a time (then two,
    // then one): each K and V row is read once for the four. Every head keeps its own dots and sums in
    // their own order, so each output has the bits of that token's head computed alone.
    const pairs = r * group;
    const lenOf = (x: number) => poss[t + Math.floor(x / group)] + 1 - first;
    for (let g = 0; g < kvHeads; g++) {
      const kvOff = g * headDim;
      // Pair x is token t + ⌊x / group⌋ with the group's head x mod group.
      const qbOf = (x: number) => ((t + Math.floor(x / group)) * heads + g * group + (x % group)) * headDim;
      const sinkOf = (x: number) => sinks?.[g * group + (x % group)];
      let x = 0;
      for (; x + 4 <= pairs; x += 4) {
        attendFour(
          qs, kc, vc, out, rowBase, kvOff, headDim, scale, cap, qbOf(x), qbOf(x + 1), qbOf(x + 2), qbOf(x + 3),
          lenOf(x), lenOf(x + 1), lenOf(x + 2), lenOf(x + 3), sinkOf(x), sinkOf(x + 1), sinkOf(x + 2), sinkOf(x + 3),
        );
      }
      for (; x + 2 <= pairs; x += 2) attendTwo(qs, kc, vc, out, rowBase, kvOff, headDim, scale, cap, qbOf(x), qbOf(x + 1), lenOf(x), lenOf(x + 1), sinkOf(x), sinkOf(x + 1));
      for (; x < pairs; x++) attendOne(qs, kc, vc, out, rowBase, lenOf(x), qbOf(x), kvOff, headDim, scale, cap, sinkOf(x));
    }
    t += r;
  }
  return f32Tensor(out, q.shape);
}

/** One query row (at `qb`) over the first `len` visible positions' K and V rows (`rowBase` + `kvOff`). */
function attendOne(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, len: number,
  qb: number, kvOff: number, headDim: number, scale: number, cap: number, sink: number | undefined,
): void {
  const scores = new Float64Array(len);
  for (let i = 0; i < len; i++) {
    const kb = rowBase[i] + kvOff;
    let dot = 0;
    for (let d = 0; d < headDim; d++) dot += qs[qb + d] * kc[kb + d];
    scores[i] = dot;
  }
  capScores(scores, scale, cap);
  // Position by position, each V row read along its length; each dimension sums its positions in order, in f64.
  const acc = new Float64Array(headDim);
  addTail(vc, rowBase, kvOff, headDim, softmaxRow(scores, 0, len, scale, sink), acc, 0, len);
  for (let d = 0; d < headDim; d++) out[qb + d] = acc[d];
}

/**
 * Soft-caps dot products in place (AttentionOptions.softcap; nothing for 0): the softmax scales them by
 * `scale`, so each becomes cap · tanh(dot · scale / cap) / scale.
 */
function capScores(dots: Float64Array, scale: number, cap: number): void {
  if (cap === 0) return;
  for (let i = 0; i < dots.length; i++) dots[i] = (cap * Math.tanh((dots[i] * scale) / cap)) / scale;
}

/** Adds positions from..to-1 of V, weighted by `w`, to `acc` in order (a whole row, or its positions past another's). */
function addTail(vc: Float32Array, rowBase: Int32Array, kvOff: number, headDim: number, w: Float64Array, acc: Float64Array, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    const x = w[i];
    const vb = rowBase[i] + kvOff;
    for (let d = 0; d < headDim; d++) acc[d] += x * vc[vb + d];
  }
}

/**
 * Four query rows that share a KV head ({@link attendOne} for each): heads of one token, or of
 * consecutive tokens of a run, with lengths l0 ≤ l1 ≤ l2 ≤ l3. The dots run to l3 for all four (each
 * row's softmax reads only its own length); the V sums share positions below l0, then each row adds
 * the rest of its own.
 */
function attendFour(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, kvOff: number, headDim: number, scale: number, cap: number,
  q0: number, q1: number, q2: number, q3: number, l0: number, l1: number, l2: number, l3: number,
  k0: number | undefined, k1: number | undefined, k2: number | undefined, k3: number | undefined,
): void {
  const s0 = new Float64Array(l3), s1 = new Float64Array(l3), s2 = new Float64Array(l3), s3 = new Float64Array(l3);
  for (let i = 0; i < l3; i++) {
    const kb = rowBase[i] + kvOff;
    let d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (let d = 0; d < headDim; d++) {
      const kv = kc[kb + d];
      d0 += qs[q0 + d] * kv;
      d1 += qs[q1 + d] * kv;
      d2 += qs[q2 + d] * kv;
      d3 += qs[q3 + d] * kv;
    }
    s0[i] = d0;
    s1[i] = d1;
    s2[i] = d2;
    s3[i] = d3;
  }
  for (const x of [s0, s1, s2, s3]) capScores(x, scale, cap);
  const w0 = softmaxRow(s0, 0, l0, scale, k0), w1 = softmaxRow(s1, 0, l1, scale, k1);
  const w2 = softmaxRow(s2, 0, l2, scale, k2), w3 = softmaxRow(s3, 0, l3, scale, k3);
  const a0 = new Float64Array(headDim), a1 = new Float64Array(headDim), a2 = new Float64Array(headDim), a3 = new Float64Array(headDim);
  for (let i = 0; i < l0; i++) {
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
  addTail(vc, rowBase, kvOff, headDim, w1, a1, l0, l1);
  addTail(vc, rowBase, kvOff, headDim, w2, a2, l0, l2);
  addTail(vc, rowBase, kvOff, headDim, w3, a3, l0, l3);
  for (let d = 0; d < headDim; d++) {
    out[q0 + d] = a0[d];
    out[q1 + d] = a1[d];
    out[q2 + d] = a2[d];
    out[q3 + d] = a3[d];
  }
}

/** Two query rows that share a KV head, lengths l0 ≤ l1: {@link attendFour} for two. */
function attendTwo(
  qs: Float32Array, kc: Float32Array, vc: Float32Array, out: Float32Array, rowBase: Int32Array, kvOff: number, headDim: number, scale: number, cap: number,
  q0: number, q1: number, l0: number, l1: number, k0: number | undefined, k1: number | undefined,
): void {
  const s0 = new Float64Array(l1), s1 = new Float64Array(l1);
  for (let i = 0; i < l1; i++) {
    const kb = rowBase[i] + kvOff;
    let d0 = 0, d1 = 0;
    for (let d = 0; d < headDim; d++) {
      const kv = kc[kb + d];
      d0 += qs[q0 + d] * kv;
      d1 += qs[q1 + d] * kv;
    }
    s0[i] = d0;
    s1[i] = d1;
  }
  for (const x of [s0, s1]) capScores(x, scale, cap);
  const w0 = softmaxRow(s0, 0, l0, scale, k0), w1 = softmaxRow(s1, 0, l1, scale, k1);
  const a0 = new Float64Array(headDim), a1 = new Float64Array(headDim);
  for (let i = 0; i < l0; i++) {
    const x0 = w0[i], x1 = w1[i];
    const vb = rowBase[i] + kvOff;
    for (let d = 0; d < headDim; d++) {
      const v = vc[vb + d];
      a0[d] += x0 * v;
      a1[d] += x1 * v;
    }
  }
  addTail(vc, rowBase, kvOff, headDim, w1, a1, l0, l1);
  for (let d = 0; d < headDim; d++) {
    out[q0 + d] = a0[d];
    out[q1 + d] = a1[d];
  }
}

/**
 * Reference row-wise and elementwise ops: embedding gather, row gather, rmsnorm, silu·mul, add,
 * softmax, argmax, scatter-add, token masks. Reductions accumulate in f64.
 */
import { BackendShapeError, MASKED_LOGIT, WEIGHT_DTYPES } from "../types.ts";
import { expectConcatColumnsShapes, expectLayerNormShapes, expectRmsnormShapes, expectMaskShapes, expectRepeatShapes, expectSampledPenaltyShapes, expectSliceColumnsShapes, expectSoftcap } from "../shape-checks.ts";
import {
  expectF32,
  expectRank,
  expectSameShape,
  f32Tensor,
  fmt,
  i32Tensor,
  type RefTensor,
  rowsOf,
} from "./storage.ts";


/** Copies rows `idx[i]` of a [rows, d] matrix into a new [m, d] f32 tensor. */
function gather(src: Float32Array, rows: number, d: number, idx: Int32Array, what: string): RefTensor {
  const out = new Float32Array(idx.length * d);
  for (let i = 0; i < idx.length; i++) {
    const r = idx[i];
    if (r < 0 || r >= rows) throw new RangeError(`${what} ${r} at position ${i} is outside 0..${rows - 1}`);
    out.set(src.subarray(r * d, (r + 1) * d), i * d);
  }
  return f32Tensor(out, [idx.length, d]);
}

/** out[i, :] = table[ids[i], :]. */
export function embedding(table: RefTensor, ids: RefTensor): RefTensor {
  expectRank(table, 2, "embedding table", WEIGHT_DTYPES);
  expectRank(ids, 1, "embedding ids", ["i32"]);
  const [vocab, d] = table.shape;
  return gather(table.f32, vocab, d, ids.i32, "Token id");
}

/** out[i, :] = x[idx[i], :]. */
export function gatherRows(x: RefTensor, idx: RefTensor): RefTensor {
  expectRank(x, 2, "gatherRows input", ["f32"]);
  expectRank(idx, 1, "gatherRows indices", ["i32"]);
  const [n, d] = x.shape;
  return gather(x.f32, n, d, idx.i32, "Row index");
}

/** Columns start..start+width-1 of the last dim, copied. */
export function sliceColumns(x: RefTensor, start: number, width: number): RefTensor {
  const { rows, cols, shape } = expectSliceColumnsShapes(x, start, width);
  const out = new Float32Array(rows * width);
  for (let r = 0; r < rows; r++) out.set(x.f32.subarray(r * cols + start, r * cols + start + width), r * width);
  return f32Tensor(out, shape);
}

/** a and b side by side along the last dim. */
export function concatColumns(a: RefTensor, b: RefTensor): RefTensor {
  const { rows, colsA, colsB, shape } = expectConcatColumnsShapes(a, b);
  const w = colsA + colsB;
  const out = new Float32Array(rows * w);
  for (let r = 0; r < rows; r++) {
    out.set(a.f32.subarray(r * colsA, (r + 1) * colsA), r * w);
    out.set(b.f32.subarray(r * colsB, (r + 1) * colsB), r * w + colsA);
  }
  return f32Tensor(out, shape);
}

/** x / sqrt(mean(x²) + eps) * weight over the last dim; a weight [g, d] gives row r its row r mod g (Backend.rmsnorm). */
export function rmsnorm(x: RefTensor, weight: RefTensor, eps: number): RefTensor {
  expectF32(x, "rmsnorm input");
  const { rows, cols, groups } = expectRmsnormShapes(x, weight);
  const src = x.f32;
  const w = weight.f32;
  const out = new Float32Array(src.length);
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    const wBase = (r % groups) * cols;
    let ss = 0;
    for (let c = 0; c < cols; c++) ss += src[base + c] * src[base + c];
    const inv = 1 / Math.sqrt(ss / cols + eps);
    for (let c = 0; c < cols; c++) out[base + c] = src[base + c] * inv * w[wBase + c];
  }
  return f32Tensor(out, x.shape);
}

/** (x − mean) / sqrt(var + eps) · weight (+ bias) over the last dim (Backend.layerNorm), in f64. */
export function layerNorm(x: RefTensor, weight: RefTensor, bias: RefTensor | undefined, eps: number): RefTensor {
  expectF32(x, "layerNorm input");
  const { rows, cols } = expectLayerNormShapes(x, weight, bias);
  const src = x.f32, w = weight.f32, b = bias?.f32;
  const out = new Float32Array(src.length);
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let sum = 0;
    for (let c = 0; c < cols; c++) sum += src[base + c];
    const mean = sum / cols;
    let ss = 0;
    for (let c = 0; c < cols; c++) ss += (src[base + c] - mean) ** 2;
    const inv = 1 / Math.sqrt(ss / cols + eps);
    for (let c = 0; c < cols; c++) out[base + c] = (src[base + c] - mean) * inv * w[c] + (b ? b[c] : 0);
  }
  return f32Tensor(out, x.shape);
}

/** GELU, tanh approximation, elementwise (Backend.gelu). */
export function gelu(x: RefTensor): RefTensor {
  expectF32(x, "gelu input");
  return f32Tensor(x.f32.map((v) => 0.5 * v * (1 + Math.tanh(GELU_C * (v + 0.044715 * v * v * v)))), x.shape);
}

/** max(x, 0)² elementwise (Backend.reluSquared). */
export function reluSquared(x: RefTensor): RefTensor {
  expectF32(x, "reluSquared input");
  return f32Tensor(x.f32.map((v) => (v > 0 ? v * v : 0)), x.shape);
}

/** act(gate) * up elementwise, after checking both are f32 of one shape (`op` names them in errors). */
function gated(gate: RefTensor, up: RefTensor, op: string, act: (x: number) => number): RefTensor {
  expectF32(gate, `${op} gate`);
  expectF32(up, `${op} up`);
  expectSameShape(gate, up, op);
  const g = gate.f32;
  const u = up.f32;
  const out = new Float32Array(g.length);
  for (let i = 0; i < g.length; i++) out[i] = act(g[i]) * u[i];
  return f32Tensor(out, gate.shape);
}

/** silu(gate) * up. */
export function siluMul(gate: RefTensor, up: RefTensor): RefTensor {
  return gated(gate, up, "siluMul", (x) => x / (1 + Math.exp(-x)));
}

/** √(2/π), GELU's tanh approximation's constant. */
const GELU_C = Math.sqrt(2 / Math.PI);

/** gelu(gate) * up with GELU's tanh approximation (Backend.geluMul). */
export function geluMul(gate: RefTensor, up: RefTensor): RefTensor {
  return gated(gate, up, "geluMul", (x) => 0.5 * x * (1 + Math.tanh(GELU_C * (x + 0.044715 * x * x * x))));
}

/** cap · tanh(x / cap) (Backend.softcap). */
export function softcap(x: RefTensor, cap: number): RefTensor {
  expectF32(x, "softcap input");
  expectSoftcap(cap);
  return f32Tensor(x.f32.map((v) => cap * Math.tanh(v / cap)), x.shape);
}

/** GPT-OSS's clamped SwiGLU (Backend.swigluOai). */
export function swigluOai(gate: RefTensor, up: RefTensor, alpha: number, limit: number): RefTensor {
  expectF32(gate, "swigluOai gate");
  expectF32(up, "swigluOai up");
  expectSameShape(gate, up, "swigluOai");
  if (!Number.isFinite(alpha) || !(limit > 0)) throw new BackendShapeError(`swigluOai needs a finite alpha and a positive limit, got ${alpha} and ${limit}`);
  const gs = gate.f32;
  const us = up.f32;
  const out = new Float32Array(gs.length);
  for (let i = 0; i < gs.length; i++) {
    const g = Math.min(gs[i], limit);
    const u = Math.min(Math.max(us[i], -limit), limit);
    out[i] = (g / (1 + Math.exp(-alpha * g))) * (u + 1);
  }
  return f32Tensor(out, gate.shape);
}

/** a + b. */
export function add(a: RefTensor, b: RefTensor): RefTensor {
  expectF32(a, "add left operand");
  expectF32(b, "add right operand");
  expectSameShape(a, b, "add");
  const x = a.f32;
  const y = b.f32;
  const out = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = x[i] + y[i];
  return f32Tensor(out, a.shape);
}

/** Numerically stable softmax of one row into f64 values. */
export function softmaxRow(src: Float32Array | Float64Array, base: number, cols: number, scale = 1, sink?: number): Float64Array {
  // A sink logit (attention sinks) joins the denominator and has no column of its own.
  let max = sink ?? -Infinity;
  for (let c = 0; c < cols; c++) max = Math.max(max, src[base + c] * scale);
  const out = new Float64Array(cols);
  let sum = sink === undefined ? 0 : Math.exp(sink - max);
  for (let c = 0; c < cols; c++) {
    out[c] = Math.exp(src[base + c] * scale - max);
    sum += out[c];
  }
  for (let c = 0; c < cols; c++) out[c] /= sum;
  return out;
}

/** Row-wise softmax over the last dim. */
export function softmax(x: RefTensor): RefTensor {
  expectF32(x, "softmax input");
  const { rows, cols } = rowsOf(x.shape);
  const src = x.f32;
  const out = new Float32Array(src.length);
  for (let r = 0; r < rows; r++) out.set(softmaxRow(src, r * cols, cols), r * cols);
  return f32Tensor(out, x.shape);
}

/**
 * Index of the largest value in one row; the lowest index wins ties. NaN is never the largest (a
 * NaN logit is no candidate; CUDA's and WGSL's kernels skip it alike), so a row of NaN and -inf only
 * gives its first -inf, and a row of NaN only gives 0.
 */
export function argmaxRow(src: Float32Array | Float64Array, base: number, cols: number): number {
  let best = -1;
  for (let c = 0; c < cols; c++) {
    const v = src[base + c];
    if (v === v && (best < 0 || v > src[base + best])) best = c;
  }
  return Math.max(best, 0);
}

/** Row-wise argmax over the last dim → i32 [rows]. */
export function argmax(x: RefTensor): RefTensor {
  expectF32(x, "argmax input");
  const { rows, cols } = rowsOf(x.shape);
  if (cols === 0) throw new BackendShapeError(`argmax needs a non-empty last dimension, got ${fmt(x.shape)}`);
  const src = x.f32;
  const out = new Int32Array(rows);
  for (let r = 0; r < rows; r++) out[r] = argmaxRow(src, r * cols, cols);
  return i32Tensor(out, [rows]);
}

/** x.flat[index[i]] += values[i]; the offsets must be distinct and inside x. Mutates x. */
export function scatterAdd(x: RefTensor, index: RefTensor, values: RefTensor): void {
  expectF32(x, "scatterAdd target");
  expectRank(index, 1, "scatterAdd index", ["i32"]);
  expectRank(values, 1, "scatterAdd values", ["f32"]);
  const m = index.shape[0];
  if (values.shape[0] !== m) throw new BackendShapeError(`scatterAdd values ${fmt(values.shape)} do not match index ${fmt(index.shape)}`);
  const dst = x.f32, idx = index.i32, val = values.f32;
  // Every offset is checked before any is added, so a rejected call leaves x as it was.
  const seen = new Set<number>();
  for (let i = 0; i < m; i++) {
    const o = idx[i];
    if (o < 0 || o >= dst.length) throw new RangeError(`scatterAdd offset ${o} at ${i} is outside 0..${dst.length - 1}`);
    if (seen.has(o)) throw new BackendShapeError(`scatterAdd offset ${o} appears twice (offsets must be distinct)`);
    seen.add(o);
  }
  for (let i = 0; i < m; i++) dst[idx[i]] += val[i];
}

/** Checks that rows [m] are distinct rows of an n-row tensor (and factors, if given, positive and finite) before any is touched. */
function checkRows(op: string, r: Int32Array, n: number, factors?: Float32Array): void {
  const seen = new Set<number>();
  for (let k = 0; k < r.length; k++) {
    const row = r[k];
    if (row < 0 || row >= n) throw new RangeError(`${op} row ${row} at ${k} is outside 0..${n - 1}`);
    if (seen.has(row)) throw new BackendShapeError(`${op} row ${row} appears twice (rows must be distinct)`);
    if (factors && (!(factors[k] > 0) || !Number.isFinite(factors[k]))) {
      throw new BackendShapeError(`${op} factor ${factors[k]} at ${k} must be positive and finite`);
    }
    seen.add(row);
  }
}

/** Backend.penalizeRepeats: where bit v of bits[k] is 1, logits[rows[k], v] /= factors[k] if positive, else *= it. Mutates logits. */
export function penalizeRepeats(logits: RefTensor, rows: RefTensor, bits: RefTensor, factors: RefTensor): void {
  const { n, vocab, m, words } = expectRepeatShapes(logits, rows, bits, factors);
  const dst = logits.f32, r = rows.i32, b = bits.i32, f = factors.f32;
  checkRows("penalizeRepeats", r, n, f);
  for (let k = 0; k < m; k++) {
    const row = r[k];
    for (let v = 0; v < vocab; v++) {
      if (((b[k * words + (v >> 5)] >>> (v & 31)) & 1) === 0) continue;
      const x = dst[row * vocab + v];
      dst[row * vocab + v] = x > 0 ? x / f[k] : x * f[k];
    }
  }
}

/**
 * Backend.penalizeSampled: records sampled[rows[k]] as history[k, count - 1], then penalizes each
 * distinct token of history row k on logits row rows[k]. The arithmetic is f32 in the order the
 * kernels use: the scaling, then delta = −frequency · c (− presence), then logit + delta.
 */
export function penalizeSampled(
  logits: RefTensor, rows: RefTensor, sampled: RefTensor, history: RefTensor, count: number, seen: RefTensor, present: RefTensor, params: RefTensor,
): void {
  const { n, vocab, m, words, h } = expectSampledPenaltyShapes(logits, rows, sampled, history, count, seen, present, params);
  const dst = logits.f32, r = rows.i32, hist = history.i32, p = params.f32;
  checkRows("penalizeSampled", r, n, Float32Array.from({ length: m }, (_, k) => p[k * 3]));
  const bit = (bits: Int32Array, k: number, t: number) => ((bits[k * words + (t >> 5)] >>> (t & 31)) & 1) === 1;
  for (let k = 0; k < m; k++) {
    const row = r[k];
    hist[k * h + count - 1] = sampled.i32[row];
    const tokens = hist.subarray(k * h, k * h + count);
    tokens.forEach((t, j) => {
      if (t < 0 || t >= vocab || tokens.indexOf(t) < j) return;
      const c = tokens.filter((u) => u === t).length;
      let x = dst[row * vocab + t];
      if (!bit(seen.i32, k, t)) x = Math.fround(x > 0 ? x / p[k * 3] : x * p[k * 3]);
      let delta = Math.fround(-Math.fround(p[k * 3 + 2] * c));
      if (!bit(present.i32, k, t)) delta = Math.fround(delta - p[k * 3 + 1]);
      dst[row * vocab + t] = Math.fround(x + delta);
    });
  }
}

/** logits[rows[k], v] = MASKED_LOGIT where bit v of bits[k] is 0 (Backend.maskLogits). Mutates logits. */
export function maskLogits(logits: RefTensor, rows: RefTensor, bits: RefTensor): void {
  const { n, vocab, m, words } = expectMaskShapes(logits, rows, bits);
  const dst = logits.f32, r = rows.i32, b = bits.i32;
  checkRows("maskLogits", r, n);
  for (let k = 0; k < m; k++) {
    const row = r[k];
    for (let v = 0; v < vocab; v++) if (((b[k * words + (v >> 5)] >>> (v & 31)) & 1) === 0) dst[row * vocab + v] = MASKED_LOGIT;
  }
}

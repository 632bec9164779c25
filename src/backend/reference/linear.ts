/**
 * Reference matmul (y = x·Wᵀ + b against a dequantized weight) and rotary embedding.
 */
import { BackendShapeError, type GluActivation, type RopeLayout, WEIGHT_DTYPES } from "../types.ts";
import { geluMul, siluMul } from "./elementwise.ts";
import { expectRopeArgs } from "../shape-checks.ts";
import { expectRank, f32Tensor, fmt, type RefTensor } from "./storage.ts";

/** y [n, out] = x [n, in] · Wᵀ (+ bias), with f64 dot products. */
export function matmul(x: RefTensor, w: RefTensor, bias?: RefTensor): RefTensor {
  expectRank(x, 2, "matmul input", ["f32"]);
  expectRank(w, 2, "matmul weight", WEIGHT_DTYPES);
  const [n, k] = x.shape;
  const [m, kw] = w.shape;
  if (k !== kw) throw new BackendShapeError(`matmul input ${fmt(x.shape)} does not fit weight ${fmt(w.shape)}`);
  let b: Float32Array | undefined;
  if (bias) {
    expectRank(bias, 1, "matmul bias", ["f32"]);
    if (bias.shape[0] !== m) throw new BackendShapeError(`matmul bias ${fmt(bias.shape)} does not fit weight ${fmt(w.shape)}`);
    b = bias.f32;
  }
  const xs = x.f32;
  const ws = w.f32;
  const out = new Float32Array(n * m);
  // Register-blocked (four input rows by two weight rows share their loads; one row takes four weight rows at a
  // time), every output still its own f64 sum over k in order: the same bits as one dot at a time.
  let i = 0;
  for (; i + 4 <= n; i += 4) matmulRows4(xs, ws, out, b, i, k, m);
  for (; i < n; i++) matmulRow1(xs, i * k, ws, 0, out, i * m, b, k, m);
  return f32Tensor(out, [n, m]);
}

/**
 * x · Wᵀ (+ bias) + residual [n, out]: the product rounded to f32 first, then the residual added,
 * the order WebGPU's matmul epilogue adds them in.
 */
export function matmulAdd(x: RefTensor, w: RefTensor, residual: RefTensor, bias?: RefTensor): RefTensor {
  const y = matmul(x, w, bias);
  expectRank(residual, 2, "matmul residual", ["f32"]);
  if (residual.shape[0] !== y.shape[0] || residual.shape[1] !== y.shape[1]) {
    throw new BackendShapeError(`matmul residual ${fmt(residual.shape)} does not fit input ${fmt(x.shape)} and weight ${fmt(w.shape)}`);
  }
  const out = y.f32;
  const r = residual.f32;
  for (let i = 0; i < out.length; i++) out[i] += r[i];
  return y;
}

/** [x · Wqᵀ, x · Wkᵀ, x · Wvᵀ] (Backend.matmulQkv): three matmuls, the weights of one dtype and width. */
export function matmulQkv(x: RefTensor, wq: RefTensor, wk: RefTensor, wv: RefTensor): [RefTensor, RefTensor, RefTensor] {
  const ws = [wq, wk, wv];
  for (const [w, what] of [[wq, "q"], [wk, "k"], [wv, "v"]] as const) expectRank(w, 2, `matmulQkv ${what} weight`, WEIGHT_DTYPES);
  expectRank(x, 2, "matmulQkv input", ["f32"]);
  if (ws.some((w) => w.dtype !== wq.dtype || w.shape[1] !== x.shape[1])) {
    throw new BackendShapeError(`matmulQkv weights ${ws.map((w) => `${fmt(w.shape)} ${w.dtype}`).join(", ")} do not share a dtype and input ${fmt(x.shape)}'s width`);
  }
  return [matmul(x, wq), matmul(x, wk), matmul(x, wv)];
}

/**
 * act(x · Gᵀ) ⊙ (x · Uᵀ) (Backend.matmulGlu): the two products rounded to f32, then siluMul or
 * geluMul, as the unfused ops give it.
 */
export function matmulGlu(x: RefTensor, wGate: RefTensor, wUp: RefTensor, activation: GluActivation): RefTensor {
  expectRank(wGate, 2, "matmulGlu gate weight", WEIGHT_DTYPES);
  expectRank(wUp, 2, "matmulGlu up weight", WEIGHT_DTYPES);
  if (wGate.dtype !== wUp.dtype || wGate.shape[0] !== wUp.shape[0] || wGate.shape[1] !== wUp.shape[1]) {
    throw new BackendShapeError(`matmulGlu gate weight ${fmt(wGate.shape)} ${wGate.dtype} and up weight ${fmt(wUp.shape)} ${wUp.dtype} differ`);
  }
  if (activation !== "silu" && activation !== "gelu") throw new BackendShapeError(`Unknown matmulGlu activation "${String(activation)}"`);
  const gate = matmul(x, wGate);
  const up = matmul(x, wUp);
  return activation === "gelu" ? geluMul(gate, up) : siluMul(gate, up);
}

/** Rows i..i+3 of `out` = rows of `xs` · each weight row (+ bias), two weight rows at a time (eight sums). */
function matmulRows4(xs: Float32Array, ws: Float32Array, out: Float32Array, b: Float32Array | undefined, i: number, k: number, m: number): void {
  const x0 = i * k, x1 = x0 + k, x2 = x1 + k, x3 = x2 + k;
  const o0 = i * m, o1 = o0 + m, o2 = o1 + m, o3 = o2 + m;
  let j = 0;
  for (; j + 2 <= m; j += 2) {
    const wa = j * k, wb = wa + k;
    let a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    for (let c = 0; c < k; c++) {
      const va = ws[wa + c], vb = ws[wb + c];
      const y0 = xs[x0 + c], y1 = xs[x1 + c], y2 = xs[x2 + c], y3 = xs[x3 + c];
      a0 += y0 * va;
      a1 += y1 * va;
      a2 += y2 * va;
      a3 += y3 * va;
      b0 += y0 * vb;
      b1 += y1 * vb;
      b2 += y2 * vb;
      b3 += y3 * vb;
    }
    const ba = b ? b[j] : 0, bb = b ? b[j + 1] : 0;
    out[o0 + j] = b ? a0 + ba : a0;
    out[o1 + j] = b ? a1 + ba : a1;
    out[o2 + j] = b ? a2 + ba : a2;
    out[o3 + j] = b ? a3 + ba : a3;
    out[o0 + j + 1] = b ? b0 + bb : b0;
    out[o1 + j + 1] = b ? b1 + bb : b1;
    out[o2 + j + 1] = b ? b2 + bb : b2;
    out[o3 + j + 1] = b ? b3 + bb : b3;
  }
  for (; j < m; j++) {
    const wb = j * k;
    let a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (let c = 0; c < k; c++) {
      const wv = ws[wb + c];
      a0 += xs[x0 + c] * wv;
      a1 += xs[x1 + c] * wv;
      a2 += xs[x2 + c] * wv;
      a3 += xs[x3 + c] * wv;
    }
    const bj = b ? b[j] : 0;
    out[o0 + j] = b ? a0 + bj : a0;
    out[o1 + j] = b ? a1 + bj : a1;
    out[o2 + j] = b ? a2 + bj : a2;
    out[o3 + j] = b ? a3 + bj : a3;
  }
}

/**
 * One output row (at `ob` in `out`) = the input row at `xb` · each of the `m` weight rows from `wb`
 * (+ bias), four weight rows at a time; each output its own f64 sum over k in order. Also the
 * reference expert matmul's (experts.ts).
 */
export function matmulRow1(xs: Float32Array, xb: number, ws: Float32Array, wb: number, out: Float32Array, ob: number, b: Float32Array | undefined, k: number, m: number): void {
  let j = 0;
  for (; j + 4 <= m; j += 4) {
    const w0 = wb + j * k, w1 = w0 + k, w2 = w1 + k, w3 = w2 + k;
    let a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (let c = 0; c < k; c++) {
      const xv = xs[xb + c];
      a0 += xv * ws[w0 + c];
      a1 += xv * ws[w1 + c];
      a2 += xv * ws[w2 + c];
      a3 += xv * ws[w3 + c];
    }
    out[ob + j] = b ? a0 + b[j] : a0;
    out[ob + j + 1] = b ? a1 + b[j + 1] : a1;
    out[ob + j + 2] = b ? a2 + b[j + 2] : a2;
    out[ob + j + 3] = b ? a3 + b[j + 3] : a3;
  }
  for (; j < m; j++) {
    const w0 = wb + j * k;
    let acc = 0;
    for (let c = 0; c < k; c++) acc += xs[xb + c] * ws[w0 + c];
    out[ob + j] = b ? acc + b[j] : acc;
  }
}

/** Rotary embedding on x [n, heads, headDim] at positions [n] (see Backend.rope). */
export function rope(
  x: RefTensor,
  positions: RefTensor,
  theta: number,
  layout: RopeLayout,
  rotaryDim?: number,
  freqFactors?: RefTensor,
  magnitude = 1,
): RefTensor {
  const { n, heads, headDim, rotaryDim: rd } = expectRopeArgs(x, positions, theta, layout, rotaryDim, freqFactors, magnitude);
  const factors = freqFactors?.f32;
  const src = x.f32;
  const pos = positions.i32;
  const out = new Float32Array(src);
  const half = rd / 2;
  for (let t = 0; t < n; t++) {
    for (let i = 0; i < half; i++) {
      const angle = (pos[t] * Math.pow(theta, (-2 * i) / rd)) / (factors ? factors[i] : 1);
      const cos = Math.cos(angle) * magnitude;
      const sin = Math.sin(angle) * magnitude;
      // normal pairs adjacent dims (2i, 2i+1); neox pairs dim i with dim i + rd/2.
      const i0 = layout === "normal" ? 2 * i : i;
      const i1 = layout === "normal" ? 2 * i + 1 : i + half;
      for (let h = 0; h < heads; h++) {
        const base = (t * heads + h) * headDim;
        const a = src[base + i0];
        const b = src[base + i1];
        out[base + i0] = a * cos - b * sin;
        out[base + i1] = a * sin + b * cos;
      }
    }
  }
  return f32Tensor(out, x.shape);
}

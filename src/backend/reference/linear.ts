/**
 * Reference matmul (y = x·Wᵀ + b against a dequantized weight) and rotary embedding.
 */
import { BackendShapeError, type RopeLayout, WEIGHT_DTYPES } from "../types.ts";
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
  for (let i = 0; i < n; i++) {
    const xb = i * k;
    for (let j = 0; j < m; j++) {
      const wb = j * k;
      let acc = 0;
      for (let c = 0; c < k; c++) acc += xs[xb + c] * ws[wb + c];
      out[i * m + j] = b ? acc + b[j] : acc;
    }
  }
  return f32Tensor(out, [n, m]);
}

/** Rotary embedding on x [n, heads, headDim] at positions [n] (see Backend.rope). */
export function rope(
  x: RefTensor,
  positions: RefTensor,
  theta: number,
  layout: RopeLayout,
  rotaryDim?: number,
  freqFactors?: RefTensor,
): RefTensor {
  const { n, heads, headDim, rotaryDim: rd } = expectRopeArgs(x, positions, theta, layout, rotaryDim, freqFactors);
  const factors = freqFactors?.f32;
  const src = x.f32;
  const pos = positions.i32;
  const out = new Float32Array(src);
  const half = rd / 2;
  for (let t = 0; t < n; t++) {
    for (let i = 0; i < half; i++) {
      const angle = (pos[t] * Math.pow(theta, (-2 * i) / rd)) / (factors ? factors[i] : 1);
      const cos = Math.cos(angle);
      const sin = Math.sin(angle);
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

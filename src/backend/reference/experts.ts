/**
 * Reference mixture-of-experts ops: routing (softmax, top-k, renormalisation), the expert matmul
 * (llama.cpp's mul_mat_id) and the weighted combine. f64 accumulation, as the other reference ops.
 */
import { expectExpertMatmulShapes, expectMoeCombineShapes, expectMoeRouteShapes } from "../shape-checks.ts";
import { BackendShapeError, type ExpertGroups, type GluActivation, MIN_ROUTE_SHARE, type MoeRouteOptions, type MoeRouting } from "../types.ts";
import { f32Tensor, fmt, i32Tensor, type RefTensor } from "./storage.ts";
import { geluMul, siluMul } from "./elementwise.ts";
import { matmulRow1 } from "./linear.ts";

/**
 * Top-k experts of each row by selection score (ties to the lower index) and their weights; see
 * Backend.moeRoute. Without a selection bias the score is the logit, which softmax and sigmoid both
 * keep in order, so rounding in the probabilities cannot reorder; with one it is probability + bias.
 */
export function moeRoute(logits: RefTensor, k: number, options: MoeRouteOptions): MoeRouting {
  const { n, experts } = expectMoeRouteShapes(logits, k, options);
  const x = logits.f32;
  const bias = options.selectionBias ? (options.selectionBias as RefTensor).f32 : undefined;
  const sigmoid = options.gating === "sigmoid";
  const scale = options.scale ?? 1;
  const groups = options.groups && options.groups.count > 1 ? options.groups : undefined;
  const ids = new Int32Array(n * k);
  const weights = new Float32Array(n * k);
  const probs = new Float64Array(experts);
  const score = new Float64Array(experts);
  const taken = new Uint8Array(experts);
  for (let t = 0; t < n; t++) {
    const row = x.subarray(t * experts, (t + 1) * experts);
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    // Softmax's denominator; a sigmoid is its own probability (a denominator of 1).
    let sum = 0;
    for (let e = 0; e < experts; e++) {
      probs[e] = sigmoid ? 1 / (1 + Math.exp(-row[e])) : Math.exp(row[e] - max);
      sum += probs[e];
    }
    if (sigmoid) sum = 1;
    // Grouped routing compares sums of probabilities, so its scores are probabilities even unbiased.
    for (let e = 0; e < experts; e++) score[e] = bias ? probs[e] / sum + bias[e] : groups ? probs[e] / sum : row[e];
    taken.fill(0);
    if (groups) barGroups(score, groups, taken);
    let picked = 0;
    for (let j = 0; j < k; j++) {
      let best = -1;
      for (let e = 0; e < experts; e++) if (!taken[e] && (best < 0 || score[e] > score[best])) best = e;
      taken[best] = 1;
      ids[t * k + j] = best;
      picked += probs[best];
    }
    // Renormalising divides by the chosen ones' share of the row instead of the whole row, that
    // share clamped to at least MIN_ROUTE_SHARE so k vanishing sigmoids cannot divide by zero. The
    // clamp applies to the normalised share (picked / sum), as llama.cpp's build_moe_ffn clamps
    // ggml_sum_rows of the chosen softmax probabilities; `picked` itself is unnormalised for softmax.
    const denominator = options.normalize ? Math.max(picked / sum, MIN_ROUTE_SHARE) * sum : sum;
    for (let j = 0; j < k; j++) weights[t * k + j] = (probs[ids[t * k + j]] / denominator) * scale;
  }
  return { ids: i32Tensor(ids, [n, k]), weights: f32Tensor(weights, [n, k]) };
}

/**
 * Marks as taken every expert outside the `used` best groups, a group scoring the sum of its two
 * highest scores (ties to the lower group).
 */
function barGroups(score: Float64Array, groups: ExpertGroups, taken: Uint8Array): void {
  const size = score.length / groups.count;
  const groupScore: number[] = [];
  for (let g = 0; g < groups.count; g++) {
    const s = Array.from(score.subarray(g * size, (g + 1) * size)).sort((a, b) => b - a);
    groupScore.push(s[0] + s[1]);
  }
  const order = groupScore.map((s, g) => ({ s, g })).sort((a, b) => b.s - a.s || a.g - b.g);
  for (const { g } of order.slice(groups.used)) taken.fill(1, g * size, (g + 1) * size);
}

/**
 * act(x · G[e]ᵀ) ⊙ (x · U[e]ᵀ) per routed row (Backend.matmulExpertsGlu): the two expert matmuls
 * rounded to f32, then siluMul or geluMul, as the unfused ops give it.
 */
export function matmulExpertsGlu(x: RefTensor, wGate: RefTensor, wUp: RefTensor, ids: RefTensor, activation: GluActivation): RefTensor {
  if (wUp.dtype !== wGate.dtype || wUp.shape.length !== wGate.shape.length || wUp.shape.some((d, i) => d !== wGate.shape[i])) {
    throw new BackendShapeError(`matmulExpertsGlu gate weight ${fmt(wGate.shape)} ${wGate.dtype} and up weight ${fmt(wUp.shape)} ${wUp.dtype} differ`);
  }
  if (activation !== "silu" && activation !== "gelu") throw new BackendShapeError(`Unknown matmulExpertsGlu activation "${String(activation)}"`);
  const gate = matmulExperts(x, wGate, ids);
  const up = matmulExperts(x, wUp, ids);
  return activation === "gelu" ? geluMul(gate, up) : siluMul(gate, up);
}

/** y [n·k, out]: each row through its expert's matrix; see Backend.matmulExperts. */
export function matmulExperts(x: RefTensor, w: RefTensor, ids: RefTensor): RefTensor {
  const { n, k, experts, out, inner, perExpertInput } = expectExpertMatmulShapes(x, w, ids);
  const xs = x.f32;
  const ws = w.f32;
  const y = new Float32Array(n * k * out);
  for (let r = 0; r < n * k; r++) {
    const e = ids.i32[r];
    if (e < 0 || e >= experts) throw new RangeError(`Expert id ${e} at position ${r} is outside 0..${experts - 1}`);
    const xb = (perExpertInput ? r : Math.floor(r / k)) * inner;
    // Four of the expert's rows at a time; each output still one f64 sum in order (the same bits).
    matmulRow1(xs, xb, ws, e * out * inner, y, r * out, undefined, inner, out);
  }
  return f32Tensor(y, [n * k, out]);
}

/** out [n, d] = Σ_j weights[t, j] · y[t·k+j, :]; see Backend.moeCombine. */
export function moeCombine(y: RefTensor, weights: RefTensor): RefTensor {
  const { n, k, d } = expectMoeCombineShapes(y, weights);
  const out = new Float32Array(n * d);
  for (let t = 0; t < n; t++) {
    for (let c = 0; c < d; c++) {
      let acc = 0;
      for (let j = 0; j < k; j++) acc += weights.f32[t * k + j] * y.f32[(t * k + j) * d + c];
      out[t * d + c] = acc;
    }
  }
  return f32Tensor(out, [n, d]);
}

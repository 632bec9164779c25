/**
 * Conformance cases for the mixture-of-experts ops: moeRoute, matmulExperts, moeCombine.
 *
 * Tolerances (|x - ref| <= atol + rtol·|ref|; the reference accumulates in f64):
 * - moeRoute ids: exact (without a bias both sides compare the same f32 logits; with one, scores
 *   of random data are far apart next to f32 rounding; the tie cases draw logits and biases from a
 *   few values so the lower-index rule decides). Weights: atol 1e-6, rtol 1e-5 (exp and an f32 sum
 *   over ≤ 512 terms, as softmax).
 * - matmulExperts: atol 1e-4, rtol 1e-4, as matmul (same inputs in [-1, 1], k ≤ 512).
 * - moeCombine: atol 1e-6, rtol 1e-5 (an f32 sum of ≤ 8 products).
 */
import { blockValues, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { type Backend, type ExpertGroups, type MoeGating, type Tensor, WEIGHT_DTYPES } from "../../src/backend/types.ts";
import { type Case, type Output } from "./conformance-support.ts";

async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...outputs, ...temps]) b.free(t);
  return res;
}

interface RouteShape {
  n: number;
  experts: number;
  k: number;
  normalize: boolean;
  /** Logits (and biases) drawn from a few values, so equal scores happen and the lower-index rule decides. */
  ties?: boolean;
  gating?: MoeGating;
  bias?: boolean;
  scale?: number;
  /** Range of the logits (default -4 to 4). */
  range?: [number, number];
  groups?: ExpertGroups;
  /** Expert 0's logit far below the rest and a selection bias that picks it anyway: its softmax share
   * (~1e-8) is under the renormalising floor, which clamps the share (llama.cpp's build_moe_ffn). */
  forced?: boolean;
}

/**
 * Router shapes as models have them (Mixtral 8/2, Qwen3-MoE 128/8, GLM-4.5 160/8 sigmoid with a
 * selection bias and a 2.5 scale, 512-expert routers) and odd ones.
 */
function routeCases(): Case[] {
  const shapes: RouteShape[] = [
    { n: 1, experts: 8, k: 2, normalize: true },
    { n: 37, experts: 128, k: 8, normalize: true },
    { n: 5, experts: 60, k: 4, normalize: false },
    { n: 3, experts: 7, k: 7, normalize: true },
    { n: 2, experts: 512, k: 8, normalize: true },
    { n: 9, experts: 16, k: 3, normalize: false, ties: true },
    { n: 4, experts: 32, k: 8, normalize: true, ties: true },
    { n: 21, experts: 160, k: 8, normalize: true, gating: "sigmoid", bias: true, scale: 2.5 },
    { n: 6, experts: 64, k: 6, normalize: false, gating: "sigmoid" },
    { n: 5, experts: 24, k: 4, normalize: true, gating: "sigmoid", bias: true, ties: true },
    { n: 7, experts: 60, k: 4, normalize: false, bias: true, scale: 0.5 },
    { n: 3, experts: 1, k: 1, normalize: false, gating: "sigmoid" },
    // Chosen sigmoids that sum below the renormalising floor.
    { n: 4, experts: 16, k: 2, normalize: true, gating: "sigmoid", range: [-40, -30] },
    // Grouped top-k: DeepSeek V3's 256 experts in 8 groups, 4 used; DeepSeek V2's softmax; k filling
    // the used groups; tied logits (softmax: equal sums only from equal pairs, so f32 and f64 agree).
    { n: 13, experts: 256, k: 8, normalize: true, gating: "sigmoid", bias: true, scale: 2.5, groups: { count: 8, used: 4 } },
    { n: 9, experts: 64, k: 6, normalize: false, groups: { count: 8, used: 3 } },
    { n: 3, experts: 16, k: 8, normalize: true, gating: "sigmoid", groups: { count: 4, used: 2 } },
    { n: 5, experts: 24, k: 4, normalize: true, ties: true, groups: { count: 6, used: 2 } },
    { n: 3, experts: 64, k: 1, normalize: true, bias: true, forced: true },
    { n: 2, experts: 64, k: 2, normalize: true, bias: true, forced: true },
  ];
  return shapes.map((c): Case => ({
    op: "moeRoute",
    name: `n=${c.n} experts=${c.experts} k=${c.k}${c.normalize ? " normalized" : ""}${c.ties ? " ties" : ""}` +
      `${c.gating ? ` ${c.gating}` : ""}${c.bias ? " biased" : ""}${c.scale !== undefined ? ` scale=${c.scale}` : ""}${c.range ? ` logits ${c.range}` : ""}` +
      `${c.groups ? ` groups ${c.groups.used}/${c.groups.count}` : ""}${c.forced ? " forced tiny share" : ""}`,
    tolerance: { atol: 1e-6, rtol: 1e-5 },
    run: (b, rng) => {
      const { n, experts, k } = c;
      const [lo, hi] = c.range ?? [-4, 4];
      const values = c.ties ? Float32Array.from({ length: n * experts }, () => rng.int(4) - 2) : rng.f32(n * experts, lo, hi);
      if (c.forced) for (let r = 0; r < n; r++) values[r * experts] = -14;
      const logits = b.upload(values, [n, experts]);
      // Biases of the size DeepSeek V3's and GLM-4.5's are, next to probabilities in (0, 1).
      const biasValues = c.ties ? Float32Array.from({ length: experts }, () => rng.int(2) / 2) : rng.f32(experts, -0.5, 0.5);
      if (c.forced) biasValues.fill(0).fill(100, 0, 1);
      const bias = c.bias ? b.upload(biasValues, [experts]) : undefined;
      const { ids, weights } = b.moeRoute(logits, k, { normalize: c.normalize, gating: c.gating, selectionBias: bias, scale: c.scale, groups: c.groups });
      return finish(b, [ids, weights], bias ? [logits, bias] : [logits]);
    },
  }));
}

function matmulExpertsCases(): Case[] {
  const cases: Case[] = [];
  // n tokens, k experts each, of `experts`, weight [experts, out, inner]; x per token or per expert.
  const shapes: [number, number, number, number, number, boolean][] = [
    [1, 2, 8, 37, 64, false], [5, 4, 6, 45, 128, true], [3, 2, 4, 33, 256, false], [2, 8, 16, 20, 512, true],
    [4, 1, 3, 9, 33, false], [7, 3, 5, 70, 96, false],
  ];
  for (const dtype of WEIGHT_DTYPES) {
    for (const [n, k, experts, out, inner, perExpert] of shapes) {
      if (inner % blockValues(dtype) !== 0) continue;
      cases.push({
        op: "matmulExperts",
        name: `${dtype} n=${n} k=${k} experts=${experts} out=${out} in=${inner}${perExpert ? " per-expert input" : ""}`,
        tolerance: { atol: 1e-4, rtol: 1e-4 },
        run: (b, rng) => {
          const rows = perExpert ? n * k : n;
          const x = b.upload(rng.f32(rows * inner), [rows, inner]);
          const w = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), dtype), [experts, out, inner], dtype);
          const ids = b.upload(rng.i32(n * k, experts), [n, k]);
          return finish(b, [b.matmulExperts(x, w, ids)], [x, w, ids]);
        },
      });
    }
    // The fused gate/up (Backend.matmulExpertsGlu): every format at two shapes (per-token and
    // per-expert input), a few formats at all of them; SiLU and GELU.
    const few = ["f32", "f16", "q8_0", "q4_k", "iq2_xs"].includes(dtype);
    for (const [i, [n, k, experts, out, inner, perExpert]] of shapes.entries()) {
      if (inner % blockValues(dtype) !== 0 || (!few && i !== 1 && i !== 2)) continue;
      const activation = i % 2 === 0 ? "silu" : "gelu";
      cases.push({
        op: "matmulExpertsGlu",
        optionalOp: "matmulExpertsGlu",
        name: `${dtype} n=${n} k=${k} experts=${experts} out=${out} in=${inner}${perExpert ? " per-expert input" : ""} ${activation}`,
        tolerance: { atol: 1e-4, rtol: 1e-4 },
        run: (b, rng) => {
          const rows = perExpert ? n * k : n;
          const x = b.upload(rng.f32(rows * inner), [rows, inner]);
          const g = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), dtype), [experts, out, inner], dtype);
          const u = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), dtype), [experts, out, inner], dtype);
          const ids = b.upload(rng.i32(n * k, experts), [n, k]);
          return finish(b, [b.matmulExpertsGlu!(x, g, u, ids, activation)], [x, g, u, ids]);
        },
      });
    }
  }
  return cases;
}

function combineCases(): Case[] {
  return [[1, 2, 64], [37, 8, 45], [3, 1, 517], [5, 4, 1]].map(([n, k, d]): Case => ({
    op: "moeCombine",
    name: `n=${n} k=${k} d=${d}`,
    tolerance: { atol: 1e-6, rtol: 1e-5 },
    run: (b, rng) => {
      const y = b.upload(rng.f32(n * k * d), [n * k, d]);
      const weights = b.upload(rng.f32(n * k, 0, 1), [n, k]);
      return finish(b, [b.moeCombine(y, weights)], [y, weights]);
    },
  }));
}

/** Every mixture-of-experts conformance case. */
export function moeCases(): Case[] {
  return [...routeCases(), ...matmulExpertsCases(), ...combineCases()];
}

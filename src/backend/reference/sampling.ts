/**
 * Reference sampling: temperature, top-k, top-p and an inverse-CDF pick with a CPU-drawn uniform.
 * This exact order is the contract every backend reproduces.
 */
import { BackendShapeError, checkSamplingRow, effectiveTemperature, type SamplingRow } from "../types.ts";
import { argmaxRow, softmaxRow } from "./elementwise.ts";
import { expectRank, i32Tensor, type RefTensor } from "./storage.ts";

/**
 * Samples one token from one row of logits:
 * 0. NaN logits count as -inf; a row without a finite largest logit (all -inf, or a +inf) gives its argmax;
 * 1. p = softmax(logits / T) (T below MIN_SAMPLING_TEMPERATURE: the argmax); with minP, tokens whose
 *    exp((logit − max) / T) (their p over the largest) is below minP get p = 0;
 * 2. order tokens by descending p, ties by lower index; keep the first topK (0 = all);
 * 3. within those, keep the shortest prefix whose mass ≥ topP × (mass kept by step 2);
 * 4. walk the kept prefix and return the first token whose cumulative p exceeds uniform × its total.
 */
export function sampleRow(logits: Float32Array, base: number, vocab: number, row: SamplingRow): number {
  // A temperature too small to divide by safely is greedy (1 / 1e-320 overflows to Infinity).
  const temperature = effectiveTemperature(row.temperature);
  const best = argmaxRow(logits, base, vocab);
  // No finite largest logit (every token -inf or NaN, or some +inf): no distribution to draw from,
  // so the argmax, as at temperature 0 (a row whose every token is barred gives token 0 everywhere).
  if (temperature === 0 || !Number.isFinite(logits[base + best])) return best;
  // NaN logits weigh nothing, as -inf ones (argmax never picks them either).
  const clean = logits.slice(base, base + vocab).map((x) => (x === x ? x : -Infinity));
  const probs = softmaxRow(clean, 0, vocab, 1 / temperature);
  const minP = row.minP ?? 0;
  if (minP > 0) {
    const max = clean[best];
    for (let i = 0; i < vocab; i++) if (Math.exp((clean[i] - max) / temperature) < minP) probs[i] = 0;
  }
  const order = Array.from({ length: vocab }, (_, i) => i);
  order.sort((a, b) => probs[b] - probs[a] || a - b);
  const k = row.topK > 0 ? Math.min(row.topK, vocab) : vocab;
  let topKMass = 0;
  for (let i = 0; i < k; i++) topKMass += probs[order[i]];
  let kept = 0;
  let mass = 0;
  while (kept < k) {
    mass += probs[order[kept]];
    kept++;
    if (mass >= row.topP * topKMass) break;
  }
  const target = row.uniform * mass;
  let cum = 0;
  for (let i = 0; i < kept; i++) {
    cum += probs[order[i]];
    if (cum > target) return order[i];
  }
  return order[kept - 1]; // only reached through rounding at uniform ≈ 1
}

/** Row-wise sampling from logits [rows, vocab] → i32 [rows]. */
export function sample(logits: RefTensor, rows: readonly SamplingRow[]): RefTensor {
  expectRank(logits, 2, "sample logits", ["f32"]);
  const [n, vocab] = logits.shape;
  if (rows.length !== n) throw new BackendShapeError(`sample got ${rows.length} sampling rows for ${n} logit rows`);
  if (vocab === 0) throw new BackendShapeError("sample needs a non-empty vocabulary");
  rows.forEach(checkSamplingRow);
  const src = logits.f32;
  const out = new Int32Array(n);
  for (let r = 0; r < n; r++) out[r] = sampleRow(src, r * vocab, vocab, rows[r]);
  return i32Tensor(out, [n]);
}

/**
 * Reference sampling: temperature, top-k, top-p and an inverse-CDF pick with a CPU-drawn uniform.
 * This exact order is the contract every backend reproduces.
 */
import { BackendShapeError, effectiveTemperature, type SamplingRow } from "../types.ts";
import { argmaxRow, softmaxRow } from "./elementwise.ts";
import { expectRank, i32Tensor, type RefTensor } from "./storage.ts";

function checkRow(row: SamplingRow, r: number): void {
  const bad = (field: string, value: number) =>
    new BackendShapeError(`Sampling row ${r} has an invalid ${field} ${value}`);
  if (!(row.temperature >= 0) || !Number.isFinite(row.temperature)) throw bad("temperature", row.temperature);
  if (!Number.isInteger(row.topK) || row.topK < 0) throw bad("topK", row.topK);
  if (!(row.topP > 0 && row.topP <= 1)) throw bad("topP", row.topP);
  if (!(row.uniform >= 0 && row.uniform < 1)) throw bad("uniform", row.uniform);
}

/**
 * Samples one token from one row of logits:
 * 1. p = softmax(logits / T) (T below MIN_SAMPLING_TEMPERATURE: the argmax);
 * 2. order tokens by descending p, ties by lower index; keep the first topK (0 = all);
 * 3. within those, keep the shortest prefix whose mass ≥ topP × (mass kept by step 2);
 * 4. walk the kept prefix and return the first token whose cumulative p exceeds uniform × its total.
 */
export function sampleRow(logits: Float32Array, base: number, vocab: number, row: SamplingRow): number {
  // A temperature too small to divide by safely is greedy (1 / 1e-320 overflows to Infinity).
  const temperature = effectiveTemperature(row.temperature);
  if (temperature === 0) return argmaxRow(logits, base, vocab);
  const probs = softmaxRow(logits, base, vocab, 1 / temperature);
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
  rows.forEach(checkRow);
  const src = logits.f32;
  const out = new Int32Array(n);
  for (let r = 0; r < n; r++) out[r] = sampleRow(src, r * vocab, vocab, rows[r]);
  return i32Tensor(out, [n]);
}

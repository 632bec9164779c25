/** Sampling parameters for the CUDA sample kernel: validated like the reference, packed 4 per row. */
import { BackendShapeError, effectiveTemperature, type SamplingRow } from "../types.ts";

/** Rejects parameters the reference would reject, quoting the value. */
function checkSamplingRow(row: SamplingRow, r: number): void {
  const bad = (field: string, value: number) => new BackendShapeError(`Sampling row ${r} has an invalid ${field} ${value}`);
  if (!(row.temperature >= 0) || !Number.isFinite(row.temperature)) throw bad("temperature", row.temperature);
  if (!Number.isInteger(row.topK) || row.topK < 0) throw bad("topK", row.topK);
  if (!(row.topP > 0 && row.topP <= 1)) throw bad("topP", row.topP);
  if (!(row.uniform >= 0 && row.uniform < 1)) throw bad("uniform", row.uniform);
}

/** (temperature, topK, topP, uniform) per row, as kernels-cuda/sample.cu reads them. */
export function packSamplingRows(rows: readonly SamplingRow[]): Float32Array {
  const params = new Float32Array(4 * rows.length);
  rows.forEach((row, r) => {
    checkSamplingRow(row, r);
    params.set([effectiveTemperature(row.temperature), row.topK, row.topP, row.uniform], 4 * r);
  });
  return params;
}

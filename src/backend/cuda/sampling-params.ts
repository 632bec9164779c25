/** Sampling parameters for the CUDA sample kernel: validated like the reference, packed 5 per row. */
import { checkSamplingRow, effectiveTemperature, type SamplingRow } from "../types.ts";

/** Floats per row, as kernels-cuda/sample.cu (SAMPLE_PARAMS) reads them. */
export const SAMPLE_PARAMS = 5;

/** (temperature, topK, topP, uniform, minP) per row, as kernels-cuda/sample.cu reads them. */
export function packSamplingRows(rows: readonly SamplingRow[]): Float32Array {
  const params = new Float32Array(SAMPLE_PARAMS * rows.length);
  rows.forEach((row, r) => {
    checkSamplingRow(row, r);
    params.set([effectiveTemperature(row.temperature), row.topK, row.topP, row.uniform, row.minP ?? 0], SAMPLE_PARAMS * r);
  });
  return params;
}

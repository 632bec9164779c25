/**
 * Shared setup for the CUDA kernel tests: the CUDA backend when a device is present (else the
 * tests are skipped), the reference backend, seeded inputs, output poisoning and comparisons.
 */
import assert from "node:assert/strict";
import { createCudaBackend, type CudaBackend } from "../../src/backend/cuda/index.ts";
import { denseBlockQuantStorage, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend, Tensor, WeightDType } from "../../src/backend/types.ts";
import { Rng } from "./conformance-support.ts";

function tryCuda(): CudaBackend | undefined {
  try {
    return createCudaBackend();
  } catch {
    return undefined;
  }
}

/** The CUDA backend, or undefined on machines without a device (tests pass `ignore: !cuda`). */
export const cuda: CudaBackend | undefined = tryCuda();
/** The oracle. */
export const ref: Backend = createReferenceBackend();

/** Deterministic values in [-scale, scale) from a seed (mulberry32). */
export function rand(count: number, seed: number, scale = 1): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: count }, () => (rng.next() * 2 - 1) * scale);
}

/** Uploads the same f32 data to both backends. */
export function both(data: Float32Array | Int32Array, shape: number[]): [Tensor, Tensor] {
  return [cuda!.upload(data, shape), ref.upload(data, shape)];
}

/** Uploads the same weight (encoded once) to both backends; the reference gets it as CUDA stores
 * it (block formats other than q8_0 as their f16 dequantization: `denseBlockQuantStorage`). */
export function bothWeight(values: Float32Array, shape: number[], dtype: WeightDType): [Tensor, Tensor] {
  const raw = encodeFromF32(values, dtype);
  const dense = denseBlockQuantStorage(raw, dtype, values.length);
  return [cuda!.uploadWeight(raw, shape, dtype), ref.uploadWeight(dense.raw, shape, dense.dtype)];
}

/** Fills the pool's next blocks of this size with NaN so an output a kernel fails to write shows up. */
export function poison(count: number, copies = 3): void {
  const ts = Array.from({ length: copies }, () => cuda!.upload(new Float32Array(count).fill(NaN), [count]));
  for (const t of ts.reverse()) cuda!.free(t);
}

/** Asserts |a - b| ≤ atol + rtol·|b| elementwise, naming the first bad index. */
export async function assertClose(
  got: Tensor, want: Tensor, what: string, atol = 1e-5, rtol = 1e-4,
): Promise<void> {
  const g = await cuda!.download(got);
  const w = await ref.download(want);
  assert.equal(g.length, w.length, `${what}: length ${g.length} vs ${w.length}`);
  for (let i = 0; i < w.length; i++) {
    const ok = Math.abs(g[i] - w[i]) <= atol + rtol * Math.abs(w[i]);
    if (!ok) assert.fail(`${what}: [${i}] cuda ${g[i]} vs reference ${w[i]}`);
  }
}

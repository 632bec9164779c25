/**
 * CUDA tensors: a device pointer plus shape and dtype. Index tensors uploaded from the host keep
 * a host copy, so attention can be planned and slots validated without reading the device back.
 */
import { byteSize } from "../dtype-codec.ts";
import { BackendShapeError, type DType, numel, type Tensor } from "../types.ts";
import type { DevicePtr } from "./native-types.ts";
import { checkShape, fmt } from "../shape-checks.ts";
export { checkShape, fmt };

/** The backend name every CUDA tensor carries. */
export const CUDA_NAME = "cuda";

/** The weight dtypes the CUDA kernels read (the other block formats are f16 on the device: backend.ts uploadWeight). */
export type CudaWeightDType = "f32" | "f16" | "bf16" | "q8_0";

/** Weight dtype codes shared with kernels-cuda/common.cuh. */
export const DTYPE_CODE: Readonly<Record<CudaWeightDType, number>> = { f32: 0, f16: 1, bf16: 2, q8_0: 3 };

/** The weight dtypes CUDA tensors hold (GGUF's other block formats become f16 at upload). */
export const CUDA_WEIGHT_DTYPES: readonly CudaWeightDType[] = ["f32", "f16", "bf16", "q8_0"];

/** A tensor living in CUDA device memory. */
export class CudaTensor implements Tensor {
  readonly backend = CUDA_NAME;
  constructor(
    readonly ptr: DevicePtr,
    readonly shape: readonly number[],
    readonly dtype: DType,
    /** Host copy of an uploaded i32 tensor (never of op results). */
    readonly host?: Int32Array,
  ) {}
}

/** Narrows a Tensor to a CudaTensor or throws naming the owning backend. */
export function asCuda(t: Tensor, what: string): CudaTensor {
  if (!(t instanceof CudaTensor)) {
    throw new BackendShapeError(`${what} belongs to backend "${t.backend}", not "${CUDA_NAME}"`);
  }
  return t;
}

/** Checks rank and dtype; returns the tensor as a CudaTensor. */
export function expect(t: Tensor, rank: number | undefined, what: string, dtypes: readonly DType[]): CudaTensor {
  const c = asCuda(t, what);
  if (rank !== undefined && c.shape.length !== rank) {
    throw new BackendShapeError(`${what} must have rank ${rank}, got shape ${fmt(c.shape)}`);
  }
  if (!dtypes.includes(c.dtype)) {
    throw new BackendShapeError(`${what} must be ${dtypes.join(" or ")}, got ${c.dtype}`);
  }
  return c;
}

/** Device bytes of a tensor's storage (q8_0 uses the repacked layout: quants, then f16 scales). */
export function deviceBytes(dtype: DType, count: number): number {
  if (dtype === "q8_0") return Math.ceil(count / 256) * 256 + (count / 32) * 2;
  return byteSize(dtype === "i32" ? "i32" : dtype, count);
}

/** rows × last dim of a shape (rank ≥ 1). */
export function rowsOf(shape: readonly number[], what: string): { rows: number; cols: number } {
  if (shape.length === 0) throw new BackendShapeError(`${what} needs rank ≥ 1, got ${fmt(shape)}`);
  const cols = shape[shape.length - 1];
  return { rows: cols === 0 ? 0 : numel(shape) / cols, cols };
}

/**
 * WebGPU tensors and the shape checks every op shares.
 *
 * A tensor's storage is one or more pooled buffers: activations, caches and small weights use one;
 * a weight larger than the device's largest storage binding is split into row chunks, each its own
 * buffer, and only matmul/embedding/download accept such a tensor.
 */
import type { PooledBuffer } from "./buffer-pool.ts";
import { BackendShapeError, type DType, numel, type Tensor } from "../types.ts";
import { checkShape, expectDtype, expectRank, expectSameShape, fmt } from "../shape-checks.ts";
export { checkShape, expectDtype, expectRank, expectSameShape, fmt };

/** Name the WebGPU backend stamps on its tensors. */
export const WEBGPU_NAME = "webgpu";

/** One row range of a weight, stored in its own buffer starting at element 0. */
export interface RowChunk {
  buffer: PooledBuffer;
  rowStart: number;
  rows: number;
}

/** Storage shared by a tensor and its reshaped views. */
export interface GpuStorage {
  chunks: RowChunk[];
  freed: boolean;
}

/** A tensor that lives on the WebGPU device. */
export class GpuTensor implements Tensor {
  readonly backend = WEBGPU_NAME;
  constructor(
    readonly shape: readonly number[],
    readonly dtype: DType,
    readonly storage: GpuStorage,
  ) {}

  /** The single buffer of an unchunked tensor. */
  get buffer(): PooledBuffer {
    if (this.storage.freed) throw new BackendShapeError(`Tensor ${fmt(this.shape)} was used after free`);
    if (this.storage.chunks.length !== 1) {
      throw new BackendShapeError(`Tensor ${fmt(this.shape)} is split into ${this.storage.chunks.length} chunks; only matmul and embedding accept it`);
    }
    return this.storage.chunks[0].buffer;
  }
}

/** Checks that a tensor belongs to this backend. */
export function asGpu(t: Tensor, what: string): GpuTensor {
  if (!(t instanceof GpuTensor)) {
    throw new BackendShapeError(`The ${what} belongs to backend "${t.backend}", not "${WEBGPU_NAME}"`);
  }
  if (t.storage.freed) throw new BackendShapeError(`The ${what} ${fmt(t.shape)} was used after free`);
  return t;
}

/** Rows and columns of a tensor seen as [rows, lastDim]. */
export function rowsOf(shape: readonly number[]): { rows: number; cols: number } {
  const cols = shape.length ? shape[shape.length - 1] : 1;
  return { rows: cols ? numel(shape) / cols : 0, cols };
}

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
  /** The backend context whose device holds the buffers: another device cannot bind them. */
  readonly owner: object;
}

/** A tensor that lives on the WebGPU device. */
export class GpuTensor implements Tensor {
  readonly backend = WEBGPU_NAME;
  constructor(
    readonly shape: readonly number[],
    readonly dtype: DType,
    readonly storage: GpuStorage,
    /** Host copy of an uploaded i32 tensor (never of op results): ops check indices against it, the device cannot throw. */
    readonly host?: Int32Array,
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

/** Checks that a tensor belongs to this backend instance (`owner`, its context) and is live. */
export function asGpu(t: Tensor, what: string, owner: object): GpuTensor {
  if (!(t instanceof GpuTensor)) {
    throw new BackendShapeError(`The ${what} belongs to backend "${t.backend}", not "${WEBGPU_NAME}"`);
  }
  if (t.storage.owner !== owner) {
    // Its buffers live on another device: binding them fails only at the next submit, and vaguely.
    throw new BackendShapeError(`The ${what} ${fmt(t.shape)} belongs to another ${WEBGPU_NAME} backend instance (another device)`);
  }
  if (t.storage.freed) throw new BackendShapeError(`The ${what} ${fmt(t.shape)} was used after free`);
  return t;
}

/** Requires an f32 activation of rank ≥ 1, as the reference backend does (a scalar has no rows). */
export function expectActivation(t: Tensor, what: string): void {
  expectDtype(t, what, ["f32"]);
  if (t.shape.length < 1) throw new BackendShapeError(`${what} must have at least 1 dimension, got ${fmt(t.shape)}`);
}

/** Rows and columns of a tensor seen as [rows, lastDim]. */
export function rowsOf(shape: readonly number[]): { rows: number; cols: number } {
  const cols = shape.length ? shape[shape.length - 1] : 1;
  return { rows: cols ? numel(shape) / cols : 0, cols };
}

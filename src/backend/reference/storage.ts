/**
 * Host storage for the reference backend: every tensor is a plain typed array (weights are
 * dequantized to f32 once, at upload), plus the shape/dtype checks every op shares.
 */
import { BackendShapeError, type DType, numel, type Tensor } from "../types.ts";
import { checkShape, expectRank, expectSameShape, fmt } from "../shape-checks.ts";
export { checkShape, expectRank, expectSameShape, fmt };

/** Name every reference tensor carries in `Tensor.backend`. */
export const REFERENCE_NAME = "reference";

/** The storage behind one or more tensor views; `freed` catches use-after-free in callers. */
export interface RefStorage {
  data: Float32Array | Int32Array;
  freed: boolean;
}

/** A reference-backend tensor: a shaped view over shared storage. */
export class RefTensor implements Tensor {
  readonly backend = REFERENCE_NAME;
  constructor(
    readonly shape: readonly number[],
    readonly dtype: DType,
    readonly storage: RefStorage,
  ) {}

  /** Values as f32 (weights already dequantized); throws on i32 or freed storage. */
  get f32(): Float32Array {
    const data = this.live();
    if (!(data instanceof Float32Array)) {
      throw new BackendShapeError(`Expected a floating-point tensor, got dtype ${this.dtype} [${this.shape}]`);
    }
    return data;
  }

  /** Values as i32; throws on float tensors or freed storage. */
  get i32(): Int32Array {
    const data = this.live();
    if (!(data instanceof Int32Array)) {
      throw new BackendShapeError(`Expected an i32 tensor, got dtype ${this.dtype} [${this.shape}]`);
    }
    return data;
  }

  private live(): Float32Array | Int32Array {
    if (this.storage.freed) throw new Error(`Tensor [${this.shape}] ${this.dtype} was used after free()`);
    return this.storage.data;
  }
}

/** Wraps fresh f32 values as a tensor. */
export function f32Tensor(data: Float32Array, shape: readonly number[]): RefTensor {
  return new RefTensor([...shape], "f32", { data, freed: false });
}

/** Wraps fresh i32 values as a tensor. */
export function i32Tensor(data: Int32Array, shape: readonly number[]): RefTensor {
  return new RefTensor([...shape], "i32", { data, freed: false });
}

/** Narrows a Tensor to a reference tensor, refusing tensors of other backends. */
export function asRef(t: Tensor, what: string): RefTensor {
  if (!(t instanceof RefTensor)) {
    throw new BackendShapeError(`${what} belongs to backend "${t.backend}", not "${REFERENCE_NAME}"`);
  }
  return t;
}

/** Requires an f32 activation tensor of rank ≥ 1. */
export function expectF32(t: RefTensor, what: string): void {
  if (t.dtype !== "f32") throw new BackendShapeError(`${what} must be f32, got ${t.dtype} ${fmt(t.shape)}`);
  if (t.shape.length < 1) throw new BackendShapeError(`${what} must have at least 1 dimension, got ${fmt(t.shape)}`);
}

/** Splits a shape into (rows, last dim) for row-wise ops. */
export function rowsOf(shape: readonly number[]): { rows: number; cols: number } {
  const cols = shape[shape.length - 1];
  return { rows: cols === 0 ? 0 : numel(shape) / cols, cols };
}

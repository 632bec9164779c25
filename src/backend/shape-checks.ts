/**
 * Shape and dtype checks shared by every backend, so a bad call reads the same whichever backend
 * receives it. Each throws a BackendShapeError that quotes the shapes.
 */
import { blockValues } from "./dtype-codec.ts";
import {
  type AttentionOptions,
  BackendShapeError,
  type DType,
  MAX_EXPERT_GROUPS,
  type MoeRouteOptions,
  numel,
  type Tensor,
  WEIGHT_DTYPES,
  type WeightDType,
} from "./types.ts";

/** Formats a shape for error messages: [2, 3]. */
export function fmt(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

/** Checks a shape holds non-negative integers and returns its element count. */
export function checkShape(shape: readonly number[], what: string): number {
  if (!shape.every((d) => Number.isInteger(d) && d >= 0)) {
    throw new BackendShapeError(`${what} has an invalid shape ${fmt(shape)}`);
  }
  return numel(shape);
}

/**
 * Checks an uploaded weight's dtype and shape: a block format (q8_0, q4_k, …) needs rows of whole
 * blocks, since kernels find a value's block from its column. Returns the element count.
 */
export function checkWeightShape(shape: readonly number[], dtype: WeightDType, what: string): number {
  const count = checkShape(shape, what);
  if (!WEIGHT_DTYPES.includes(dtype)) throw new BackendShapeError(`${what} got unknown weight dtype "${dtype}"`);
  const block = blockValues(dtype);
  if (block > 1 && (shape.length === 0 || shape[shape.length - 1] % block !== 0)) {
    throw new BackendShapeError(`A ${dtype} weight needs rows that are a multiple of ${block}, got ${fmt(shape)}`);
  }
  return count;
}

/** Requires one of the given dtypes. */
export function expectDtype(t: Tensor, what: string, dtypes: readonly DType[]): void {
  if (!dtypes.includes(t.dtype)) {
    throw new BackendShapeError(`${what} must be ${dtypes.join(" or ")}, got ${t.dtype} ${fmt(t.shape)}`);
  }
}

/** Requires exactly `rank` dimensions and one of the given dtypes. */
export function expectRank(t: Tensor, rank: number, what: string, dtypes: readonly DType[]): void {
  if (t.shape.length !== rank) {
    throw new BackendShapeError(`${what} must have ${rank} dimensions, got ${fmt(t.shape)}`);
  }
  expectDtype(t, what, dtypes);
}

/** Requires two identical shapes. */
export function expectSameShape(a: Tensor, b: Tensor, what: string): void {
  if (a.shape.length !== b.shape.length || a.shape.some((d, i) => d !== b.shape[i])) {
    throw new BackendShapeError(`${what}: shapes ${fmt(a.shape)} and ${fmt(b.shape)} differ`);
  }
}

/**
 * The shapes of a `maskLogits` (or `penalizeRepeats`, named by `op`) call: logits f32 [n, vocab],
 * rows i32 [m], bits i32 [m, ceil(vocab / 32)].
 */
export function expectMaskShapes(logits: Tensor, rows: Tensor, bits: Tensor, op = "maskLogits"): { n: number; vocab: number; m: number; words: number } {
  expectRank(logits, 2, `${op} logits`, ["f32"]);
  expectRank(rows, 1, `${op} rows`, ["i32"]);
  expectRank(bits, 2, `${op} bits`, ["i32"]);
  const [n, vocab] = logits.shape;
  const m = rows.shape[0];
  const words = Math.ceil(vocab / 32);
  if (bits.shape[0] !== m || bits.shape[1] !== words) {
    throw new BackendShapeError(`${op} bits ${fmt(bits.shape)} do not match ${m} rows of ${words} words for a vocabulary of ${vocab}`);
  }
  return { n, vocab, m, words };
}

/** The shapes of a `penalizeRepeats` call: those of maskLogits, and factors f32 [m] of positive finite values (checked where the host holds them). */
export function expectRepeatShapes(logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor): { n: number; vocab: number; m: number; words: number } {
  const shapes = expectMaskShapes(logits, rows, bits, "penalizeRepeats");
  expectRank(factors, 1, "penalizeRepeats factors", ["f32"]);
  if (factors.shape[0] !== shapes.m) throw new BackendShapeError(`penalizeRepeats factors ${fmt(factors.shape)} do not match ${shapes.m} rows`);
  return shapes;
}

/**
 * The shapes of a `moeRoute` call: logits f32 [n, experts], 1 ≤ k ≤ experts, a selection bias f32
 * [experts], a known gating and a finite scale.
 */
export function expectMoeRouteShapes(logits: Tensor, k: number, options: MoeRouteOptions): { n: number; experts: number } {
  expectRank(logits, 2, "moeRoute logits", ["f32"]);
  const [n, experts] = logits.shape;
  if (!Number.isInteger(k) || k < 1 || k > experts) {
    throw new BackendShapeError(`moeRoute k must be an integer from 1 to ${experts} (the experts in ${fmt(logits.shape)}), got ${k}`);
  }
  const gating = options.gating ?? "softmax";
  if (gating !== "softmax" && gating !== "sigmoid") throw new BackendShapeError(`Unknown moeRoute gating "${gating}"`);
  if (options.scale !== undefined && !Number.isFinite(options.scale)) {
    throw new BackendShapeError(`moeRoute scale must be a finite number, got ${options.scale}`);
  }
  const bias = options.selectionBias;
  if (bias) {
    expectRank(bias, 1, "moeRoute selection bias", ["f32"]);
    if (bias.shape[0] !== experts) {
      throw new BackendShapeError(`moeRoute selection bias ${fmt(bias.shape)} needs ${experts} values for logits ${fmt(logits.shape)}`);
    }
  }
  const g = options.groups;
  if (g) {
    const { count, used } = g;
    const valid = Number.isInteger(count) && Number.isInteger(used) && count >= 1 && count <= MAX_EXPERT_GROUPS &&
      experts % count === 0 && experts / count >= 2 && used >= 1 && used <= count && k <= used * (experts / count);
    if (!valid) {
      throw new BackendShapeError(
        `moeRoute groups ${JSON.stringify(g)} do not fit ${experts} experts and k ${k}: ${MAX_EXPERT_GROUPS} groups at most, each of 2 experts or more, and k within the used groups`,
      );
    }
  }
  return { n, experts };
}

/** The shapes of a `matmulExperts` call: x f32 [n or n·k, in], w [experts, out, in], ids i32 [n, k]. */
export function expectExpertMatmulShapes(
  x: Tensor,
  w: Tensor,
  ids: Tensor,
): { n: number; k: number; experts: number; out: number; inner: number; perExpertInput: boolean } {
  expectRank(x, 2, "matmulExperts input", ["f32"]);
  expectRank(w, 3, "matmulExperts weight", WEIGHT_DTYPES);
  expectRank(ids, 2, "matmulExperts ids", ["i32"]);
  const [n, k] = ids.shape;
  const [experts, out, inner] = w.shape;
  if (x.shape[1] !== inner) throw new BackendShapeError(`matmulExperts input ${fmt(x.shape)} does not fit weight ${fmt(w.shape)}`);
  if (x.shape[0] !== n && x.shape[0] !== n * k) {
    throw new BackendShapeError(`matmulExperts input ${fmt(x.shape)} needs ${n} or ${n * k} rows for ids ${fmt(ids.shape)}`);
  }
  return { n, k, experts, out, inner, perExpertInput: x.shape[0] === n * k && k !== 1 };
}

/** The shapes of a `moeCombine` call: y f32 [n·k, d], weights f32 [n, k]. */
export function expectMoeCombineShapes(y: Tensor, weights: Tensor): { n: number; k: number; d: number } {
  expectRank(y, 2, "moeCombine input", ["f32"]);
  expectRank(weights, 2, "moeCombine weights", ["f32"]);
  const [n, k] = weights.shape;
  if (y.shape[0] !== n * k) throw new BackendShapeError(`moeCombine input ${fmt(y.shape)} needs ${n * k} rows for weights ${fmt(weights.shape)}`);
  return { n, k, d: y.shape[1] };
}

/**
 * Checks a {@link Backend.sliceColumns} call: x f32 [..., d] (rank ≥ 1) and a window of whole columns
 * inside d. Returns the rows (product of the leading dims), d and the output shape.
 */
export function expectSliceColumnsShapes(x: Tensor, start: number, width: number): { rows: number; cols: number; shape: number[] } {
  expectDtype(x, "sliceColumns input", ["f32"]);
  if (x.shape.length === 0) throw new BackendShapeError(`sliceColumns needs a tensor of rank 1 or more, got ${fmt(x.shape)}`);
  const cols = x.shape[x.shape.length - 1];
  if (!Number.isInteger(start) || !Number.isInteger(width) || start < 0 || width < 1 || start + width > cols) {
    throw new BackendShapeError(`sliceColumns window start ${start}, width ${width} does not fit the last dim of ${fmt(x.shape)}`);
  }
  return { rows: cols === 0 ? 0 : numel(x.shape) / cols, cols, shape: [...x.shape.slice(0, -1), width] };
}

/**
 * Checks a {@link Backend.concatColumns} call: a f32 [..., da] and b f32 [..., db] with the same
 * leading dims. Returns the rows, da, db and the output shape [..., da + db].
 */
export function expectConcatColumnsShapes(a: Tensor, b: Tensor): { rows: number; colsA: number; colsB: number; shape: number[] } {
  expectDtype(a, "concatColumns left operand", ["f32"]);
  expectDtype(b, "concatColumns right operand", ["f32"]);
  const lead = a.shape.slice(0, -1);
  if (a.shape.length === 0 || a.shape.length !== b.shape.length || lead.some((d, i) => d !== b.shape[i])) {
    throw new BackendShapeError(`concatColumns operands ${fmt(a.shape)} and ${fmt(b.shape)} must share every dim but the last`);
  }
  const colsA = a.shape[a.shape.length - 1];
  const colsB = b.shape[b.shape.length - 1];
  return { rows: numel(lead), colsA, colsB, shape: [...lead, colsA + colsB] };
}

/**
 * Checks pagedAttention's options for `heads` query heads: a window of whole positions ≥ 1 (0 for
 * none) and sinks f32 [heads]. Returns the window, 0 when absent.
 */
export function expectAttentionOptions(options: AttentionOptions | undefined, heads: number): number {
  const window = options?.window ?? 0;
  if (!Number.isInteger(window) || window < 0 || window > 0x7fffffff) {
    throw new BackendShapeError(`Attention window ${window} is not a whole number of positions`);
  }
  const sinks = options?.sinks;
  if (sinks) {
    expectRank(sinks, 1, "attention sinks", ["f32"]);
    if (sinks.shape[0] !== heads) throw new BackendShapeError(`Attention sinks ${fmt(sinks.shape)} do not match ${heads} query heads`);
  }
  return window;
}

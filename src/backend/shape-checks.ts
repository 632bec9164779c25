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
 * The shapes of a `penalizeSampled` call: logits f32 [n, vocab], rows i32 [m], sampled i32 [n],
 * history i32 [m, h] with 1 ≤ count ≤ h, seen and present as maskLogits' bits, params f32 [m, 3].
 */
export function expectSampledPenaltyShapes(
  logits: Tensor, rows: Tensor, sampled: Tensor, history: Tensor, count: number, seen: Tensor, present: Tensor, params: Tensor,
): { n: number; vocab: number; m: number; words: number; h: number } {
  const shapes = expectMaskShapes(logits, rows, seen, "penalizeSampled");
  expectMaskShapes(logits, rows, present, "penalizeSampled");
  expectRank(sampled, 1, "penalizeSampled sampled", ["i32"]);
  expectRank(history, 2, "penalizeSampled history", ["i32"]);
  expectRank(params, 2, "penalizeSampled params", ["f32"]);
  if (sampled.shape[0] !== shapes.n) throw new BackendShapeError(`penalizeSampled sampled ${fmt(sampled.shape)} does not match ${shapes.n} logit rows`);
  if (history.shape[0] !== shapes.m) throw new BackendShapeError(`penalizeSampled history ${fmt(history.shape)} does not match ${shapes.m} rows`);
  const h = history.shape[1];
  if (!Number.isInteger(count) || count < 1 || count > h) throw new BackendShapeError(`penalizeSampled count must be an integer from 1 to ${h} (the history's columns), got ${count}`);
  if (params.shape[0] !== shapes.m || params.shape[1] !== 3) throw new BackendShapeError(`penalizeSampled params ${fmt(params.shape)} are not [${shapes.m}, 3]`);
  return { ...shapes, h };
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
  attentionSoftcap(options);
  return window;
}

/** The attention's soft cap (AttentionOptions.softcap), 0 for none; a cap that is not a positive finite number is refused. */
export function attentionSoftcap(options: AttentionOptions | undefined): number {
  const cap = options?.softcap;
  if (cap === undefined) return 0;
  if (!(Number.isFinite(cap) && cap > 0)) throw new BackendShapeError(`Attention softcap ${cap} must be a positive number`);
  return cap;
}

/**
 * Checks rmsnorm's shapes (Backend.rmsnorm): x [..., d] f32 and a weight [d] or [g, d] whose g rows
 * take x's rows in turn (so g divides the row count). Returns the rows, d and g.
 */
export function expectRmsnormShapes(x: { shape: readonly number[] }, weight: { shape: readonly number[]; dtype: DType }): { rows: number; cols: number; groups: number } {
  const cols = x.shape.length === 0 ? 1 : x.shape[x.shape.length - 1];
  const rows = cols === 0 ? 0 : numel(x.shape) / cols;
  if (weight.dtype !== "f32" || (weight.shape.length !== 1 && weight.shape.length !== 2)) {
    throw new BackendShapeError(`rmsnorm weight must be f32 [d] or [groups, d], got ${weight.dtype} ${fmt(weight.shape)}`);
  }
  const groups = weight.shape.length === 2 ? weight.shape[0] : 1;
  if (weight.shape[weight.shape.length - 1] !== cols || groups < 1 || rows % groups !== 0) {
    throw new BackendShapeError(`rmsnorm weight ${fmt(weight.shape)} does not match input ${fmt(x.shape)}`);
  }
  return { rows, cols, groups };
}

/** Checks layerNorm's operands (Backend.layerNorm): f32 weight and optional bias of the input's last dim. */
export function expectLayerNormShapes(x: { shape: readonly number[] }, weight: { shape: readonly number[]; dtype: DType }, bias: { shape: readonly number[]; dtype: DType } | undefined): { rows: number; cols: number } {
  const cols = x.shape.length === 0 ? 1 : x.shape[x.shape.length - 1];
  const rows = cols === 0 ? 0 : numel(x.shape) / cols;
  for (const [t, what] of [[weight, "weight"], [bias, "bias"]] as const) {
    if (t && (t.dtype !== "f32" || t.shape.length !== 1 || t.shape[0] !== cols)) {
      throw new BackendShapeError(`layerNorm ${what} must be f32 [${cols}] for input ${fmt(x.shape)}, got ${t.dtype} ${fmt(t.shape)}`);
    }
  }
  return { rows, cols };
}

/** Checks softcap's cap (Backend.softcap). */
export function expectSoftcap(cap: number): void {
  if (!(Number.isFinite(cap) && cap > 0)) throw new BackendShapeError(`softcap cap ${cap} must be a positive number`);
}

/**
 * Host-side range check of index values (a device kernel cannot throw, so every backend checks the
 * copies it holds on the host): a RangeError naming the first value outside 0..limit-1.
 */
export function checkIndexRange(values: Int32Array, limit: number, what: string): void {
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v < 0 || v >= limit) throw new RangeError(`${what} ${v} at position ${i} is outside 0..${limit - 1}`);
  }
}

/** The geometry {@link checkAttentionIndices} checks a paged attention batch against. */
export interface AttentionIndexGeometry {
  numSeqs: number;
  maxBlocks: number;
  blockSize: number;
  numBlocks: number;
  maxContext: number;
  /** Sliding window (0: none): blocks wholly before every row's window are never read. */
  window: number;
}

/**
 * Checks a paged attention batch's indices on the host, where their values are known (the device
 * kernels skip what is out of range): each row's sequence inside the block tables, its position
 * below maxContext and the table's reach, and every block id a row reads inside the cache. A
 * RangeError names the first bad value. Blocks are checked once per sequence, so a prefill costs its
 * rows plus its blocks, not rows × blocks.
 */
export function checkAttentionIndices(seqs: Int32Array, poss: Int32Array, tables: Int32Array, g: AttentionIndexGeometry): void {
  const reach = g.maxBlocks * g.blockSize;
  for (let t = 0; t < seqs.length; t++) {
    const seq = seqs[t], pos = poss[t];
    if (seq < 0 || seq >= g.numSeqs) throw new RangeError(`tokenSeq ${seq} at row ${t} is outside 0..${g.numSeqs - 1}`);
    if (pos < 0 || pos >= reach || pos >= g.maxContext) {
      throw new RangeError(`tokenPos ${pos} at row ${t} exceeds the block table or maxContext ${g.maxContext}`);
    }
  }
  // Each row reads blocks lo..hi of its sequence; rows in (sequence, lo) order check each block once.
  // A step's rows come in that order (a sequence's positions ascending), so the sort is rarely needed.
  const n = seqs.length;
  const lo = new Int32Array(n);
  for (let t = 0; t < n; t++) lo[t] = Math.floor((g.window > 0 ? Math.max(0, poss[t] - g.window + 1) : 0) / g.blockSize);
  const before = (a: number, b: number) => seqs[a] - seqs[b] || lo[a] - lo[b];
  let ordered = true;
  for (let t = 1; t < n && ordered; t++) ordered = before(t - 1, t) <= 0;
  const rows = ordered ? undefined : Array.from({ length: n }, (_, t) => t).sort(before);
  let seq = -1, done = -1;
  for (let r = 0; r < n; r++) {
    const t = rows ? rows[r] : r;
    if (seqs[t] !== seq) {
      seq = seqs[t];
      done = -1;
    }
    const hi = Math.floor(poss[t] / g.blockSize);
    for (let b = Math.max(lo[t], done + 1); b <= hi; b++) {
      const block = tables[seq * g.maxBlocks + b];
      if (block < 0 || block >= g.numBlocks) throw new RangeError(`Block ${block} of sequence ${seq} is outside 0..${g.numBlocks - 1}`);
    }
    done = Math.max(done, hi);
  }
}

/**
 * {@link checkAttentionIndices} once per batch: every layer of a step passes the same index tensors
 * (their host copies are made at upload and never change), so a decode step of 64 sequences at 32k
 * context checks its 130k block ids once, not once per layer. Keeps the last few batches checked.
 */
export class AttentionIndexChecks {
  private readonly seen: { seqs: Int32Array; poss: Int32Array; tables: Int32Array; key: string }[] = [];

  /** Checks the batch unless these very arrays passed with the same geometry. */
  check(seqs: Int32Array, poss: Int32Array, tables: Int32Array, g: AttentionIndexGeometry): void {
    const key = `${g.numSeqs},${g.maxBlocks},${g.blockSize},${g.numBlocks},${g.maxContext},${g.window}`;
    if (this.seen.some((e) => e.seqs === seqs && e.poss === poss && e.tables === tables && e.key === key)) return;
    checkAttentionIndices(seqs, poss, tables, g);
    this.seen.unshift({ seqs, poss, tables, key });
    if (this.seen.length > 4) this.seen.pop(); // sliding and full layers alternate: two keys a step
  }
}

/** Requires a rope base frequency that is finite and positive (θ^(-2i/d) is NaN or 0 otherwise). */
export function expectRopeTheta(theta: number): void {
  if (!Number.isFinite(theta) || !(theta > 0)) throw new BackendShapeError(`rope theta must be a finite positive number, got ${theta}`);
}

/**
 * The arguments of a `rope` call: x f32 [n, heads, headDim], positions i32 [n], a finite positive
 * theta, an even rotaryDim (default headDim) within headDim, a known layout, and freqFactors f32
 * [rotaryDim / 2]. Returns the shape's parts and the rotary dim.
 */
export function expectRopeArgs(
  x: Tensor,
  positions: Tensor,
  theta: number,
  layout: string,
  rotaryDim: number | undefined,
  freqFactors: Tensor | undefined,
  magnitude = 1,
): { n: number; heads: number; headDim: number; rotaryDim: number } {
  expectRank(x, 3, "rope input", ["f32"]);
  expectRank(positions, 1, "rope positions", ["i32"]);
  const [n, heads, headDim] = x.shape;
  if (positions.shape[0] !== n) throw new BackendShapeError(`rope positions ${fmt(positions.shape)} do not match input ${fmt(x.shape)}`);
  expectRopeTheta(theta);
  const rd = rotaryDim ?? headDim;
  if (!Number.isInteger(rd) || rd <= 0 || rd % 2 !== 0 || rd > headDim) {
    throw new BackendShapeError(`rope rotaryDim ${rd} must be even and within headDim ${headDim}`);
  }
  if (layout !== "normal" && layout !== "neox") throw new BackendShapeError(`Unknown rope layout "${layout}"`);
  if (!(Number.isFinite(magnitude) && magnitude > 0)) throw new BackendShapeError(`rope magnitude ${magnitude} must be a positive number`);
  if (freqFactors) {
    expectRank(freqFactors, 1, "rope freqFactors", ["f32"]);
    if (freqFactors.shape[0] !== rd / 2) {
      throw new BackendShapeError(`rope freqFactors ${fmt(freqFactors.shape)} should hold rotaryDim/2 = ${rd / 2} values`);
    }
  }
  return { n, heads, headDim, rotaryDim: rd };
}

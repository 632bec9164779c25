/**
 * Row-wise and elementwise ops: rmsnorm, softmax, argmax, add, siluMul, geluMul, swigluOai, softcap, reluSquared, gatherRows, sliceColumns,
 * concatColumns, rope.
 */
import type { PooledBuffer } from "./buffer-pool.ts";
import { type GpuContext } from "./context.ts";
import { F32 } from "./recorder.ts";
import { download, upload } from "./ops-memory.ts";
import { asGpu, expectActivation, expectRank, expectSameShape, fmt, type GpuTensor, rowsOf } from "./tensor.ts";
import { BackendShapeError, numel, type RopeLayout, type Tensor } from "../types.ts";
import { checkIndexRange, expectConcatColumnsShapes, expectLayerNormShapes, expectRmsnormShapes, expectRopeArgs, expectSliceColumnsShapes, expectSoftcap } from "../shape-checks.ts";

/** x / sqrt(mean(x²) + eps) * weight over the last dim; a weight [g, d] gives row r its row r mod g. */
export function rmsnorm(ctx: GpuContext, xT: Tensor, wT: Tensor, eps: number): Tensor {
  const x = asGpu(xT, "rmsnorm input", ctx);
  const w = asGpu(wT, "rmsnorm weight", ctx);
  expectActivation(x, "rmsnorm input");
  const { rows, cols, groups } = expectRmsnormShapes(x, w);
  const out = ctx.output(x.shape);
  ctx.recorder.dispatch("rmsnorm", { CENTER: false, BIAS: false }, [rows, cols, new F32(eps), groups], [[1, x.buffer], [2, w.buffer], [3, out.buffer]], rows);
  return out;
}

/** (x − mean) / sqrt(var + eps) · weight (+ bias) over the last dim (Backend.layerNorm): the RMS norm kernel, centred. */
export function layerNorm(ctx: GpuContext, xT: Tensor, wT: Tensor, bT: Tensor | undefined, eps: number): Tensor {
  const x = asGpu(xT, "layerNorm input", ctx);
  const w = asGpu(wT, "layerNorm weight", ctx);
  const b = bT && asGpu(bT, "layerNorm bias", ctx);
  expectActivation(x, "layerNorm input");
  const { rows, cols } = expectLayerNormShapes(x, w, b);
  const out = ctx.output(x.shape);
  const bindings: [number, PooledBuffer][] = [[1, x.buffer], [2, w.buffer], [3, out.buffer], ...(b ? [[4, b.buffer] as [number, PooledBuffer]] : [])];
  ctx.recorder.dispatch("rmsnorm", { CENTER: true, BIAS: b !== undefined }, [rows, cols, new F32(eps), 1], bindings, rows);
  return out;
}

/** Row-wise softmax over the last dim. */
export function softmax(ctx: GpuContext, xT: Tensor): Tensor {
  const x = asGpu(xT, "softmax input", ctx);
  expectActivation(x, "softmax input");
  const { rows, cols } = rowsOf(x.shape);
  const out = ctx.output(x.shape);
  ctx.recorder.dispatch("softmax", {}, [rows, cols, 0, 0], [[1, x.buffer], [2, out.buffer]], rows);
  return out;
}

/** Row-wise argmax → i32 [rows]. */
export function argmax(ctx: GpuContext, xT: Tensor): Tensor {
  const x = asGpu(xT, "argmax input", ctx);
  expectActivation(x, "argmax input");
  const { rows, cols } = rowsOf(x.shape);
  if (cols === 0) throw new BackendShapeError(`argmax needs a non-empty last dimension, got ${fmt(x.shape)}`);
  const out = ctx.output([rows], "i32");
  ctx.recorder.dispatch("argmax", {}, [rows, cols, 0, 0], [[1, x.buffer], [2, out.buffer]], rows);
  return out;
}

type BinaryOp = "add" | "siluMul" | "geluMul" | "swigluOai";

const OPERAND_NAMES: Record<BinaryOp, [string, string]> = {
  add: ["add left operand", "add right operand"],
  siluMul: ["siluMul gate", "siluMul up"],
  geluMul: ["geluMul gate", "geluMul up"],
  swigluOai: ["swigluOai gate", "swigluOai up"],
};

function binary(ctx: GpuContext, aT: Tensor, bT: Tensor, op: BinaryOp, alpha = 0, limit = 0): Tensor {
  const names = OPERAND_NAMES[op];
  const a = asGpu(aT, names[0], ctx);
  const b = asGpu(bT, names[1], ctx);
  expectActivation(a, names[0]);
  expectActivation(b, names[1]);
  expectSameShape(a, b, op);
  const n = numel(a.shape);
  const out = ctx.output(a.shape);
  ctx.recorder.dispatch(
    "elementwise",
    { OP_ADD: op === "add", OP_OAI: op === "swigluOai", OP_GELU: op === "geluMul", OP_SOFTCAP: false, OP_RELU2: false, OP_GELU1: false },
    [n, new F32(alpha), new F32(limit), 0],
    [[1, a.buffer], [2, b.buffer], [3, out.buffer]],
    Math.ceil(n / 256),
  );
  return out;
}

/** The elementwise kernel's unary ops, x bound as both operands: soft-capping, max(x, 0)², or gelu(x). */
function unary(ctx: GpuContext, xT: Tensor, op: "softcap" | "reluSquared" | "gelu", alpha = 0): Tensor {
  const x = asGpu(xT, `${op} input`, ctx);
  expectActivation(x, `${op} input`);
  const n = numel(x.shape);
  const out = ctx.output(x.shape);
  ctx.recorder.dispatch(
    "elementwise",
    { OP_ADD: false, OP_OAI: false, OP_GELU: false, OP_SOFTCAP: op === "softcap", OP_RELU2: op === "reluSquared", OP_GELU1: op === "gelu" },
    [n, new F32(alpha), new F32(0), 0],
    [[1, x.buffer], [2, x.buffer], [3, out.buffer]],
    Math.ceil(n / 256),
  );
  return out;
}

/** cap · tanh(x / cap) (Backend.softcap). */
export function softcap(ctx: GpuContext, xT: Tensor, cap: number): Tensor {
  expectSoftcap(cap);
  return unary(ctx, xT, "softcap", cap);
}

/** max(x, 0)² (Backend.reluSquared). */
export const reluSquared = (ctx: GpuContext, x: Tensor): Tensor => unary(ctx, x, "reluSquared");

/** GELU, tanh approximation (Backend.gelu). */
export const gelu = (ctx: GpuContext, x: Tensor): Tensor => unary(ctx, x, "gelu");

/** a + b. */
export const add = (ctx: GpuContext, a: Tensor, b: Tensor): Tensor => binary(ctx, a, b, "add");

/** silu(gate) * up. */
export const siluMul = (ctx: GpuContext, gate: Tensor, up: Tensor): Tensor => binary(ctx, gate, up, "siluMul");

/** gelu(gate) * up, GELU's tanh approximation (Backend.geluMul). */
export const geluMul = (ctx: GpuContext, gate: Tensor, up: Tensor): Tensor => binary(ctx, gate, up, "geluMul");

/** GPT-OSS's clamped SwiGLU (Backend.swigluOai). */
export function swigluOai(ctx: GpuContext, gate: Tensor, up: Tensor, alpha: number, limit: number): Tensor {
  if (!Number.isFinite(alpha) || !(limit > 0)) throw new BackendShapeError(`swigluOai needs a finite alpha and a positive limit, got ${alpha} and ${limit}`);
  return binary(ctx, gate, up, "swigluOai", alpha, limit);
}

/** out[i, :] = x[idx[i], :]. */
export function gatherRows(ctx: GpuContext, xT: Tensor, idxT: Tensor): Tensor {
  const x = asGpu(xT, "gatherRows input", ctx);
  const idx = asGpu(idxT, "gatherRows indices", ctx);
  expectRank(x, 2, "gatherRows input", ["f32"]);
  expectRank(idx, 1, "gatherRows indices", ["i32"]);
  const [rows, cols] = x.shape;
  if (idx.host) checkIndexRange(idx.host, rows, "Row index");
  const m = idx.shape[0];
  const out = ctx.output([m, cols]);
  ctx.recorder.dispatch("gather_rows", { T: "f32", SCATTER: false }, [m, cols, rows, 0], [[1, x.buffer], [2, idx.buffer], [3, out.buffer]], Math.ceil((m * cols) / 256));
  return out;
}

/**
 * Rows `idx` of an f16 table [rows, width] (width even: whole words) as IEEE half bits, copied on the
 * device word for word and downloaded at two bytes a value (Backend.downloadHalfRows).
 */
export async function downloadHalfRows(ctx: GpuContext, xT: Tensor, idxT: Tensor): Promise<Uint16Array> {
  const x = asGpu(xT, "downloadHalfRows input", ctx);
  const idx = asGpu(idxT, "downloadHalfRows indices", ctx);
  expectRank(x, 2, "downloadHalfRows input", ["f16"]);
  expectRank(idx, 1, "downloadHalfRows indices", ["i32"]);
  const [rows, cols] = x.shape;
  if (idx.host) checkIndexRange(idx.host, rows, "Row index");
  if (cols % 2 !== 0) throw new BackendShapeError(`downloadHalfRows needs rows of whole words (an even width), got ${fmt(x.shape)}`);
  if (x.storage.chunks.length > 1) throw new BackendShapeError(`downloadHalfRows needs a table in one buffer, got ${x.storage.chunks.length} chunks`);
  const m = idx.shape[0];
  const words = cols / 2;
  const out = ctx.output([m * words], "i32");
  ctx.recorder.dispatch("gather_rows", { T: "u32", SCATTER: false }, [m, words, rows, 0], [[1, x.buffer], [2, idx.buffer], [3, out.buffer]], Math.ceil((m * words) / 256));
  try {
    const bits = (await download(ctx, out)) as Int32Array;
    return new Uint16Array(bits.buffer, bits.byteOffset, m * cols);
  } finally {
    ctx.release(out);
  }
}

/** Copies a [rows, width] window of src into dst (strides and offsets in elements). */
function copyColumns(
  ctx: GpuContext,
  src: PooledBuffer,
  dst: PooledBuffer,
  rows: number,
  width: number,
  from: { stride: number; offset: number },
  to: { stride: number; offset: number },
): void {
  const fields = [rows, width, from.stride, from.offset, to.stride, to.offset, 0, 0];
  ctx.recorder.dispatch("copy_columns", {}, fields, [[1, src], [2, dst]], Math.ceil((rows * width) / 256));
}

/** Columns start..start+width-1 of the last dim, copied. */
export function sliceColumns(ctx: GpuContext, xT: Tensor, start: number, width: number): Tensor {
  const x = asGpu(xT, "sliceColumns input", ctx);
  const { rows, cols, shape } = expectSliceColumnsShapes(x, start, width);
  const out = ctx.output(shape);
  copyColumns(ctx, x.buffer, out.buffer, rows, width, { stride: cols, offset: start }, { stride: width, offset: 0 });
  return out;
}

/** a and b side by side along the last dim. */
export function concatColumns(ctx: GpuContext, aT: Tensor, bT: Tensor): Tensor {
  const a = asGpu(aT, "concatColumns left operand", ctx);
  const b = asGpu(bT, "concatColumns right operand", ctx);
  const { rows, colsA, colsB, shape } = expectConcatColumnsShapes(a, b);
  const out = ctx.output(shape);
  const w = colsA + colsB;
  copyColumns(ctx, a.buffer, out.buffer, rows, colsA, { stride: colsA, offset: 0 }, { stride: w, offset: 0 });
  copyColumns(ctx, b.buffer, out.buffer, rows, colsB, { stride: colsB, offset: 0 }, { stride: w, offset: colsA });
  return out;
}

/** Rotary embedding on x [n, heads, headDim]. */
export function rope(
  ctx: GpuContext,
  xT: Tensor,
  posT: Tensor,
  theta: number,
  layout: RopeLayout,
  rotaryDim?: number,
  freqFactorsT?: Tensor,
  magnitude = 1,
): Tensor {
  const x = asGpu(xT, "rope input", ctx);
  const pos = asGpu(posT, "rope positions", ctx);
  const f = freqFactorsT && asGpu(freqFactorsT, "rope freqFactors", ctx);
  const { n, heads, headDim, rotaryDim: rd } = expectRopeArgs(x, pos, theta, layout, rotaryDim, f, magnitude);
  const bindings: [number, PooledBuffer][] = [[1, x.buffer], [2, pos.buffer]];
  if (f) bindings.push([4, f.buffer]);
  const out = ctx.output(x.shape);
  bindings.push([3, out.buffer]);
  const threads = n * heads * (rd / 2 + headDim - rd);
  ctx.recorder.dispatch(
    "rope",
    { NEOX: layout === "neox", FREQ_FACTORS: freqFactorsT !== undefined },
    [n, heads, headDim, rd, new F32(Math.log2(theta)), new F32(magnitude), 0, 0],
    bindings,
    Math.ceil(threads / 256),
  );
  return out;
}

/** Half bits written into rows `idx` of an f16 table [rows, width] (width even), word for word (Backend.writeHalfRows). Mutates x. */
export function writeHalfRows(ctx: GpuContext, xT: Tensor, idxT: Tensor, bits: Uint16Array): void {
  const x = asGpu(xT, "writeHalfRows table", ctx);
  const idx = asGpu(idxT, "writeHalfRows indices", ctx);
  expectRank(x, 2, "writeHalfRows table", ["f16"]);
  expectRank(idx, 1, "writeHalfRows indices", ["i32"]);
  const [rows, cols] = x.shape;
  if (idx.host) checkIndexRange(idx.host, rows, "Row index");
  const m = idx.shape[0];
  if (cols % 2 !== 0) throw new BackendShapeError(`writeHalfRows needs rows of whole words (an even width), got ${fmt(x.shape)}`);
  if (bits.length !== m * cols) throw new BackendShapeError(`writeHalfRows got ${bits.length} halves for ${m} rows of ${cols}`);
  if (m === 0) return;
  const words = cols / 2;
  // Two halves a word, the first in the low bits: the layout the table's buffer holds.
  const aligned = bits.byteOffset % 4 === 0 ? bits : new Uint16Array(bits);
  const src = upload(ctx, new Int32Array(aligned.buffer, aligned.byteOffset, m * words), [m * words], false) as GpuTensor;
  ctx.recorder.dispatch("gather_rows", { T: "u32", SCATTER: true }, [m, words, rows, 0], [[1, src.buffer], [2, idx.buffer], [3, x.buffer]], Math.ceil((m * words) / 256));
  ctx.release(src);
}

/**
 * Sampling on the device (see kernels-wgsl/sample.wgsl for the sort-free search), and the sparse
 * add that applies logit biases and penalties before it.
 */
import { type GpuContext } from "./context.ts";
import { asGpu, expectActivation, expectRank, fmt } from "./tensor.ts";
import { expectMaskShapes, expectRepeatShapes, expectSampledPenaltyShapes } from "../shape-checks.ts";
import { BackendShapeError, checkSamplingRow, effectiveTemperature, numel, type SamplingRow, type Tensor } from "../types.ts";

/** Row-wise sampling from logits [rows, vocab] → i32 [rows]. */
export function sample(ctx: GpuContext, logitsT: Tensor, rows: readonly SamplingRow[]): Tensor {
  const logits = asGpu(logitsT, "sample logits", ctx);
  expectRank(logits, 2, "sample logits", ["f32"]);
  const [n, vocab] = logits.shape;
  if (rows.length !== n) throw new BackendShapeError(`sample got ${rows.length} sampling rows for ${n} logit rows`);
  if (vocab === 0) throw new BackendShapeError("sample needs a non-empty vocabulary");
  rows.forEach(checkSamplingRow);
  // Two vec4s per row: (temperature, topK, topP, uniform), (minP, 0, 0, 0).
  const params = new Float32Array(n * 8);
  rows.forEach((r, i) => params.set([effectiveTemperature(r.temperature), Math.min(r.topK, 2 ** 24), r.topP, r.uniform, r.minP ?? 0], i * 8));
  const paramBuf = ctx.pool.acquire(params.byteLength);
  ctx.write(paramBuf, new Uint8Array(params.buffer));
  const scratch = ctx.scratch(n * vocab * 4);
  const out = ctx.output([n], "i32");
  const indexBits = vocab > 1 ? Math.ceil(Math.log2(vocab)) : 0;
  ctx.recorder.dispatch(
    "sample",
    {},
    [n, vocab, indexBits, 0],
    [[1, logits.buffer], [2, paramBuf], [3, scratch], [4, out.buffer]],
    n,
  );
  ctx.pool.release(scratch);
  ctx.pool.release(paramBuf);
  return out;
}

/** x.flat[index[i]] += values[i]; offsets distinct (the caller's duty: the kernel does not lock). Mutates x. */
export function scatterAdd(ctx: GpuContext, xT: Tensor, indexT: Tensor, valuesT: Tensor): void {
  const x = asGpu(xT, "scatterAdd target", ctx);
  const index = asGpu(indexT, "scatterAdd index", ctx);
  const values = asGpu(valuesT, "scatterAdd values", ctx);
  expectActivation(x, "scatterAdd target");
  expectRank(index, 1, "scatterAdd index", ["i32"]);
  expectRank(values, 1, "scatterAdd values", ["f32"]);
  const m = index.shape[0];
  if (values.shape[0] !== m) throw new BackendShapeError(`scatterAdd values ${fmt(values.shape)} do not match index ${fmt(index.shape)}`);
  if (m === 0) return;
  ctx.recorder.dispatch(
    "scatter_add",
    {},
    [m, numel(x.shape), 0, 0],
    [[1, x.buffer], [2, index.buffer], [3, values.buffer]],
    Math.ceil(m / 256),
  );
}

/** logits[rows[k], v] = -1e30 wherever bit v of bits[k] is 0 (Backend.maskLogits); rows distinct. Mutates logits. */
export function maskLogits(ctx: GpuContext, logitsT: Tensor, rowsT: Tensor, bitsT: Tensor): void {
  const logits = asGpu(logitsT, "maskLogits logits", ctx);
  const rows = asGpu(rowsT, "maskLogits rows", ctx);
  const bits = asGpu(bitsT, "maskLogits bits", ctx);
  const { n, vocab, m, words } = expectMaskShapes(logits, rows, bits);
  if (m === 0) return;
  ctx.recorder.dispatch(
    "mask_logits",
    {},
    [m, n, vocab, words],
    [[1, logits.buffer], [2, rows.buffer], [3, bits.buffer]],
    Math.ceil((m * words) / 256),
  );
}

/** Backend.penalizeRepeats: where bit v of bits[k] is 1, logits[rows[k], v] /= factors[k] if positive, else *= it; rows distinct. Mutates logits. */
export function penalizeRepeats(ctx: GpuContext, logitsT: Tensor, rowsT: Tensor, bitsT: Tensor, factorsT: Tensor): void {
  const logits = asGpu(logitsT, "penalizeRepeats logits", ctx);
  const rows = asGpu(rowsT, "penalizeRepeats rows", ctx);
  const bits = asGpu(bitsT, "penalizeRepeats bits", ctx);
  const factors = asGpu(factorsT, "penalizeRepeats factors", ctx);
  const { n, vocab, m, words } = expectRepeatShapes(logits, rows, bits, factors);
  if (m === 0) return;
  ctx.recorder.dispatch(
    "penalize_repeats",
    {},
    [m, n, vocab, words],
    [[1, logits.buffer], [2, rows.buffer], [3, bits.buffer], [4, factors.buffer]],
    Math.ceil((m * words) / 256),
  );
}

/** Backend.penalizeSampled: records each row's last sampled token, then penalizes its distinct tokens sampled on the device. Mutates logits and history. */
export function penalizeSampled(
  ctx: GpuContext, logitsT: Tensor, rowsT: Tensor, sampledT: Tensor, historyT: Tensor, count: number, seenT: Tensor, presentT: Tensor, paramsT: Tensor,
): void {
  const [logits, rows, sampled, history, seen, present, params] = ([
    [logitsT, "logits"], [rowsT, "rows"], [sampledT, "sampled"], [historyT, "history"], [seenT, "seen"], [presentT, "present"], [paramsT, "params"],
  ] as const).map(([t, what]) => asGpu(t, `penalizeSampled ${what}`, ctx));
  const { n, vocab, m, words, h } = expectSampledPenaltyShapes(logits, rows, sampled, history, count, seen, present, params);
  if (m === 0) return;
  ctx.recorder.dispatch(
    "penalize_sampled",
    {},
    [m, n, vocab, words, h, count],
    [[1, logits.buffer], [2, rows.buffer], [3, sampled.buffer], [4, history.buffer], [5, seen.buffer], [6, present.buffer], [7, params.buffer]],
    Math.ceil(m / 64),
  );
}

/**
 * matmul (GEMV for decode, register-blocked tiles for prefill) and embedding, against weights of
 * any dtype, including weights split into row chunks.
 */
import { type GpuContext } from "./context.ts";
import type { KernelParams } from "./kernel-source.ts";
import { asGpu, expectRank, fmt, type GpuTensor, rowsOf } from "./tensor.ts";
import { isBlockQuant } from "../quant-blocks.ts";
import { isIqDType } from "../quant-blocks-iq.ts";
import { deviceBytes, gridPrefix } from "./weight-layout.ts";
import { checkIndexRange } from "../shape-checks.ts";
import { BackendShapeError, type GluActivation, type Tensor, WEIGHT_DTYPES } from "../types.ts";

/** Template flags selecting the weight accessor for a dtype. */
export function weightParams(ctx: GpuContext, w: GpuTensor): KernelParams {
  return {
    W_F32: w.dtype === "f32",
    W_F16N: w.dtype === "f16" && ctx.gpu.f16,
    W_F16: w.dtype === "f16" && !ctx.gpu.f16,
    W_BF16: w.dtype === "bf16",
    W_Q8: w.dtype === "q8_0",
    W_BLOCKQ: isBlockQuant(w.dtype),
    W_Q4_0: w.dtype === "q4_0",
    W_Q4_1: w.dtype === "q4_1",
    W_Q5_0: w.dtype === "q5_0",
    W_Q5_1: w.dtype === "q5_1",
    W_Q2K: w.dtype === "q2_k",
    W_Q3K: w.dtype === "q3_k",
    W_Q4K: w.dtype === "q4_k",
    W_Q5K: w.dtype === "q5_k",
    W_Q6K: w.dtype === "q6_k",
    W_MXFP4: w.dtype === "mxfp4",
    W_F8E4M3: w.dtype === "f8_e4m3",
    W_IQ4NL: w.dtype === "iq4_nl",
    W_IQ4XS: w.dtype === "iq4_xs",
    W_IQ4: w.dtype === "iq4_nl" || w.dtype === "iq4_xs",
    W_IQ2XXS: w.dtype === "iq2_xxs",
    W_IQ2XS: w.dtype === "iq2_xs",
    W_IQ2S: w.dtype === "iq2_s",
    W_IQ3XXS: w.dtype === "iq3_xxs",
    W_IQ3S: w.dtype === "iq3_s",
    W_IQ1S: w.dtype === "iq1_s",
    W_IQ1M: w.dtype === "iq1_m",
    W_IQ1: w.dtype === "iq1_s" || w.dtype === "iq1_m",
    W_IQGRID: isIqDType(w.dtype),
    // The lattice i-quants' layout, as weight-layout.ts packs it: the grid's words ahead of each
    // chunk, then blocks of this many words per 256 values.
    IQ_GRID_WORDS: isIqDType(w.dtype) ? gridPrefix(w.dtype)!.byteLength / 4 : 0,
    IQ_BLOCK_WORDS: isIqDType(w.dtype) ? deviceBytes(w.dtype, 256) / 4 : 0,
    W_KQ45: w.dtype === "q4_k" || w.dtype === "q5_k",
  };
}

/** Row groups per workgroup of the register-blocked kernel: enough for n rows, at most 8. */
function rowThreads(n: number): number {
  return n <= 4 ? 1 : n <= 8 ? 2 : n <= 16 ? 4 : 8;
}

/** y [n, out] = x [n, in] · Wᵀ (+ bias) (+ residual [n, out], added as y is written). */
export function matmul(ctx: GpuContext, xT: Tensor, wT: Tensor, biasT?: Tensor, residualT?: Tensor): Tensor {
  const x = asGpu(xT, "matmul input", ctx);
  const w = asGpu(wT, "matmul weight", ctx);
  expectRank(x, 2, "matmul input", ["f32"]);
  expectRank(w, 2, "matmul weight", WEIGHT_DTYPES);
  const [n, k] = x.shape;
  const [m, kw] = w.shape;
  if (k !== kw) throw new BackendShapeError(`matmul input ${fmt(x.shape)} does not fit weight ${fmt(w.shape)}`);
  const bias = biasT && asGpu(biasT, "matmul bias", ctx);
  if (bias) {
    expectRank(bias, 1, "matmul bias", ["f32"]);
    if (bias.shape[0] !== m) throw new BackendShapeError(`matmul bias ${fmt(bias.shape)} does not fit weight ${fmt(w.shape)}`);
  }
  const residual = residualT && asGpu(residualT, "matmul residual", ctx);
  if (residual) {
    expectRank(residual, 2, "matmul residual", ["f32"]);
    if (residual.shape[0] !== n || residual.shape[1] !== m) {
      throw new BackendShapeError(`matmul residual ${fmt(residual.shape)} does not fit input ${fmt(x.shape)} and weight ${fmt(w.shape)}`);
    }
  }
  const y = ctx.output([n, m]);
  if (n === 0 || m === 0) return y;
  if (k === 0) {
    ctx.recorder.clear(y.buffer, n * m * 4);
    if (!bias && !residual) return y;
  }
  const gemv = n <= ctx.gemvMaxRows;
  const params = { ...weightParams(ctx, w), VEC4: k % 4 === 0, HAS_BIAS: bias !== undefined, HAS_RES: residual !== undefined };
  for (const chunk of w.storage.chunks) {
    const bindings: [number, typeof chunk.buffer][] = [[1, chunk.buffer], [2, x.buffer], [4, y.buffer]];
    if (bias) bindings.push([3, bias.buffer]);
    if (residual) bindings.push([5, residual.buffer]);
    if (gemv) {
      const perRow = Math.ceil(chunk.rows / 4);
      ctx.recorder.dispatch("matmul_gemv", params, [n, k, chunk.rows, m, chunk.rowStart, perRow, 0, 0], bindings, perRow * n);
    } else {
      const rt = rowThreads(n);
      const gm = Math.ceil(chunk.rows / ((64 / rt) * 4));
      ctx.recorder.dispatch(
        "matmul_tiled",
        { ...params, RT: rt },
        [n, k, chunk.rows, m, chunk.rowStart, gm, 0, 0],
        bindings,
        gm * Math.ceil(n / (4 * rt)),
      );
    }
  }
  return y;
}

/**
 * act(x · Gᵀ) ⊙ (x · Uᵀ) [n, out] in one dispatch per row chunk (matmul_glu_*.wgsl): G and U of one
 * dtype and shape, so their row chunks match.
 */
export function matmulGlu(ctx: GpuContext, xT: Tensor, gT: Tensor, uT: Tensor, activation: GluActivation): Tensor {
  const x = asGpu(xT, "matmulGlu input", ctx);
  const g = asGpu(gT, "matmulGlu gate weight", ctx);
  const u = asGpu(uT, "matmulGlu up weight", ctx);
  expectRank(x, 2, "matmulGlu input", ["f32"]);
  expectRank(g, 2, "matmulGlu gate weight", WEIGHT_DTYPES);
  expectRank(u, 2, "matmulGlu up weight", WEIGHT_DTYPES);
  if (g.dtype !== u.dtype || g.shape[0] !== u.shape[0] || g.shape[1] !== u.shape[1]) {
    throw new BackendShapeError(`matmulGlu gate weight ${fmt(g.shape)} ${g.dtype} and up weight ${fmt(u.shape)} ${u.dtype} differ`);
  }
  if (activation !== "silu" && activation !== "gelu") throw new BackendShapeError(`Unknown matmulGlu activation "${String(activation)}"`);
  const [n, k] = x.shape;
  const [m, kw] = g.shape;
  if (k !== kw) throw new BackendShapeError(`matmulGlu input ${fmt(x.shape)} does not fit weight ${fmt(g.shape)}`);
  const y = ctx.output([n, m]);
  if (n === 0 || m === 0) return y;
  const chunks = g.storage.chunks;
  if (chunks.length !== u.storage.chunks.length || chunks.some((c, i) => c.rows !== u.storage.chunks[i].rows)) {
    throw new BackendShapeError(`matmulGlu gate and up weights ${fmt(g.shape)} are split into different row chunks`);
  }
  const gemv = n <= ctx.gemvMaxRows;
  const params = { ...weightParams(ctx, g), VEC4: k % 4 === 0, GELU: activation === "gelu" };
  chunks.forEach((chunk, i) => {
    const bindings: [number, typeof chunk.buffer][] = [[1, chunk.buffer], [6, u.storage.chunks[i].buffer], [2, x.buffer], [4, y.buffer]];
    if (gemv) {
      const perRow = Math.ceil(chunk.rows / 4);
      ctx.recorder.dispatch("matmul_glu_gemv", params, [n, k, chunk.rows, m, chunk.rowStart, perRow, 0, 0], bindings, perRow * n);
    } else {
      const rt = rowThreads(n);
      // Two outputs a thread (of G and of U each): matmul_glu_tiled.wgsl.
      const gm = Math.ceil(chunk.rows / ((64 / rt) * 2));
      ctx.recorder.dispatch("matmul_glu_tiled", { ...params, RT: rt }, [n, k, chunk.rows, m, chunk.rowStart, gm, 0, 0], bindings, gm * Math.ceil(n / (4 * rt)));
    }
  });
  return y;
}

/**
 * [x · Wqᵀ, x · Wkᵀ, x · Wvᵀ] in one dispatch (matmul_qkv_*.wgsl), the weights of one dtype and input
 * width; as three matmuls where a weight is split into row chunks.
 */
export function matmulQkv(ctx: GpuContext, xT: Tensor, wqT: Tensor, wkT: Tensor, wvT: Tensor): [Tensor, Tensor, Tensor] {
  const x = asGpu(xT, "matmulQkv input", ctx);
  const ws = ([[wqT, "q"], [wkT, "k"], [wvT, "v"]] as const).map(([t, what]) => {
    const w = asGpu(t, `matmulQkv ${what} weight`, ctx);
    expectRank(w, 2, `matmulQkv ${what} weight`, WEIGHT_DTYPES);
    return w;
  });
  expectRank(x, 2, "matmulQkv input", ["f32"]);
  const [n, k] = x.shape;
  if (ws.some((w) => w.dtype !== ws[0].dtype || w.shape[1] !== k)) {
    throw new BackendShapeError(`matmulQkv weights ${ws.map((w) => `${fmt(w.shape)} ${w.dtype}`).join(", ")} do not share a dtype and input ${fmt(x.shape)}'s width`);
  }
  if (ws.some((w) => w.storage.chunks.length > 1)) return [matmul(ctx, x, ws[0]), matmul(ctx, x, ws[1]), matmul(ctx, x, ws[2])];
  const ys = ws.map((w) => ctx.output([n, w.shape[0]])) as [GpuTensor, GpuTensor, GpuTensor];
  const ms = ws.map((w) => w.shape[0]);
  if (n === 0 || k === 0 || ms.some((m) => m === 0)) {
    for (const [i, y] of ys.entries()) if (k === 0 && n > 0 && ms[i] > 0) ctx.recorder.clear(y.buffer, n * ms[i] * 4);
    return ys;
  }
  const gemv = n <= ctx.gemvMaxRows;
  const params = { ...weightParams(ctx, ws[0]), VEC4: k % 4 === 0 };
  const bindings: [number, GpuTensor["buffer"]][] = [
    [1, ws[0].storage.chunks[0].buffer], [6, ws[1].storage.chunks[0].buffer], [7, ws[2].storage.chunks[0].buffer],
    [2, x.buffer], [4, ys[0].buffer], [8, ys[1].buffer], [9, ys[2].buffer],
  ];
  if (gemv) {
    const gs = ms.map((m) => Math.ceil(m / 4));
    ctx.recorder.dispatch("matmul_qkv_gemv", params, [n, k, ...ms, ...gs], bindings, (gs[0] + gs[1] + gs[2]) * n);
  } else {
    const rt = rowThreads(n);
    const gs = ms.map((m) => Math.ceil(m / ((64 / rt) * 4)));
    ctx.recorder.dispatch("matmul_qkv_tiled", { ...params, RT: rt }, [n, k, ...ms, ...gs], bindings, (gs[0] + gs[1] + gs[2]) * Math.ceil(n / (4 * rt)));
  }
  return ys;
}

/** Gathers rows `ids` of a (possibly chunked) [rows, cols] weight into a fresh f32 [n, cols]. */
export function embeddingChunks(ctx: GpuContext, table: GpuTensor, ids: GpuTensor, n: number, cols: number): GpuTensor {
  const out = ctx.output([n, cols]);
  const params = weightParams(ctx, table);
  const single = table.storage.chunks.length === 1;
  const total = rowsOf(table.shape).rows;
  for (const c of table.storage.chunks) {
    // One buffer holds every row of whatever view this is (a KV cache seen as [slots, width]: its
    // chunk was recorded at allocation, not as this view's rows).
    const rows = single ? total : c.rows;
    ctx.recorder.dispatch(
      "embedding",
      params,
      [n, cols, c.rowStart, rows, total, 0, 0, 0],
      [[1, c.buffer], [2, ids.buffer], [3, out.buffer]],
      Math.ceil((n * cols) / 256),
    );
  }
  return out;
}

/** out[i, :] = table[ids[i], :] as f32. */
export function embedding(ctx: GpuContext, tableT: Tensor, idsT: Tensor): Tensor {
  const table = asGpu(tableT, "embedding table", ctx);
  const ids = asGpu(idsT, "embedding ids", ctx);
  expectRank(table, 2, "embedding table", WEIGHT_DTYPES);
  expectRank(ids, 1, "embedding ids", ["i32"]);
  // The kernel writes zeros for an id outside the table; an uploaded id list is checked here, as the other backends do.
  if (ids.host) checkIndexRange(ids.host, table.shape[0], "Token id");
  return embeddingChunks(ctx, table, ids, ids.shape[0], table.shape[1]);
}

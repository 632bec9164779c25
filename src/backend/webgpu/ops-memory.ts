/**
 * Memory ops of the WebGPU backend: upload, uploadWeight, zeros, download, reshape, free.
 */
import { type GpuContext } from "./context.ts";
import { asGpu, checkShape, fmt, GpuTensor, type RowChunk } from "./tensor.ts";
import { packWeight } from "./weight-layout.ts";
import { checkWeightShape } from "../shape-checks.ts";
import { embeddingChunks } from "./ops-linear.ts";
import { BackendShapeError, type KvDType, numel, type Tensor, type WeightDType } from "../types.ts";

/** Uploads f32 or i32 host data; i32 data keeps a host copy (indices) unless `hostCopy` is false (raw words). */
export function upload(ctx: GpuContext, data: Float32Array | Int32Array, shape: readonly number[], hostCopy = true): Tensor {
  const count = checkShape(shape, "upload");
  if (!(data instanceof Float32Array) && !(data instanceof Int32Array)) {
    throw new BackendShapeError("upload accepts only Float32Array or Int32Array data");
  }
  if (data.length !== count) throw new BackendShapeError(`upload got ${data.length} values for shape ${fmt(shape)}`);
  const pb = ctx.storage(shape, count * 4);
  ctx.write(pb, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  // An index tensor keeps a host copy, so ops can refuse out-of-range indices (slots, block ids) as the reference does.
  const chunks = [{ buffer: pb, rowStart: 0, rows: 1 }];
  if (data instanceof Float32Array) return ctx.wrap(shape, "f32", chunks);
  return ctx.wrap(shape, "i32", chunks, hostCopy ? new Int32Array(data) : undefined);
}

/** Uploads a weight in its file layout; see weight-layout.ts for the device layouts. */
export function uploadWeight(ctx: GpuContext, raw: Uint8Array, shape: readonly number[], dtype: WeightDType): Tensor {
  const count = checkWeightShape(shape, dtype, "uploadWeight");
  const cols = shape.length ? shape[shape.length - 1] : 1;
  const rows = cols ? count / cols : 0;
  const chunks: RowChunk[] = packWeight(raw, rows, cols, dtype, ctx.gpu.maxBinding).map((c) => {
    const pb = ctx.pool.acquire(Math.max(c.bytes.byteLength, 4));
    ctx.write(pb, c.bytes);
    return { buffer: pb, rowStart: c.rowStart, rows: c.rows };
  });
  return ctx.wrap(shape, dtype, chunks);
}

/** A zero-filled f32 or i32 tensor, or an f16 one (a KV cache: two halves per u32 word, as f16 weights). */
export function zeros(ctx: GpuContext, shape: readonly number[], dtype: "i32" | KvDType): Tensor {
  const count = checkShape(shape, "zeros");
  if (dtype !== "f32" && dtype !== "i32" && dtype !== "f16" && dtype !== "f8_e4m3") {
    throw new BackendShapeError(`zeros accepts f32, i32, f16 or f8_e4m3, got ${dtype}`);
  }
  if (dtype === "f8_e4m3" && count % 32 !== 0) throw new BackendShapeError(`An f8_e4m3 tensor needs whole 32-value blocks, got shape ${fmt(shape)}`);
  // f8_e4m3 zeros: every block's scale and codes 0.
  const bytes = dtype === "f16" ? Math.ceil(count / 2) * 4 : dtype === "f8_e4m3" ? (count / 32) * 36 : count * 4;
  const pb = ctx.storage(shape, bytes);
  ctx.recorder.clear(pb, Math.max(bytes, 4));
  return ctx.wrap(shape, dtype, [{ buffer: pb, rowStart: 0, rows: 1 }]);
}

/** Reads a tensor back; weights are dequantized on the device first. */
export async function download(ctx: GpuContext, t: Tensor): Promise<Float32Array | Int32Array> {
  let g = asGpu(t, "download tensor", ctx);
  ctx.recorder.assertLive();
  const count = numel(g.shape);
  let temp: GpuTensor | undefined;
  if (g.dtype !== "f32" && g.dtype !== "i32" || g.storage.chunks.length > 1) {
    const cols = g.shape.length ? g.shape[g.shape.length - 1] : 1;
    const rows = cols ? count / cols : 0;
    const ids = Int32Array.from({ length: rows }, (_, i) => i);
    const idT = upload(ctx, ids, [rows], false) as GpuTensor;
    temp = embeddingChunks(ctx, g, idT, rows, cols);
    ctx.release(idT);
    g = temp;
  }
  const bytes = count * 4;
  const isInt = g.dtype === "i32";
  if (bytes === 0) return isInt ? new Int32Array(0) : new Float32Array(0);
  const readback = ctx.gpu.device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  ctx.recorder.copy(g.buffer.buffer, 0, readback, 0, bytes);
  if (temp) ctx.release(temp);
  await ctx.recorder.checkPipelines();
  ctx.recorder.submit();
  // The queue wait that surfaces any validation error recorded with this batch, begun with the map:
  // Deno answers each on a 10 ms poll (never sooner, however long ago the work finished), so one after
  // the other cost two periods a download (docs/bench-engine.md "Deno's readback").
  const settled = ctx.recorder.flush();
  try {
    await readback.mapAsync(GPUMapMode.READ);
  } catch (e) {
    readback.destroy();
    await settled.catch(() => undefined);
    // On a lost device mapAsync rejects with an empty AbortError (Dawn) or a bare OperationError (Deno).
    throw await ctx.recorder.lostError() ?? e;
  }
  const copy = readback.getMappedRange().slice(0);
  readback.unmap();
  readback.destroy();
  await settled;
  return isInt ? new Int32Array(copy) : new Float32Array(copy);
}

/** A view with a new shape over the same storage. */
export function reshape(ctx: GpuContext, t: Tensor, shape: readonly number[]): Tensor {
  const g = asGpu(t, "reshape tensor", ctx);
  if (checkShape(shape, "reshape") !== numel(g.shape)) {
    throw new BackendShapeError(`Cannot reshape ${fmt(g.shape)} to ${fmt(shape)}`);
  }
  const chunks = g.storage.chunks.length;
  if (chunks > 1 && shape[shape.length - 1] !== g.shape[g.shape.length - 1]) {
    // Its chunks hold whole rows of the old last dim: a new one would read the wrong rows.
    throw new BackendShapeError(`Cannot reshape ${fmt(g.shape)} to ${fmt(shape)}: the weight is split into ${chunks} row chunks, so its last dim must stay`);
  }
  return new GpuTensor([...shape], g.dtype, g.storage, g.host);
}

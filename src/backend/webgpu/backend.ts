/**
 * The WebGPU backend: the Backend interface over a GpuContext, plus counters for benchmarks and
 * a poisoning switch for tests.
 */
import type { PoolStats } from "./buffer-pool.ts";
import { GpuContext, POISON_BITS } from "./context.ts";
import type { GpuDevice } from "./device.ts";
import { kvWrite, MAX_HEAD_DIM, pagedAttention } from "./ops-attention.ts";
import { embedding, matmul } from "./ops-linear.ts";
import { matmulExperts, moeCombine, moeRoute } from "./ops-experts.ts";
import { download, reshape, upload, uploadWeight, zeros } from "./ops-memory.ts";
import { add, argmax, concatColumns, downloadHalfRows, gatherRows, geluMul, writeHalfRows, rmsnorm, rope, siluMul, sliceColumns, softmax, swigluOai } from "./ops-rowwise.ts";
import { maskLogits, penalizeRepeats, sample, scatterAdd } from "./ops-sample.ts";
import type { RecorderStats } from "./recorder.ts";
import { asGpu, WEBGPU_NAME } from "./tensor.ts";
import type {
  AttentionBatch,
  AttentionOptions,
  Backend,
  BackendInfo,
  MoeRouteOptions,
  MoeRouting,
  RopeLayout,
  SamplingRow,
  Tensor,
  WeightDType,
} from "../types.ts";

/** Counters a WebGPU backend reports. */
export interface WebGpuStats {
  pool: PoolStats;
  recorder: RecorderStats;
}

/** The WebGPU implementation of Backend. */
export class WebGpuBackend implements Backend {
  readonly info: BackendInfo;
  readonly #ctx: GpuContext;
  #destroyed = false;

  constructor(gpu: GpuDevice, options: { poison: boolean; gemvMaxRows: number }) {
    this.#ctx = new GpuContext(gpu, options.poison, options.gemvMaxRows);
    this.info = { name: WEBGPU_NAME, device: gpu.description, f16: gpu.f16, kvDtypes: ["f32", "f16"], maxHeadDim: MAX_HEAD_DIM };
  }

  /** Byte counters of the buffer pool and dispatch/submit counts. */
  stats(): WebGpuStats {
    return { pool: this.#ctx.pool.stats(), recorder: this.#ctx.recorder.stats() };
  }

  /** Turns NaN poisoning of op outputs on or off. */
  setPoison(on: boolean): void {
    this.#ctx.poison = on;
  }

  /** Fills every buffer waiting in the pool with NaN, so a kernel that leaves an element unwritten is caught. */
  poisonFreeBuffers(): void {
    for (const pb of this.#ctx.pool.freeBuffers()) this.#ctx.fill(pb, pb.size / 4, POISON_BITS);
  }

  /** The device, for benchmark kernels that run outside the Backend ops. */
  get context(): GpuContext {
    return this.#ctx;
  }

  upload(data: Float32Array | Int32Array, shape: readonly number[]): Tensor {
    return upload(this.#ctx, data, shape);
  }
  uploadWeight(raw: Uint8Array, shape: readonly number[], dtype: WeightDType): Tensor {
    return uploadWeight(this.#ctx, raw, shape, dtype);
  }
  zeros(shape: readonly number[], dtype: "f32" | "i32" | "f16"): Tensor {
    return zeros(this.#ctx, shape, dtype);
  }
  download(t: Tensor): Promise<Float32Array | Int32Array> {
    return download(this.#ctx, t);
  }
  reshape(t: Tensor, shape: readonly number[]): Tensor {
    return reshape(t, shape);
  }
  free(t: Tensor): void {
    this.#ctx.release(asGpu(t, "free tensor"));
  }
  flush(): Promise<void> {
    return this.#ctx.recorder.flush();
  }
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#ctx.recorder.dropBindGroups();
    this.#ctx.pool.trim();
    this.#ctx.uniformPool.trim();
    this.#ctx.gpu.device.destroy();
  }

  embedding(table: Tensor, ids: Tensor): Tensor {
    return embedding(this.#ctx, table, ids);
  }
  rmsnorm(x: Tensor, weight: Tensor, eps: number): Tensor {
    return rmsnorm(this.#ctx, x, weight, eps);
  }
  matmul(x: Tensor, w: Tensor, bias?: Tensor): Tensor {
    return matmul(this.#ctx, x, w, bias);
  }
  rope(x: Tensor, positions: Tensor, theta: number, layout: RopeLayout, rotaryDim?: number, freqFactors?: Tensor): Tensor {
    return rope(this.#ctx, x, positions, theta, layout, rotaryDim, freqFactors);
  }
  kvWrite(k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor): void {
    kvWrite(this.#ctx, k, v, kCache, vCache, slots);
  }
  pagedAttention(q: Tensor, kCache: Tensor, vCache: Tensor, batch: AttentionBatch, scale: number, options?: AttentionOptions): Tensor {
    return pagedAttention(this.#ctx, q, kCache, vCache, batch, scale, options);
  }
  siluMul(gate: Tensor, up: Tensor): Tensor {
    return siluMul(this.#ctx, gate, up);
  }

  geluMul(gate: Tensor, up: Tensor): Tensor {
    return geluMul(this.#ctx, gate, up);
  }

  swigluOai(gate: Tensor, up: Tensor, alpha: number, limit: number): Tensor {
    return swigluOai(this.#ctx, gate, up, alpha, limit);
  }
  add(a: Tensor, b: Tensor): Tensor {
    return add(this.#ctx, a, b);
  }
  softmax(x: Tensor): Tensor {
    return softmax(this.#ctx, x);
  }
  argmax(x: Tensor): Tensor {
    return argmax(this.#ctx, x);
  }
  sample(logits: Tensor, rows: readonly SamplingRow[]): Tensor {
    return sample(this.#ctx, logits, rows);
  }
  scatterAdd(x: Tensor, index: Tensor, values: Tensor): void {
    scatterAdd(this.#ctx, x, index, values);
  }
  maskLogits(logits: Tensor, rows: Tensor, bits: Tensor): void {
    maskLogits(this.#ctx, logits, rows, bits);
  }

  penalizeRepeats(logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor): void {
    penalizeRepeats(this.#ctx, logits, rows, bits, factors);
  }
  gatherRows(x: Tensor, idx: Tensor): Tensor {
    return gatherRows(this.#ctx, x, idx);
  }

  downloadHalfRows(x: Tensor, idx: Tensor): Promise<Uint16Array> {
    return downloadHalfRows(this.#ctx, x, idx);
  }

  writeHalfRows(x: Tensor, idx: Tensor, bits: Uint16Array): void {
    writeHalfRows(this.#ctx, x, idx, bits);
  }
  sliceColumns(x: Tensor, start: number, width: number): Tensor {
    return sliceColumns(this.#ctx, x, start, width);
  }
  concatColumns(a: Tensor, b: Tensor): Tensor {
    return concatColumns(this.#ctx, a, b);
  }
  moeRoute(logits: Tensor, k: number, options: MoeRouteOptions): MoeRouting {
    return moeRoute(this.#ctx, logits, k, options);
  }
  matmulExperts(x: Tensor, w: Tensor, ids: Tensor): Tensor {
    return matmulExperts(this.#ctx, x, w, ids);
  }
  moeCombine(y: Tensor, weights: Tensor): Tensor {
    return moeCombine(this.#ctx, y, weights);
  }
}

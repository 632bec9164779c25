/**
 * The WebGPU backend: the Backend interface over a GpuContext, plus counters for benchmarks and
 * a poisoning switch for tests.
 */
import type { PoolStats } from "./buffer-pool.ts";
import { GpuContext, POISON_BITS } from "./context.ts";
import { type GpuDevice, WebGpuError } from "./device.ts";
import { kvWrite, MAX_HEAD_DIM, pagedAttention } from "./ops-attention.ts";
import { embedding, matmul, matmulGlu, matmulQkv } from "./ops-linear.ts";
import { matmulExperts, moeCombine, moeRoute } from "./ops-experts.ts";
import { download, reshape, upload, uploadWeight, zeros } from "./ops-memory.ts";
import { add, argmax, concatColumns, downloadHalfRows, gatherRows, gelu, geluMul, layerNorm, reluSquared, writeHalfRows, rmsnorm, rope, siluMul, sliceColumns, softcap, softmax, swigluOai } from "./ops-rowwise.ts";
import { causalConv1d, gatedDeltaNet, shortConv, sigmoidMul, ssmScan } from "./ops-recurrent.ts";
import { maskLogits, penalizeRepeats, penalizeSampled, sample, scatterAdd } from "./ops-sample.ts";
import type { RecorderStats } from "./recorder.ts";
import { asGpu, WEBGPU_NAME } from "./tensor.ts";
import type {
  AttentionBatch,
  AttentionOptions,
  Backend,
  BackendInfo,
  DeltaNetSpec,
  SsmSpec,
  GluActivation,
  KvDType,
  MoeRouteOptions,
  MoeRouting,
  RecurrentBatch,
  RopeLayout,
  RopeSpec,
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

  constructor(gpu: GpuDevice, options: { poison: boolean; gemvMaxRows: number; attentionSplitGroups: number }) {
    this.#ctx = new GpuContext(gpu, options.poison, options.gemvMaxRows, options.attentionSplitGroups);
    this.info = { name: WEBGPU_NAME, device: gpu.description, f16: gpu.f16, kvDtypes: ["f32", "f16", "f8_e4m3"], maxHeadDim: MAX_HEAD_DIM, preparesKernelsLazily: true };
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

  /** The context of a backend not yet destroyed: its device is gone after destroy(), and WebGPU would fail vaguely. */
  get #live(): GpuContext {
    if (this.#destroyed) throw new WebGpuError("The webgpu backend was destroyed; create a new one to run ops");
    return this.#ctx;
  }

  /** The device, for benchmark kernels that run outside the Backend ops. */
  get context(): GpuContext {
    return this.#ctx;
  }

  upload(data: Float32Array | Int32Array, shape: readonly number[]): Tensor {
    return upload(this.#live, data, shape);
  }
  uploadWeight(raw: Uint8Array, shape: readonly number[], dtype: WeightDType): Tensor {
    return uploadWeight(this.#live, raw, shape, dtype);
  }
  zeros(shape: readonly number[], dtype: "i32" | KvDType): Tensor {
    return zeros(this.#live, shape, dtype);
  }
  async download(t: Tensor): Promise<Float32Array | Int32Array> {
    return await download(this.#live, t);
  }
  reshape(t: Tensor, shape: readonly number[]): Tensor {
    return reshape(this.#live, t, shape);
  }
  free(t: Tensor): void {
    // destroy() released everything already; freeing afterwards (an engine stopping late) is harmless.
    if (this.#destroyed) return;
    this.#ctx.release(asGpu(t, "free tensor", this.#ctx));
  }
  async flush(): Promise<void> {
    await this.#live.recorder.flush();
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
    return embedding(this.#live, table, ids);
  }
  rmsnorm(x: Tensor, weight: Tensor, eps: number): Tensor {
    return rmsnorm(this.#live, x, weight, eps);
  }
  matmul(x: Tensor, w: Tensor, bias?: Tensor): Tensor {
    return matmul(this.#live, x, w, bias);
  }

  /** The routed experts' act(x · G[e]) ⊙ (x · U[e]) in one pass (matmul_experts_glu*.wgsl). */
  matmulExpertsGlu(x: Tensor, wGate: Tensor, wUp: Tensor, ids: Tensor, activation: GluActivation): Tensor {
    return matmulExperts(this.#live, x, wGate, ids, { up: wUp, activation });
  }

  /** q, k and v projections of one input in one dispatch (matmul_qkv_*.wgsl). */
  matmulQkv(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor): [Tensor, Tensor, Tensor] {
    return matmulQkv(this.#live, x, wq, wk, wv);
  }

  /** act(x · Gᵀ) ⊙ (x · Uᵀ) in one dispatch a row chunk (matmul_glu_*.wgsl). */
  matmulGlu(x: Tensor, wGate: Tensor, wUp: Tensor, activation: GluActivation): Tensor {
    return matmulGlu(this.#live, x, wGate, wUp, activation);
  }

  /** rope(q) in place, rope(k) and kvWrite in one dispatch (kv_write.wgsl with ROPE). */
  rotateAndWriteKv(q: Tensor, k: Tensor, v: Tensor, positions: Tensor, spec: RopeSpec, kCache: Tensor, vCache: Tensor, slots: Tensor): void {
    kvWrite(this.#live, k, v, kCache, vCache, slots, { q, positions, spec });
  }

  /** x · Wᵀ (+ bias) + residual, the residual added in the matmul's epilogue (one dispatch a chunk). */
  matmulAdd(x: Tensor, w: Tensor, residual: Tensor, bias?: Tensor): Tensor {
    return matmul(this.#live, x, w, bias, residual);
  }
  rope(x: Tensor, positions: Tensor, theta: number, layout: RopeLayout, rotaryDim?: number, freqFactors?: Tensor, magnitude?: number): Tensor {
    return rope(this.#live, x, positions, theta, layout, rotaryDim, freqFactors, magnitude);
  }
  kvWrite(k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor): void {
    kvWrite(this.#live, k, v, kCache, vCache, slots);
  }
  pagedAttention(q: Tensor, kCache: Tensor, vCache: Tensor, batch: AttentionBatch, scale: number, options?: AttentionOptions): Tensor {
    return pagedAttention(this.#live, q, kCache, vCache, batch, scale, options);
  }
  siluMul(gate: Tensor, up: Tensor): Tensor {
    return siluMul(this.#live, gate, up);
  }

  /** sigmoid(gate) · x, elementwise (sigmoid_mul.wgsl). */
  sigmoidMul(gate: Tensor, x: Tensor): Tensor {
    return sigmoidMul(this.#live, gate, x);
  }

  /** The causal convolution of Gated DeltaNet layers, its state updated in place (causal_conv1d.wgsl). */
  causalConv1d(x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, bias?: Tensor): Tensor {
    return causalConv1d(this.#live, x, weight, state, batch, bias);
  }

  /** LFM2's gated short convolution, its state updated in place (causal_conv1d.wgsl with GATED). */
  shortConv(bcx: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch): Tensor {
    return shortConv(this.#live, bcx, weight, state, batch);
  }

  /** The gated delta rule, its state updated in place (gated_delta_net.wgsl). */
  gatedDeltaNet(x: Tensor, alpha: Tensor, beta: Tensor, decay: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: DeltaNetSpec): Tensor {
    return gatedDeltaNet(this.#live, x, alpha, beta, decay, dtBias, state, batch, spec);
  }
  ssmScan(xbc: Tensor, dt: Tensor, a: Tensor, d: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: SsmSpec): Tensor {
    return ssmScan(this.#live, xbc, dt, a, d, dtBias, state, batch, spec);
  }

  layerNorm(x: Tensor, weight: Tensor, bias: Tensor | undefined, eps: number): Tensor {
    return layerNorm(this.#live, x, weight, bias, eps);
  }
  gelu(x: Tensor): Tensor {
    return gelu(this.#live, x);
  }
  reluSquared(x: Tensor): Tensor {
    return reluSquared(this.#live, x);
  }

  softcap(x: Tensor, cap: number): Tensor {
    return softcap(this.#live, x, cap);
  }

  geluMul(gate: Tensor, up: Tensor): Tensor {
    return geluMul(this.#live, gate, up);
  }

  swigluOai(gate: Tensor, up: Tensor, alpha: number, limit: number): Tensor {
    return swigluOai(this.#live, gate, up, alpha, limit);
  }
  add(a: Tensor, b: Tensor): Tensor {
    return add(this.#live, a, b);
  }
  softmax(x: Tensor): Tensor {
    return softmax(this.#live, x);
  }
  argmax(x: Tensor): Tensor {
    return argmax(this.#live, x);
  }
  sample(logits: Tensor, rows: readonly SamplingRow[]): Tensor {
    return sample(this.#live, logits, rows);
  }
  scatterAdd(x: Tensor, index: Tensor, values: Tensor): void {
    scatterAdd(this.#live, x, index, values);
  }
  maskLogits(logits: Tensor, rows: Tensor, bits: Tensor): void {
    maskLogits(this.#live, logits, rows, bits);
  }

  penalizeRepeats(logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor): void {
    penalizeRepeats(this.#live, logits, rows, bits, factors);
  }

  penalizeSampled(logits: Tensor, rows: Tensor, sampled: Tensor, history: Tensor, count: number, seen: Tensor, present: Tensor, params: Tensor): void {
    penalizeSampled(this.#live, logits, rows, sampled, history, count, seen, present, params);
  }
  gatherRows(x: Tensor, idx: Tensor): Tensor {
    return gatherRows(this.#live, x, idx);
  }

  async downloadHalfRows(x: Tensor, idx: Tensor): Promise<Uint16Array> {
    return await downloadHalfRows(this.#live, x, idx);
  }

  writeHalfRows(x: Tensor, idx: Tensor, bits: Uint16Array): void {
    writeHalfRows(this.#live, x, idx, bits);
  }
  sliceColumns(x: Tensor, start: number, width: number): Tensor {
    return sliceColumns(this.#live, x, start, width);
  }
  concatColumns(a: Tensor, b: Tensor): Tensor {
    return concatColumns(this.#live, a, b);
  }
  moeRoute(logits: Tensor, k: number, options: MoeRouteOptions): MoeRouting {
    return moeRoute(this.#live, logits, k, options);
  }
  matmulExperts(x: Tensor, w: Tensor, ids: Tensor): Tensor {
    return matmulExperts(this.#live, x, w, ids);
  }
  moeCombine(y: Tensor, weights: Tensor): Tensor {
    return moeCombine(this.#live, y, weights);
  }
}

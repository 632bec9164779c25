/**
 * What the CUDA backend offers beyond the Backend interface: fused ops that save a pass over
 * memory (residual add + rmsnorm; rope + KV write after a fused QKV projection) and benchmark
 * helpers (device-side random weights, a copy-bandwidth probe, event timing). Also the shared
 * validation helpers the backend's ops use.
 */
import { BackendShapeError, type RopeLayout, type Tensor } from "../types.ts";
import type { DevicePtr, NativeContext } from "./native-types.ts";
import { checkShape, CudaTensor, type CudaWeightDType, DTYPE_CODE, expect, fmt, rowsOf } from "./tensor.ts";
import { expectRopeTheta } from "../shape-checks.ts";

/** Result of the fused residual add + rmsnorm. */
export interface AddRmsnormResult {
  /** x + residual (the next residual stream). */
  sum: Tensor;
  /** rmsnorm(x + residual) * weight. */
  normed: Tensor;
}

/** Base of CudaBackend: the context, helpers, fused ops and benchmark hooks. */
export class CudaExtras {
  constructor(protected readonly ctx: NativeContext) {}

  /** sum = x + residual and normed = rmsnorm(sum) * weight, reading x and residual once. */
  addRmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: number): AddRmsnormResult {
    const xs = expect(x, undefined, "addRmsnorm input", ["f32"]);
    const rs = expect(residual, undefined, "addRmsnorm residual", ["f32"]);
    const w = expect(weight, 1, "addRmsnorm weight", ["f32"]);
    const { rows, cols } = rowsOf(xs.shape, "addRmsnorm input");
    if (rs.shape.length !== xs.shape.length || rs.shape.some((d, i) => d !== xs.shape[i]) || w.shape[0] !== cols) {
      throw new BackendShapeError(
        `addRmsnorm input ${fmt(xs.shape)}, residual ${fmt(rs.shape)} and weight ${fmt(w.shape)} do not fit`,
      );
    }
    if (cols > 16384) {
      throw new BackendShapeError(`addRmsnorm supports rows of at most 16384 values, got ${fmt(xs.shape)}`);
    }
    const [sum, normed] = this.ctx.addRmsnorm(xs.ptr, rs.ptr, w.ptr, rows, cols, eps);
    return { sum: this.f32(sum, xs.shape), normed: this.f32(normed, xs.shape) };
  }

  /**
   * After one matmul against concatenated [Wq; Wk; Wv]: qkv f32 [n, (heads + 2·kvHeads)·headDim].
   * Applies rope to q and k, writes k and v into the caches at `slots`, and returns q [n, heads, headDim].
   * `freqFactors` as for Backend.rope.
   */
  ropeKvWrite(
    qkv: Tensor, positions: Tensor, slots: Tensor, heads: number, theta: number, layout: RopeLayout,
    kCache: Tensor, vCache: Tensor, rotaryDim?: number, freqFactors?: Tensor,
  ): Tensor {
    const [kc, vc] = this.caches(kCache, vCache);
    const [numBlocks, blockSize, kvHeads, headDim] = kc.shape;
    const x = expect(qkv, 2, "ropeKvWrite qkv", ["f32"]);
    const p = expect(positions, 1, "ropeKvWrite positions", ["i32"]);
    const s = expect(slots, 1, "ropeKvWrite slots", ["i32"]);
    const n = x.shape[0];
    if (x.shape[1] !== (heads + 2 * kvHeads) * headDim || p.shape[0] !== n || s.shape[0] !== n) {
      throw new BackendShapeError(
        `ropeKvWrite qkv ${fmt(x.shape)}, positions ${fmt(p.shape)}, slots ${fmt(s.shape)} do not fit ${heads} heads and cache ${fmt(kc.shape)}`,
      );
    }
    const capacity = numBlocks * blockSize;
    if (s.host) this.checkIndices(s.host, capacity, "KV slot");
    expectRopeTheta(theta);
    const rd = this.rotaryDim(rotaryDim, headDim, layout);
    const f = this.freqFactors(freqFactors, rd);
    const q = this.ctx.ropeKvWrite(
      x.ptr, p.ptr, s.ptr, n, heads, kvHeads, headDim, rd, theta, layout === "neox" ? 1 : 0, kc.ptr, vc.ptr, capacity, f,
    );
    return this.f32(q, [n, heads, headDim]);
  }

  /** A weight of `shape` filled on the device with seeded values uniform in [-scale, scale]. */
  randomWeight(shape: readonly number[], dtype: CudaWeightDType, seed: number, scale: number): Tensor {
    const count = checkShape(shape, "randomWeight");
    if (dtype === "q8_0" && count % 32 !== 0) throw new BackendShapeError(`A q8_0 weight needs a multiple of 32 values, got ${fmt(shape)}`);
    return new CudaTensor(this.ctx.fillRandom(DTYPE_CODE[dtype], count, seed, scale), [...shape], dtype);
  }

  /** Measured device copy bandwidth in GB/s (bytes read + bytes written per second). */
  copyBandwidthGBps(bytes: number, iterations: number): number {
    const src = this.ctx.alloc(bytes);
    const dst = this.ctx.alloc(bytes);
    try {
      this.ctx.copyBytes(src, dst, bytes); // warm-up
      this.ctx.mark();
      for (let i = 0; i < iterations; i++) this.ctx.copyBytes(src, dst, bytes);
      const ms = this.ctx.sinceMarkMs();
      return (2 * bytes * iterations) / (ms / 1e3) / 1e9;
    } finally {
      this.ctx.free(src);
      this.ctx.free(dst);
    }
  }

  /** Device time in ms of the work `enqueue` puts on the stream (event timing). */
  timeMs(enqueue: () => void): number {
    this.ctx.mark();
    enqueue();
    return this.ctx.sinceMarkMs();
  }

  /** Which matmul kernel a shape takes: "gemv", "tensor-core" or "simt". */
  matmulPath(dtype: CudaWeightDType, n: number, k: number, out: number): "gemv" | "tensor-core" | "simt" {
    return (["gemv", "tensor-core", "simt"] as const)[this.ctx.matmulPath(DTYPE_CODE[dtype], n, k, out)];
  }

  protected f32(p: DevicePtr, shape: readonly number[]): CudaTensor {
    return new CudaTensor(p, [...shape], "f32");
  }

  protected caches(kCache: Tensor, vCache: Tensor): [CudaTensor, CudaTensor] {
    const k = expect(kCache, 4, "key cache", ["f32"]);
    const v = expect(vCache, 4, "value cache", ["f32"]);
    if (k.shape.some((d, i) => d !== v.shape[i])) {
      throw new BackendShapeError(`Key cache ${fmt(k.shape)} and value cache ${fmt(v.shape)} differ`);
    }
    return [k, v];
  }

  protected rotaryDim(rotaryDim: number | undefined, headDim: number, layout: RopeLayout): number {
    const rd = rotaryDim ?? headDim;
    if (!Number.isInteger(rd) || rd <= 0 || rd % 2 !== 0 || rd > headDim) {
      throw new BackendShapeError(`rope rotaryDim ${rd} must be even and within headDim ${headDim}`);
    }
    if (layout !== "normal" && layout !== "neox") throw new BackendShapeError(`Unknown rope layout "${layout}"`);
    return rd;
  }

  /** The device pointer of an optional f32 [rotaryDim / 2] frequency-divisor tensor, 0n when absent. */
  protected freqFactors(freqFactors: Tensor | undefined, rotaryDim: number): DevicePtr {
    if (!freqFactors) return 0n;
    const f = expect(freqFactors, 1, "rope freqFactors", ["f32"]);
    if (f.shape[0] !== rotaryDim / 2) {
      throw new BackendShapeError(`rope freqFactors ${fmt(f.shape)} should hold rotaryDim/2 = ${rotaryDim / 2} values`);
    }
    return f.ptr;
  }

  /** Host-side range check for index tensors whose values are known (the device cannot throw). */
  protected checkIndices(values: Int32Array, limit: number, what: string): void {
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v < 0 || v >= limit) throw new RangeError(`${what} ${v} at position ${i} is outside 0..${limit - 1}`);
    }
  }
}

/**
 * The CUDA backend's recurrent-state ops (kernels-cuda/recurrent.cu): the causal convolution and the
 * gated delta rule of Gated DeltaNet layers (Qwen3.5, Qwen3-Next). Both walk each sequence's rows in
 * order and update their state tensors in place; the sequence table's values are range-checked on the
 * host where an `upload`ed table keeps a copy, and the kernels skip a sequence out of range otherwise.
 */
import { checkRecurrentSeqs, expectConv1dShapes, expectDeltaNetShapes, expectShortConvShapes, expectSsmShapes } from "../shape-checks-recurrent.ts";
import { BackendShapeError, type DeltaNetSpec, type RecurrentBatch, type SsmSpec, type Tensor } from "../types.ts";
import { CudaExperts } from "./experts.ts";
import { type CudaTensor, expect, fmt } from "./tensor.ts";

/** The most taps causalConv1d takes on CUDA (kernels.h CONV1D_MAX_KERNEL: a channel's window lives in registers). */
export const CUDA_MAX_CONV1D_KERNEL = 8;

/** The largest key head dimension gatedDeltaNet takes on CUDA (kernels.h DELTA_NET_MAX_KEY_DIM: a state column spans at most 8 threads' registers). */
export const CUDA_MAX_DELTA_NET_KEY_DIM = 256;

/** The largest state dimension ssmScan takes on CUDA (kernels.h SSM_MAX_STATE_DIM: a state row spans one warp, 8 values a lane). */
export const CUDA_MAX_SSM_STATE_DIM = 256;

/** A grid's y extent, which the kernels give to channel tiles and value heads. */
const MAX_GRID_Y = 65535;

/** Base of CudaBackend that adds the recurrent-state ops of the Backend interface. */
export class CudaRecurrent extends CudaExperts {
  /**
   * Backend.causalConv1d: one thread per (sequence, channel), its K taps and K - 1 previous inputs in
   * registers; K at most {@link CUDA_MAX_CONV1D_KERNEL}.
   */
  causalConv1d(x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, bias?: Tensor): Tensor {
    return this.#conv1d("causalConv1d", x, weight, state, batch, false, bias);
  }

  /** Backend.shortConv: the causal convolution's kernel, gated (B·x in, C times the sum out). */
  shortConv(bcx: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch): Tensor {
    return this.#conv1d("shortConv", bcx, weight, state, batch, true);
  }

  #conv1d(op: "causalConv1d" | "shortConv", x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, gated: boolean, bias?: Tensor): Tensor {
    // The shared checks first, so a bad call reads the same on every backend.
    const { n, channels, kernel, slots } = gated ? expectShortConvShapes(x, weight, state, batch) : expectConv1dShapes(x, weight, state, batch, bias);
    const b = bias === undefined ? undefined : expect(bias, 1, `${op} bias`, ["f32"]);
    const xs = expect(x, 2, `${op} input`, ["f32"]);
    const w = expect(weight, 2, `${op} weight`, ["f32"]);
    const st = expect(state, 3, `${op} state`, ["f32"]);
    const seqs = expect(batch.seqs, 2, "recurrent sequence table", ["i32"]);
    if (kernel > CUDA_MAX_CONV1D_KERNEL) {
      throw new BackendShapeError(`${op} on CUDA takes at most ${CUDA_MAX_CONV1D_KERNEL} taps, got weight ${fmt(w.shape)}`);
    }
    if (Math.ceil(channels / 128) > MAX_GRID_Y) {
      throw new BackendShapeError(`${op} on CUDA takes at most ${MAX_GRID_Y * 128} channels, got input ${fmt(xs.shape)}`);
    }
    const zero = this.uncovered(seqs, n, slots);
    return this.f32(this.ctx.causalConv1d(xs.ptr, w.ptr, st.ptr, seqs.ptr, batch.numSeqs, n, channels, kernel, slots, zero, gated ? 1 : 0, b?.ptr ?? 0n), [n, channels]);
  }

  /**
   * Backend.gatedDeltaNet: one block per (sequence, value head, tile of state columns), each column
   * held in registers by 1 to 8 threads; headKDim at most {@link CUDA_MAX_DELTA_NET_KEY_DIM}.
   */
  gatedDeltaNet(
    x: Tensor, alpha: Tensor, beta: Tensor, decay: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: DeltaNetSpec,
  ): Tensor {
    const { n, slots } = expectDeltaNetShapes(x, alpha, beta, decay, dtBias, state, batch, spec);
    const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
    const [xs, a, b, d, bias] = ([[x, "input", 2], [alpha, "alpha", 2], [beta, "beta", 2], [decay, "decay", 1], [dtBias, "dtBias", 1]] as const)
      .map(([t, what, rank]) => expect(t, rank, `gatedDeltaNet ${what}`, ["f32"]));
    const st = expect(state, 4, "gatedDeltaNet state", ["f32"]);
    const seqs = expect(batch.seqs, 2, "recurrent sequence table", ["i32"]);
    if (dk > CUDA_MAX_DELTA_NET_KEY_DIM) {
      throw new BackendShapeError(`gatedDeltaNet on CUDA takes a key head dimension of at most ${CUDA_MAX_DELTA_NET_KEY_DIM}, got headKDim ${dk}`);
    }
    if (nv > MAX_GRID_Y) throw new BackendShapeError(`gatedDeltaNet on CUDA takes at most ${MAX_GRID_Y} value heads, got numVHeads ${nv}`);
    const zero = this.uncovered(seqs, n, slots);
    const grouped = spec.vHeadOrder === "grouped" ? 1 : 0;
    const out = this.ctx.gatedDeltaNet(
      xs.ptr, a.ptr, b.ptr, d.ptr, bias.ptr, st.ptr, seqs.ptr, batch.numSeqs, n, nk, nv, dk, dv, grouped, spec.eps, slots, zero,
    );
    return this.f32(out, [n, nv * dv]);
  }

  /**
   * Backend.ssmScan: one warp per (sequence, head, state row), the row's stateDim values spread over its
   * lanes; stateDim at most {@link CUDA_MAX_SSM_STATE_DIM}.
   */
  ssmScan(xbc: Tensor, dt: Tensor, a: Tensor, d: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: SsmSpec): Tensor {
    const { n, slots } = expectSsmShapes(xbc, dt, a, d, dtBias, state, batch, spec);
    const { heads, headDim, stateDim, groups } = spec;
    const [xs, dts, as, ds, bias] = ([[xbc, "input", 2], [dt, "dt", 2], [a, "a", 1], [d, "d", 1], [dtBias, "dtBias", 1]] as const)
      .map(([t, what, rank]) => expect(t, rank, `ssmScan ${what}`, ["f32"]));
    const st = expect(state, 4, "ssmScan state", ["f32"]);
    const seqs = expect(batch.seqs, 2, "recurrent sequence table", ["i32"]);
    if (stateDim > CUDA_MAX_SSM_STATE_DIM) throw new BackendShapeError(`ssmScan on CUDA takes a state dimension of at most ${CUDA_MAX_SSM_STATE_DIM}, got stateDim ${stateDim}`);
    if (heads > MAX_GRID_Y) throw new BackendShapeError(`ssmScan on CUDA takes at most ${MAX_GRID_Y} heads, got ${heads}`);
    const zero = this.uncovered(seqs, n, slots);
    const out = this.ctx.ssmScan(xs.ptr, dts.ptr, as.ptr, ds.ptr, bias.ptr, st.ptr, seqs.ptr, batch.numSeqs, n, heads, headDim, stateDim, groups, slots, zero);
    return this.f32(out, [n, heads * headDim]);
  }

  /**
   * Range-checks a sequence table's host copy (RangeError naming the bad value, before anything is
   * written); returns 1 where some row of the step may belong to no sequence, so the kernel's output is
   * cleared first and such rows read 0, as on the reference: always without a host copy.
   */
  private uncovered(seqs: CudaTensor, rows: number, slots: number): number {
    if (!seqs.host) return 1;
    checkRecurrentSeqs(seqs.host, rows, slots);
    const covered = new Uint8Array(rows);
    let count = 0;
    for (let s = 0; s * 4 < seqs.host.length; s++) {
      const first = seqs.host[s * 4];
      for (let r = first; r < first + seqs.host[s * 4 + 1]; r++) {
        if (!covered[r]) count++;
        covered[r] = 1;
      }
    }
    return count === rows ? 0 : 1;
  }
}

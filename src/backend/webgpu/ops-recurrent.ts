/**
 * The ops of Gated DeltaNet layers (Qwen3.5, Qwen3-Next): sigmoidMul (sigmoid_mul.wgsl), the causal
 * convolution (causal_conv1d.wgsl) and the gated delta rule (gated_delta_net.wgsl). Both recurrent
 * ops update their state tensor in place, a sequence at a time in its rows' order; an uploaded
 * sequence table is checked on the host first (the kernels skip what is out of range in op results).
 */
import { type GpuContext } from "./context.ts";
import { F32 } from "./recorder.ts";
import { asGpu, expectActivation, expectSameShape, fmt, type GpuTensor } from "./tensor.ts";
import { BackendShapeError, type DeltaNetSpec, numel, type RecurrentBatch, type SsmSpec, type Tensor } from "../types.ts";
import { checkRecurrentSeqs, expectConv1dShapes, expectDeltaNetShapes, expectShortConvShapes, expectSsmShapes } from "../shape-checks-recurrent.ts";

/** Widest convolution causal_conv1d.wgsl supports (its window and weights live in registers). */
export const MAX_CONV_KERNEL = 8;
/** Widest key head gated_delta_net.wgsl supports (each invocation holds a state column of this many values). */
export const MAX_DELTA_NET_KEY_DIM = 256;
/** Widest state ssm_scan.wgsl supports (each invocation holds a state row of this many values). */
export const MAX_SSM_STATE_DIM = 256;
/** Columns of the delta rule's state one workgroup updates (gated_delta_net.wgsl `WG`). */
const DELTA_NET_WG = 64;
/** Invocations per workgroup of causal_conv1d.wgsl. */
const CONV_WG = 64;

/** sigmoid(gate) · x, elementwise (Backend.sigmoidMul). */
export function sigmoidMul(ctx: GpuContext, gateT: Tensor, xT: Tensor): Tensor {
  const gate = asGpu(gateT, "sigmoidMul gate", ctx);
  const x = asGpu(xT, "sigmoidMul input", ctx);
  expectActivation(gate, "sigmoidMul gate");
  expectActivation(x, "sigmoidMul input");
  expectSameShape(gate, x, "sigmoidMul");
  const n = numel(x.shape);
  const out = ctx.output(x.shape);
  ctx.recorder.dispatch("sigmoid_mul", {}, [n, 0, 0, 0], [[1, gate.buffer], [2, x.buffer], [3, out.buffer]], Math.ceil(n / 256));
  return out;
}

/** The sequence table of a step, checked on the host where it was uploaded. */
function seqTable(ctx: GpuContext, batch: RecurrentBatch, rows: number, slots: number): GpuTensor {
  const seqs = asGpu(batch.seqs, "recurrent sequence table", ctx);
  if (seqs.host) checkRecurrentSeqs(seqs.host, rows, slots);
  return seqs;
}

/**
 * Depthwise causal convolution with SiLU, carrying each sequence's last K - 1 inputs in its state
 * slot (Backend.causalConv1d): x [n, C], weight [C, K], state [slots, K - 1, C] (updated) → [n, C].
 */
export function causalConv1d(ctx: GpuContext, xT: Tensor, weightT: Tensor, stateT: Tensor, batch: RecurrentBatch, biasT?: Tensor): Tensor {
  return conv1d(ctx, "causalConv1d", xT, weightT, stateT, batch, false, biasT);
}

/**
 * LFM2's gated short convolution (Backend.shortConv): bcx [n, 3C] (B, C, x), weight [C, K], state
 * [slots, K - 1, C] (updated) → [n, C]; causal_conv1d.wgsl with GATED.
 */
export function shortConv(ctx: GpuContext, bcxT: Tensor, weightT: Tensor, stateT: Tensor, batch: RecurrentBatch): Tensor {
  return conv1d(ctx, "shortConv", bcxT, weightT, stateT, batch, true);
}

/** Both convolutions: causal_conv1d.wgsl, GATED or not. */
function conv1d(ctx: GpuContext, op: "causalConv1d" | "shortConv", xT: Tensor, weightT: Tensor, stateT: Tensor, batch: RecurrentBatch, gated: boolean, biasT?: Tensor): Tensor {
  const x = asGpu(xT, `${op} input`, ctx);
  const weight = asGpu(weightT, `${op} weight`, ctx);
  const state = asGpu(stateT, `${op} state`, ctx);
  const bias = biasT === undefined ? undefined : asGpu(biasT, `${op} bias`, ctx);
  const { n, channels, kernel, slots } = gated ? expectShortConvShapes(x, weight, state, batch) : expectConv1dShapes(x, weight, state, batch, bias);
  if (kernel > MAX_CONV_KERNEL) {
    throw new BackendShapeError(`${op} kernel width ${kernel} (weight ${fmt(weight.shape)}) exceeds the webgpu backend's ${MAX_CONV_KERNEL}`);
  }
  const seqs = seqTable(ctx, batch, n, slots);
  const out = ctx.output([n, channels]);
  ctx.recorder.dispatch(
    "causal_conv1d",
    { GATED: gated ? 1 : 0 },
    [n, channels, kernel, slots, batch.numSeqs, bias ? 1 : 0, 0, 0],
    // Without a bias its binding takes the weights (never read then).
    [[1, x.buffer], [2, weight.buffer], [3, state.buffer], [4, seqs.buffer], [5, out.buffer], [6, (bias ?? weight).buffer]],
    Math.ceil((batch.numSeqs * channels) / CONV_WG),
  );
  return out;
}

/** The private-array bucket of gated_delta_net.wgsl for key heads of `dk` dims. */
function keyDimBucket(dk: number): number {
  for (const b of [32, 64, 128]) if (dk <= b) return b;
  return MAX_DELTA_NET_KEY_DIM;
}

/**
 * The gated delta rule over each sequence's rows, its state [slots, nv, dk, dv] updated in place
 * (Backend.gatedDeltaNet) → [n, nv · dv].
 */
export function gatedDeltaNet(
  ctx: GpuContext,
  xT: Tensor,
  alphaT: Tensor,
  betaT: Tensor,
  decayT: Tensor,
  dtBiasT: Tensor,
  stateT: Tensor,
  batch: RecurrentBatch,
  spec: DeltaNetSpec,
): Tensor {
  const x = asGpu(xT, "gatedDeltaNet input", ctx);
  const alpha = asGpu(alphaT, "gatedDeltaNet alpha", ctx);
  const beta = asGpu(betaT, "gatedDeltaNet beta", ctx);
  const decay = asGpu(decayT, "gatedDeltaNet decay", ctx);
  const dtBias = asGpu(dtBiasT, "gatedDeltaNet dtBias", ctx);
  const state = asGpu(stateT, "gatedDeltaNet state", ctx);
  const { n, width, slots } = expectDeltaNetShapes(x, alpha, beta, decay, dtBias, state, batch, spec);
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
  if (dk > MAX_DELTA_NET_KEY_DIM) {
    throw new BackendShapeError(`gatedDeltaNet key head dimension ${dk} exceeds the webgpu backend's ${MAX_DELTA_NET_KEY_DIM}`);
  }
  const seqs = seqTable(ctx, batch, n, slots);
  const out = ctx.output([n, nv * dv]);
  const blocks = Math.ceil(dv / DELTA_NET_WG);
  ctx.recorder.dispatch(
    "gated_delta_net",
    { DKM: keyDimBucket(dk) },
    [n, width, nk, nv, dk, dv, slots, batch.numSeqs, blocks, spec.vHeadOrder === "tiled" ? 1 : 0, new F32(spec.eps), new F32(1 / Math.sqrt(dk))],
    [
      [1, x.buffer], [2, alpha.buffer], [3, beta.buffer], [4, decay.buffer], [5, dtBias.buffer],
      [6, state.buffer], [7, seqs.buffer], [8, out.buffer],
    ],
    batch.numSeqs * nv * blocks,
  );
  return out;
}

/**
 * Mamba-2's scan over each sequence's rows, its state [slots, heads, headDim, stateDim] updated in
 * place (Backend.ssmScan) → [n, heads · headDim].
 */
export function ssmScan(
  ctx: GpuContext, xbcT: Tensor, dtT: Tensor, aT: Tensor, dT: Tensor, dtBiasT: Tensor, stateT: Tensor, batch: RecurrentBatch, spec: SsmSpec,
): Tensor {
  const xbc = asGpu(xbcT, "ssmScan input", ctx);
  const dt = asGpu(dtT, "ssmScan dt", ctx);
  const a = asGpu(aT, "ssmScan a", ctx);
  const d = asGpu(dT, "ssmScan d", ctx);
  const dtBias = asGpu(dtBiasT, "ssmScan dtBias", ctx);
  const state = asGpu(stateT, "ssmScan state", ctx);
  const { n, width, slots } = expectSsmShapes(xbc, dt, a, d, dtBias, state, batch, spec);
  const { heads, headDim, stateDim, groups } = spec;
  if (stateDim > MAX_SSM_STATE_DIM) throw new BackendShapeError(`ssmScan state dimension ${stateDim} exceeds the webgpu backend's ${MAX_SSM_STATE_DIM}`);
  const seqs = seqTable(ctx, batch, n, slots);
  const out = ctx.output([n, heads * headDim]);
  const blocks = Math.ceil(headDim / DELTA_NET_WG);
  ctx.recorder.dispatch(
    "ssm_scan",
    { DSM: keyDimBucket(stateDim) },
    [n, width, heads, headDim, stateDim, groups, slots, batch.numSeqs, blocks, 0, 0, 0],
    [[1, xbc.buffer], [2, dt.buffer], [3, a.buffer], [4, d.buffer], [5, dtBias.buffer], [6, state.buffer], [7, seqs.buffer], [8, out.buffer]],
    batch.numSeqs * heads * blocks,
  );
  return out;
}

/**
 * The mixing blocks of layers with recurrent state. A Gated DeltaNet layer's with its residual add (Qwen3.5; ModelConfig.deltaNet): norm;
 * q, k and v projected together, then the causal convolution with SiLU over each sequence's recent
 * inputs (Backend.causalConv1d); the gated delta rule over each value head's state matrix
 * (Backend.gatedDeltaNet, with beta and the decay's alpha projected from the same input); each value
 * head's output RMS-normed and gated by SiLU of its own projection (z); the output projection. The
 * state tensors carry each sequence's convolution inputs and matrices from step to step. LFM2's short
 * convolution block (ModelConfig.shortConv): norm; B, C and x projected together; Backend.shortConv
 * (C ⊙ conv(B ⊙ x), its last inputs carried in the state); the output projection. Granite 4.0-H's
 * Mamba-2 block (ModelConfig.mamba2): the selective scan over a [headDim, stateDim] state per head.
 */
import type { Backend, DeltaNetSpec, RecurrentBatch, Tensor } from "../backend/types.ts";
import type { LayerWeights } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { ForwardInputError } from "./forward-batch.ts";
import { matmulPlus, preNorm, type Project, scaled, type Scratch } from "./forward-layers.ts";

/** The Gated DeltaNet ops a backend must have to run such a layer. */
export type DeltaNetOps = Required<Pick<Backend, "causalConv1d" | "gatedDeltaNet">>;

/** `backend`'s Gated DeltaNet ops, or an error naming what it lacks. */
export function deltaNetOps(backend: Backend): DeltaNetOps {
  const { causalConv1d, gatedDeltaNet } = backend;
  if (!causalConv1d || !gatedDeltaNet) throw new ForwardInputError(`The ${backend.info.name} backend lacks the Gated DeltaNet ops (causalConv1d, gatedDeltaNet) this model needs`);
  return { causalConv1d: causalConv1d.bind(backend), gatedDeltaNet: gatedDeltaNet.bind(backend) };
}

/** The step's sequences as the recurrent ops read them: each entry's rows, state slot, and whether it starts at position 0. */
export function recurrentSeqTable(entries: readonly { tokens: readonly number[]; startPos: number; stateSlot?: number }[], slots: number): Int32Array {
  const table = new Int32Array(entries.length * 4);
  let row = 0;
  entries.forEach((e, i) => {
    const slot = e.stateSlot;
    if (slot === undefined || !Number.isInteger(slot) || slot < 0 || slot >= slots) {
      throw new ForwardInputError(`Entry ${i} needs a recurrent state slot in 0..${slots - 1} (this model has Gated DeltaNet layers), got ${slot}`);
    }
    table.set([row, e.tokens.length, slot, e.startPos === 0 ? 1 : 0], i * 4);
    row += e.tokens.length;
  });
  return table;
}

/** One Gated DeltaNet layer over the step, plus the residual `x`; `project` adds the projections' adapter deltas. */
export function deltaNetBlock(
  backend: Backend, ops: DeltaNetOps, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, batch: RecurrentBatch, conv: Tensor, ssm: Tensor, s: Scratch,
  project?: Project,
): Tensor {
  const c = model.config;
  const d = c.deltaNet!;
  const { ssmQkv, ssmZ, ssmBeta, ssmAlpha, ssmConv, ssmDtBias, ssmDecay, ssmNorm, ssmOut } = l;
  if (!ssmQkv || !ssmZ || !ssmBeta || !ssmAlpha || !ssmConv || !ssmDtBias || !ssmDecay || !ssmNorm || !ssmOut) {
    throw new ForwardInputError("The model config asks for a Gated DeltaNet layer but the weights lack it");
  }
  const n = x.shape[0];
  const mm: Project = project ?? ((a, w, _bias, _target, r) => matmulPlus(backend, a, w, undefined, r, s));
  const h = preNorm(backend, model, l.attnNorm, x, s);
  const qkv = s.keep(mm(h, ssmQkv, undefined, "ssmQkv"));
  const z = s.keep(mm(h, ssmZ, undefined, "ssmZ"));
  const beta = s.keep(mm(h, ssmBeta, undefined, "ssmBeta"));
  const alpha = s.keep(mm(h, ssmAlpha, undefined, "ssmAlpha"));
  const mixed = s.keep(ops.causalConv1d(qkv, ssmConv, conv, batch));
  const spec: DeltaNetSpec = { numKHeads: d.numKHeads, numVHeads: d.numVHeads, headKDim: d.headKDim, headVDim: d.headVDim, vHeadOrder: d.vHeadOrder, eps: c.rmsNormEps };
  const o = s.keep(ops.gatedDeltaNet(mixed, alpha, beta, ssmDecay, ssmDtBias, ssm, batch, spec));
  // Each value head's output normed over its own dims, then gated by SiLU of z.
  const heads = [n * d.numVHeads, d.headVDim];
  const normed = s.keep(backend.rmsnorm(backend.reshape(o, heads), ssmNorm, c.rmsNormEps));
  const gated = s.keep(backend.siluMul(backend.reshape(z, heads), normed));
  return mm(backend.reshape(gated, [n, d.numVHeads * d.headVDim]), ssmOut, undefined, "ssmOut", x);
}

/** The short convolution op a backend must have to run LFM2's layers. */
export type ShortConvOp = NonNullable<Backend["shortConv"]>;

/** `backend`'s short convolution, or an error naming what it lacks. */
export function shortConvOp(backend: Backend): ShortConvOp {
  if (!backend.shortConv) throw new ForwardInputError(`The ${backend.info.name} backend lacks the short convolution op (shortConv) this model needs`);
  return backend.shortConv.bind(backend);
}

/** One short convolution layer (LFM2) over the step, plus the residual `x`; `project` adds the projections' adapter deltas. */
export function shortConvBlock(
  backend: Backend, op: ShortConvOp, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, batch: RecurrentBatch, conv: Tensor, s: Scratch, project?: Project,
): Tensor {
  const { convIn, convWeight, convOut } = l;
  if (!convIn || !convWeight || !convOut) throw new ForwardInputError("The model config asks for a short convolution layer but the weights lack it");
  const mm: Project = project ?? ((a, w, _bias, _target, r) => matmulPlus(backend, a, w, undefined, r, s));
  const h = preNorm(backend, model, l.attnNorm, x, s);
  const bcx = s.keep(mm(h, convIn, undefined, "convIn"));
  const y = s.keep(op(bcx, convWeight, conv, batch));
  return mm(y, convOut, undefined, "convOut", x);
}

/** The Mamba-2 ops a backend must have to run such a layer. */
export type Mamba2Ops = Required<Pick<Backend, "causalConv1d" | "ssmScan">>;

/** `backend`'s Mamba-2 ops, or an error naming what it lacks. */
export function mamba2Ops(backend: Backend): Mamba2Ops {
  const { causalConv1d, ssmScan } = backend;
  if (!causalConv1d || !ssmScan) throw new ForwardInputError(`The ${backend.info.name} backend lacks the Mamba-2 ops (causalConv1d, ssmScan) this model needs`);
  return { causalConv1d: causalConv1d.bind(backend), ssmScan: ssmScan.bind(backend) };
}

/**
 * One Mamba-2 layer (Granite 4.0-H, Nemotron-H, Falcon-H1) over the step, plus `residual` (by default
 * `x`; Falcon-H1's: `x` with its attention's output added): norm; z, x·B·C and dt from one projection;
 * the causal convolution with its bias and SiLU over x·B·C; the scan (Backend.ssmScan, D's skip
 * included); SiLU(z) times its output, RMS-normed (unless Mamba2Config.unnormed); the output
 * projection, scaled where the model scales blocks before the residual (ModelConfig.residualScale).
 */
export function mamba2Block(
  backend: Backend, ops: Mamba2Ops, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, batch: RecurrentBatch, conv: Tensor, ssm: Tensor, s: Scratch,
  project?: Project, residual: Tensor = x,
): Tensor {
  const c = model.config;
  const m = c.mamba2!;
  const { ssmIn, ssmConv, ssmConvBias, ssmDtBias, ssmDecay, ssmD, ssmNorm, ssmOut } = l;
  if (!ssmIn || !ssmConv || !ssmConvBias || !ssmDtBias || !ssmDecay || !ssmD || (!ssmNorm && !m.unnormed) || !ssmOut) {
    throw new ForwardInputError("The model config asks for a Mamba-2 layer but the weights lack it");
  }
  const mm: Project = project ?? ((a, w, _bias, _target, r) => matmulPlus(backend, a, w, undefined, r, s));
  const h = preNorm(backend, model, l.attnNorm, x, s);
  const channels = m.innerSize + 2 * m.groups * m.stateSize;
  const zxbcdt = s.keep(mm(h, ssmIn, undefined, "ssmIn"));
  const z = s.keep(backend.sliceColumns(zxbcdt, 0, m.innerSize));
  const xbc = s.keep(backend.sliceColumns(zxbcdt, m.innerSize, channels));
  const dt = s.keep(backend.sliceColumns(zxbcdt, m.innerSize + channels, m.heads));
  const mixed = s.keep(ops.causalConv1d(xbc, ssmConv, conv, batch, ssmConvBias));
  const spec = { heads: m.heads, headDim: m.innerSize / m.heads, stateDim: m.stateSize, groups: m.groups };
  const y = s.keep(ops.ssmScan(mixed, dt, backend.reshape(ssmDecay, [m.heads]), backend.reshape(ssmD, [m.heads]), ssmDtBias, ssm, batch, spec));
  // The gated norm runs per group (llama.cpp's grouped RMS norm): each token's width as `groups` rows, weighed by its group's row of ssmNorm.
  const width = m.innerSize / m.groups;
  const norm = (t: Tensor) =>
    !ssmNorm
      ? t
      : m.groups === 1
      ? s.keep(backend.rmsnorm(t, backend.reshape(ssmNorm, [m.innerSize]), c.rmsNormEps))
      : backend.reshape(s.keep(backend.rmsnorm(backend.reshape(t, [t.shape[0] * m.groups, width]), backend.reshape(ssmNorm, [m.groups, width]), c.rmsNormEps)), [t.shape[0], m.innerSize]);
  const normed = m.normBeforeGate ? s.keep(backend.siluMul(z, norm(y))) : norm(s.keep(backend.siluMul(z, y)));
  if (c.residualScale === undefined) return mm(normed, ssmOut, undefined, "ssmOut", residual);
  const o = s.keep(mm(normed, ssmOut, undefined, "ssmOut"));
  return backend.add(residual, s.keep(scaled(backend, o, c.residualScale)));
}

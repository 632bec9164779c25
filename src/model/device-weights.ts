/**
 * Moves a loaded model's host weights onto a backend. Matrices keep their storage dtype
 * (f32/f16/bf16/q8_0); norm weights and biases become f32 because the ops take them as f32.
 */
import { type DeviceVision, freeVision, uploadVision } from "./vision/vision-encoder.ts";
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { type Backend, numel, type Tensor } from "../backend/types.ts";
import { attentionGeometries, type HostTensor, type LayerWeights, type LoadedModel, type ModelConfig, type ModelWeights, type MtpWeights } from "./config.ts";

/** A model whose weights live on a backend: what `forward` consumes. */
export interface DeviceModel {
  config: ModelConfig;
  weights: ModelWeights<Tensor>;
  /** config.ropeFreqFactors as f32 [rotaryDim / 2], uploaded once for every layer's rope. */
  ropeFreqFactors?: Tensor;
  /** Weights of ones [headDim] for each head size, where values are normed without a weight (ModelConfig.valueNorm: Gemma 4). */
  unitNorms?: ReadonlyMap<number, Tensor>;
  /** The vision tower (LoadedModel.vision), uploaded: it gives images' rows (model/vision/vision-encoder.ts). */
  vision?: DeviceVision;
}

/** Uploads a matrix in its own dtype. */
function uploadMatrix(backend: Backend, t: HostTensor): Tensor {
  return backend.uploadWeight(t.data, t.shape, t.dtype);
}

/** Uploads a vector (norm weight, bias) as f32. */
function uploadVector(backend: Backend, t: HostTensor): Tensor {
  const count = numel(t.shape);
  return backend.upload(decodeToF32(t.data, t.dtype, count), [count]);
}

function uploadOptional(backend: Backend, t: HostTensor | undefined): Tensor | undefined {
  return t === undefined ? undefined : uploadVector(backend, t);
}

function uploadOptionalMatrix(backend: Backend, t: HostTensor | undefined): Tensor | undefined {
  return t === undefined ? undefined : uploadMatrix(backend, t);
}

/** Uploads a table of biases (one row per expert) as f32 in its shape, for Backend.gatherRows. */
function uploadOptionalF32(backend: Backend, t: HostTensor | undefined): Tensor | undefined {
  return t === undefined ? undefined : backend.upload(decodeToF32(t.data, t.dtype, numel(t.shape)), t.shape);
}

function uploadLayer(backend: Backend, l: LayerWeights<HostTensor>): LayerWeights<Tensor> {
  return {
    attnNorm: uploadOptional(backend, l.attnNorm),
    wq: uploadOptionalMatrix(backend, l.wq),
    wk: uploadOptionalMatrix(backend, l.wk),
    wv: uploadOptionalMatrix(backend, l.wv),
    wo: uploadOptionalMatrix(backend, l.wo),
    wqA: uploadOptionalMatrix(backend, l.wqA),
    qANorm: uploadOptional(backend, l.qANorm),
    wkvA: uploadOptionalMatrix(backend, l.wkvA),
    kvANorm: uploadOptional(backend, l.kvANorm),
    wkB: uploadOptionalMatrix(backend, l.wkB),
    wvB: uploadOptionalMatrix(backend, l.wvB),
    bq: uploadOptional(backend, l.bq),
    bk: uploadOptional(backend, l.bk),
    bv: uploadOptional(backend, l.bv),
    qNorm: uploadOptional(backend, l.qNorm),
    kNorm: uploadOptional(backend, l.kNorm),
    attnPostNorm: uploadOptional(backend, l.attnPostNorm),
    ffnPostNorm: uploadOptional(backend, l.ffnPostNorm),
    ffnNorm: uploadOptional(backend, l.ffnNorm),
    ffnPostNorm1: uploadOptional(backend, l.ffnPostNorm1),
    ffnPreNorm2: uploadOptional(backend, l.ffnPreNorm2),
    ffnPostNorm2: uploadOptional(backend, l.ffnPostNorm2),
    routerNorm: uploadOptional(backend, l.routerNorm),
    expertScale: uploadOptionalF32(backend, l.expertScale),
    pleGate: uploadOptionalMatrix(backend, l.pleGate),
    pleProj: uploadOptionalMatrix(backend, l.pleProj),
    plePostNorm: uploadOptional(backend, l.plePostNorm),
    wGate: uploadOptionalMatrix(backend, l.wGate),
    wUp: uploadOptionalMatrix(backend, l.wUp),
    wDown: uploadOptionalMatrix(backend, l.wDown),
    router: uploadOptionalMatrix(backend, l.router),
    routerBias: uploadOptional(backend, l.routerBias),
    wGateShared: uploadOptionalMatrix(backend, l.wGateShared),
    wUpShared: uploadOptionalMatrix(backend, l.wUpShared),
    wDownShared: uploadOptionalMatrix(backend, l.wDownShared),
    sharedGate: uploadOptionalMatrix(backend, l.sharedGate),
    bo: uploadOptional(backend, l.bo),
    sinks: uploadOptional(backend, l.sinks),
    routerLogitBias: uploadOptional(backend, l.routerLogitBias),
    bGate: uploadOptionalF32(backend, l.bGate),
    bUp: uploadOptionalF32(backend, l.bUp),
    bDown: uploadOptionalF32(backend, l.bDown),
    ssmQkv: uploadOptionalMatrix(backend, l.ssmQkv),
    ssmZ: uploadOptionalMatrix(backend, l.ssmZ),
    ssmBeta: uploadOptionalMatrix(backend, l.ssmBeta),
    ssmAlpha: uploadOptionalMatrix(backend, l.ssmAlpha),
    ssmConv: uploadOptionalF32(backend, l.ssmConv),
    ssmDtBias: uploadOptional(backend, l.ssmDtBias),
    ssmDecay: uploadOptional(backend, l.ssmDecay),
    ssmNorm: uploadOptional(backend, l.ssmNorm),
    ssmOut: uploadOptionalMatrix(backend, l.ssmOut),
    convIn: uploadOptionalMatrix(backend, l.convIn),
    convWeight: uploadOptionalF32(backend, l.convWeight),
    convOut: uploadOptionalMatrix(backend, l.convOut),
    ssmIn: uploadOptionalMatrix(backend, l.ssmIn),
    ssmConvBias: uploadOptional(backend, l.ssmConvBias),
    ssmD: uploadOptional(backend, l.ssmD),
  };
}

/** Uploads every weight of `model` to `backend`. */
export function uploadModel(backend: Backend, model: Pick<LoadedModel, "config" | "weights" | "vision">): DeviceModel {
  const w = model.weights;
  return {
    config: model.config,
    weights: {
      tokenEmbedding: uploadMatrix(backend, w.tokenEmbedding),
      layers: w.layers.map((l) => uploadLayer(backend, l)),
      outputNorm: uploadVector(backend, w.outputNorm),
      output: w.output === undefined ? undefined : uploadMatrix(backend, w.output),
      ...(w.perLayerEmbedding && w.perLayerModelProj && w.perLayerProjNorm
        ? { perLayerEmbedding: uploadMatrix(backend, w.perLayerEmbedding), perLayerModelProj: uploadMatrix(backend, w.perLayerModelProj), perLayerProjNorm: uploadVector(backend, w.perLayerProjNorm) }
        : {}),
      ...(w.mtp ? { mtp: uploadMtp(backend, w.mtp) } : {}),
    },
    ropeFreqFactors: uploadFreqFactors(backend, model.config),
    ...(model.config.valueNorm ? { unitNorms: uploadUnitNorms(backend, model.config) } : {}),
    ...(model.vision ? { vision: uploadVision(backend, model.vision) } : {}),
  };
}

/** Uploads a multi-token-prediction block (or an EAGLE head run as one). */
function uploadMtp(backend: Backend, m: MtpWeights<HostTensor>): MtpWeights<Tensor> {
  return {
    layer: uploadLayer(backend, m.layer),
    ehProj: uploadMatrix(backend, m.ehProj),
    ...(m.enorm ? { enorm: uploadVector(backend, m.enorm) } : {}),
    ...(m.hnorm ? { hnorm: uploadVector(backend, m.hnorm) } : {}),
    ...(m.headNorm ? { headNorm: uploadVector(backend, m.headNorm) } : {}),
    ...(m.head ? { head: uploadMatrix(backend, m.head) } : {}),
    ...(m.embedding ? { embedding: uploadMatrix(backend, m.embedding) } : {}),
    ...(m.ehBias ? { ehBias: uploadVector(backend, m.ehBias) } : {}),
    ...(m.fcInNorm ? { fcInNorm: uploadVector(backend, m.fcInNorm) } : {}),
    ...(m.draftEmbedding ? { draftEmbedding: uploadMatrix(backend, m.draftEmbedding) } : {}),
    ...(m.ropeFreqFactors ? { ropeFreqFactors: uploadVector(backend, m.ropeFreqFactors) } : {}),
  };
}

/** A weight of ones for each head size of the model's attending layers. */
function uploadUnitNorms(backend: Backend, config: ModelConfig): Map<number, Tensor> {
  const out = new Map<number, Tensor>();
  for (const { headDim } of attentionGeometries(config)) if (!out.has(headDim)) out.set(headDim, backend.upload(new Float32Array(headDim).fill(1), [headDim]));
  return out;
}

function uploadFreqFactors(backend: Backend, config: ModelConfig): Tensor | undefined {
  const f = config.ropeFreqFactors;
  return f === undefined ? undefined : backend.upload(Float32Array.from(f), [f.length]);
}

/** Frees every device weight of a model uploaded with `uploadModel`. */
export function freeDeviceModel(backend: Backend, model: DeviceModel): void {
  const w = model.weights;
  const all: (Tensor | undefined)[] = [w.tokenEmbedding, w.outputNorm, w.output, w.perLayerEmbedding, w.perLayerModelProj, w.perLayerProjNorm, model.ropeFreqFactors, ...(model.unitNorms?.values() ?? [])];
  for (const l of w.layers) all.push(...Object.values(l));
  if (w.mtp) {
    const { layer, ...rest } = w.mtp;
    all.push(...Object.values(layer), ...Object.values(rest));
  }
  for (const t of all) if (t !== undefined) backend.free(t);
  if (model.vision) freeVision(backend, model.vision);
}

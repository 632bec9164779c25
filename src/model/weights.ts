/**
 * Gathers a model's host weights from any tensor source (GGUF, safetensors) under that format's
 * names, checks every shape against the config, converts norms and biases to f32 and reports
 * progress. Both loaders share it so the forward sees one layout whatever the file.
 */
import { blockValues, decodeToF32, encodeFromF32 } from "../backend/dtype-codec.ts";
import { numel, WEIGHT_DTYPES, type WeightDType } from "../backend/types.ts";
import { isIqDType, type IqDType } from "../backend/quant-blocks-iq.ts";
import { type HostTensor, isDeltaNetLayer, layerAttention, isFeedForwardOnlyLayer, isMamba2Layer, isMoeLayer, isShortConvLayer, type LayerWeights, type ModelConfig, ModelLoadError, type ModelWeights, type MoeConfig } from "./config.ts";
import { EXPERT } from "./expert-stack.ts";

/** Progress of a load: bytes of tensor data read so far out of the total. */
export interface LoadProgress {
  bytesRead: number;
  totalBytes: number;
  /** A one-time remark on the first progress call, e.g. that an FP8 checkpoint's matrices were widened to bf16 (hf-loader.ts). */
  note?: string;
}

/** `options` whose progress callback carries `note` on its first call (nothing changes without a note or a callback). */
export function withLoadNote(options: LoadOptions, note: string | undefined): LoadOptions {
  const onProgress = options.onProgress;
  if (!note || !onProgress) return options;
  let pending: string | undefined = note;
  return {
    ...options,
    onProgress: (p) => {
      onProgress(pending ? { ...p, note: pending } : p);
      pending = undefined;
    },
  };
}

/** Options every loader accepts. */
export interface LoadOptions {
  /** Called after each tensor is read. */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Quantize the matrices (embedding, projections, output) stored as f32, f16, bf16 or FP8 (an FP8
   * checkpoint's) into this block format as they are read (`--quantize`); tensors already in a GGUF
   * block format, norms and biases, and matrices whose rows are not whole blocks stay as stored.
   */
  quantize?: QuantizeDType;
  /**
   * Loads the model's first multi-token-prediction block too (ModelConfig.mtp), for speculative
   * decoding's "mtp" method; a model without one is refused.
   */
  mtp?: boolean;
  /** Attaches the EAGLE head in directory `path` (model/eagle-head.ts), for speculative decoding's "eagle3" or "eagle" method. */
  eagle?: { method: "eagle" | "eagle3"; path: string };
  /** Loads the vision tower in llama.cpp projector file `path` (`--mmproj`, model/vision/mmproj.ts): prompts may then hold images. */
  mmproj?: string;
}

/**
 * The formats `--quantize` writes: every block format but q2_k, q3_k and the 2–3-bit lattice i-quants, whose
 * round-to-nearest encoders (2 and 3 bits without llama.cpp's error-minimising, importance-weighted
 * search) lose too much to offer; files that hold them still load.
 */
export type QuantizeDType = Exclude<WeightDType, "f32" | "f16" | "bf16" | "q2_k" | "q3_k" | IqDType>;

/** The `--quantize` choices, for CLIs and checks. */
export const QUANTIZE_DTYPES: readonly QuantizeDType[] = WEIGHT_DTYPES.filter(
  (d): d is QuantizeDType => blockValues(d) > 1 && d !== "q2_k" && d !== "q3_k" && !isIqDType(d),
);

/** True when `s` names a `--quantize` format. */
export function isQuantizeDType(s: string): s is QuantizeDType {
  return (QUANTIZE_DTYPES as readonly string[]).includes(s);
}

/**
 * `t` in block format `dtype` when it is an f32/f16/bf16 or FP8 (f8_e4m3, an FP8 checkpoint's) matrix
 * (or stack of experts' matrices) whose rows hold whole blocks; else `t`.
 */
export function quantizeTensor(t: HostTensor, dtype: QuantizeDType): HostTensor {
  const rows = t.shape[t.shape.length - 1] ?? 0;
  const matrix = t.shape.length === 2 || t.shape.length === 3; // a 3-D weight stacks experts' matrices
  const float = t.dtype === "f32" || t.dtype === "f16" || t.dtype === "bf16" || t.dtype === "f8_e4m3";
  if (!matrix || !float || t.dtype === dtype || rows % blockValues(dtype) !== 0) return t;
  const values = decodeToF32(t.data, t.dtype, numel(t.shape));
  return { name: t.name, shape: t.shape, dtype, data: encodeFromF32(values, dtype) };
}

/** Where tensors come from: names in the file's own convention. */
export interface TensorSource {
  has(name: string): boolean;
  /** Stored size in bytes (for progress totals). */
  byteLength(name: string): number;
  read(name: string): Promise<HostTensor>;
}

/** Per-role layer tensor names of a file format. */
export type LayerRole = keyof LayerWeights<unknown>;

/** A file format's naming of model tensors. */
export interface TensorNames {
  tokenEmbedding: string;
  outputNorm: string;
  output: string;
  /** Gemma 4 E2B/E4B's per-layer input tensors (ModelWeights.perLayer*), where the format names them. */
  perLayer?: { embedding: string; modelProj: string; projNorm: string };
  layer(index: number, role: LayerRole): string;
  /** A multi-token-prediction block's own tensors (MtpWeights), where the format names them (GGUF's `blk.N.nextn.*`). */
  nextn?(index: number, part: NextnPart): string;
}

/** A multi-token-prediction block's own tensors, besides its layer's. */
export type NextnPart = "ehProj" | "enorm" | "hnorm" | "headNorm" | "head" | "embedding";

/** Architectures whose multi-token-prediction block the engine runs (LoadOptions.mtp). */
export const MTP_ARCHITECTURES: readonly string[] = ["glm4moe", "deepseek2", "qwen35", "qwen35moe", "qwen3next"];

const NORM_OR_BIAS: ReadonlySet<LayerRole> = new Set<LayerRole>([
  "ssmConv", "ssmDtBias", "ssmDecay", "ssmNorm", "ssmConvBias", "ssmD", "attnNorm", "ffnNorm", "attnPostNorm", "ffnPostNorm", "qNorm", "kNorm", "qANorm", "kvANorm", "bq", "bk", "bv", "routerBias",
  "bo", "sinks", "routerLogitBias", "bGate", "bUp", "bDown", "ffnPostNorm1", "ffnPreNorm2", "ffnPostNorm2", "routerNorm", "expertScale", "plePostNorm",
]);

/** Small tensors kept as stored (not quantized): llama.cpp's quantizer leaves them too, and their rounding would change which experts run. */
const KEEP_AS_STORED: ReadonlySet<LayerRole> = new Set<LayerRole>(["router", "sharedGate"]);

/** Shapes of the multi-head latent attention roles ({@link MlaConfig}). */
function mlaShape(c: ModelConfig, role: LayerRole): number[] | undefined {
  const m = c.mla;
  if (!m) return undefined;
  const h = c.numHeads;
  switch (role) {
    case "wq":
      return [h * (m.nopeDim + m.ropeDim), m.qLoraRank > 0 ? m.qLoraRank : c.hiddenSize];
    case "wqA":
      return [m.qLoraRank, c.hiddenSize];
    case "qANorm":
      return [m.qLoraRank];
    case "wkvA":
      return [m.kvLoraRank + m.ropeDim, c.hiddenSize];
    case "kvANorm":
      return [m.kvLoraRank];
    case "wkB":
      return [h, m.kvLoraRank, m.nopeDim];
    case "wvB":
      return [h, m.vHeadDim, m.kvLoraRank];
    case "wo":
      return [c.hiddenSize, h * m.vHeadDim];
    default:
      return undefined;
  }
}

/** Shapes of the Gated DeltaNet roles ({@link DeltaNetConfig}). */
function deltaNetShape(c: ModelConfig, role: LayerRole): number[] | undefined {
  const d = c.deltaNet;
  if (!d) return undefined;
  const keys = d.numKHeads * d.headKDim;
  const values = d.numVHeads * d.headVDim;
  switch (role) {
    case "ssmQkv":
      return [2 * keys + values, c.hiddenSize];
    case "ssmZ":
      return [values, c.hiddenSize];
    case "ssmBeta":
    case "ssmAlpha":
      return [d.numVHeads, c.hiddenSize];
    case "ssmConv":
      return [2 * keys + values, d.convKernel];
    case "ssmDtBias":
    case "ssmDecay":
      return [d.numVHeads];
    case "ssmNorm":
      return [d.headVDim];
    case "ssmOut":
      return [c.hiddenSize, values];
    default:
      return undefined;
  }
}

/** Shapes of a Mamba-2 layer's roles ({@link Mamba2Config}). */
function mamba2Shape(c: ModelConfig, role: LayerRole): number[] | undefined {
  const m = c.mamba2;
  if (!m) return undefined;
  const channels = m.innerSize + 2 * m.groups * m.stateSize;
  switch (role) {
    case "ssmIn":
      return [m.innerSize + channels + m.heads, c.hiddenSize];
    case "ssmConv":
      return [channels, m.convKernel];
    case "ssmConvBias":
      return [channels];
    case "ssmDtBias":
      return [m.heads];
    case "ssmDecay":
    case "ssmD":
      return [m.heads, 1];
    case "ssmNorm":
      return [m.groups, m.innerSize / m.groups];
    case "ssmOut":
      return [c.hiddenSize, m.innerSize];
    default:
      return undefined;
  }
}

/** Shapes of a short convolution layer's roles ({@link ShortConvConfig}). */
function shortConvShape(c: ModelConfig, role: LayerRole): number[] | undefined {
  const k = c.shortConv?.kernel;
  if (k === undefined) return undefined;
  if (role === "convIn") return [3 * c.hiddenSize, c.hiddenSize];
  if (role === "convWeight") return [c.hiddenSize, k];
  if (role === "convOut") return [c.hiddenSize, c.hiddenSize];
  return undefined;
}

function expectedLayerShape(c: ModelConfig, role: LayerRole, layer: number): number[] {
  const mla = mlaShape(c, role) ?? deltaNetShape(c, role) ?? shortConvShape(c, role) ?? mamba2Shape(c, role);
  if (mla) return mla;
  // Gemma 4's sliding layers have heads of their own size.
  const { headDim, numKvHeads } = layerAttention(c, layer);
  const q = c.numHeads * headDim;
  const kv = numKvHeads * headDim;
  // An MoE layer stacks its experts' feed-forward matrices; a leading dense layer has its own width.
  const sparse = isMoeLayer(c, layer);
  const experts = sparse ? [c.moe!.numExperts] : [];
  const ff = c.moe && !sparse ? c.moe.denseIntermediateSize : c.layerIntermediateSizes?.[layer] ?? c.intermediateSize;
  const shared = c.moe?.sharedIntermediateSize ?? 0;
  switch (role) {
    case "attnNorm":
    case "ffnNorm":
    case "attnPostNorm":
    case "ffnPostNorm":
      return [c.hiddenSize];
    case "wq":
      // Qwen3.5's gated attention: each head's query, then its gate.
      return [c.attnOutputGate ? 2 * q : q, c.hiddenSize];
    case "wk":
    case "wv":
      return [kv, c.hiddenSize];
    case "wo":
      return [c.hiddenSize, q];
    case "bq":
      return [q];
    case "bk":
    case "bv":
      return [kv];
    case "qNorm":
      return [c.qkNormPerRow ? q : headDim];
    case "kNorm":
      return [c.qkNormPerRow ? kv : headDim];
    case "wGate":
    case "wUp":
      return [...experts, ff, c.hiddenSize];
    case "wDown":
      return [...experts, c.hiddenSize, ff];
    case "router":
      return [c.moe?.numExperts ?? 0, c.hiddenSize];
    case "routerBias":
      return [c.moe?.numExperts ?? 0];
    case "wGateShared":
    case "wUpShared":
      return [shared, c.hiddenSize];
    case "wDownShared":
      return [c.hiddenSize, shared];
    case "sharedGate":
      return [1, c.hiddenSize];
    case "bo":
      return [c.hiddenSize];
    case "sinks":
      return [c.numHeads];
    case "ffnPostNorm1":
    case "ffnPreNorm2":
    case "ffnPostNorm2":
    case "routerNorm":
      return [c.hiddenSize];
    case "expertScale":
      return [c.moe?.numExperts ?? 0];
    case "pleGate":
      return [c.perLayerInput?.width ?? 0, c.hiddenSize];
    case "pleProj":
      return [c.hiddenSize, c.perLayerInput?.width ?? 0];
    case "plePostNorm":
      return [c.hiddenSize];
    case "routerLogitBias":
      return [c.moe?.numExperts ?? 0];
    case "bGate":
    case "bUp":
      return [...experts, ff];
    case "bDown":
      return [...experts, c.hiddenSize];
    default:
      throw new ModelLoadError(`Layer weight "${role}" belongs to multi-head latent attention, which this model does not use`);
  }
}

/** The roles layer `i` of a model has, in the order they are read. */
export function layerRoles(config: ModelConfig, i: number): LayerRole[] {
  // Nemotron-H: a layer is one block behind attnNorm.
  if (isFeedForwardOnlyLayer(config, i)) {
    const moe = config.moe;
    if (!moe || !isMoeLayer(config, i)) return ["attnNorm", "wUp", "wDown", ...(config.ffnBias ? ["bUp", "bDown"] as const : [])];
    // Nemotron 3's experts: ungated, as its shared expert.
    return ["attnNorm", "router", ...(moe.selectionBias ? ["routerBias"] as const : []), "wUp", "wDown", ...(moe.sharedIntermediateSize > 0 ? ["wUpShared", "wDownShared"] as const : [])];
  }
  if (config.layerBlocks?.[i] === "mixer") {
    if (isMamba2Layer(config, i)) return ["attnNorm", ...MAMBA2_ROLES];
    return ["attnNorm", "wq", "wk", "wv", "wo", ...(config.qkvBias ? ["bq", "bk", "bv"] as const : []), ...(config.outputBias ? ["bo"] as const : [])];
  }
  if (isDeltaNetLayer(config, i)) return [...DELTA_NET_ROLES, ...feedForwardRoles(config, i, ["attnNorm", "ffnNorm", "wGate", "wUp", "wDown"])];
  if (isShortConvLayer(config, i)) return ["convIn", "convWeight", "convOut", ...feedForwardRoles(config, i, ["attnNorm", "ffnNorm", "wGate", "wUp", "wDown"])];
  if (isMamba2Layer(config, i)) {
    const mamba2 = config.mamba2?.unnormed ? MAMBA2_ROLES.filter((r) => r !== "ssmNorm") : MAMBA2_ROLES;
    // Falcon-H1: attention beside the scan, from the same norm.
    const attention: LayerRole[] = config.mamba2?.parallelAttention ? ["wq", "wk", "wv", "wo", ...(config.qkvBias ? ["bq", "bk", "bv"] as const : []), ...(config.outputBias ? ["bo"] as const : [])] : [];
    return [...mamba2, ...attention, ...feedForwardRoles(config, i, ["attnNorm", "ffnNorm", "wGate", "wUp", "wDown"])];
  }
  const mla = config.mla;
  // Gemma 4's layers without a value projection take their keys' as values; those reading another's cache project queries alone.
  const shared = config.kvShareFrom?.[i] !== undefined;
  const attention: LayerRole[] = !mla
    ? (shared ? ["wq"] : config.keyAsValue?.[i] ? ["wq", "wk"] : ["wq", "wk", "wv"])
    : [...(mla.qLoraRank > 0 ? ["wqA", "qANorm"] as const : []), "wq", "wkvA", "kvANorm", "wkB", "wvB"];
  const roles: LayerRole[] = config.noPreNorms ? [...attention, "wo", "wGate", "wUp", "wDown"] : ["attnNorm", ...attention, "wo", "ffnNorm", "wGate", "wUp", "wDown"];
  if (config.qkvBias) roles.push("bq", "bk", "bv");
  if (config.outputBias) roles.push("bo");
  if (config.attentionSinks) roles.push("sinks");
  if (config.qkNorm) roles.push(...(shared ? ["qNorm"] as const : ["qNorm", "kNorm"] as const));
  if (config.postNorms) roles.push("attnPostNorm", "ffnPostNorm");
  if (config.perLayerInput) roles.push("pleGate", "pleProj", "plePostNorm");
  return feedForwardRoles(config, i, roles);
}

/** A Mamba-2 layer's own roles. */
const MAMBA2_ROLES: readonly LayerRole[] = ["ssmIn", "ssmConv", "ssmConvBias", "ssmDtBias", "ssmDecay", "ssmD", "ssmNorm", "ssmOut"];

/** A Gated DeltaNet layer's own roles. */
const DELTA_NET_ROLES: readonly LayerRole[] = ["ssmQkv", "ssmZ", "ssmBeta", "ssmAlpha", "ssmConv", "ssmDtBias", "ssmDecay", "ssmNorm", "ssmOut"];

/** `roles` and the mixture-of-experts roles layer `i` adds. */
function feedForwardRoles(config: ModelConfig, i: number, roles: LayerRole[]): LayerRole[] {
  const moe = config.moe;
  if (moe && isMoeLayer(config, i)) {
    roles.push("router");
    if (moe.selectionBias) roles.push("routerBias");
    if (moe.routerLogitBias) roles.push("routerLogitBias");
    if (moe.expertBiases) roles.push("bGate", "bUp", "bDown");
    if (moe.sharedIntermediateSize > 0) roles.push("wGateShared", "wUpShared", "wDownShared");
    if (moe.sharedGate) roles.push("sharedGate");
    if (moe.gemma4) roles.push("ffnPostNorm1", "ffnPreNorm2", "ffnPostNorm2", "routerNorm", "expertScale");
  }
  return roles;
}

/** Converts a tensor of any weight dtype to f32 (norm weights and biases are always f32). */
export function toF32(t: HostTensor): HostTensor {
  if (t.dtype === "f32") return t;
  const count = t.shape.reduce((a, b) => a * b, 1);
  const values = decodeToF32(t.data, t.dtype, count);
  return { name: t.name, shape: t.shape, dtype: "f32", data: new Uint8Array(values.buffer) };
}

/** Reads every weight the config calls for, in file order of roles, checking shapes. */
export async function assembleWeights(
  config: ModelConfig,
  source: TensorSource,
  names: TensorNames,
  sourcePath: string,
  options: LoadOptions = {},
): Promise<ModelWeights<HostTensor>> {
  if (!Number.isSafeInteger(config.numLayers) || config.numLayers < 1) {
    throw new ModelLoadError(`Model "${sourcePath}" has ${config.numLayers} layers; expected a positive whole number`);
  }
  const wanted: string[] = [];
  // Each name is checked as it is listed, so a layer count far beyond the file's tensors fails at the
  // first missing layer instead of listing billions of names.
  const want = (n: string) => {
    if (!source.has(n)) throw new ModelLoadError(`Model "${sourcePath}" lacks the tensor "${n}"`);
    wanted.push(n);
  };
  want(names.tokenEmbedding);
  want(names.outputNorm);
  if (!config.tiedEmbeddings) want(names.output);
  const ple = config.perLayerInput;
  if (ple && !names.perLayer) throw new ModelLoadError(`Model "${sourcePath}" has per-layer inputs, which its format's names do not cover`);
  if (ple) for (const n of [names.perLayer!.embedding, names.perLayer!.modelProj, names.perLayer!.projNorm]) want(n);
  for (let i = 0; i < config.numLayers; i++) for (const r of layerRoles(config, i)) want(names.layer(i, r));
  const mtp = options.mtp ? mtpNames(config, names, sourcePath) : undefined;
  if (mtp) {
    for (const r of layerRoles(config, config.numLayers)) want(names.layer(config.numLayers, r));
    for (const part of ["ehProj", "enorm", "hnorm"] as const) want(mtp(part));
    for (const part of ["headNorm", "head", "embedding"] as const) if (source.has(mtp(part))) wanted.push(mtp(part));
  }
  const totalBytes = wanted.reduce((a, n) => a + source.byteLength(n), 0);
  let bytesRead = 0;
  // Norms and biases become f32; routers and the shared-expert gate stay as stored.
  const read = async (name: string, shape: number[], f32: boolean, keep = false): Promise<HostTensor> => {
    const t = await source.read(name);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new ModelLoadError(`Tensor "${name}" in "${sourcePath}" has shape [${t.shape}], expected [${shape}]`);
    }
    bytesRead += source.byteLength(name);
    options.onProgress?.({ bytesRead, totalBytes });
    return f32 ? toF32(t) : options.quantize && !keep ? quantizeTensor(t, options.quantize) : t;
  };
  const tokenEmbedding = await read(names.tokenEmbedding, [config.vocabSize, config.hiddenSize], false);
  const layers: LayerWeights<HostTensor>[] = [];
  for (let i = 0; i < config.numLayers; i++) {
    const layer: Partial<LayerWeights<HostTensor>> = {};
    for (const r of layerRoles(config, i)) {
      layer[r] = await read(names.layer(i, r), expectedLayerShape(config, r, i), NORM_OR_BIAS.has(r), KEEP_AS_STORED.has(r));
    }
    layers.push(layer as LayerWeights<HostTensor>);
  }
  const outputNorm = await read(names.outputNorm, [config.hiddenSize], true);
  const weights: ModelWeights<HostTensor> = { tokenEmbedding, layers, outputNorm };
  if (ple) {
    const all = ple.width * config.numLayers;
    weights.perLayerEmbedding = await read(names.perLayer!.embedding, [config.vocabSize, all], false);
    weights.perLayerModelProj = await read(names.perLayer!.modelProj, [all, config.hiddenSize], false);
    weights.perLayerProjNorm = await read(names.perLayer!.projNorm, [ple.width], true);
  }
  if (!config.tiedEmbeddings) weights.output = await read(names.output, [config.vocabSize, config.hiddenSize], false);
  if (mtp) {
    const at = config.numLayers, h = config.hiddenSize;
    const layer: Partial<LayerWeights<HostTensor>> = {};
    for (const r of layerRoles(config, at)) layer[r] = await read(names.layer(at, r), expectedLayerShape(config, r, at), NORM_OR_BIAS.has(r), KEEP_AS_STORED.has(r));
    const optional = async (part: NextnPart, shape: number[], f32: boolean) => (source.has(mtp(part)) ? await read(mtp(part), shape, f32) : undefined);
    // DeepSeek V3's checkpoints repeat the model's embedding and head in the block: one copy is kept.
    const unlessSame = (t: HostTensor | undefined, model: HostTensor | undefined) => (t && model && sameTensor(t, model) ? undefined : t);
    const headNorm = await optional("headNorm", [h], true);
    const head = unlessSame(await optional("head", [config.vocabSize, h], false), weights.output ?? tokenEmbedding);
    const embedding = unlessSame(await optional("embedding", [config.vocabSize, h], false), tokenEmbedding);
    weights.mtp = {
      layer: layer as LayerWeights<HostTensor>,
      ehProj: await read(mtp("ehProj"), [h, 2 * h], false),
      enorm: await read(mtp("enorm"), [h], true),
      hnorm: await read(mtp("hnorm"), [h], true),
      ...(headNorm ? { headNorm } : {}),
      ...(head ? { head } : {}),
      ...(embedding ? { embedding } : {}),
    };
  }
  return weights;
}

/** Whether two host tensors hold the same values in the same storage. */
function sameTensor(a: HostTensor, b: HostTensor): boolean {
  if (a.dtype !== b.dtype || a.data.length !== b.data.length || a.shape.some((d, i) => d !== b.shape[i])) return false;
  for (let i = 0; i < a.data.length; i++) if (a.data[i] !== b.data[i]) return false;
  return true;
}

/** The names of the first multi-token-prediction block's own tensors, once the model is seen to have one the engine runs. */
function mtpNames(config: ModelConfig, names: TensorNames, path: string): (part: NextnPart) => string {
  if (!config.nextnLayers) throw new ModelLoadError(`Model "${path}" has no multi-token-prediction layers (GGUF nextn_predict_layers, config.json num_nextn_predict_layers), which speculative method "mtp" needs`);
  const nextn = names.nextn;
  if (!MTP_ARCHITECTURES.includes(config.architecture) || !nextn) {
    throw new ModelLoadError(`Model "${path}" has multi-token-prediction layers, but those of the "${config.architecture}" architecture are not run; ${MTP_ARCHITECTURES.slice(0, -1).join(", ")} and ${MTP_ARCHITECTURES[MTP_ARCHITECTURES.length - 1]} ones are`);
  }
  return (part) => nextn(config.numLayers, part);
}

/**
 * Checks that the last expert of the first MoE layer is in the file before the experts are stacked,
 * which lists every expert's name: an expert count far beyond the file fails here at once.
 */
export function checkLastExpert(names: TensorNames, moe: MoeConfig, has: (name: string) => boolean, path: string): void {
  if (!Number.isSafeInteger(moe.numExperts) || moe.numExperts < 1) {
    throw new ModelLoadError(`Model "${path}" has ${moe.numExperts} experts; expected a positive whole number`);
  }
  const name = names.layer(moe.denseLayers ?? 0, "wGate");
  if (!name.includes(EXPERT)) return;
  const last = name.replace(EXPERT, String(moe.numExperts - 1));
  if (!has(last)) throw new ModelLoadError(`Model "${path}" lacks the tensor "${last}" of its ${moe.numExperts} experts`);
}

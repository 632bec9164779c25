/**
 * GGUF file → LoadedModel: the config from `{arch}.*` metadata, weights under llama.cpp's tensor
 * names, and the file's own tokenizer (GPT-OSS's additions: gguf-gpt-oss.ts). Llama GGUFs carry q/k rows permuted by llama.cpp's
 * converter for the "normal" (interleaved) RoPE, which DeepSeek's (deepseek2) use unpermuted;
 * Qwen2/Qwen3/GLM keep the "neox" (half-split) order.
 */
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { openRandomAccess, type RandomAccessFile } from "../runtime/fs.ts";
import {
  type Architecture,
  ARCHITECTURES,
  expertGroups,
  type HostTensor,
  isMoeLayer,
  checkMla,
  type LoadedModel,
  type MlaConfig,
  type ModelConfig,
  ModelLoadError,
  type MoeConfig,
  plainMoe,
  POOLING_TYPES,
  type Tokenizer,
} from "./config.ts";
import { GgufMetadata, showGgufValue } from "./gguf-metadata.ts";
import { type GgufHeader, type GgufTensorInfo, readGgufHeader, readGgufTensor } from "./gguf-reader.ts";
import { checkFreqFactors, ggufYarnScaling, yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";
import { ggufMagnitudeYarn, ggufSlidingWindow, gptOssMoe, withHarmonyStops } from "./gguf-gpt-oss.ts";
import { ggufGemma3 } from "./gguf-gemma3.ts";
import { splittingKvB } from "./mla-weights.ts";
import { BpeTokenizer, preAddsBos } from "./tokenizer-bpe.ts";
import { SpmTokenizer } from "./tokenizer-spm.ts";
import { assembleWeights, checkLastExpert, type LayerRole, type LoadOptions, type TensorNames } from "./weights.ts";
import { EXPERT, stackingExperts } from "./expert-stack.ts";

/** Architectures whose every file has experts. */
const MOE_ARCHITECTURES: readonly string[] = ["qwen2moe", "qwen3moe", "glm4moe", "deepseek2", "gpt-oss"];

const LAYER_NAMES: Record<LayerRole, string> = {
  attnNorm: "attn_norm.weight",
  wq: "attn_q.weight",
  wk: "attn_k.weight",
  wv: "attn_v.weight",
  wo: "attn_output.weight",
  bq: "attn_q.bias",
  bk: "attn_k.bias",
  bv: "attn_v.bias",
  qNorm: "attn_q_norm.weight",
  kNorm: "attn_k_norm.weight",
  attnPostNorm: "post_attention_norm.weight",
  ffnPostNorm: "post_ffw_norm.weight",
  ffnNorm: "ffn_norm.weight",
  wGate: "ffn_gate.weight",
  wUp: "ffn_up.weight",
  wDown: "ffn_down.weight",
  router: "ffn_gate_inp.weight",
  routerBias: "exp_probs_b.bias",
  wGateShared: "ffn_gate_shexp.weight",
  wUpShared: "ffn_up_shexp.weight",
  wDownShared: "ffn_down_shexp.weight",
  sharedGate: "ffn_gate_inp_shexp.weight",
  wqA: "attn_q_a.weight",
  qANorm: "attn_q_a_norm.weight",
  wkvA: "attn_kv_a_mqa.weight",
  kvANorm: "attn_kv_a_norm.weight",
  wkB: "attn_k_b.weight",
  wvB: "attn_v_b.weight",
  bo: "attn_output.bias",
  sinks: "attn_sinks.weight",
  routerLogitBias: "ffn_gate_inp.bias",
  bGate: "ffn_gate.bias",
  bUp: "ffn_up.bias",
  bDown: "ffn_down.bias",
};

/** The combined kv_b of GGUFs converted before llama.cpp split it into attn_k_b and attn_v_b. */
const KV_B = "attn_kv_b.weight";

/** GLM-4.5 names its pre-feed-forward norm after HF's `post_attention_layernorm`. */
const GLM4MOE_NAMES: Partial<Record<LayerRole, string>> = { ffnNorm: "post_attention_norm.weight" };

/** Each architecture's own names: GLM-4.5's and GPT-OSS's norm; DeepSeek's q up-projection after its low-rank bottleneck. */
function ownNames(config: ModelConfig): Partial<Record<LayerRole, string>> {
  if (config.architecture === "glm4moe" || config.architecture === "gpt-oss") return GLM4MOE_NAMES;
  return config.mla && config.mla.qLoraRank > 0 ? { wq: "attn_q_b.weight" } : {};
}

/** An MoE layer's stacked experts (llama.cpp's `ffn_*_exps`). */
const EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  wGate: "ffn_gate_exps.weight",
  wUp: "ffn_up_exps.weight",
  wDown: "ffn_down_exps.weight",
  bGate: "ffn_gate_exps.bias",
  bUp: "ffn_up_exps.bias",
  bDown: "ffn_down_exps.bias",
};

/** The first Mixtral GGUFs' experts, one tensor each (`blk.N.ffn_gate.E.weight`). */
const SPLIT_EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  wGate: `ffn_gate.${EXPERT}.weight`,
  wUp: `ffn_up.${EXPERT}.weight`,
  wDown: `ffn_down.${EXPERT}.weight`,
};

/** llama.cpp's GGUF tensor names. */
export const GGUF_TENSOR_NAMES: TensorNames = {
  tokenEmbedding: "token_embd.weight",
  outputNorm: "output_norm.weight",
  output: "output.weight",
  layer: (i, role) => `blk.${i}.${LAYER_NAMES[role]}`,
};

/**
 * llama.cpp's names for a model with experts, stacked or (older Mixtral files) split; a leading
 * dense layer's feed-forward keeps the plain names.
 */
function moeTensorNames(config: ModelConfig, split: boolean): TensorNames {
  const experts = split ? SPLIT_EXPERT_NAMES : EXPERT_NAMES;
  const own = ownNames(config);
  return {
    ...GGUF_TENSOR_NAMES,
    layer: (i, role) => `blk.${i}.${own[role] ?? (isMoeLayer(config, i) ? experts[role] : undefined) ?? LAYER_NAMES[role]}`,
  };
}

/** llama.cpp's tensor of per-pair RoPE frequency divisors (Llama 3.1+ converters write it). */
export const GGUF_ROPE_FREQS = "rope_freqs.weight";

/** Builds the ModelConfig from GGUF metadata and the tensors present. */
export function ggufConfig(header: GgufHeader, path: string): ModelConfig {
  const meta = new GgufMetadata(header.metadata, path);
  const arch = meta.string("general.architecture", "");
  if (!ARCHITECTURES.includes(arch as Architecture)) {
    throw new ModelLoadError(`Unknown architecture "${arch}" in "${path}"; supported: ${ARCHITECTURES.join(", ")}`);
  }
  const architecture = arch as Architecture;
  const tensors = new Map(header.tensors.map((t) => [t.name, t]));
  const embd = tensors.get(GGUF_TENSOR_NAMES.tokenEmbedding);
  if (!embd) throw new ModelLoadError(`Model "${path}" lacks the tensor "${GGUF_TENSOR_NAMES.tokenEmbedding}"`);
  const hiddenSize = positiveInteger(meta.number(`${arch}.embedding_length`), `${arch}.embedding_length`, path);
  const numHeads = positiveInteger(perLayerNumber(meta, `${arch}.attention.head_count`, path), `${arch}.attention.head_count`, path);
  const numKvHeads = positiveInteger(perLayerNumber(meta, `${arch}.attention.head_count_kv`, path, numHeads), `${arch}.attention.head_count_kv`, path);
  const keyLength = `${arch}.attention.key_length`;
  const headDim = meta.has(keyLength) ? positiveInteger(meta.number(keyLength), keyLength, path) : Math.floor(hiddenSize / numHeads);
  const ropeDim = meta.number(`${arch}.rope.dimension_count`, headDim);
  if (!Number.isInteger(ropeDim) || ropeDim <= 0 || ropeDim % 2 !== 0 || ropeDim > headDim) {
    throw new ModelLoadError(`Model "${path}" rotates ${ropeDim} of ${headDim} head dims; expected an even count from 2 to ${headDim}`);
  }
  if (meta.has(`${arch}.rope.dimension_sections`)) {
    throw new ModelLoadError(`Model "${path}" uses multimodal RoPE sections ("${arch}.rope.dimension_sections"), which are not supported`);
  }
  const scalingType = meta.string(`${arch}.rope.scaling.type`, "none");
  // Gemma 3's linear scaling is its global layers' (gguf-gemma3.ts).
  const yarn = scalingType !== "none" && meta.number(`${arch}.rope.scaling.factor`, 1) !== 1 && architecture !== "gemma3";
  if (yarn && (scalingType !== "yarn" || (architecture !== "deepseek2" && architecture !== "gpt-oss"))) {
    throw new ModelLoadError(`Model "${path}" uses RoPE scaling type "${scalingType}"; only rope_freqs factors (and YaRN for deepseek2 and gpt-oss) are supported`);
  }
  if (numHeads % numKvHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numHeads} heads, not a multiple of its ${numKvHeads} KV heads`);
  }
  const tokModel = meta.string("tokenizer.ggml.model", "");
  const optionalId = (key: string) => meta.optionalNumber(key);
  // As llama.cpp, a special-token id outside the vocabulary is ignored.
  const validId = (id: number | undefined): id is number => id !== undefined && Number.isInteger(id) && id >= 0 && id < embd.shape[0];
  const poolingNumber = meta.optionalNumber(`${arch}.pooling_type`);
  const pooling = poolingNumber === undefined ? undefined : POOLING_TYPES[poolingNumber];
  if (poolingNumber !== undefined && pooling === undefined) {
    throw new ModelLoadError(`GGUF metadata "${arch}.pooling_type" in "${path}" is ${poolingNumber}; known types are 0 to ${POOLING_TYPES.length - 1} (${POOLING_TYPES.join(", ")})`);
  }
  const vocabTokens = meta.array("tokenizer.ggml.tokens");
  // A token id past the embedding's rows would index outside it (llama.cpp refuses such files too).
  if (vocabTokens && vocabTokens.length > embd.shape[0]) {
    throw new ModelLoadError(`Model "${path}" has ${vocabTokens.length} tokens (tokenizer.ggml.tokens) but its "${GGUF_TENSOR_NAMES.tokenEmbedding}" has only ${embd.shape[0]} rows`);
  }
  // Gemma's chat turns end with <end_of_turn>, which its files need not name as EOT (llama.cpp finds it by its text).
  const endOfTurn = architecture === "gemma3" ? vocabTokens?.indexOf("<end_of_turn>") ?? -1 : -1;
  const eosTokenIds = withHarmonyStops(
    [
      ...new Set(
        [...["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"].map(optionalId), endOfTurn]
          .filter(validId),
      ),
    ],
    vocabTokens,
  );
  const bos = optionalId("tokenizer.ggml.bos_token_id");
  const moe = ggufMoe(meta, arch, (name) => tensors.has(name), path);
  const mla = architecture === "deepseek2" ? ggufMla(meta, arch, headDim, ropeDim, tensors.has("blk.0.attn_q_a.weight"), path) : undefined;
  const ropeTheta = meta.number(`${arch}.rope.freq_base`, 10000);
  if (!(Number.isFinite(ropeTheta) && ropeTheta > 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.rope.freq_base" in "${path}" should be a positive number, got ${ropeTheta}`);
  }
  const rmsNormEps = meta.number(`${arch}.attention.layer_norm_rms_epsilon`, 1e-6);
  if (!(Number.isFinite(rmsNormEps) && rmsNormEps >= 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.attention.layer_norm_rms_epsilon" in "${path}" should be a number from 0, got ${rmsNormEps}`);
  }
  const scaled = !yarn ? undefined : mla ? ggufYarn(meta, arch, ropeTheta, mla, path) : ggufMagnitudeYarn(meta, arch, ropeTheta, ropeDim, headDim, path);
  const ffnKey = moe ? `${arch}.expert_feed_forward_length` : `${arch}.feed_forward_length`;
  // GLM-4.5 files end with multi-token-prediction blocks (NextN) that llama.cpp loads but never runs.
  const blocks = positiveInteger(meta.number(`${arch}.block_count`), `${arch}.block_count`, path);
  const nextn = meta.optionalNumber(`${arch}.nextn_predict_layers`) ?? 0;
  if (!Number.isInteger(nextn) || nextn < 0 || nextn >= blocks) {
    throw new ModelLoadError(`Model "${path}" has ${nextn} next-token-prediction layers of its ${blocks} blocks`);
  }
  const numLayers = blocks - nextn;
  const slidingWindow = architecture === "gpt-oss" ? ggufSlidingWindow(meta, arch, numLayers, ropeTheta, path) : undefined;
  const gemma3 = architecture === "gemma3" ? ggufGemma3(meta, arch, { hiddenSize, numHeads, headDim, rotaryDim: ropeDim, numLayers, ropeTheta }, path) : undefined;
  if (architecture !== "gpt-oss" && architecture !== "gemma3" && meta.has(`${arch}.attention.sliding_window`)) {
    throw new ModelLoadError(`Model "${path}" declares a sliding window, which the "${arch}" architecture does not support`);
  }
  return {
    architecture,
    vocabSize: embd.shape[0],
    hiddenSize,
    numLayers,
    numHeads,
    // Latent attention caches one head: the latent and the shared RoPE key.
    numKvHeads: mla ? 1 : numKvHeads,
    headDim: mla ? mla.kvLoraRank + mla.ropeDim : headDim,
    intermediateSize: meta.entries.has(ffnKey) ? perLayerNumber(meta, ffnKey, path) : perLayerNumber(meta, `${arch}.feed_forward_length`, path),
    ...(moe ? { moe } : {}),
    ...(mla ? { mla } : {}),
    ...(scaled ? { attentionScale: scaled.attentionScale, ropeFreqFactors: scaled.freqFactors } : {}),
    rmsNormEps,
    ropeTheta,
    // llama.cpp turns DeepSeek's RoPE dims in adjacent pairs, as it does Llama's permuted ones.
    ropeLayout: architecture === "llama" || architecture === "deepseek2" ? "normal" : "neox",
    ...(ropeDim !== headDim || mla ? { rotaryDim: ropeDim } : {}),
    contextLength: positiveInteger(meta.number(`${arch}.context_length`, 2048), `${arch}.context_length`, path),
    tiedEmbeddings: !tensors.has(GGUF_TENSOR_NAMES.output),
    qkvBias: tensors.has(GGUF_TENSOR_NAMES.layer(0, "bq")),
    qkNorm: tensors.has(GGUF_TENSOR_NAMES.layer(0, "qNorm")),
    ...(architecture === "gpt-oss" ? { outputBias: true, attentionSinks: true } : {}),
    ...(slidingWindow ? { slidingWindow } : {}),
    ...gemma3,
    bosTokenId: validId(bos) ? bos : undefined,
    eosTokenIds,
    addBos: meta.bool("tokenizer.ggml.add_bos_token", tokModel === "llama" || (tokModel === "gpt2" && preAddsBos(meta.string("tokenizer.ggml.pre", "default")))),
    ...(meta.bool("tokenizer.ggml.add_eos_token", false) && validId(optionalId("tokenizer.ggml.eos_token_id")) ? { appendEosTokenId: optionalId("tokenizer.ggml.eos_token_id") } : {}),
    ...(pooling !== undefined ? { poolingType: pooling } : {}),
  };
}

/**
 * The experts of a Mixtral (`llama` with `llama.expert_count`), Qwen2-MoE, Qwen3-MoE or GLM-4.5 file,
 * routed as llama.cpp routes each: it renormalises the chosen experts' weights for Mixtral and
 * Qwen3-MoE whatever the file says, never for Qwen2-MoE, and for GLM-4.5 and DeepSeek per
 * `expert_weights_norm`; only GLM-4.5 and DeepSeek may route within expert groups.
 */
function ggufMoe(meta: GgufMetadata, arch: string, has: (tensor: string) => boolean, path: string): MoeConfig | undefined {
  const numExperts = meta.optionalNumber(`${arch}.expert_count`) ?? 0;
  if (numExperts === 0) {
    if (MOE_ARCHITECTURES.includes(arch)) throw new ModelLoadError(`Model "${path}" is ${arch} but has no "${arch}.expert_count"`);
    return undefined;
  }
  const numExpertsUsed = meta.number(`${arch}.expert_used_count`);
  if (!Number.isInteger(numExpertsUsed) || numExpertsUsed < 1 || numExpertsUsed > numExperts) {
    throw new ModelLoadError(`Model "${path}" uses ${numExpertsUsed} of its ${numExperts} experts per token; expected 1 to ${numExperts}`);
  }
  const groups = expertGroups(
    meta.optionalNumber(`${arch}.expert_group_count`) ?? 0,
    meta.optionalNumber(`${arch}.expert_group_used_count`),
    numExperts,
    numExpertsUsed,
    path,
  );
  const shared = meta.optionalNumber(`${arch}.expert_shared_count`) ?? 0;
  // llama.cpp treats a scale of 0 (its default) as none.
  const scale = meta.optionalNumber(`${arch}.expert_weights_scale`) ?? 0;
  if (!(Number.isFinite(scale) && scale >= 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.expert_weights_scale" in "${path}" should be a positive number or 0, got ${scale}`);
  }
  const routedScale = scale === 0 ? 1 : scale;
  if (groups && arch !== "glm4moe" && arch !== "deepseek2") {
    throw new ModelLoadError(`Model "${path}" routes within expert groups, which the "${arch}" architecture does not support`);
  }
  switch (arch) {
    case "qwen2moe":
      return {
        ...plainMoe(numExperts, numExpertsUsed, false),
        routedScale,
        // llama.cpp's fallback for files without the shared width: the dense one.
        sharedIntermediateSize: meta.optionalNumber(`${arch}.expert_shared_feed_forward_length`) ??
          perLayerNumber(meta, `${arch}.feed_forward_length`, path),
        sharedGate: true,
      };
    case "glm4moe":
    case "deepseek2": {
      const gatingFunc = meta.optionalNumber(`${arch}.expert_gating_func`) ?? 0;
      if (gatingFunc !== 0 && gatingFunc !== 1 && gatingFunc !== 2) {
        throw new ModelLoadError(`Model "${path}" uses expert gating function ${gatingFunc}; supported: 1 (softmax), 2 (sigmoid)`);
      }
      const denseLayers = meta.optionalNumber(`${arch}.leading_dense_block_count`) ?? 0;
      return {
        numExperts,
        numExpertsUsed,
        normalizeTopK: meta.bool(`${arch}.expert_weights_norm`, false),
        // llama.cpp's default for DeepSeek V2 files without a gating function is softmax.
        gating: gatingFunc === 1 || (gatingFunc === 0 && arch === "deepseek2") ? "softmax" : "sigmoid",
        // DeepSeek V2 has no selection bias; V3 and Kimi K2 do.
        selectionBias: arch === "glm4moe" || has(`blk.${denseLayers}.${LAYER_NAMES.routerBias}`),
        routedScale,
        denseLayers,
        denseIntermediateSize: denseLayers > 0 ? perLayerNumber(meta, `${arch}.feed_forward_length`, path) : 0,
        sharedIntermediateSize: shared * perLayerNumber(meta, `${arch}.expert_feed_forward_length`, path),
        sharedGate: false,
        ...(groups ? { groups } : {}),
      };
    }
    case "gpt-oss":
      if (shared > 0) throw new ModelLoadError(`Model "${path}" has shared experts, which the "${arch}" architecture does not support`);
      return gptOssMoe(numExperts, numExpertsUsed);
    default:
      if (shared > 0) throw new ModelLoadError(`Model "${path}" has shared experts, which the "${arch}" architecture does not support`);
      return plainMoe(numExperts, numExpertsUsed, true);
  }
}

/**
 * DeepSeek's latent attention sizes. Current files (llama.cpp's converter since it split kv_b) give
 * `key_length` as the cached latent + RoPE width and the per-head q/k and v widths under `*_mla`;
 * older ones give the per-head widths as `key_length` / `value_length`.
 */
function ggufMla(meta: GgufMetadata, arch: string, keyLength: number, ropeDim: number, qLora: boolean, path: string): MlaConfig {
  const qk = meta.optionalNumber(`${arch}.attention.key_length_mla`) ?? keyLength;
  const mla: MlaConfig = {
    qLoraRank: qLora ? meta.number(`${arch}.attention.q_lora_rank`) : 0,
    kvLoraRank: meta.number(`${arch}.attention.kv_lora_rank`),
    nopeDim: qk - ropeDim,
    ropeDim,
    vHeadDim: meta.optionalNumber(`${arch}.attention.value_length_mla`) ?? meta.number(`${arch}.attention.value_length`),
  };
  return checkMla(mla, path);
}

/**
 * DeepSeek V3's / Kimi K2's YaRN as llama.cpp runs deepseek2: frequencies blended per pair, RoPE's
 * magnitude left at 1, and the scores scaled by mscale² with mscale from `yarn_log_multiplier`
 * (0.1 · mscale_all_dim). Files whose YaRN would scale RoPE's magnitude are refused.
 */
function ggufYarn(meta: GgufMetadata, arch: string, theta: number, mla: MlaConfig, path: string): { freqFactors: number[]; attentionScale: number } {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  const logMul = meta.optionalNumber(key("yarn_log_multiplier"));
  const attnFactor = meta.optionalNumber(key("attn_factor")) ?? 1;
  const extFactor = meta.optionalNumber(key("yarn_ext_factor")) ?? 1;
  if (logMul === undefined || attnFactor !== 1 || (extFactor !== 1 && extFactor !== -1)) {
    throw new ModelLoadError(`Model "${path}" uses YaRN that scales RoPE's magnitude (no "${key("yarn_log_multiplier")}", or an attn/ext factor other than 1), which is not supported`);
  }
  const scaling = ggufYarnScaling(meta, arch);
  const mscale = yarnMscale(scaling.factor, logMul / 0.1);
  return {
    freqFactors: checkFreqFactors(yarnFreqFactors(theta, mla.ropeDim, scaling), mla.ropeDim, path),
    attentionScale: (mscale * mscale) / Math.sqrt(mla.nopeDim + mla.ropeDim),
  };
}

/** `value` when it is a whole number from 1 that a JS number holds exactly; else an error naming the key. */
function positiveInteger(value: number, key: string, path: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should be a positive whole number, got ${value}`);
  }
  return value;
}

/** Some GGUFs store per-layer values as arrays; we support only uniform ones. */
function perLayerNumber(meta: GgufMetadata, key: string, path: string, fallback?: number): number {
  const arr = meta.entries.get(key)?.value;
  if (!Array.isArray(arr)) return meta.number(key, fallback);
  if (arr.length === 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" is an empty array; expected a number or one per layer`);
  const bad = arr.findIndex((v) => typeof v !== "number" && typeof v !== "bigint");
  if (bad >= 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should hold numbers, got ${showGgufValue(arr[bad])} at index ${bad}`);
  const values = new Set(arr.map(Number));
  if (values.size !== 1) throw new ModelLoadError(`Model "${path}" has per-layer "${key}" values; only uniform layers are supported`);
  return [...values][0];
}

/** Builds the GGUF's own tokenizer (SentencePiece-style "llama" or byte-level BPE "gpt2"). */
export function ggufTokenizer(header: GgufHeader, config: ModelConfig, path: string): Tokenizer {
  const meta = new GgufMetadata(header.metadata, path);
  const model = meta.string("tokenizer.ggml.model", "");
  const tokens = meta.array("tokenizer.ggml.tokens");
  if (!tokens || tokens.length === 0) {
    throw new ModelLoadError(`Model "${path}" has no tokenizer vocab (tokenizer.ggml.tokens${tokens ? " is empty" : ""})`);
  }
  const bad = tokens.findIndex((t) => typeof t !== "string");
  if (bad >= 0) {
    throw new ModelLoadError(`GGUF metadata "tokenizer.ggml.tokens" in "${path}" should hold strings, got ${showGgufValue(tokens[bad])} at index ${bad}`);
  }
  const tokenStrings = tokens as string[];
  /** A per-token array (`token_type`, `scores`): numbers, one per token, or absent. */
  const perToken = (key: string): number[] => {
    const values = meta.array(key) ?? [];
    if (values.length > 0 && values.length !== tokens.length) {
      throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" has ${values.length} values for ${tokens.length} tokens`);
    }
    // A NaN score would leave SentencePiece's merge order undefined.
    const at = values.findIndex((v) => typeof v !== "number" || Number.isNaN(v));
    if (at >= 0) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should hold numbers, got ${showGgufValue(values[at])} at index ${at}`);
    return values as number[];
  };
  const types = perToken("tokenizer.ggml.token_type");
  const unkId = meta.optionalNumber("tokenizer.ggml.unknown_token_id");
  switch (model) {
    case "llama":
      return new SpmTokenizer({
        tokens: tokenStrings,
        scores: perToken("tokenizer.ggml.scores"),
        types,
        bosId: config.bosTokenId,
        // As llama.cpp, an id outside the vocabulary is ignored.
        unkId: unkId !== undefined && Number.isInteger(unkId) && unkId >= 0 && unkId < tokens.length ? unkId : undefined,
        addSpacePrefix: meta.bool("tokenizer.ggml.add_space_prefix", true),
      });
    case "gpt2":
      return new BpeTokenizer({
        tokens: tokenStrings,
        types,
        merges: (meta.array("tokenizer.ggml.merges") ?? []).map(String),
        pre: meta.string("tokenizer.ggml.pre", "default"),
        bosId: config.bosTokenId,
      });
    default:
      throw new ModelLoadError(`Model "${path}" uses tokenizer "${model}"; supported GGUF tokenizers are "llama" and "gpt2"`);
  }
}

async function readFreqFactors(file: RandomAccessFile, info: GgufTensorInfo, rotaryDim: number, path: string): Promise<number[]> {
  const t = await readGgufTensor(file, info);
  const count = t.shape.reduce((a, b) => a * b, 1);
  if (t.shape.length !== 1) throw new ModelLoadError(`Tensor "${GGUF_ROPE_FREQS}" in "${path}" should be 1-D, got [${t.shape.join(", ")}]`);
  return checkFreqFactors(Array.from(decodeToF32(t.data, t.dtype, count)), rotaryDim, path);
}

/** llama.cpp stores Qwen2-MoE's shared-expert gate as a vector [hidden]; the forward multiplies by it as a [1, hidden] matrix. */
function sharedGateAsMatrix(t: HostTensor): HostTensor {
  return t.name.endsWith(LAYER_NAMES.sharedGate) && t.shape.length === 1 ? { ...t, shape: [1, t.shape[0]] } : t;
}

/** One part of llama-gguf-split's output holds only some tensors (and only the first the metadata): refused by name. */
function checkNotSplit(header: GgufHeader, path: string): void {
  const meta = new GgufMetadata(header.metadata, path);
  const count = meta.number("split.count", 1);
  if (count === 1) return;
  const no = meta.number("split.no", 0);
  throw new ModelLoadError(
    `GGUF file "${path}" is part ${no + 1} of a ${count}-file split (split.count); merge the parts with llama-gguf-split --merge and load the merged file`,
  );
}

/** Loads a GGUF model file. */
export async function loadGguf(path: string, options: LoadOptions = {}): Promise<LoadedModel> {
  const file = await openRandomAccess(path);
  try {
    const header = await readGgufHeader(file);
    checkNotSplit(header, path);
    const config = ggufConfig(header, path);
    const freqs = header.tensors.find((t) => t.name === GGUF_ROPE_FREQS);
    if (freqs) config.ropeFreqFactors = await readFreqFactors(file, freqs, config.rotaryDim ?? config.headDim, path);
    const tokenizer = ggufTokenizer(header, config, path);
    const infos = new Map<string, GgufTensorInfo>(header.tensors.map((t) => [t.name, t]));
    const source = {
      has: (n: string) => infos.has(n),
      byteLength: (n: string) => infos.get(n)!.byteLength,
      read: async (n: string) => sharedGateAsMatrix(await readGgufTensor(file, infos.get(n)!)),
    };
    const moe = config.moe;
    // Experts are stacked in current files; the first Mixtral conversions wrote one tensor per expert.
    const first = moe?.denseLayers ?? 0;
    const split = moe !== undefined && !infos.has(moeTensorNames(config, false).layer(first, "wGate")) &&
      infos.has(moeTensorNames(config, true).layer(first, "wGate").replace(EXPERT, "0"));
    const names = moe ? moeTensorNames(config, split) : GGUF_TENSOR_NAMES;
    if (moe) checkLastExpert(names, moe, (n) => infos.has(n), path);
    let tensors = moe ? stackingExperts(source, moe.numExperts, path) : source;
    if (config.mla) {
      tensors = splittingKvB(tensors, config, names, (i) => `blk.${i}.${KV_B}`, path);
    }
    const weights = await assembleWeights(config, tensors, names, path, options);
    const template = header.metadata.get("tokenizer.chat_template")?.value;
    return {
      config,
      weights,
      tokenizer,
      chatTemplate: typeof template === "string" ? template : undefined,
      source: path,
    };
  } finally {
    await file.close();
  }
}

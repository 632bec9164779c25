/**
 * A Hugging Face checkpoint's ModelConfig from config.json (+ tokenizer_config.json for BOS
 * handling); DeepSeek's, GPT-OSS's, Gemma 3's and Phi-3's additions: hf-deepseek.ts, hf-gpt-oss.ts, hf-gemma3.ts, phi3.ts.
 * HF checkpoints keep q/k rows in the half-split order, so RoPE is "neox" for every architecture.
 */
import { hfMinimaxM2 } from "./minimax-m2.ts";
import { falconH1Folds, hfFalconH1 } from "./falcon-h1.ts";
import { type Architecture, ARCHITECTURES, type ModelConfig, ModelLoadError, type MoeConfig, nopeEvery, plainMoe } from "./config.ts";
import { hfRopeFreqFactors } from "./rope-scaling.ts";
import { GLM4_MOE_DEFAULTS, hfDeepseekAttention, hfDeepseekMoe } from "./hf-deepseek.ts";
import { hfHeadDim, isJsonObject, type Json, num, positiveInt } from "./hf-json.ts";
import { hfGptOss, hfSlidingWindow } from "./hf-gpt-oss.ts";
import { hfGemma2, hfGemma3 } from "./hf-gemma3.ts";
import { hfTiedEmbeddings } from "./hf-defaults.ts";
import { hfLongRope } from "./phi3.ts";
import { hfGranite } from "./granite.ts";
import { hfQwen35 } from "./hf-qwen35.ts";
import { hfMistral3 } from "./mistral3.ts";
import { hfLfm2, hfLfm2Moe, lfm2FeedForward } from "./lfm2.ts";
import { hfGraniteHybrid } from "./granite-hybrid.ts";
import { hfNemotronH } from "./nemotron-h.ts";

/** config.json's `architectures[0]` (or `model_type`) → our architecture. */
const HF_ARCHITECTURES: Record<string, Architecture> = {
  LlamaForCausalLM: "llama",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Qwen2MoeForCausalLM: "qwen2moe",
  Qwen3MoeForCausalLM: "qwen3moe",
  Glm4MoeForCausalLM: "glm4moe",
  DeepseekV3ForCausalLM: "deepseek2",
  GptOssForCausalLM: "gpt-oss",
  Gemma3ForCausalLM: "gemma3",
  Gemma2ForCausalLM: "gemma2",
  Phi3ForCausalLM: "phi3",
  SmolLM3ForCausalLM: "smollm3",
  GraniteForCausalLM: "granite",
  Olmo2ForCausalLM: "olmo2",
  Olmo3ForCausalLM: "olmo2",
  Exaone4ForCausalLM: "exaone4",
  Qwen3_5ForCausalLM: "qwen35",
  Qwen3_5MoeForCausalLM: "qwen35moe",
  Qwen3NextForCausalLM: "qwen3next",
  Ministral3ForCausalLM: "mistral3",
  Lfm2ForCausalLM: "lfm2",
  Lfm2MoeForCausalLM: "lfm2moe",
  GraniteMoeHybridForCausalLM: "granitehybrid",
  NemotronHForCausalLM: "nemotron_h",
  FalconH1ForCausalLM: "falcon-h1",
  MiniMaxM2ForCausalLM: "minimax-m2",
  // ByteDance's Seed-OSS: Llama's layout with q/k/v biases and NeoX RoPE.
  SeedOssForCausalLM: "seed_oss",
  // Mistral 7B, Mistral Small 3.x's and Devstral's text models: Llama's layout (and a window on every layer where set).
  MistralForCausalLM: "llama",
  MixtralForCausalLM: "llama",
  // config.json's model_type, for files without `architectures`
  qwen2_moe: "qwen2moe",
  qwen3_moe: "qwen3moe",
  glm4_moe: "glm4moe",
  deepseek_v3: "deepseek2",
  kimi_k2: "deepseek2",
  gpt_oss: "gpt-oss",
  gemma3_text: "gemma3",
  gemma2: "gemma2",
  phi3: "phi3",
  smollm3: "smollm3",
  granite: "granite",
  olmo2: "olmo2",
  olmo3: "olmo2",
  exaone4: "exaone4",
  qwen3_5_text: "qwen35",
  qwen3_5_moe_text: "qwen35moe",
  qwen3_next: "qwen3next",
  ministral3: "mistral3",
  lfm2: "lfm2",
  lfm2_moe: "lfm2moe",
  granitemoehybrid: "granitehybrid",
  nemotron_h: "nemotron_h",
  falcon_h1: "falcon-h1",
  minimax_m2: "minimax-m2",
  seed_oss: "seed_oss",
  mistral: "llama",
  mixtral: "llama",
};

/** Builds a ModelConfig from config.json (+ tokenizer_config.json for BOS handling). */
export function hfConfig(cfg: Json, tokCfg: Json, vocabSize: number, path: string): ModelConfig {
  const archName = Array.isArray(cfg.architectures) ? String(cfg.architectures[0]) : String(cfg.model_type ?? "");
  const architecture = HF_ARCHITECTURES[archName] ?? ((ARCHITECTURES as readonly string[]).includes(archName) ? archName as Architecture : undefined);
  if (archName === "Gemma3ForConditionalGeneration" || archName === "gemma3") {
    throw new ModelLoadError(`Model "${path}" is Gemma 3 with its vision tower (${archName}), which is not supported; its text model runs from a "gemma3" GGUF or a Gemma3ForCausalLM checkpoint`);
  }
  if (!architecture) {
    throw new ModelLoadError(`Unknown architecture "${archName}" in "${path}"; supported: ${Object.keys(HF_ARCHITECTURES).join(", ")}`);
  }
  const hiddenSize = positiveInt(cfg, "hidden_size", path);
  const numHeads = positiveInt(cfg, "num_attention_heads", path);
  const numKvHeads = positiveInt(cfg, "num_key_value_heads", path, numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numHeads} attention heads (num_attention_heads), not a multiple of its ${numKvHeads} KV heads (num_key_value_heads)`);
  }
  const eos = cfg.eos_token_id;
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).map((id) => tokenId(id, "eos_token_id", vocabSize, path))
    .filter((id): id is number => id !== undefined);
  const bos = cfg.bos_token_id === undefined || cfg.bos_token_id === null ? undefined : tokenId(cfg.bos_token_id, "bos_token_id", vocabSize, path);
  const addBosSetting = tokCfg.add_bos_token;
  const ropeTheta = num(cfg, "rope_theta", path, ropeParametersTheta(cfg, path) ?? 10000);
  if (!(Number.isFinite(ropeTheta) && ropeTheta > 0)) throw new ModelLoadError(`"rope_theta" in "${path}" should be a positive number, got ${ropeTheta}`);
  const deepseek = architecture === "deepseek2" ? hfDeepseekAttention(cfg, ropeTheta, path) : undefined;
  const mla = deepseek?.mla;
  // Latent attention caches one head: the latent and the shared RoPE key.
  // NemotronHConfig named it attention_head_dim before head_dim.
  const headCfg = architecture === "nemotron_h" && cfg.head_dim === undefined && cfg.attention_head_dim !== undefined ? { ...cfg, head_dim: cfg.attention_head_dim } : cfg;
  const headDim = mla ? mla.kvLoraRank + mla.ropeDim : hfHeadDim(headCfg, hiddenSize, numHeads, path);
  const numLayers = positiveInt(cfg, "num_hidden_layers", path);
  const gptOss = architecture === "gpt-oss" ? hfGptOss(cfg, ropeTheta, headDim, numLayers, path) : undefined;
  // MiniMax-M2: its experts, its q/k norms and rotary_dim (minimax-m2.ts).
  const minimax = architecture === "minimax-m2" ? hfMinimaxM2(cfg, headDim, path) : undefined;
  if (architecture === "seed_oss" && (cfg.attention_out_bias === true || cfg.mlp_bias === true)) {
    throw new ModelLoadError(`Model "${path}" sets ${cfg.attention_out_bias === true ? "attention_out_bias" : "mlp_bias"}; Seed-OSS with an output or feed-forward bias is not supported`);
  }
  const rotaryDim = mla ? mla.ropeDim : minimax ? minimax.rotaryDim : hfRotaryDim(cfg, architecture, headDim, path);
  const gemma3 = architecture === "gemma3" ? hfGemma3(cfg, hiddenSize, headDim, rotaryDim ?? headDim, numLayers, path) : architecture === "gemma2" ? hfGemma2(cfg, hiddenSize, numLayers, path) : undefined;
  const contextLength = positiveInt(cfg, "max_position_embeddings", path, 2048);
  const phi3 = architecture === "phi3" ? hfLongRope(cfg, contextLength, rotaryDim ?? headDim, path) : undefined;
  const mistral3 = architecture === "mistral3" ? hfMistral3(cfg, ropeTheta, headDim, path) : undefined;
  const ownRope = deepseek ?? gptOss ?? gemma3 ?? phi3 ?? mistral3;
  const ropeFreqFactors = ownRope ? ownRope.ropeFreqFactors : hfRopeFreqFactors(cfg, ropeTheta, rotaryDim ?? headDim, path);
  // Granite 4.0-H: its Mamba-2 layers, its experts (or dense shared_mlp), NoPE (granite-hybrid.ts).
  const granite4 = architecture === "granitehybrid" ? hfGraniteHybrid(cfg, hiddenSize, numLayers, path) : undefined;
  // LFM2 and LFM2-MoE (lfm2.ts): the same layers, LFM2-MoE's feed-forwards past its leading dense ones experts.
  const lfm2 = architecture === "lfm2" || architecture === "lfm2moe";
  const moe = deepseek ? hfDeepseekMoe(cfg, path) : minimax ? minimax.moe : gptOss ? gptOss.moe : granite4 ? granite4.moe : architecture === "lfm2moe" ? hfLfm2Moe(cfg, lfm2FeedForward(cfg, path), path) : hfMoe(cfg, archName, architecture, path);
  const attentionScale = deepseek?.attentionScale ?? gptOss?.attentionScale ?? gemma3?.attentionScale ?? mistral3?.attentionScale;
  // Nemotron-H: one block a layer (nemotron-h.ts).
  const nemotron = architecture === "nemotron_h" ? hfNemotronH(cfg, numLayers, path) : undefined;
  // Falcon-H1: attention beside each Mamba-2 scan; its embedding and logit multipliers (the others fold into the weights: falcon-h1.ts).
  const falconH1 = architecture === "falcon-h1" ? hfFalconH1(cfg, hiddenSize, numLayers, path) : undefined;
  return {
    architecture,
    vocabSize,
    hiddenSize,
    numLayers,
    numHeads,
    numKvHeads: mla ? 1 : numKvHeads,
    headDim,
    // Mixtral's and GPT-OSS's experts have the plain width; the others name theirs apart.
    intermediateSize: granite4 ? granite4.intermediateSize : architecture === "lfm2" ? lfm2FeedForward(cfg, path) : num(cfg, moe && architecture !== "llama" && architecture !== "minimax-m2" && !gptOss ? "moe_intermediate_size" : "intermediate_size", path),
    ...(moe ? { moe } : {}),
    ...(deepseek ? { mla: deepseek.mla } : {}),
    // DeepSeek V3's and GLM-4.5's multi-token-prediction layers follow the others (model.layers.N).
    ...hfNextn(cfg, architecture, path),
    ...(attentionScale !== undefined ? { attentionScale } : {}),
    ...(gptOss ? { outputBias: true, attentionSinks: true, ...(gptOss.slidingWindow ? { slidingWindow: gptOss.slidingWindow } : {}) } : {}),
    ...(gemma3 ?? {}),
    // LFM2 names it norm_eps.
    rmsNormEps: nonNegative(cfg, lfm2 && cfg.rms_norm_eps === undefined ? "norm_eps" : "rms_norm_eps", path, 1e-6),
    ropeTheta,
    ropeLayout: deepseek?.ropeLayout ?? "neox",
    ...(rotaryDim !== undefined ? { rotaryDim } : {}),
    ...(ropeFreqFactors ? { ropeFreqFactors } : {}),
    ...(phi3?.ropeMagnitude !== undefined ? { ropeMagnitude: phi3.ropeMagnitude } : {}),
    ...(phi3?.longRope ? { longRope: phi3.longRope } : {}),
    ...(architecture === "smollm3" ? { nopeLayers: hfNopeLayers(cfg, numLayers, path) } : {}),
    ...(architecture === "granite" ? hfGranite(cfg, path) : {}),
    ...(granite4 ? { ...hfGranite(cfg, path), mamba2: granite4.mamba2, ...(granite4.nopeLayers ? { nopeLayers: granite4.nopeLayers } : {}) } : {}),
    // OLMo 2 and 3: no pre-norms, norms of the blocks' outputs, q/k norms over the whole projection; OLMo 3's three layers of four slide.
    ...(architecture === "olmo2" ? { noPreNorms: true, postNorms: true, qkNormPerRow: true, ...hfSlidingWindow(cfg, numLayers, path, (i) => i % 4 < 3) } : {}),
    ...(architecture === "exaone4" ? hfExaone4(cfg, numLayers, path) : {}),
    ...(mistral3?.attnTemperature ? { attnTemperature: mistral3.attnTemperature } : {}),
    ...(lfm2 ? hfLfm2(cfg, numLayers, path) : {}),
    ...(falconH1 ? { mamba2: falconH1.mamba2, embeddingScale: falconH1.embeddingScale, logitScale: falconH1.logitScale, ...(falconH1Folds(falconH1.multipliers) ? { foldedMultipliers: true } : {}) } : {}),
    // MistralConfig's `sliding_window` (4096 in Mistral 7B v0.1, null since) masks every layer, as transformers and vLLM apply it.
    ...(archName === "MistralForCausalLM" || archName === "mistral" ? hfSlidingWindow(cfg, numLayers, path, () => true) : {}),
    ...(architecture === "qwen35" || architecture === "qwen35moe" || architecture === "qwen3next" ? hfQwen35(cfg, numLayers, path) : {}),
    contextLength,
    // LFM2's configs name it tie_embedding.
    tiedEmbeddings: hfTiedEmbeddings(lfm2 && cfg.tie_word_embeddings === undefined ? { ...cfg, tie_word_embeddings: cfg.tie_embedding } : cfg, architecture, path),
    qkvBias: architecture === "qwen2" || architecture === "qwen2moe" || architecture === "gpt-oss" || cfg.attention_bias === true,
    qkNorm: lfm2 || architecture === "qwen3" || architecture === "qwen35" || architecture === "qwen35moe" || architecture === "qwen3next" || architecture === "qwen3moe" || architecture === "gemma3" || architecture === "olmo2" || architecture === "exaone4" || (architecture === "glm4moe" && cfg.use_qk_norm === true),
    // After qkNorm: MiniMax-M2's follow its config.
    ...(minimax ? { qkNorm: minimax.qkNorm, ...(minimax.qkNormPerRow ? { qkNormPerRow: true } : {}) } : {}),
    bosTokenId: bos,
    eosTokenIds,
    addBos: typeof addBosSetting === "boolean" ? addBosSetting : architecture === "llama",
    ...nemotron,
  };
}

/**
 * A config.json token id: a whole number from 0, else an error naming the key; undefined (ignored, as
 * llama.cpp ignores such special ids) when past the embedding's `vocabSize` rows, which it would index outside.
 */
function tokenId(v: unknown, key: string, vocabSize: number, path: string): number | undefined {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw new ModelLoadError(`"${key}" in "${path}" should be token ids (whole numbers from 0), got ${JSON.stringify(v)}`);
  }
  return v < vocabSize ? v : undefined;
}

/** `cfg[key]` as a finite number from 0 (an epsilon). */
function nonNegative(cfg: Json, key: string, path: string, fallback: number): number {
  const v = num(cfg, key, path, fallback);
  if (!(Number.isFinite(v) && v >= 0)) throw new ModelLoadError(`"${key}" in "${path}" should be a number from 0, got ${v}`);
  return v;
}

/**
 * RoPE's dims when it turns only the first ones of a head (`partial_rotary_factor`; GLM-4.5's
 * default is a half); undefined for all of them.
 */
function hfRotaryDim(cfg: Json, architecture: Architecture, headDim: number, path: string): number | undefined {
  // transformers 5 moves it into `rope_parameters` (Qwen3.5's configs).
  const params = isJsonObject(cfg.rope_parameters) ? cfg.rope_parameters : {};
  const factor = num(cfg, "partial_rotary_factor", path, num(params, "partial_rotary_factor", path, architecture === "glm4moe" ? 0.5 : 1));
  const dims = Math.floor(headDim * factor);
  if (!(factor > 0 && factor <= 1) || dims % 2 !== 0 || dims === 0) {
    throw new ModelLoadError(`"partial_rotary_factor" in "${path}" should give an even number of a head's ${headDim} dims, got ${factor}`);
  }
  return dims === headDim ? undefined : dims;
}

/** The experts of a Mixtral, Qwen2-MoE, Qwen3-MoE or GLM-4.5 config.json. */
function hfMoe(cfg: Json, archName: string, architecture: Architecture, path: string): MoeConfig | undefined {
  const mixtral = archName === "MixtralForCausalLM" || archName === "mixtral";
  // GLM-4.5's experts are DeepSeek V3's design, with transformers' Glm4MoeConfig defaults.
  if (architecture === "glm4moe") return hfDeepseekMoe(cfg, path, GLM4_MOE_DEFAULTS);
  if (!mixtral && architecture !== "qwen2moe" && architecture !== "qwen3moe" && architecture !== "qwen35moe" && architecture !== "qwen3next") return undefined;
  const numExperts = num(cfg, mixtral ? "num_local_experts" : "num_experts", path);
  const numExpertsUsed = num(cfg, "num_experts_per_tok", path);
  if (!Number.isInteger(numExpertsUsed) || numExpertsUsed < 1 || numExpertsUsed > numExperts) {
    throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${numExpertsUsed}`);
  }
  const dense = cfg.mlp_only_layers;
  const step = cfg.decoder_sparse_step;
  if ((Array.isArray(dense) && dense.length > 0) || (typeof step === "number" && step !== 1)) {
    throw new ModelLoadError(`Model "${path}" mixes dense and MoE layers (mlp_only_layers, decoder_sparse_step); only all-MoE layers are supported`);
  }
  // Mixtral always renormalises (softmax over the chosen logits); Qwen2- and Qwen3-MoE per their
  // config (transformers' default false; true in every released Qwen3-MoE, false in Qwen2-MoE's).
  // Qwen3.5-MoE's config leaves it out: transformers' Qwen3_5MoeTextConfig renormalises. (Qwen3-Next's
  // sets it true, as llama.cpp runs it whatever the file says.)
  const moe = plainMoe(numExperts, numExpertsUsed, mixtral || cfg.norm_topk_prob === true || (architecture === "qwen35moe" && cfg.norm_topk_prob !== false));
  if (architecture !== "qwen2moe" && architecture !== "qwen35moe" && architecture !== "qwen3next") return moe;
  return { ...moe, sharedIntermediateSize: num(cfg, "shared_expert_intermediate_size", path), sharedGate: true };
}

/**
 * SmolLM3Config's NoPE layers: `no_rope_layers` (1 turns, 0 does not, one per layer), else every
 * `no_rope_layer_interval`-th (default 4). Its sliding window (`use_sliding_window`, off in the
 * released model) is refused rather than run without it.
 */
function hfNopeLayers(cfg: Json, numLayers: number, path: string): boolean[] {
  if (cfg.use_sliding_window === true) throw new ModelLoadError(`Model "${path}" sets use_sliding_window, which SmolLM3 support here does not run`);
  const flags = cfg.no_rope_layers;
  if (flags === undefined || flags === null) {
    const interval = num(cfg, "no_rope_layer_interval", path, 4);
    if (!Number.isInteger(interval) || interval < 1) throw new ModelLoadError(`"no_rope_layer_interval" in "${path}" should be a whole number from 1, got ${interval}`);
    return nopeEvery(numLayers, interval);
  }
  if (!Array.isArray(flags) || flags.length < numLayers || !flags.every((f) => f === 0 || f === 1)) {
    throw new ModelLoadError(`"no_rope_layers" in "${path}" should list 0 or 1 for each of the ${numLayers} layers, got ${JSON.stringify(flags)}`);
  }
  return flags.slice(0, numLayers).map((f) => f === 0);
}

/**
 * Exaone4Config's layers: OLMo 2's norms with per-head q/k norms; `sliding_window` on the layers
 * `layer_types` marks (transformers' default: every fourth global), the global ones turning nothing
 * (no RoPE where the model slides); none for a null window (the 1.2B).
 */
function hfExaone4(cfg: Json, numLayers: number, path: string): Partial<ModelConfig> {
  const window = hfSlidingWindow({ ...cfg, sliding_window: cfg.sliding_window === undefined ? 4096 : cfg.sliding_window }, numLayers, path, (i) => (i + 1) % 4 !== 0);
  const w = window.slidingWindow;
  return { noPreNorms: true, postNorms: true, ...(w ? { slidingWindow: w, nopeLayers: w.layers.map((s) => !s) } : {}) };
}

/** transformers 5 moves rope_theta into `rope_parameters`. */
function ropeParametersTheta(cfg: Json, path: string): number | undefined {
  const p = cfg.rope_parameters;
  const theta = isJsonObject(p) ? p.rope_theta : undefined;
  if (theta === undefined || theta === null || typeof theta === "number") return theta ?? undefined;
  throw new ModelLoadError(`"rope_parameters.rope_theta" in "${path}" should be a number, got ${JSON.stringify(theta)}`);
}

/**
 * ModelConfig.nextnLayers from config.json's `num_nextn_predict_layers` (DeepSeek V3, GLM-4.5) or
 * `mtp_num_hidden_layers` (Qwen3.5); Qwen3-Next's, either (its released config names neither: the
 * loader then counts the checkpoint's `mtp.` block, as vLLM takes one).
 */
function hfNextn(cfg: Record<string, unknown>, architecture: Architecture, path: string): Partial<ModelConfig> {
  const key = architecture === "deepseek2" || architecture === "glm4moe"
    ? "num_nextn_predict_layers"
    : architecture === "qwen35" || architecture === "qwen35moe"
    ? "mtp_num_hidden_layers"
    : architecture === "qwen3next"
    ? (cfg.num_nextn_predict_layers !== undefined ? "num_nextn_predict_layers" : "mtp_num_hidden_layers")
    : undefined;
  if (!key) return {};
  const n = num(cfg, key, path, 0);
  if (!Number.isInteger(n) || n < 0) throw new ModelLoadError(`config.json "${key}" in "${path}" should be a whole number from 0, got ${n}`);
  return n > 0 ? { nextnLayers: n } : {};
}

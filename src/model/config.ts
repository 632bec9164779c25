/**
 * Model description shared by the loaders (GGUF, safetensors) and the forward pass.
 * Loaders translate their file's names into these; the forward knows nothing of file formats.
 */
import type { VisionConfig, VisionModel } from "./vision/mmproj.ts";
import { type ExpertGroups, MAX_EXPERT_GROUPS, type MoeGating, type RopeLayout, type WeightDType } from "../backend/types.ts";

/**
 * Architectures the forward supports ("llama" includes Mixtral: a llama with {@link MoeConfig experts};
 * "glm4moe" is GLM-4.5/4.6/4.7's, "qwen2moe" Qwen1.5/Qwen2-MoE's and "deepseek2" DeepSeek V2/V3/R1's and
 * Kimi K2's, with {@link MlaConfig multi-head latent attention}; "gemma3" Gemma 3's text model).
 */
export type Architecture = "llama" | "qwen2" | "qwen3" | "qwen2moe" | "qwen3moe" | "glm4moe" | "deepseek2" | "gpt-oss" | "gemma3" | "phi3" | "smollm3" | "granite" | "olmo2" | "exaone4" | "gemma2" | "qwen35" | "qwen35moe" | "qwen3next" | "mistral3" | "lfm2" | "granitehybrid" | "nemotron_h" | "nemotron_h_moe" | "lfm2moe" | "falcon-h1" | "minimax-m2" | "seed_oss" | "gemma4";

/** Every {@link Architecture}, by the name GGUF files give it (`general.architecture`). */
export const ARCHITECTURES: readonly Architecture[] = ["llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "glm4moe", "deepseek2", "gpt-oss", "gemma3", "phi3", "smollm3", "granite", "olmo2", "exaone4", "gemma2", "qwen35", "qwen35moe", "qwen3next", "mistral3", "lfm2", "granitehybrid", "nemotron_h", "nemotron_h_moe", "lfm2moe", "falcon-h1", "minimax-m2", "seed_oss", "gemma4"];

/**
 * Multi-head latent attention (DeepSeek V2/V3, Kimi K2). Each token's keys and values are one
 * `kvLoraRank`-wide latent (RMS-normed) plus a `ropeDim`-wide RoPE key shared by every head; the cache
 * holds only those (one KV head of `kvLoraRank + ropeDim` dims: `ModelConfig.headDim`). Queries are
 * absorbed into the latent space (per head, q_nope · W_kb), so attention runs as multi-query attention
 * over the cache, and each head's latent output is expanded by W_vb to `vHeadDim` before `wo`.
 */
export interface MlaConfig {
  /** Width of q's low-rank down-projection (`q_lora_rank`); 0 when q is projected directly (DeepSeek-V2-Lite). */
  qLoraRank: number;
  kvLoraRank: number;
  /** Per-head query/key dims without RoPE (`qk_nope_head_dim`) and with (`qk_rope_head_dim`). */
  nopeDim: number;
  ropeDim: number;
  vHeadDim: number;
}

/** Checks latent attention sizes read from a file: positive integers (q's rank may be 0), an even RoPE width. */
export function checkMla(mla: MlaConfig, path: string): MlaConfig {
  const bad = Object.entries(mla).find(([key, v]) => !Number.isInteger(v) || v < (key === "qLoraRank" ? 0 : 1) || (key === "ropeDim" && v % 2 !== 0));
  if (bad) {
    throw new ModelLoadError(`Model "${path}" has latent attention ${bad[0]} ${bad[1]}; expected a positive integer (even for the RoPE dims)`);
  }
  return mla;
}

/**
 * A mixture-of-experts feed-forward: a router picks `numExpertsUsed` of `numExperts` SwiGLU experts
 * per token and sums their outputs weighted by its probabilities (Backend.moeRoute); some models
 * add an always-on shared expert and keep their first layers dense.
 */
export interface MoeConfig {
  numExperts: number;
  numExpertsUsed: number;
  /** Rescale the chosen experts' probabilities to sum to 1 (Mixtral, Qwen3-MoE, GLM-4.5; llama.cpp's `norm_w`). */
  normalizeTopK: boolean;
  /** Softmax over the experts (Mixtral, Qwen) or each expert's sigmoid (GLM-4.5, DeepSeek V3). */
  gating: MoeGating;
  /** Each MoE layer has a router selection bias, `LayerWeights.routerBias` (GLM-4.5's `e_score_correction_bias`). */
  selectionBias: boolean;
  /** Multiplies the routed experts' weights (GLM-4.5's `routed_scaling_factor`, 2.5); 1 for most. */
  routedScale: number;
  /** Layers 0..denseLayers-1 have a dense feed-forward of width {@link denseIntermediateSize} (GLM-4.5's `first_k_dense_replace`). */
  denseLayers: number;
  denseIntermediateSize: number;
  /** Width of the shared expert every token runs (GLM-4.5's shared experts fused; Qwen2-MoE's); 0 for none. */
  sharedIntermediateSize: number;
  /** The shared expert's output is scaled by sigmoid(x · `LayerWeights.sharedGate`) per token (Qwen2-MoE). */
  sharedGate: boolean;
  /** Grouped top-k (DeepSeek V3: 8 groups, 4 used; `MoeRouteOptions.groups`); absent for one group. */
  groups?: ExpertGroups;
  /** The router has a bias added to its logits before gating, `LayerWeights.routerLogitBias` (GPT-OSS). */
  routerLogitBias?: boolean;
  /** Each expert's gate, up and down projections have biases, `LayerWeights.bGate`/`bUp`/`bDown` (GPT-OSS). */
  expertBiases?: boolean;
  /**
   * Gemma 4's: a dense GeGLU feed-forward (the shared roles, `sharedIntermediateSize` wide) beside the
   * GELU experts, each normed before and after on its own; the router reads the residual RMS-normed by
   * `LayerWeights.routerNorm`; each expert's output is scaled by its `LayerWeights.expertScale`.
   */
  gemma4?: boolean;
  /** The experts' activation: SwiGLU (absent), or GPT-OSS's clamped one (Backend.swigluOai). */
  activation?: ExpertActivation;
}

/** GPT-OSS's clamped SwiGLU: g = min(gate, limit), u = clamp(up, ±limit), g·sigmoid(alpha·g)·(u + 1). */
export interface ExpertActivation {
  kind: "swiglu-oai";
  alpha: number;
  limit: number;
}

/** GPT-OSS's constants (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE, HF's GptOssExperts). */
export const GPT_OSS_ACTIVATION: ExpertActivation = { kind: "swiglu-oai", alpha: 1.702, limit: 7 };

/**
 * Sliding-window attention on some layers (GPT-OSS: 128 positions on every other layer; Gemma 3: 512
 * or 1024 on five layers of six): a query at position p on a sliding layer sees positions
 * p - size + 1..p (AttentionOptions.window).
 */
export interface SlidingWindow {
  size: number;
  /** One entry per layer: true where the layer's attention slides. */
  layers: readonly boolean[];
  /**
   * The sliding layers' own RoPE base, with no frequency factors (Gemma 3: 10 000, while its global
   * layers turn with `ropeTheta` and, from 4B up, linear scaling); absent: as every layer.
   */
  ropeTheta?: number;
  /**
   * The sliding layers' own head size, KV heads and rotated dims, where they differ from the other
   * layers' (ModelConfig.headDim, numKvHeads, rotaryDim: Gemma 4's full-attention layers' larger heads).
   */
  headDim?: number;
  numKvHeads?: number;
  rotaryDim?: number;
}

/** Layer `i`'s attention geometry: its KV heads, head size and rotated dims (undefined: all); Gemma 4's sliding layers have their own. */
export function layerAttention(config: ModelConfig, i: number): { numKvHeads: number; headDim: number; rotaryDim: number | undefined } {
  const w = config.slidingWindow;
  if (!w || !w.layers[i] || (w.headDim === undefined && w.numKvHeads === undefined)) return { numKvHeads: config.numKvHeads, headDim: config.headDim, rotaryDim: config.rotaryDim };
  return { numKvHeads: w.numKvHeads ?? config.numKvHeads, headDim: w.headDim ?? config.headDim, rotaryDim: w.headDim === undefined ? config.rotaryDim : w.rotaryDim };
}

/** Each distinct attention geometry of the model's attending layers (one for most models; Gemma 4's two). */
export function attentionGeometries(config: ModelConfig): { numKvHeads: number; headDim: number }[] {
  const seen = new Map<string, { numKvHeads: number; headDim: number }>();
  for (const i of attentionLayers(config)) {
    const g = layerAttention(config, i);
    seen.set(`${g.numKvHeads}x${g.headDim}`, { numKvHeads: g.numKvHeads, headDim: g.headDim });
  }
  return seen.size > 0 ? [...seen.values()] : [{ numKvHeads: config.numKvHeads, headDim: config.headDim }];
}

/** The window of layer `i`'s attention, or undefined where it sees the whole context. */
export function layerWindow(config: ModelConfig, i: number): number | undefined {
  const w = config.slidingWindow;
  return w && w.layers[i] ? w.size : undefined;
}

/**
 * llama.cpp's layer pattern for `sliding_window_pattern` n: layer i slides unless i % n == n - 1
 * (every layer for n = 0). GPT-OSS files leave it out and mean 2: even layers slide.
 */
export function slidingLayers(numLayers: number, pattern: number): boolean[] {
  return Array.from({ length: numLayers }, (_, i) => pattern === 0 || i % pattern < pattern - 1);
}

/** NoPE layers every `interval`-th (layer i when (i + 1) % interval is 0), as SmolLM3 has them. */
export function nopeEvery(numLayers: number, interval: number): boolean[] {
  return Array.from({ length: numLayers }, (_, i) => (i + 1) % interval === 0);
}

/**
 * The expert groups a file declares (`count` groups, experts chosen within the `used` best), checked
 * against the routing: undefined for one group; a clear error where Backend.moeRoute could not route them.
 */
export function expertGroups(count: number, used: number | undefined, numExperts: number, numExpertsUsed: number, where: string): ExpertGroups | undefined {
  if (count <= 1) return undefined;
  const size = numExperts / count;
  const ok = Number.isInteger(count) && count <= MAX_EXPERT_GROUPS && Number.isInteger(size) && size >= 2 &&
    used !== undefined && Number.isInteger(used) && used >= 1 && used <= count && numExpertsUsed <= used * size;
  if (!ok) {
    throw new ModelLoadError(
      `Model "${where}" routes ${numExpertsUsed} of ${numExperts} experts within ${used ?? "an unstated number"} of ${count} expert groups; ` +
        `supported: up to ${MAX_EXPERT_GROUPS} groups of 2 or more experts, and the chosen experts within the used groups`,
    );
  }
  return { count, used };
}

/** Experts as Mixtral and Qwen3-MoE have them: softmax routing, no bias, scale 1, every layer sparse, no shared expert. */
export function plainMoe(numExperts: number, numExpertsUsed: number, normalizeTopK: boolean): MoeConfig {
  return {
    numExperts,
    numExpertsUsed,
    normalizeTopK,
    gating: "softmax",
    selectionBias: false,
    routedScale: 1,
    denseLayers: 0,
    denseIntermediateSize: 0,
    sharedIntermediateSize: 0,
    sharedGate: false,
  };
}

/**
 * Gated DeltaNet (Qwen3.5, Qwen3-Next): linear attention whose state per sequence, a causal
 * convolution's last inputs and a [headKDim, headVDim] matrix per value head, replaces the KV cache on
 * its layers (Backend.causalConv1d, Backend.gatedDeltaNet).
 */
export interface DeltaNetConfig {
  /** One entry per layer: true where the layer is a Gated DeltaNet layer. */
  layers: readonly boolean[];
  numKHeads: number;
  numVHeads: number;
  headKDim: number;
  headVDim: number;
  /** The causal convolution's width (`linear_conv_kernel_dim`, 4). */
  convKernel: number;
  /** Which key head a value head reads (DeltaNetSpec.vHeadOrder): GGUF files are "tiled", Hugging Face's "grouped". */
  vHeadOrder: "tiled" | "grouped";
}

/** True when layer `i` is a Gated DeltaNet layer. */
export function isDeltaNetLayer(config: ModelConfig, i: number): boolean {
  return config.deltaNet?.layers[i] === true;
}

/** LFM2's gated short convolution layers (Backend.shortConv): which layers, and the convolution's width (`conv_L_cache`, 3). */
export interface ShortConvConfig {
  layers: boolean[];
  kernel: number;
}

/** True when layer `i` is a short convolution layer (LFM2). */
export function isShortConvLayer(config: ModelConfig, i: number): boolean {
  return config.shortConv?.layers[i] === true;
}

/**
 * Mamba-2 layers (Granite 4.0-H): one input projection gives z (the output gate, innerSize), x, B and
 * C (innerSize + 2·groups·stateSize, through a causal convolution with a bias and SiLU) and dt (heads);
 * the selective scan keeps a [headDim, stateSize] state per head (Backend.ssmScan); its output, gated
 * by SiLU of z, is RMS-normed (per group) before the output projection.
 */
export interface Mamba2Config {
  /** One entry per layer: true where the layer is a Mamba-2 layer. */
  layers: readonly boolean[];
  /** The scan's width, heads · headDim (`ssm.inner_size`, `mamba_expand` · hidden). */
  innerSize: number;
  /** Each head's state columns (`ssm.state_size`, `mamba_d_state`). */
  stateSize: number;
  /** Heads (`ssm.time_step_rank`, `mamba_n_heads`): dt and the decay are per head. */
  heads: number;
  /** Groups of heads sharing B and C (`ssm.group_count`, `mamba_n_groups`). */
  groups: number;
  /** The convolution's width (`ssm.conv_kernel`, `mamba_d_conv`). */
  convKernel: number;
  /**
   * Every Mamba-2 layer also attends, in parallel: attention and the scan read the same normed input
   * and both outputs join the residual (Falcon-H1). Such layers have KV caches and states both.
   */
  parallelAttention?: boolean;
  /** The gated output reaches the output projection unnormed: no `ssmNorm` (Falcon-H1 without `mamba_rms_norm`). */
  unnormed?: boolean;
  /** The scan's output is normed before SiLU(z) gates it, not after (Falcon-H1 checkpoints' `mamba_norm_before_gate`). */
  normBeforeGate?: boolean;
}

/** True when layer `i` is a Mamba-2 layer. */
export function isMamba2Layer(config: ModelConfig, i: number): boolean {
  return config.mamba2?.layers[i] === true;
}

/** True when layer `i` keeps recurrent state instead of KV (a Gated DeltaNet, short convolution or Mamba-2 layer). */
export function isRecurrentLayer(config: ModelConfig, i: number): boolean {
  return isDeltaNetLayer(config, i) || isShortConvLayer(config, i) || isMamba2Layer(config, i);
}

/** True when the model has layers with recurrent state (ModelConfig.deltaNet, .shortConv or .mamba2): state slots, checkpoints and their limits apply. */
export function hasRecurrentState(config: ModelConfig): boolean {
  return config.deltaNet !== undefined || config.shortConv !== undefined || config.mamba2 !== undefined;
}

/** The kind of recurrent layers a model has, for messages: "Gated DeltaNet layers", "short convolution layers" or "Mamba-2 layers". */
export function recurrentKind(config: ModelConfig): string {
  return config.deltaNet ? "Gated DeltaNet layers" : config.mamba2 ? "Mamba-2 layers" : "short convolution layers";
}

/** The one block of a layer that has one ({@link ModelConfig.layerBlocks}). */
export type LayerBlock = "mixer" | "ffn";

/** True when layer `i` is a feed-forward block alone, with neither attention nor a recurrent mixer (Nemotron-H's MLP layers). */
export function isFeedForwardOnlyLayer(config: ModelConfig, i: number): boolean {
  return config.layerBlocks?.[i] === "ffn";
}

/** True when layer `i` has a feed-forward block (all but Nemotron-H's mixer layers). */
export function hasFeedForward(config: ModelConfig, i: number): boolean {
  return config.layerBlocks?.[i] !== "mixer";
}

/** The layers with a KV cache of their own, in order (all of them but those with recurrent state or a feed-forward alone, or that read another's cache; Falcon-H1's Mamba-2 layers attend too). */
export function attentionLayers(config: ModelConfig): number[] {
  return Array.from({ length: config.numLayers }, (_, i) => i).filter((i) =>
    (!isRecurrentLayer(config, i) || attendsInParallel(config, i)) && !isFeedForwardOnlyLayer(config, i) && config.kvShareFrom?.[i] === undefined
  );
}

/**
 * The layers with a KV cache of their own, in the order PagedKv holds them: the attention layers
 * ({@link attentionLayers}), then a loaded multi-token-prediction block's (ModelConfig.mtp).
 */
export function cachedLayers(config: ModelConfig): number[] {
  const layers = attentionLayers(config);
  return config.mtp ? [...layers, config.mtp.layer] : layers;
}

/**
 * The attention layers whose cache may hold only each sequence's window: those with a cache of their
 * own ({@link attentionLayers}) that slide. With the engine's `slidingWindowKv: "window"` they keep
 * their window in per-sequence slots (RecurrentState.window) instead of paged blocks.
 */
export function windowedLayers(config: ModelConfig): number[] {
  return attentionLayers(config).filter((i) => layerWindow(config, i) !== undefined);
}

/** True when layer `i` is a Mamba-2 layer that also attends, in parallel (Mamba2Config.parallelAttention: Falcon-H1). */
export function attendsInParallel(config: ModelConfig, i: number): boolean {
  return config.mamba2?.parallelAttention === true && isMamba2Layer(config, i);
}

/** True when layer `i` of a model runs experts (an MoE model past its leading dense layers). */
export function isMoeLayer(config: ModelConfig, i: number): boolean {
  return config.moe !== undefined && i >= config.moe.denseLayers;
}

/** Hyper-parameters of a decoder-only transformer of the Llama/Qwen families. */
export interface ModelConfig {
  architecture: Architecture;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** The feed-forward width; with `moe`, each routed expert's. */
  intermediateSize: number;
  /** Present for mixture-of-experts models. */
  moe?: MoeConfig;
  /** Present for multi-head latent attention; `numKvHeads` is then 1 and `headDim` the cached latent + RoPE width. */
  mla?: MlaConfig;
  /**
   * Multi-token-prediction blocks the file holds after its layers (GGUF `nextn_predict_layers`,
   * config.json `num_nextn_predict_layers` or Qwen3.5's `mtp_num_hidden_layers`), loaded or not;
   * absent for none.
   */
  nextnLayers?: number;
  /**
   * Present when the first of them is loaded (LoadOptions.mtp, ModelWeights.mtp): its layer is layer
   * `numLayers`, with a KV cache of its own beside the others' (forward-mtp.ts).
   */
  mtp?: { layer: number; eagle?: EagleHeadConfig };
  /** A vision tower is loaded (LoadOptions.mmproj, LoadedModel.vision): prompts may hold images (model/vision/). */
  vision?: VisionConfig;
  /** The attention scores' scale; absent for 1/√headDim (MLA: 1/√(nope + rope), times YaRN's mscale²). */
  attentionScale?: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeLayout: RopeLayout;
  /** Dims of each head that RoPE turns, the first ones (GLM-4.5: half); absent for all `headDim`. */
  rotaryDim?: number;
  /** Per-pair RoPE frequency divisors, length rotaryDim/2 (Llama 3.1+ "llama3" scaling; llama.cpp's
   * `rope_freqs.weight`): pair i turns at pos · ropeTheta^(-2i/rotaryDim) / ropeFreqFactors[i]. */
  ropeFreqFactors?: number[];
  /**
   * Multiplies RoPE's rotated pairs of q and k, leaving the dims past `rotaryDim` as they are
   * (LongRoPE's attention factor: Phi-3's 128K models, Phi-4-mini; Backend.rope's `magnitude`); absent: 1.
   */
  ropeMagnitude?: number;
  /**
   * Llama 4's attention temperature tuning (Ministral 3): each query, once turned, is scaled by
   * 1 + beta · ln(1 + ⌊position / originalContext⌋), so scores sharpen past the original context.
   */
  attnTemperature?: { beta: number; originalContext: number };
  /**
   * LongRoPE's two sets of divisors (Phi-3's 128K models): `ropeFreqFactors` holds the long ones where
   * the context served passes `originalContext`, the short ones within it, as llama.cpp chooses by its
   * context; a loader chooses by the model's context, an engine again by its own (phi3.ts `longRopeFor`).
   */
  longRope?: { long: number[]; short: number[]; originalContext: number };
  /** Layers that turn neither q nor k (NoPE: SmolLM3's every fourth); absent: every layer turns. */
  nopeLayers?: boolean[];
  /** Gated DeltaNet layers in place of some attention layers (Qwen3.5: three of four; delta-net.ts). */
  deltaNet?: DeltaNetConfig;
  /** LFM2's short convolution layers; absent for other models. */
  shortConv?: ShortConvConfig;
  /** Granite 4.0-H's and Nemotron-H's Mamba-2 layers; absent for other models. */
  mamba2?: Mamba2Config;
  /**
   * The query projection gives each head its query and then as many gate values; the attention's
   * output is multiplied by their sigmoid before `wo` (Qwen3.5's gated attention).
   */
  attnOutputGate?: boolean;
  /** Maximum context the model was trained for. */
  contextLength: number;
  /** True when the output projection reuses the token embedding. */
  tiedEmbeddings: boolean;
  /** Qwen2 has biases on the q/k/v projections. */
  qkvBias: boolean;
  /** Qwen3 normalises q and k per head before RoPE. */
  qkNorm: boolean;
  /** The q/k norms span each token's whole projection ([heads·headDim]) instead of each head (OLMo 2). */
  qkNormPerRow?: boolean;
  /**
   * The blocks read the residual stream unnormed: no `attnNorm` or `ffnNorm`, only the norms of the
   * blocks' outputs (OLMo 2; with `postNorms`).
   */
  noPreNorms?: boolean;
  /** The output projection has a bias, `LayerWeights.bo` (GPT-OSS). */
  outputBias?: boolean;
  /** Each layer has a learned sink logit per query head, `LayerWeights.sinks` (GPT-OSS; AttentionOptions.sinks). */
  attentionSinks?: boolean;
  /** Sliding-window attention on some layers (GPT-OSS, Gemma 3). */
  slidingWindow?: SlidingWindow;
  /** Multiplies the token embeddings before the first layer (Gemma: √hiddenSize); absent: 1. */
  embeddingScale?: number;
  /** Multiplies each block's output before its residual add (Granite's `residual_multiplier`); absent: 1. */
  residualScale?: number;
  /** Divides the logits (Granite's `logits_scaling`); absent: 1. */
  logitScale?: number;
  /**
   * Multipliers are folded into the projections' weights (Falcon-H1's µP multipliers: a GGUF's always,
   * as its converter folds them unrecorded; a checkpoint's where any is not 1), so a PEFT adapter's
   * deltas, trained against the unscaled projections, would not apply as given.
   */
  foldedMultipliers?: boolean;
  /** Soft-caps the attention's scaled scores: cap · tanh(s / cap) (Gemma 2's `attn_logit_softcapping`); absent: none. */
  attnSoftcap?: number;
  /** The values are RMS-normed per head, without a weight, before the cache (Gemma 4). */
  valueNorm?: boolean;
  /** One entry per layer: true where the layer has no value projection and its values are its keys' projection, before their norm (Gemma 4's). */
  keyAsValue?: readonly boolean[];
  /** One entry per layer: the scalar its output (the residual stream after it) is multiplied by (Gemma 4's `layer_output_scale`, read from the weights). */
  layerOutputScales?: readonly number[];
  /**
   * One entry per layer: the earlier layer whose KV cache it attends over instead of its own (Gemma 4
   * E2B/E4B's last layers: no key or value projection, no cache); undefined where it has its own.
   */
  kvShareFrom?: readonly (number | undefined)[];
  /** One entry per layer where the feed-forward widths differ (Gemma 4 E2B/E4B's double-wide shared layers); else intermediateSize. */
  layerIntermediateSizes?: readonly number[];
  /**
   * Gemma 4 E2B/E4B's per-layer inputs: each token's own `width` values per layer (ModelWeights.perLayer*),
   * gated into each layer's output (LayerWeights.pleGate, pleProj, plePostNorm).
   */
  perLayerInput?: { width: number };
  /** Soft-caps the logits (Gemma 2's `final_logit_softcapping`); absent: none. */
  finalSoftcap?: number;
  /**
   * Each layer also norms its attention's and feed-forward's outputs before adding them to the
   * residual stream (Gemma 2/3's "sandwich" norms, `LayerWeights.attnPostNorm` and `ffnPostNorm`).
   */
  postNorms?: boolean;
  /**
   * The dense feed-forward's activation: "silu" (SwiGLU, absent), "gelu" (GeGLU with GELU's tanh
   * approximation, Backend.geluMul: Gemma), or "relu2", an ungated feed-forward down(max(up·x, 0)²)
   * with no `wGate` (Backend.reluSquared: Nemotron-H).
   */
  ffnActivation?: "silu" | "gelu" | "relu2";
  /** The dense feed-forward's up and down projections have biases, `LayerWeights.bUp` and `bDown` (Nemotron-H's `mlp_bias`). */
  ffnBias?: boolean;
  /**
   * Per layer, the one block a layer has where it has only one: "mixer" (attention or a recurrent
   * mixer, no feed-forward) or "ffn" (a feed-forward alone, normed by `attnNorm`); absent, or an
   * undefined entry: both, as most models (Nemotron-H: each layer is a Mamba-2, attention or MLP block).
   */
  layerBlocks?: readonly (LayerBlock | undefined)[];
  bosTokenId?: number;
  eosTokenIds: number[];
  /** Whether prompts start with BOS (GGUF tokenizer.ggml.add_bos_token; Llama yes, Qwen no). */
  addBos: boolean;
  /**
   * A token the model's tokenizer ends every text with (GGUF tokenizer.ggml.add_eos_token; a Hugging
   * Face tokenizer whose post-processor appends one, as Qwen3-Embedding's `<|endoftext|>`). Embedding
   * models pool the state at it, so /v1/embeddings appends it to text inputs; generation prompts end
   * where their template ends them. Absent: none.
   */
  appendEosTokenId?: number;
  /**
   * How the model's embeddings are pooled, where its file says (GGUF `{arch}.pooling_type`: llama.cpp's
   * none, mean, cls, last, rank). /v1/embeddings pools the last token, so it refuses mean, cls and rank.
   */
  poolingType?: PoolingType;
  /** The sampling defaults the model ships (a Hugging Face directory's generation_config.json, a GGUF's `general.sampling.*`); absent: none. */
  samplingDefaults?: SamplingDefaults;
}

/**
 * Sampling parameters a model's authors recommend (generation_config.json), which a server may use
 * where a request leaves them out (serve's `--generation-config auto`, as vLLM does).
 */
export interface SamplingDefaults {
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  repetitionPenalty?: number;
  /** `max_new_tokens`: the output budget of a request that names none. */
  maxTokens?: number;
  /** Keys it sets that this server cannot apply (`typical_p`, `no_repeat_ngram_size`), for a note at start-up. */
  unsupported?: string[];
  /** Where they came from, for that note (absent: a Hugging Face directory's generation_config.json). */
  source?: "GGUF general.sampling";
}

/** A tensor as read from a file, before upload: raw little-endian bytes in its dtype's layout. */
/** llama.cpp's pooling types, by their GGUF number (0 to 4). */
export const POOLING_TYPES = ["none", "mean", "cls", "last", "rank"] as const;
/** How a model's embeddings are pooled ({@link POOLING_TYPES}). */
export type PoolingType = (typeof POOLING_TYPES)[number];

export interface HostTensor {
  name: string;
  shape: number[]; // row-major, outermost first (e.g. [out, in] for a linear weight)
  dtype: WeightDType;
  data: Uint8Array;
}

/**
 * Host-side weights of one layer, named for their role. In a mixture-of-experts layer `wGate`,
 * `wUp` and `wDown` stack every expert's matrix: [experts, out, in] (GGUF's `ffn_*_exps`), and
 * `router` [experts, hidden] scores the experts; a model's leading dense layers hold plain matrices.
 */
export interface LayerWeights<T> {
  /** The norm before the attention; absent where the model has none ({@link ModelConfig.noPreNorms}). */
  attnNorm?: T;
  /** The query projection [heads·headDim, hidden]; with MLA [heads·(nope + rope), qLoraRank or hidden]. Absent on Gated DeltaNet layers. */
  wq?: T;
  /** Key and value projections; absent with MLA, whose keys and values come from `wkvA`. */
  wk?: T;
  wv?: T;
  /** The attention's output projection; absent on Gated DeltaNet layers. */
  wo?: T;
  /** MLA: q's down-projection [qLoraRank, hidden] and the norm after it [qLoraRank]. */
  wqA?: T;
  qANorm?: T;
  /** MLA: [kvLoraRank + ropeDim, hidden] (the latent, then the shared RoPE key) and the latent's norm [kvLoraRank]. */
  wkvA?: T;
  kvANorm?: T;
  /** MLA: per head, latent ← q_nope [heads, kvLoraRank, nopeDim] and value ← latent [heads, vHeadDim, kvLoraRank]. */
  wkB?: T;
  wvB?: T;
  bq?: T;
  bk?: T;
  bv?: T;
  qNorm?: T;
  kNorm?: T;
  /** [hidden]: the norms of the attention's and the feed-forward's outputs ({@link ModelConfig.postNorms}). */
  attnPostNorm?: T;
  ffnPostNorm?: T;
  /** [hidden]: Gemma 4's experts' layer: the dense feed-forward's output norm, the experts' input and output norms ({@link MoeConfig.gemma4}). */
  ffnPostNorm1?: T;
  ffnPreNorm2?: T;
  ffnPostNorm2?: T;
  /** [hidden]: the weight of the router's own RMS norm of the residual (Gemma 4's router scale over √hidden). */
  routerNorm?: T;
  /** [experts]: each expert's output scale (Gemma 4's per-expert scale). */
  expertScale?: T;
  /** Gemma 4 E2B/E4B's per-layer input: gate [width, hidden], projection [hidden, width], output norm [hidden] ({@link ModelConfig.perLayerInput}). */
  pleGate?: T;
  pleProj?: T;
  plePostNorm?: T;
  /** The norm before the feed-forward; absent where the model has none ({@link ModelConfig.noPreNorms}). */
  ffnNorm?: T;
  /** The feed-forward's gate (absent for an ungated one, ffnActivation "relu2"), up and down projections; all absent on a layer without a feed-forward ({@link ModelConfig.layerBlocks}). */
  wGate?: T;
  wUp?: T;
  wDown?: T;
  router?: T;
  /** [experts]: added to the router's probabilities to choose experts ({@link MoeConfig.selectionBias}). */
  routerBias?: T;
  /** The shared expert's SwiGLU matrices ({@link MoeConfig.sharedIntermediateSize}). */
  wGateShared?: T;
  wUpShared?: T;
  wDownShared?: T;
  /** [1, hidden]: the shared expert's gate ({@link MoeConfig.sharedGate}). */
  sharedGate?: T;
  /** [hidden]: the output projection's bias ({@link ModelConfig.outputBias}). */
  bo?: T;
  /** [heads]: each query head's attention sink logit ({@link ModelConfig.attentionSinks}). */
  sinks?: T;
  /** [experts]: added to the router's logits ({@link MoeConfig.routerLogitBias}). */
  routerLogitBias?: T;
  /** [experts, width]: each expert's gate, up and down biases ({@link MoeConfig.expertBiases}). */
  bGate?: T;
  bUp?: T;
  bDown?: T;
  /**
   * A Gated DeltaNet layer's ({@link DeltaNetConfig}): q, k and v's projection [2·kHeads·dk + vHeads·dv,
   * hidden], the output gate's [vHeads·dv, hidden], beta's and alpha's [vHeads, hidden], the causal
   * convolution [2·kHeads·dk + vHeads·dv, K], dt's bias and the decay rates −exp(A_log) [vHeads], the
   * gated norm [dv] and the output projection [hidden, vHeads·dv]. Such a layer has no wq, wk, wv or wo.
   */
  ssmQkv?: T;
  ssmZ?: T;
  ssmBeta?: T;
  ssmAlpha?: T;
  ssmConv?: T;
  ssmDtBias?: T;
  ssmDecay?: T;
  ssmNorm?: T;
  ssmOut?: T;
  /**
   * A short convolution layer's ({@link ShortConvConfig}, LFM2): the input projection [3·hidden,
   * hidden] (B, C and x), the depthwise convolution [hidden, K] and the output projection [hidden,
   * hidden]. Such a layer has no wq, wk, wv or wo.
   */
  convIn?: T;
  convWeight?: T;
  convOut?: T;
  /**
   * A Mamba-2 layer's ({@link Mamba2Config}), besides ssmConv [channels, K], ssmDtBias [heads],
   * ssmDecay (−exp(A_log)) [heads, 1], ssmNorm [groups, innerSize / groups] and ssmOut [hidden,
   * innerSize]: the input projection [2·innerSize + 2·groups·stateSize + heads, hidden] (z, then x, B
   * and C, then dt), the convolution's bias [channels] and the skip D [heads, 1].
   */
  ssmIn?: T;
  ssmConvBias?: T;
  ssmD?: T;
}

/** All weights of a model, generic over host (HostTensor) or device (Tensor) storage. */
export interface ModelWeights<T> {
  tokenEmbedding: T;
  layers: LayerWeights<T>[];
  outputNorm: T;
  /** Absent when tied to the token embedding. */
  output?: T;
  /** Gemma 4 E2B/E4B's per-layer inputs ({@link ModelConfig.perLayerInput}): a table [vocab, layers · width], a projection [layers · width, hidden] of the embedding, its norm [width]. */
  perLayerEmbedding?: T;
  perLayerModelProj?: T;
  perLayerProjNorm?: T;
  /** The multi-token-prediction block (ModelConfig.mtp). */
  mtp?: MtpWeights<T>;
}

/**
 * A multi-token-prediction block: from the model's normed hidden state at a position and the next
 * token's embedding it predicts the token after (forward-mtp.ts). `ehProj` [hidden, 2·hidden] takes
 * [enorm(embedding); hnorm(hidden)]; then one whole layer; then `headNorm` and `head`, or the model's
 * output norm and head where the file has none of its own; `embedding` likewise.
 */
export interface MtpWeights<T> {
  layer: LayerWeights<T>;
  /** An EAGLE head's `fc`: [hidden, 3·hidden] over the fused layers' states (EAGLE-3), [hidden, 2·hidden] over [embedding; hidden] (EAGLE). */
  ehProj: T;
  /** Absent for an EAGLE head, which norms neither (EAGLE-3's are its layer's input_layernorm and hidden_norm). */
  enorm?: T;
  hnorm?: T;
  headNorm?: T;
  head?: T;
  embedding?: T;
  /** An EAGLE head's `fc.bias` [hidden], where it has one. */
  ehBias?: T;
  /**
   * [draft vocabulary, hidden]: the embedding of each token an EAGLE-3 head with its own vocabulary
   * names (EagleHeadConfig.draftToTarget), which its chained drafts are fed on the device.
   */
  draftEmbedding?: T;
  /** The weight of an EAGLE-3 head's norm before `fc` (EagleHeadConfig.fcInputNorm): [3·hidden], or ones [hidden] for "each". */
  fcInNorm?: T;
  /** f32 [rotary pairs]: an EAGLE head's RoPE divisors (its config's rope_scaling), where it has them. */
  ropeFreqFactors?: T;
}

/**
 * An EAGLE draft head attached to a model (model/eagle-head.ts; vLLM's speculative methods "eagle"
 * and "eagle3"): one Llama decoder layer of its own geometry, run as ModelConfig.mtp's block
 * (forward-eagle.ts).
 */
export interface EagleHeadConfig {
  /** "eagle3": fc over the states entering `auxLayers`, then [input_layernorm(embedding); hidden_norm(fused)] into the attention; "eagle": fc over [embedding; the model's normed hidden state]. */
  method: "eagle" | "eagle3";
  numHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  /** EAGLE-3: the model's layers whose input states (the residual stream entering them) are fused, in order. */
  auxLayers?: number[];
  /** EAGLE-3's `norm_before_residual`: the residual is the fused state after hidden_norm, not before. */
  normBeforeResidual?: boolean;
  /**
   * EAGLE-3's norm of the states before `fc`: "whole" (`norm_before_fc`, one RMS norm over the three
   * side by side, `MtpWeights.fcInNorm`) or "each" (`fc_norm`, each state its own, their weights folded
   * into `fc`'s columns at load, `fcInNorm` then ones). Absent: none.
   */
  fcInputNorm?: "whole" | "each";
  /** A sliding-window head's window (`sliding_window`, positions seen including its own); absent: the whole context. */
  window?: number;
  /** The attention scores' scale where YaRN sets it (the attention factor squared over √headDim); absent: 1/√headDim. */
  attentionScale?: number;
  /** EAGLE-3's `norm_output`: a chained pass takes the head's state after `norm`, not before. */
  normOutput?: boolean;
  /** The target id of each id of a head with its own (smaller) vocabulary (its d2t offsets added); absent: the model's ids. */
  draftToTarget?: Int32Array;
  /** Where the head was read from. */
  source: string;
}

/** The tokenizer contract the engine and server use. */
export interface Tokenizer {
  readonly vocabSize: number;
  /** Encodes text to ids; adds BOS only when `addBos` is true. */
  encode(text: string, options?: { addBos?: boolean }): number[];
  /**
   * Decodes ids to text: control tokens (`<|im_end|>`, Mistral's `[TOOL_CALLS]`) are skipped unless
   * `special` is true (vLLM's `skip_special_tokens` false), which writes each as its vocabulary string.
   */
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** Text of one token as it would appear in streamed output (may be a partial UTF-8 piece); see {@link decode} for `special`. */
  tokenText?(id: number, options?: DecodeOptions): string;
  /**
   * The bytes one token stands for in the output (empty for special tokens), where they are known: a
   * piece of a UTF-8 character has no text of its own, and output grammars place such pieces by
   * their bytes (src/engine/token-trie.ts).
   */
  tokenBytes?(id: number): Uint8Array | undefined;
  /**
   * The most UTF-16 code units of input text one token can stand for (its longest vocabulary
   * piece, special tokens included; a byte-fallback token stands for at most one), so
   * `Math.ceil(text.length / maxCharsPerToken())` tokens at least come out of `encode(text)`.
   * Undefined when no such bound holds (a tokenizer that can drop or fuse input).
   */
  maxCharsPerToken?(): number | undefined;
}

/** How {@link Tokenizer.decode} writes control tokens. */
export interface DecodeOptions {
  /** Write control tokens as their vocabulary strings (default false: skip them). */
  special?: boolean;
  /**
   * The ids are a whole text (`/detokenize`), not a continuation of one: the space a SentencePiece
   * encoder prefixes is dropped from the first piece even without BOS before it, as sentencepiece
   * decodes. Default false: generated text keeps it (" Once" after a prompt).
   */
  whole?: boolean;
}

/** A token's text as it streams: the tokenizer's piece for it, or its decoding where it has none. */
export function tokenTextOf(tokenizer: Tokenizer, id: number, options?: DecodeOptions): string {
  return tokenizer.tokenText?.(id, options) ?? tokenizer.decode([id], options);
}

/** A loaded model: configuration, host weights, tokenizer and its chat template if any. */
export interface LoadedModel {
  config: ModelConfig;
  weights: ModelWeights<HostTensor>;
  tokenizer: Tokenizer;
  chatTemplate?: string;
  /** Where it came from (path), for logs. */
  source: string;
  /** The vision tower (LoadOptions.mmproj); its config is `config.vision`. */
  vision?: VisionModel;
}

/** A clear, one-line error about a model file: missing, truncated, corrupt or unsupported. */
export class ModelLoadError extends Error {
  override name = "ModelLoadError";
}

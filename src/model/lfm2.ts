/**
 * LFM2 (llama.cpp's `lfm2`, transformers' Lfm2ForCausalLM: Liquid AI's LFM2 350M–2.6B and LFM2.5):
 * a hybrid of gated short convolution layers (ModelConfig.shortConv: B, C and x from one projection,
 * a depthwise causal convolution of width 3 over B ⊙ x, gated by C; Backend.shortConv) and grouped
 * query attention layers with q/k norms, each followed by a SwiGLU feed-forward. A convolution
 * layer keeps its last inputs per sequence in a recurrent state slot, as a Gated DeltaNet layer does
 * (engine/state-slots.ts, state-checkpoints.ts). GGUF files tell the layers apart by a per-layer
 * `attention.head_count_kv` of 0; configs by `layer_types` ("conv" or "full_attention") or
 * `full_attn_idxs`. The final norm is `token_embd_norm` (GGUF) / `model.embedding_norm` (HF).
 * LFM2-MoE (`lfm2moe`, Lfm2MoeForCausalLM: LFM2-8B-A1B) has the same layers, its feed-forwards past the
 * leading dense ones routed experts (sigmoid scores chosen with a selection bias, renormalised).
 */
import { isMoeLayer, ModelLoadError, type ModelConfig, type MoeConfig, type ShortConvConfig } from "./config.ts";
import { EXPERT } from "./expert-stack.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { type Json, num, wholeAtLeast } from "./hf-json.ts";
import type { LayerRole, TensorSource } from "./weights.ts";

/** A per-layer `head_count_kv` array's layers (0: a convolution layer) and the attention layers' KV heads. */
export function ggufLfm2(meta: GgufMetadata, arch: string, path: string): { shortConv: ShortConvConfig; numKvHeads: number } {
  const key = `${arch}.attention.head_count_kv`;
  const raw = meta.entries.get(key)?.value;
  if (!Array.isArray(raw) || raw.length === 0) throw new ModelLoadError(`Model "${path}" is lfm2 but "${key}" is not a per-layer array (0 for its convolution layers)`);
  const heads = raw.map(Number);
  const blocks = meta.number(`${arch}.block_count`);
  if (heads.length !== blocks) throw new ModelLoadError(`Model "${path}" lists "${key}" for ${heads.length} layers of its ${blocks}`);
  const attention = [...new Set(heads.filter((h) => h !== 0))];
  if (attention.length !== 1 || !Number.isInteger(attention[0]) || attention[0] < 1) {
    throw new ModelLoadError(`Model "${path}" has "${key}" [${heads.join(", ")}]; expected 0 for each convolution layer and one KV head count for the attention layers`);
  }
  const kernel = meta.number(`${arch}.shortconv.l_cache`);
  if (!Number.isInteger(kernel) || kernel < 2) throw new ModelLoadError(`GGUF metadata "${arch}.shortconv.l_cache" in "${path}" should be a whole number of at least 2, got ${kernel}`);
  return { shortConv: { layers: heads.map((h) => h === 0), kernel }, numKvHeads: attention[0] };
}

/**
 * Lfm2Config's layers and convolution: `layer_types` (else `full_attn_idxs`), `conv_L_cache`; a
 * convolution with a bias (`conv_bias`) is refused.
 */
export function hfLfm2(cfg: Json, numLayers: number, path: string): { shortConv: ShortConvConfig } {
  if (cfg.conv_bias === true) throw new ModelLoadError(`Model "${path}" sets conv_bias, which LFM2 support here does not run`);
  const types = cfg.layer_types;
  let layers: boolean[];
  if (Array.isArray(types)) {
    if (types.length !== numLayers || !types.every((t) => t === "conv" || t === "full_attention")) {
      throw new ModelLoadError(`"layer_types" in "${path}" should name conv or full_attention for each of the ${numLayers} layers, got ${JSON.stringify(types)}`);
    }
    layers = types.map((t) => t === "conv");
  } else if (Array.isArray(cfg.full_attn_idxs)) {
    const full = new Set(cfg.full_attn_idxs.map(Number));
    layers = Array.from({ length: numLayers }, (_, i) => !full.has(i));
  } else {
    throw new ModelLoadError(`Model "${path}" is LFM2 but gives neither "layer_types" nor "full_attn_idxs"`);
  }
  const kernel = num(cfg, "conv_L_cache", path, 3);
  if (!Number.isInteger(kernel) || kernel < 2) throw new ModelLoadError(`"conv_L_cache" in "${path}" should be a whole number of at least 2, got ${kernel}`);
  return { shortConv: { layers, kernel } };
}

/**
 * Lfm2MLP's width, as transformers and llama.cpp's converter compute it: `block_ff_dim` (else
 * `intermediate_size`), with `block_auto_adjust_ff_dim` two thirds of it, times
 * `block_ffn_dim_multiplier`, rounded up to `block_multiple_of`.
 */
export function lfm2FeedForward(cfg: Json, path: string): number {
  let ff = num(cfg, cfg.block_ff_dim !== undefined ? "block_ff_dim" : "intermediate_size", path);
  if (cfg.block_auto_adjust_ff_dim === true) {
    ff = Math.trunc((2 * ff) / 3);
    if (typeof cfg.block_ffn_dim_multiplier === "number") ff = Math.trunc(cfg.block_ffn_dim_multiplier * ff);
    const multiple = num(cfg, "block_multiple_of", path, 256);
    ff = multiple * Math.ceil(ff / multiple);
  }
  return ff;
}

/** transformers' LFM2 names of the roles other architectures name differently (under `model.layers.N.`). */
export const LFM2_HF_NAMES: Partial<Record<LayerRole, string>> = {
  attnNorm: "operator_norm.weight",
  ffnNorm: "ffn_norm.weight",
  wo: "self_attn.out_proj.weight",
  qNorm: "self_attn.q_layernorm.weight",
  kNorm: "self_attn.k_layernorm.weight",
  wGate: "feed_forward.w1.weight",
  wUp: "feed_forward.w3.weight",
  wDown: "feed_forward.w2.weight",
};

/** An LFM2 checkpoint's tensors as the forward takes them: the convolution [C, 1, K] as [C, K]. */
export function lfm2HfTensors(source: TensorSource): TensorSource {
  return {
    ...source,
    read: async (name) => {
      const t = await source.read(name);
      return name.endsWith("conv.conv.weight") && t.shape.length === 3 && t.shape[1] === 1 ? { ...t, shape: [t.shape[0], t.shape[2]] } : t;
    },
  };
}

/**
 * Lfm2MoeConfig's experts: `num_experts`, `num_experts_per_tok`, `num_dense_layers` leading dense
 * layers of `dense` width, sigmoid scores chosen with the router's `expert_bias` (`use_expert_bias`),
 * renormalised (`norm_topk_prob`), as llama.cpp's lfm2moe runs them; experts of `moe_intermediate_size`
 * (ModelConfig.intermediateSize). A `routed_scaling_factor` other than 1, which llama.cpp does not
 * apply, or an unbiased or unnormalised router, are refused by name.
 */
export function hfLfm2Moe(cfg: Json, dense: number, path: string): MoeConfig {
  const whole = (key: string, fallback: number, least: number) => wholeAtLeast(cfg, key, path, fallback, least);
  const numExperts = whole("num_experts", 32, 1);
  const numExpertsUsed = whole("num_experts_per_tok", 4, 1);
  if (numExpertsUsed > numExperts) throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${numExpertsUsed}`);
  if (num(cfg, "routed_scaling_factor", path, 1) !== 1) throw new ModelLoadError(`Model "${path}" sets routed_scaling_factor ${cfg.routed_scaling_factor}; LFM2-MoE's experts run unscaled (as llama.cpp runs them)`);
  if (cfg.use_expert_bias === false || cfg.norm_topk_prob === false) {
    throw new ModelLoadError(`Model "${path}" sets ${cfg.use_expert_bias === false ? "use_expert_bias" : "norm_topk_prob"} false; only LFM2-MoE's router (biased selection, renormalised weights) is supported`);
  }
  const denseLayers = whole("num_dense_layers", 2, 0);
  return {
    numExperts, numExpertsUsed, normalizeTopK: true, gating: "sigmoid", selectionBias: true, routedScale: 1,
    denseLayers, denseIntermediateSize: denseLayers > 0 ? dense : 0, sharedIntermediateSize: 0, sharedGate: false,
  };
}

/** LFM2-MoE's expert layers' names (`feed_forward.gate`, `feed_forward.expert_bias`, each expert's w1/w3/w2, stacked as read). */
const LFM2_EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  router: "feed_forward.gate.weight",
  routerBias: "feed_forward.expert_bias",
  wGate: `feed_forward.experts.${EXPERT}.w1.weight`,
  wUp: `feed_forward.experts.${EXPERT}.w3.weight`,
  wDown: `feed_forward.experts.${EXPERT}.w2.weight`,
};

/** An LFM2 (or LFM2-MoE) layer role's name under `model.layers.N.`: an expert layer's its own, else LFM2's, else `fallback`'s. */
export function lfm2HfName(config: ModelConfig, layer: number, role: LayerRole): string | undefined {
  return (config.moe && isMoeLayer(config, layer) ? LFM2_EXPERT_NAMES[role] : undefined) ?? LFM2_HF_NAMES[role];
}

/**
 * NVIDIA Nemotron-H (llama.cpp's `nemotron_h` GGUFs: Nemotron-H 8B/47B, Nemotron Nano 9B/12B v2;
 * `nemotron_h_moe`: Nemotron 3 Nano, whose feed-forwards are experts) as
 * llama.cpp runs it: each layer is one block behind one RMS norm — a Mamba-2 mixer (ModelConfig.mamba2,
 * with groups: the gated norm runs per group), grouped query attention without positions (NoPE), or an
 * ungated feed-forward down(max(up·x, 0)²) (ModelConfig.ffnActivation "relu2") — told apart as llama.cpp
 * tells them: a per-layer `attention.head_count_kv` and `feed_forward_length` of 0 and 0 for a Mamba-2
 * layer, a KV head count alone for attention, a width alone for a feed-forward. Its Hugging Face
 * checkpoints (NemotronHForCausalLM) name the same in `hybrid_override_pattern`.
 */
import { isFeedForwardOnlyLayer, isMoeLayer, type LayerBlock, type Mamba2Config, ModelLoadError, type ModelConfig, type MoeConfig } from "./config.ts";
import { EXPERT } from "./expert-stack.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { type Json, num, wholeAtLeast } from "./hf-json.ts";
import { ggufMamba2 } from "./granite-hybrid.ts";
import type { LayerRole, TensorNames } from "./weights.ts";

/** What a nemotron_h GGUF adds to the config. */
export interface NemotronHConfig {
  mamba2: Mamba2Config;
  layerBlocks: LayerBlock[];
  /** The attention layers' KV heads (1 where the model has none, which keeps shapes whole). */
  numKvHeads: number;
  /** The feed-forward layers' width. */
  intermediateSize: number;
}

/** A per-layer whole-number array of `blocks` entries, or a single number given to every layer. */
function perLayer(meta: GgufMetadata, key: string, blocks: number, path: string): number[] {
  const raw = meta.entries.get(key)?.value;
  const values = Array.isArray(raw) ? raw.map(Number) : meta.has(key) ? Array<number>(blocks).fill(meta.number(key)) : undefined;
  if (!values || values.length !== blocks || !values.every((v) => Number.isInteger(v) && v >= 0)) {
    throw new ModelLoadError(`Model "${path}" has "${key}" that is not a whole number from 0 for each of its ${blocks} layers`);
  }
  return values;
}

/** The one nonzero value a kind of layer shares, or `fallback` where no layer has one. */
function shared(values: readonly number[], key: string, what: string, path: string, fallback: number): number {
  const distinct = [...new Set(values.filter((v) => v !== 0))];
  if (distinct.length > 1) throw new ModelLoadError(`Model "${path}" has ${what} of differing "${key}" (${distinct.join(", ")}); only uniform layers are supported`);
  return distinct[0] ?? fallback;
}

/** A nemotron_h GGUF's layers, their Mamba-2 geometry, KV heads and feed-forward width. */
export function ggufNemotronH(meta: GgufMetadata, arch: string, path: string): NemotronHConfig {
  const blocks = meta.number(`${arch}.block_count`);
  const kvKey = `${arch}.attention.head_count_kv`;
  const ffKey = `${arch}.feed_forward_length`;
  const kv = perLayer(meta, kvKey, blocks, path);
  const ff = perLayer(meta, ffKey, blocks, path);
  const both = kv.findIndex((h, i) => h !== 0 && ff[i] !== 0);
  if (both >= 0) throw new ModelLoadError(`Model "${path}" gives layer ${both} both KV heads and a feed-forward width; a nemotron_h layer has one block`);
  const mamba2 = ggufMamba2(meta, arch, kv.map((h, i) => h === 0 && ff[i] === 0), path);
  return {
    mamba2,
    layerBlocks: ff.map((w) => (w !== 0 ? "ffn" : "mixer")),
    numKvHeads: shared(kv, kvKey, "attention layers", path, 1),
    intermediateSize: shared(ff, ffKey, "feed-forward layers", path, 1),
  };
}

/** The layer kinds of NemotronHConfig's `hybrid_override_pattern` and `layers_block_type`. */
const PATTERN_KINDS: Readonly<Record<string, "mamba" | "attention" | "mlp" | "moe">> = { M: "mamba", "*": "attention", "-": "mlp", E: "moe" };

/**
 * NemotronHConfig's layers (`hybrid_override_pattern`: M, * and -; or `layers_block_type`: mamba,
 * attention, mlp), Mamba-2 geometry (`mamba_num_heads` × `mamba_head_dim` wide, `ssm_state_size`,
 * `mamba_n_groups`, `mamba_d_conv`; transformers' defaults where absent), ReLU² feed-forward width
 * (`intermediate_size`), biases (`attention_bias` on q, k, v and o; `mlp_bias`) and norm epsilon
 * (`layer_norm_epsilon`); Nemotron 3's experts (E, "moe") make it `nemotron_h_moe`. Another
 * activation, a convolution without a bias or projections with one are refused by name.
 */
export function hfNemotronH(cfg: Json, numLayers: number, path: string): Partial<ModelConfig> {
  const raw = cfg.hybrid_override_pattern ?? cfg.layers_block_type;
  const known = new Set<string>(Object.values(PATTERN_KINDS));
  const kinds: (string | undefined)[] | undefined = typeof raw === "string" ? [...raw].map((c) => PATTERN_KINDS[c]) : Array.isArray(raw) ? raw.map((k) => (typeof k === "string" && known.has(k) ? k : undefined)) : undefined;
  if (!kinds || kinds.length !== numLayers || kinds.some((k) => k === undefined)) {
    throw new ModelLoadError(`"hybrid_override_pattern" in "${path}" should name each of the ${numLayers} layers (M, * or -; or layers_block_type's mamba, attention, mlp), got ${JSON.stringify(raw)}`);
  }
  const moe = kinds.includes("moe") ? hfNemotronMoe(cfg, path) : undefined;
  if (moe && kinds.includes("mlp")) throw new ModelLoadError(`Model "${path}" has both dense (-) and expert (E) feed-forward layers; a Nemotron-H has one kind`);
  const activation = cfg.mlp_hidden_act ?? "relu2";
  if (activation !== "relu2") throw new ModelLoadError(`"mlp_hidden_act" in "${path}" is ${JSON.stringify(activation)}; only relu2 (Nemotron-H's) is supported`);
  if (cfg.mamba_conv_bias === false) throw new ModelLoadError(`Model "${path}" sets mamba_conv_bias false; only a convolution with a bias (Nemotron-H's) is supported`);
  if (cfg.mamba_proj_bias === true) throw new ModelLoadError(`Model "${path}" sets mamba_proj_bias; Mamba-2 projections with biases are not supported`);
  const whole = (key: string, fallback: number, least = 1) => wholeAtLeast(cfg, key, path, fallback, least);
  const heads = whole("mamba_num_heads", 128);
  const groups = whole("mamba_n_groups", 8);
  if (heads % groups !== 0) throw new ModelLoadError(`"mamba_n_groups" ${groups} in "${path}" does not divide its ${heads} Mamba-2 heads`);
  const mamba2: Mamba2Config = {
    layers: kinds.map((k) => k === "mamba"),
    innerSize: heads * whole("mamba_head_dim", 64),
    stateSize: whole("ssm_state_size", 128),
    heads,
    groups,
    convKernel: whole("mamba_d_conv", 4, 2),
  };
  const bias = cfg.attention_bias === true;
  const eps = num(cfg, "layer_norm_epsilon", path, 1e-5);
  if (!(Number.isFinite(eps) && eps >= 0)) throw new ModelLoadError(`"layer_norm_epsilon" in "${path}" should be a number from 0, got ${eps}`);
  return {
    mamba2,
    layerBlocks: kinds.map((k) => (k === "mlp" || k === "moe" ? "ffn" : "mixer")),
    nopeLayers: Array<boolean>(numLayers).fill(true),
    ffnActivation: "relu2",
    ...(cfg.mlp_bias === true ? { ffnBias: true } : {}),
    qkvBias: bias,
    ...(bias ? { outputBias: true } : {}),
    qkNorm: false,
    intermediateSize: moe ? whole("moe_intermediate_size", 1856) : whole("intermediate_size", 21504),
    rmsNormEps: eps,
    ...(moe ? { architecture: "nemotron_h_moe" as const, moe } : {}),
  };
}

/**
 * Nemotron 3's experts as NemotronHConfig names them (`n_routed_experts`, `num_experts_per_tok`,
 * `norm_topk_prob`, `routed_scaling_factor`, one shared expert of `moe_shared_expert_intermediate_size`):
 * sigmoid scores chosen with the router's `e_score_correction_bias`, as llama.cpp's nemotron_h_moe.
 * Expert groups past one and latent experts (`moe_latent_size`, Nemotron 3 Super) are refused.
 */
function hfNemotronMoe(cfg: Json, path: string): MoeConfig {
  const whole = (key: string, fallback: number, least: number) => wholeAtLeast(cfg, key, path, fallback, least);
  const numExperts = whole("n_routed_experts", 128, 1);
  const numExpertsUsed = whole("num_experts_per_tok", 6, 1);
  if (numExpertsUsed > numExperts) throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${numExpertsUsed}`);
  if (whole("n_group", 1, 1) > 1) throw new ModelLoadError(`Model "${path}" routes within expert groups ("n_group" ${cfg.n_group}), which Nemotron-H does not support`);
  if (cfg.moe_latent_size !== undefined && cfg.moe_latent_size !== null) {
    throw new ModelLoadError(`Model "${path}" runs its experts in a latent space ("moe_latent_size", Nemotron 3 Super's), which is not supported`);
  }
  const scale = num(cfg, "routed_scaling_factor", path, 1);
  if (!(Number.isFinite(scale) && scale > 0)) throw new ModelLoadError(`"routed_scaling_factor" in "${path}" should be a positive number, got ${scale}`);
  const shared = whole("n_shared_experts", 1, 0);
  return {
    numExperts,
    numExpertsUsed,
    normalizeTopK: cfg.norm_topk_prob !== false,
    gating: "sigmoid",
    selectionBias: true,
    routedScale: scale,
    denseLayers: 0,
    denseIntermediateSize: 0,
    sharedIntermediateSize: shared * whole("moe_shared_expert_intermediate_size", 3712, 0),
    sharedGate: false,
  };
}

/** Nemotron-H's checkpoint names (`backbone.layers.N.` then its one norm and `mixer.*`). */
const HF_NAMES: Partial<Record<LayerRole, string>> = {
  attnNorm: "norm.weight",
  wq: "mixer.q_proj.weight", wk: "mixer.k_proj.weight", wv: "mixer.v_proj.weight", wo: "mixer.o_proj.weight",
  bq: "mixer.q_proj.bias", bk: "mixer.k_proj.bias", bv: "mixer.v_proj.bias", bo: "mixer.o_proj.bias",
  wUp: "mixer.up_proj.weight", wDown: "mixer.down_proj.weight", bUp: "mixer.up_proj.bias", bDown: "mixer.down_proj.bias",
  ssmIn: "mixer.in_proj.weight", ssmConv: "mixer.conv1d.weight", ssmConvBias: "mixer.conv1d.bias", ssmDtBias: "mixer.dt_bias",
  ssmDecay: "mixer.A_log", ssmD: "mixer.D", ssmNorm: "mixer.norm.weight", ssmOut: "mixer.out_proj.weight",
};

/** Nemotron 3's expert layers' names (each routed expert's, stacked as read: expert-stack.ts). */
const HF_EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  router: "mixer.gate.weight", routerBias: "mixer.gate.e_score_correction_bias",
  wUp: `mixer.experts.${EXPERT}.up_proj.weight`, wDown: `mixer.experts.${EXPERT}.down_proj.weight`,
  wUpShared: "mixer.shared_experts.up_proj.weight", wDownShared: "mixer.shared_experts.down_proj.weight",
};

/** A Nemotron-H checkpoint's tensor names: `backbone.embeddings`, `backbone.layers.N.`, `backbone.norm_f`, `lm_head`. */
export const NEMOTRON_H_HF_NAMES: TensorNames = {
  tokenEmbedding: "backbone.embeddings.weight",
  outputNorm: "backbone.norm_f.weight",
  output: "lm_head.weight",
  layer: (i, role) => `backbone.layers.${i}.${HF_NAMES[role] ?? role}`,
};

/** The names `config`'s weights are read under: an expert layer's its own. */
export function nemotronHHfNames(config: ModelConfig): TensorNames {
  if (!config.moe) return NEMOTRON_H_HF_NAMES;
  return { ...NEMOTRON_H_HF_NAMES, layer: (i, role) => `backbone.layers.${i}.${(isMoeLayer(config, i) && isFeedForwardOnlyLayer(config, i) ? HF_EXPERT_NAMES[role] : undefined) ?? HF_NAMES[role] ?? role}` };
}

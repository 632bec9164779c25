/**
 * IBM Granite 4.0-H (llama.cpp's `granitehybrid` GGUFs, transformers' GraniteMoeHybridForCausalLM
 * checkpoints) as llama.cpp runs it: Mamba-2 layers (ModelConfig.mamba2; Backend.ssmScan) and, among them, grouped
 * query attention layers, each followed by a SwiGLU feed-forward (or Granite's experts with a shared
 * one), with Granite 3.x's four multipliers (granite.ts). Its files tell the layers apart by a
 * per-layer `attention.head_count_kv` of 0 (a Mamba-2 layer), as LFM2's do. Granite 4.0-H's
 * attention layers turn nothing (`rope.scaling.finetuned` false: NoPE on every layer); Bamba-style
 * files that keep it true rotate as Granite 3.x's. An expansion other than llama.cpp's 2 is refused
 * (all Granite 4.0-H models have one group; more run as Nemotron-H's, the norm per group).
 */
import { byteSize, decodeToF32 } from "../backend/dtype-codec.ts";
import { numel } from "../backend/types.ts";
import { type Mamba2Config, ModelLoadError, type MoeConfig, plainMoe } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { type Json, wholeAtLeast } from "./hf-json.ts";
import type { LayerRole, TensorSource } from "./weights.ts";

/**
 * A GGUF's Mamba-2 geometry (`ssm.inner_size`, `state_size`, `time_step_rank` — the heads —,
 * `group_count`, `conv_kernel`) for `layers`, the heads dividing the width and the groups the heads.
 */
export function ggufMamba2(meta: GgufMetadata, arch: string, layers: boolean[], path: string): Mamba2Config {
  const whole = (name: string, least = 1) => {
    const v = meta.number(`${arch}.ssm.${name}`);
    if (!Number.isInteger(v) || v < least) throw new ModelLoadError(`GGUF metadata "${arch}.ssm.${name}" in "${path}" should be a whole number of at least ${least}, got ${v}`);
    return v;
  };
  const m: Mamba2Config = {
    layers,
    innerSize: whole("inner_size"),
    stateSize: whole("state_size"),
    heads: whole("time_step_rank"),
    groups: whole("group_count"),
    convKernel: whole("conv_kernel", 2),
  };
  if (m.innerSize % m.heads !== 0) throw new ModelLoadError(`Model "${path}" has an SSM inner size ${m.innerSize} that its ${m.heads} heads do not divide`);
  if (m.heads % m.groups !== 0) throw new ModelLoadError(`Model "${path}" has ${m.groups} SSM groups, which do not divide its ${m.heads} heads`);
  return m;
}

/** A granitehybrid GGUF's Mamba-2 geometry, its attention layers' KV heads, and whether those rotate. */
export function ggufGraniteHybrid(meta: GgufMetadata, arch: string, hiddenSize: number, path: string): { mamba2: Mamba2Config; numKvHeads: number; rotates: boolean } {
  const key = `${arch}.attention.head_count_kv`;
  const raw = meta.entries.get(key)?.value;
  const blocks = meta.number(`${arch}.block_count`);
  const heads = Array.isArray(raw) ? raw.map(Number) : undefined;
  if (!heads || heads.length !== blocks) throw new ModelLoadError(`Model "${path}" is granitehybrid but "${key}" is not a per-layer array of its ${blocks} layers (0 for each Mamba-2 layer)`);
  const attention = [...new Set(heads.filter((h) => h !== 0))];
  if (attention.length > 1 || (attention.length === 1 && !(Number.isInteger(attention[0]) && attention[0] >= 1))) {
    throw new ModelLoadError(`Model "${path}" has "${key}" [${heads.join(", ")}]; expected 0 for each Mamba-2 layer and one KV head count for the attention layers`);
  }
  const mamba2 = ggufMamba2(meta, arch, heads.map((h) => h === 0), path);
  if (mamba2.innerSize !== 2 * hiddenSize) throw new ModelLoadError(`Model "${path}" has an SSM inner size ${mamba2.innerSize}, not twice its hidden size ${hiddenSize} (the only expansion llama.cpp runs)`);
  const rotates = meta.bool(`${arch}.rope.scaling.finetuned`, true);
  // A model of Mamba-2 layers alone has no attention layer, and no KV head count to give: 1 keeps the shapes whole.
  return { mamba2, numKvHeads: attention[0] ?? 1, rotates };
}

/** GraniteMoeHybridConfig's own fields as the config takes them (transformers' defaults where absent). */
export interface HfGraniteHybrid {
  mamba2: Mamba2Config;
  /** The dense feed-forward's width (`shared_intermediate_size` without experts) or each expert's. */
  intermediateSize: number;
  moe?: MoeConfig;
  nopeLayers?: boolean[];
}

/**
 * GraniteMoeHybridConfig's layers (`layer_types`: "mamba" or "attention"; all Mamba-2 when absent),
 * Mamba-2 geometry (`mamba_n_heads`, `mamba_d_head`, `mamba_d_state`, `mamba_d_conv`, `mamba_expand`,
 * `mamba_n_groups`), experts (`num_local_experts` 0: a dense model whose `shared_mlp` is its
 * feed-forward) and `position_embedding_type` (only "rope" turns). A convolution without a bias, a
 * projection with one, or more than one group are refused by name.
 */
export function hfGraniteHybrid(cfg: Json, hiddenSize: number, numLayers: number, path: string): HfGraniteHybrid {
  const types = cfg.layer_types ?? cfg.layers_block_type;
  if (types !== undefined && types !== null && (!Array.isArray(types) || types.length !== numLayers || !types.every((t) => t === "mamba" || t === "attention"))) {
    throw new ModelLoadError(`"layer_types" in "${path}" should name mamba or attention for each of the ${numLayers} layers, got ${JSON.stringify(types)}`);
  }
  const whole = (key: string, fallback: number, least = 1) => wholeAtLeast(cfg, key, path, fallback, least);
  const heads = whole("mamba_n_heads", 128);
  const innerSize = whole("mamba_expand", 2) * hiddenSize;
  if (innerSize % heads !== 0) throw new ModelLoadError(`"mamba_n_heads" ${heads} in "${path}" does not divide the Mamba-2 width ${innerSize}`);
  if (typeof cfg.mamba_d_head === "number" && cfg.mamba_d_head * heads !== innerSize) {
    throw new ModelLoadError(`"mamba_d_head" ${cfg.mamba_d_head} in "${path}" times ${heads} heads is not the Mamba-2 width ${innerSize}`);
  }
  const groups = whole("mamba_n_groups", 1);
  if (heads % groups !== 0) throw new ModelLoadError(`"mamba_n_groups" ${groups} in "${path}" does not divide its ${heads} Mamba-2 heads`);
  if (cfg.mamba_conv_bias === false) throw new ModelLoadError(`Model "${path}" sets mamba_conv_bias false; only a convolution with a bias (Granite 4.0-H's) is supported`);
  if (cfg.mamba_proj_bias === true) throw new ModelLoadError(`Model "${path}" sets mamba_proj_bias; projections with biases are not supported`);
  const mamba2: Mamba2Config = {
    layers: Array.isArray(types) ? types.map((t) => t === "mamba") : Array<boolean>(numLayers).fill(true),
    innerSize, stateSize: whole("mamba_d_state", 256), heads, groups, convKernel: whole("mamba_d_conv", 4, 2),
  };
  const experts = whole("num_local_experts", 8, 0);
  const shared = whole("shared_intermediate_size", 1024, 0);
  const nopeLayers = cfg.position_embedding_type === "rope" ? undefined : Array<boolean>(numLayers).fill(true);
  if (experts === 0) return { mamba2, intermediateSize: shared, ...(nopeLayers ? { nopeLayers } : {}) };
  const used = whole("num_experts_per_tok", 2);
  if (used > experts) throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${experts}, got ${used}`);
  // GraniteMoeHybridTopKGating: the top-k logits softmaxed (the chosen experts' weights renormalised); the shared MLP ungated.
  const moe: MoeConfig = { ...plainMoe(experts, used, true), sharedIntermediateSize: shared, sharedGate: false };
  return { mamba2, intermediateSize: whole("intermediate_size", 1024), moe, ...(nopeLayers ? { nopeLayers } : {}) };
}

/** The fused gate/up tensors' roles (`…input_linear.weight`, gate rows first), read as halves by {@link graniteHybridHfTensors}. */
const GATE = ":gate";
const UP = ":up";

/** Granite 4.0-H's transformers names for the roles other models name otherwise (under `model.layers.N.`). */
export function graniteHybridHfName(role: LayerRole, moeLayer: boolean): string | undefined {
  const experts = "block_sparse_moe.";
  switch (role) {
    case "ssmIn": return "mamba.in_proj.weight";
    case "ssmConv": return "mamba.conv1d.weight";
    case "ssmConvBias": return "mamba.conv1d.bias";
    case "ssmDtBias": return "mamba.dt_bias";
    case "ssmDecay": return "mamba.A_log";
    case "ssmD": return "mamba.D";
    case "ssmNorm": return "mamba.norm.weight";
    case "ssmOut": return "mamba.out_proj.weight";
    case "wGate": return (moeLayer ? `${experts}input_linear.weight` : "shared_mlp.input_linear.weight") + GATE;
    case "wUp": return (moeLayer ? `${experts}input_linear.weight` : "shared_mlp.input_linear.weight") + UP;
    case "wDown": return moeLayer ? `${experts}output_linear.weight` : "shared_mlp.output_linear.weight";
    case "router": return `${experts}router.layer.weight`;
    case "wGateShared": return "shared_mlp.input_linear.weight" + GATE;
    case "wUpShared": return "shared_mlp.input_linear.weight" + UP;
    case "wDownShared": return "shared_mlp.output_linear.weight";
    default: return undefined;
  }
}

/**
 * A Granite 4.0-H or Nemotron-H checkpoint's tensors as the forward takes them: a fused gate/up
 * (`…:gate`, `…:up`; [2·ff, H], or [E, 2·ff, H] for the experts) cut in halves, A_log (under `mamba.`,
 * Nemotron-H's `mixer.`) read as −exp(A_log) [heads, 1], D as [heads, 1], the gated norm as [groups,
 * inner / groups], the convolution [C, 1, K] as [C, K].
 */
export function graniteHybridHfTensors(source: TensorSource, groups = 1): TensorSource {
  const fused = (name: string) => (name.endsWith(GATE) || name.endsWith(UP) ? name.slice(0, name.lastIndexOf(":")) : undefined);
  const mixer = (name: string, part: string) => name.endsWith(`mamba.${part}`) || name.endsWith(`mixer.${part}`);
  return {
    has: (name) => source.has(fused(name) ?? name),
    byteLength: (name) => (fused(name) ? source.byteLength(fused(name)!) / 2 : source.byteLength(name)),
    async read(name) {
      const whole = fused(name);
      if (whole !== undefined) {
        const t = await source.read(whole);
        const rows = t.shape[t.shape.length - 2];
        if (t.shape.length < 2 || rows % 2 !== 0) throw new ModelLoadError(`Fused gate/up "${whole}" has shape [${t.shape}]; expected [..., 2·ff, hidden]`);
        const stacks = t.shape.length === 3 ? t.shape[0] : 1;
        const half = byteSize(t.dtype, (rows / 2) * t.shape[t.shape.length - 1]);
        const at = name.endsWith(UP) ? 1 : 0;
        const data = new Uint8Array(stacks * half);
        for (let e = 0; e < stacks; e++) data.set(t.data.subarray((2 * e + at) * half, (2 * e + at + 1) * half), e * half);
        return { name, shape: [...t.shape.slice(0, -2), rows / 2, t.shape[t.shape.length - 1]], dtype: t.dtype, data };
      }
      const t = await source.read(name);
      if (mixer(name, "A_log") || mixer(name, "D")) {
        const v = decodeToF32(t.data, t.dtype, numel(t.shape));
        const out = name.endsWith("A_log") ? v.map((x) => -Math.exp(x)) : v;
        return { name, shape: [v.length, 1], dtype: "f32", data: new Uint8Array(out.buffer) };
      }
      if (mixer(name, "norm.weight") && t.shape.length === 1 && t.shape[0] % groups === 0) return { ...t, shape: [groups, t.shape[0] / groups] };
      if (mixer(name, "conv1d.weight") && t.shape.length === 3 && t.shape[1] === 1) return { ...t, shape: [t.shape[0], t.shape[2]] };
      return t;
    },
  };
}

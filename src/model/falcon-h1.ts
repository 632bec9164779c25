/**
 * TII's Falcon-H1 (llama.cpp's `falcon-h1` GGUFs, transformers' FalconH1ForCausalLM checkpoints): every
 * layer runs attention and a Mamba-2 scan side by side on the same normed input, both outputs joining
 * the residual (Mamba2Config.parallelAttention), then a SwiGLU feed-forward. The scan's gated output is
 * RMS-normed per group only where the model says so (`mamba_rms_norm`; a GGUF's `ssm_norm`), before or
 * after the gate (`mamba_norm_before_gate`; llama.cpp's files gate first). Falcon-H1's µP multipliers
 * are folded into the weights, as llama.cpp's converter folds them: q, k and v by
 * `attention_in_multiplier` (k also by `key_multiplier`), o by `attention_out_multiplier`, the scan's input
 * projection by `ssm_in_multiplier` and its five parts (z, x, B, C, dt) by `ssm_multipliers`, its output
 * projection by `ssm_out_multiplier`, the gate and down projections by `mlp_multipliers`; the embedding's
 * and the logits' as ModelConfig.embeddingScale and logitScale. A GGUF has them folded already.
 */
import { decodeToF32, encodeFromF32 } from "../backend/dtype-codec.ts";
import { numel } from "../backend/types.ts";
import { type Mamba2Config, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { ggufMamba2 } from "./granite-hybrid.ts";
import { type Json, wholeAtLeast } from "./hf-json.ts";
import type { LayerRole, TensorSource } from "./weights.ts";

/** A falcon-h1 GGUF's Mamba-2 geometry: every layer scans and attends; its gated norm there where the file has `ssm_norm`. */
export function ggufFalconH1(meta: GgufMetadata, arch: string, normed: boolean, path: string): Mamba2Config {
  const layers = Array<boolean>(meta.number(`${arch}.block_count`)).fill(true);
  return { ...ggufMamba2(meta, arch, layers, path), parallelAttention: true, ...(normed ? {} : { unnormed: true }) };
}

/** Falcon-H1's multipliers (FalconH1Config; 1 where absent), as folded into the weights. */
export interface FalconH1Multipliers {
  attentionIn: number;
  attentionOut: number;
  key: number;
  ssmIn: number;
  ssmOut: number;
  /** The scan's input projection's five parts: z, x, B, C, dt. */
  ssm: readonly number[];
  /** The feed-forward's gate and down projections. */
  mlp: readonly number[];
}

/** What a FalconH1ForCausalLM config.json adds to the config, and the multipliers its weights take as they load. */
export interface HfFalconH1 {
  mamba2: Mamba2Config;
  embeddingScale: number;
  /** The logits' divisor (1 / `lm_head_multiplier`). */
  logitScale: number;
  multipliers: FalconH1Multipliers;
}

/** FalconH1Config's fields, transformers' defaults where absent; what the forward cannot run refused by name. */
export function hfFalconH1(cfg: Json, hiddenSize: number, numLayers: number, path: string): HfFalconH1 {
  const whole = (key: string, fallback: number, least = 1) => wholeAtLeast(cfg, key, path, fallback, least);
  const heads = whole("mamba_n_heads", 128);
  // FalconH1Config: absent, 1024; null, the expansion times the hidden size.
  const innerSize = cfg.mamba_d_ssm === null ? whole("mamba_expand", 2) * hiddenSize : whole("mamba_d_ssm", 1024);
  if (innerSize % heads !== 0) throw new ModelLoadError(`"mamba_n_heads" ${heads} in "${path}" does not divide the Mamba-2 width ${innerSize}`);
  if (typeof cfg.mamba_d_head === "number" && cfg.mamba_d_head * heads !== innerSize) {
    throw new ModelLoadError(`"mamba_d_head" ${cfg.mamba_d_head} in "${path}" times ${heads} heads is not the Mamba-2 width ${innerSize}`);
  }
  const groups = whole("mamba_n_groups", 1);
  if (heads % groups !== 0) throw new ModelLoadError(`"mamba_n_groups" ${groups} in "${path}" does not divide its ${heads} Mamba-2 heads`);
  if (cfg.mamba_conv_bias === false) throw new ModelLoadError(`Model "${path}" sets mamba_conv_bias false; only a convolution with a bias is supported`);
  for (const key of ["mamba_proj_bias", "projectors_bias", "attention_bias"]) {
    if (cfg[key] === true) throw new ModelLoadError(`Model "${path}" sets ${key}; Falcon-H1's projections with biases are not supported`);
  }
  if (cfg.hidden_act !== undefined && cfg.hidden_act !== "silu") throw new ModelLoadError(`Model "${path}" has hidden_act ${JSON.stringify(cfg.hidden_act)}; Falcon-H1's feed-forward is SiLU-gated`);
  const normed = cfg.mamba_rms_norm === true;
  const mamba2: Mamba2Config = {
    layers: Array<boolean>(numLayers).fill(true),
    innerSize, stateSize: whole("mamba_d_state", 256), heads, groups, convKernel: whole("mamba_d_conv", 4, 2), parallelAttention: true,
    // transformers' default norms before the gate; llama.cpp's graph (and so its files) after.
    ...(normed ? (cfg.mamba_norm_before_gate === false ? {} : { normBeforeGate: true }) : { unnormed: true }),
  };
  const scalar = (key: string) => {
    const v = cfg[key];
    if (v === undefined || v === null) return 1;
    if (typeof v !== "number" || !Number.isFinite(v) || v === 0) throw new ModelLoadError(`"${key}" in "${path}" should be a nonzero number, got ${JSON.stringify(v)}`);
    return v;
  };
  const list = (key: string, n: number) => {
    const v = cfg[key];
    if (v === undefined || v === null) return Array<number>(n).fill(1);
    if (!Array.isArray(v) || v.length !== n || !v.every((x) => typeof x === "number" && Number.isFinite(x))) {
      throw new ModelLoadError(`"${key}" in "${path}" should be a list of ${n} numbers, got ${JSON.stringify(v)}`);
    }
    return v as number[];
  };
  return {
    mamba2,
    embeddingScale: scalar("embedding_multiplier"),
    logitScale: 1 / scalar("lm_head_multiplier"),
    multipliers: {
      attentionIn: scalar("attention_in_multiplier"), attentionOut: scalar("attention_out_multiplier"), key: scalar("key_multiplier"),
      ssmIn: scalar("ssm_in_multiplier"), ssmOut: scalar("ssm_out_multiplier"), ssm: list("ssm_multipliers", 5), mlp: list("mlp_multipliers", 2),
    },
  };
}

/** Whether any of the multipliers that fold into the weights is not 1. */
export function falconH1Folds(m: FalconH1Multipliers): boolean {
  return [m.attentionIn, m.attentionOut, m.key, m.ssmIn, m.ssmOut, ...m.ssm, ...m.mlp].some((x) => x !== 1);
}

/** FalconH1ForCausalLM's names for the roles other models name otherwise (under `model.layers.N.`); the scan's as Granite 4.0-H's (`mamba.*`). */
export function falconH1HfName(role: LayerRole): string | undefined {
  switch (role) {
    case "ffnNorm": return "pre_ff_layernorm.weight";
    case "wGate": return "feed_forward.gate_proj.weight";
    case "wUp": return "feed_forward.up_proj.weight";
    case "wDown": return "feed_forward.down_proj.weight";
    default: return undefined;
  }
}

/**
 * `source` with Falcon-H1's multipliers folded into the weights as they are read (as llama.cpp's
 * converter folds them): each scaled in f32 and stored back in its own dtype. A quantized matrix (an
 * FP8 checkpoint's) cannot be scaled row by row here, and is refused by name.
 */
export function falconH1HfTensors(source: TensorSource, m: FalconH1Multipliers, mamba2: Mamba2Config): TensorSource {
  const gs = mamba2.groups * mamba2.stateSize;
  const inner = mamba2.innerSize;
  // The input projection's rows: z, x, B, C, dt.
  const ssmInParts = [inner, inner, gs, gs, mamba2.heads];
  const factor = (name: string): number | readonly number[] | undefined => {
    const at = /\.(self_attn\.[qkvo]_proj|mamba\.in_proj|mamba\.out_proj|feed_forward\.gate_proj|feed_forward\.down_proj)\.weight$/.exec(name)?.[1];
    switch (at) {
      case "self_attn.q_proj":
      case "self_attn.v_proj": return m.attentionIn;
      case "self_attn.k_proj": return m.attentionIn * m.key;
      case "self_attn.o_proj": return m.attentionOut;
      case "mamba.out_proj": return m.ssmOut;
      case "feed_forward.gate_proj": return m.mlp[0];
      case "feed_forward.down_proj": return m.mlp[1];
      case "mamba.in_proj": return ssmInParts.flatMap((rows, part) => Array<number>(rows).fill(m.ssmIn * m.ssm[part]));
      default: return undefined;
    }
  };
  return {
    has: (name) => source.has(name),
    byteLength: (name) => source.byteLength(name),
    async read(name) {
      const t = await source.read(name);
      const f = factor(name);
      if (f === undefined || (typeof f === "number" && f === 1) || (typeof f !== "number" && f.every((x) => x === 1))) return t;
      if (t.dtype !== "f32" && t.dtype !== "f16" && t.dtype !== "bf16") {
        throw new ModelLoadError(`Falcon-H1's multipliers cannot be folded into "${name}", stored as ${t.dtype}; only f32, f16 and bf16 checkpoints are supported`);
      }
      const rows = t.shape[0];
      if (typeof f !== "number" && f.length !== rows) throw new ModelLoadError(`"${name}" has ${rows} rows; Falcon-H1's scan projects to ${f.length}`);
      const values = decodeToF32(t.data, t.dtype, numel(t.shape));
      const width = values.length / rows;
      for (let r = 0; r < rows; r++) {
        const k = typeof f === "number" ? f : f[r];
        for (let c = r * width; c < (r + 1) * width; c++) values[c] *= k;
      }
      return { ...t, data: encodeFromF32(values, t.dtype) };
    },
  };
}

/**
 * Falcon-H1 test files. The HF checkpoint as FalconH1ForCausalLM stores it: per layer
 * `input_layernorm`, `self_attn.{q,k,v,o}_proj`, the scan under `mamba.` (`in_proj`, `conv1d` and its
 * bias, `dt_bias`, `A_log`, `D`, `norm` where `mamba_rms_norm`, `out_proj`), `pre_ff_layernorm`,
 * `feed_forward.{gate,up,down}_proj`; `model.final_layernorm`; the µP multipliers in config.json. The
 * GGUF as llama.cpp's converter writes it (conversion/falcon_h1.py): the multipliers folded into the
 * weights, `ssm_a` −exp(A_log), `ssm_norm` [groups, inner / groups], the `ssm.*` keys.
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import type { HfWeights, ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Falcon-H1's scan and multipliers (1 where absent). */
export interface FalconH1Spec {
  /** Scan heads of `headDim` (inner size heads · headDim), states of `stateSize`, B and C in `groups`, a convolution of `conv`. */
  heads: number;
  headDim: number;
  stateSize: number;
  groups: number;
  conv: number;
  /** `mamba_rms_norm`: the gated output normed per group (and `mamba_norm_before_gate`: normed before the gate; llama.cpp's files cannot say so). */
  normed: boolean;
  normBeforeGate?: boolean;
  multipliers?: {
    embedding: number;
    lmHead: number;
    attentionIn: number;
    attentionOut: number;
    key: number;
    ssmIn: number;
    ssmOut: number;
    ssm: number[];
    mlp: number[];
  };
}

/** Draws layer i in HF naming with `put` (name, shape, scale, offset). */
export function falconH1HfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const f = spec.falconH1!;
  const { hidden, heads, kvHeads, headDim: hd, ffn } = spec;
  const p = `model.layers.${i}.`;
  put(p + "input_layernorm.weight", [hidden], 0.2, 1);
  put(p + "self_attn.q_proj.weight", [heads * hd, hidden], 1 / Math.sqrt(hidden));
  put(p + "self_attn.k_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
  put(p + "self_attn.v_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
  put(p + "self_attn.o_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
  const m = p + "mamba.";
  const inner = f.heads * f.headDim;
  const channels = inner + 2 * f.groups * f.stateSize;
  put(m + "in_proj.weight", [inner + channels + f.heads, hidden], 1.5 / Math.sqrt(hidden));
  put(m + "conv1d.weight", [channels, 1, f.conv], 0.6);
  put(m + "conv1d.bias", [channels], 0.3);
  put(m + "dt_bias", [f.heads], 1, -1);
  put(m + "A_log", [f.heads], 1, 0);
  put(m + "D", [f.heads], 0.5, 1);
  if (f.normed) put(m + "norm.weight", [inner], 0.2, 1);
  put(m + "out_proj.weight", [hidden, inner], 1 / Math.sqrt(inner));
  put(p + "pre_ff_layernorm.weight", [hidden], 0.2, 1);
  put(p + "feed_forward.gate_proj.weight", [ffn, hidden], 1 / Math.sqrt(hidden));
  put(p + "feed_forward.up_proj.weight", [ffn, hidden], 1 / Math.sqrt(hidden));
  put(p + "feed_forward.down_proj.weight", [hidden, ffn], 1 / Math.sqrt(ffn));
}

const LAYER_NAMES: Record<string, string> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.o_proj.weight": "attn_output.weight",
  "mamba.in_proj.weight": "ssm_in.weight",
  "mamba.conv1d.bias": "ssm_conv1d.bias",
  "mamba.dt_bias": "ssm_dt.bias",
  "mamba.out_proj.weight": "ssm_out.weight",
  // llama.cpp's falcon-h1 loader asks for it without the ".weight" suffix.
  "pre_ff_layernorm.weight": "ffn_norm",
  "feed_forward.gate_proj.weight": "ffn_gate.weight",
  "feed_forward.up_proj.weight": "ffn_up.weight",
  "feed_forward.down_proj.weight": "ffn_down.weight",
};

/** Rows of `values` ([rows, width]) each multiplied by `factor(row)`. */
function scaleRows(values: Float32Array, rows: number, factor: (row: number) => number): Float32Array {
  const width = values.length / rows;
  return values.map((v, i) => v * factor(Math.floor(i / width)));
}

/** One Falcon-H1 weight as the converter writes it (its multiplier folded in), or undefined for the others (the final norm). */
export function falconH1GgufPart(spec: ModelFileSpec, hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  const f = spec.falconH1!;
  const x = f.multipliers;
  if (hf === "model.embed_tokens.weight") return { name: "token_embd.weight", shape, values: values.map((v) => v * (x?.embedding ?? 1)), hf };
  if (hf === "lm_head.weight") return { name: "output.weight", shape, values: values.map((v) => v * (x?.lmHead ?? 1)), hf };
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
  if (!m) return undefined;
  const at = `blk.${m[1]}.`;
  const inner = f.heads * f.headDim;
  const gs = f.groups * f.stateSize;
  const scaled = (k: number) => values.map((v) => v * k);
  switch (m[2]) {
    case "mamba.conv1d.weight": return { name: at + "ssm_conv1d.weight", shape: [shape[0], shape[2]], values, hf };
    case "mamba.A_log": return { name: at + "ssm_a", shape: [shape[0], 1], values: values.map((v) => -Math.exp(v)), hf };
    case "mamba.D": return { name: at + "ssm_d", shape: [shape[0], 1], values, hf };
    case "mamba.norm.weight": return { name: at + "ssm_norm.weight", shape: [f.groups, shape[0] / f.groups], values, hf };
  }
  const name = LAYER_NAMES[m[2]];
  if (!name) throw new Error(`No GGUF name for ${hf}`);
  if (!x) return { name: at + name, shape, values, hf };
  const bounds = [inner, 2 * inner, 2 * inner + gs, 2 * inner + 2 * gs];
  const folded = m[2] === "self_attn.q_proj.weight" || m[2] === "self_attn.v_proj.weight"
    ? scaled(x.attentionIn)
    : m[2] === "self_attn.k_proj.weight"
    ? scaled(x.attentionIn * x.key)
    : m[2] === "self_attn.o_proj.weight"
    ? scaled(x.attentionOut)
    : m[2] === "mamba.out_proj.weight"
    ? scaled(x.ssmOut)
    : m[2] === "feed_forward.gate_proj.weight"
    ? scaled(x.mlp[0])
    : m[2] === "feed_forward.down_proj.weight"
    ? scaled(x.mlp[1])
    : m[2] === "mamba.in_proj.weight"
    ? scaleRows(values, shape[0], (r) => x.ssmIn * x.ssm[bounds.filter((b) => r >= b).length])
    : values;
  return { name: at + name, shape, values: folded, hf };
}

/** A falcon-h1 GGUF's own metadata: the scan's geometry. */
export function falconH1GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  const f = spec.falconH1!;
  return [
    [`${a}.ssm.conv_kernel`, gguf.u32(f.conv)],
    [`${a}.ssm.inner_size`, gguf.u32(f.heads * f.headDim)],
    [`${a}.ssm.state_size`, gguf.u32(f.stateSize)],
    [`${a}.ssm.time_step_rank`, gguf.u32(f.heads)],
    [`${a}.ssm.group_count`, gguf.u32(f.groups)],
  ];
}

/** The weights under FalconH1ForCausalLM's names: the final norm `model.final_layernorm`. */
export function falconH1HfWeights(weights: HfWeights): HfWeights {
  return new Map([...weights].map(([name, w]) => [name === "model.norm.weight" ? "model.final_layernorm.weight" : name, w]));
}

/** FalconH1Config's own fields: the scan's geometry, its norm, the multipliers. */
export function falconH1HfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const f = spec.falconH1!;
  const x = f.multipliers;
  return {
    mamba_d_ssm: f.heads * f.headDim, mamba_n_heads: f.heads, mamba_d_head: f.headDim, mamba_d_state: f.stateSize, mamba_n_groups: f.groups, mamba_d_conv: f.conv,
    mamba_expand: 2, mamba_chunk_size: 128, mamba_conv_bias: true, mamba_proj_bias: false, projectors_bias: false,
    mamba_rms_norm: f.normed, mamba_norm_before_gate: f.normBeforeGate === true, hidden_act: "silu",
    ...(x
      ? {
        embedding_multiplier: x.embedding, lm_head_multiplier: x.lmHead, attention_in_multiplier: x.attentionIn, attention_out_multiplier: x.attentionOut,
        key_multiplier: x.key, ssm_in_multiplier: x.ssmIn, ssm_out_multiplier: x.ssmOut, ssm_multipliers: x.ssm, mlp_multipliers: x.mlp,
      }
      : {}),
  };
}

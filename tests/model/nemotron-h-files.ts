/**
 * Nemotron-H test files as llama.cpp's converter writes them (nemotron_h): every layer one block
 * behind `attn_norm` — Mamba-2 (`ssm_in`, the convolution and its bias, `ssm_dt.bias`, `ssm_a` as
 * −exp(A_log), `ssm_d`, `ssm_norm` [groups, inner / groups], `ssm_out`), attention without RoPE, or
 * an ungated feed-forward (`ffn_up`, `ffn_down`, biases where the spec asks); per-layer
 * `attention.head_count_kv` and `feed_forward_length` (0 where a layer has no such block) and the
 * `ssm.*` keys. HF names are the checkpoint's under `model.layers.N.` (`norm`, `mixer.*`).
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { HfWeights, ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Nemotron-H's layers, as its `hybrid_override_pattern` writes them: M (Mamba-2), * (attention), - (feed-forward), E (experts: the spec's `experts`, Nemotron 3). */
export interface NemotronHSpec {
  pattern: string;
  /** Mamba-2 heads, each of `headDim` (inner size heads · headDim), states of `stateSize`, B and C in `groups`. */
  heads: number;
  headDim: number;
  stateSize: number;
  groups: number;
  conv: number;
  /** Biases on the attention's projections (`attention_bias`) and the feed-forward's (`mlp_bias`). */
  attnBias?: boolean;
  mlpBias?: boolean;
}

/** The layer kind at i: "M", "*" or "-". */
export function nemotronKind(spec: ModelFileSpec, i: number): string {
  return spec.nemotronH!.pattern[i];
}

/** Draws layer i in HF naming with `put` (name, shape, scale, offset). */
export function nemotronHHfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const n = spec.nemotronH!;
  const { hidden, heads, kvHeads, headDim: hd, ffn } = spec;
  const p = `model.layers.${i}.`;
  put(p + "norm.weight", [hidden], 0.2, 1);
  const m = p + "mixer.";
  const kind = nemotronKind(spec, i);
  if (kind === "M") {
    const inner = n.heads * n.headDim;
    const channels = inner + 2 * n.groups * n.stateSize;
    put(m + "in_proj.weight", [inner + channels + n.heads, hidden], 1.5 / Math.sqrt(hidden));
    put(m + "conv1d.weight", [channels, 1, n.conv], 0.6);
    put(m + "conv1d.bias", [channels], 0.3);
    put(m + "dt_bias", [n.heads], 1, -1);
    put(m + "A_log", [n.heads], 1, 0);
    put(m + "D", [n.heads], 0.5, 1);
    put(m + "norm.weight", [inner], 0.2, 1);
    put(m + "out_proj.weight", [hidden, inner], 1 / Math.sqrt(inner));
  } else if (kind === "*") {
    put(m + "q_proj.weight", [heads * hd, hidden], 1 / Math.sqrt(hidden));
    put(m + "k_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(m + "v_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(m + "o_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
    if (n.attnBias) {
      put(m + "q_proj.bias", [heads * hd], 0.5);
      put(m + "k_proj.bias", [kvHeads * hd], 0.5);
      put(m + "v_proj.bias", [kvHeads * hd], 0.5);
      put(m + "o_proj.bias", [hidden], 0.5);
    }
  } else if (kind === "E") {
    const e = spec.experts!;
    // A sharper router than the projections, and a selection bias that changes which experts win.
    put(m + "gate.weight", [e.count, hidden], 4 / Math.sqrt(hidden));
    put(m + "gate.e_score_correction_bias", [e.count], 0.5);
    for (let x = 0; x < e.count; x++) {
      put(`${m}experts.${x}.up_proj.weight`, [ffn, hidden], 2 / Math.sqrt(hidden));
      put(`${m}experts.${x}.down_proj.weight`, [hidden, ffn], 2 / Math.sqrt(ffn));
    }
    const shared = e.sharedFfn ?? 0;
    if (shared > 0) {
      put(m + "shared_experts.up_proj.weight", [shared, hidden], 2 / Math.sqrt(hidden));
      put(m + "shared_experts.down_proj.weight", [hidden, shared], 2 / Math.sqrt(shared));
    }
  } else {
    // Larger than a SwiGLU's draw: ReLU² squares what passes, and half of it does not.
    put(m + "up_proj.weight", [ffn, hidden], 2 / Math.sqrt(hidden));
    put(m + "down_proj.weight", [hidden, ffn], 2 / Math.sqrt(ffn));
    if (n.mlpBias) {
      put(m + "up_proj.bias", [ffn], 0.5);
      put(m + "down_proj.bias", [hidden], 0.5);
    }
  }
}

const MIXER_NAMES: Record<string, string> = {
  "q_proj.weight": "attn_q.weight",
  "k_proj.weight": "attn_k.weight",
  "v_proj.weight": "attn_v.weight",
  "o_proj.weight": "attn_output.weight",
  "q_proj.bias": "attn_q.bias",
  "k_proj.bias": "attn_k.bias",
  "v_proj.bias": "attn_v.bias",
  "o_proj.bias": "attn_output.bias",
  "up_proj.weight": "ffn_up.weight",
  "down_proj.weight": "ffn_down.weight",
  "up_proj.bias": "ffn_up.bias",
  "down_proj.bias": "ffn_down.bias",
  "in_proj.weight": "ssm_in.weight",
  "conv1d.bias": "ssm_conv1d.bias",
  "dt_bias": "ssm_dt.bias",
  "out_proj.weight": "ssm_out.weight",
  "gate.weight": "ffn_gate_inp.weight",
  "gate.e_score_correction_bias": "exp_probs_b.bias",
  "shared_experts.up_proj.weight": "ffn_up_shexp.weight",
  "shared_experts.down_proj.weight": "ffn_down_shexp.weight",
};

/** One Nemotron-H layer weight as the converter writes it, or undefined for the other names. */
export function nemotronHGgufPart(spec: ModelFileSpec, hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  const m = /^model\.layers\.(\d+)\.(norm\.weight|mixer\.(.+))$/.exec(hf);
  if (!m) return undefined;
  const at = `blk.${m[1]}.`;
  if (m[2] === "norm.weight") return { name: at + "attn_norm.weight", shape, values, hf };
  const groups = spec.nemotronH!.groups;
  // The routed experts are stacked as every model's are (model-files.ts).
  if (m[3].startsWith("experts.")) return undefined;
  switch (m[3]) {
    case "conv1d.weight": return { name: at + "ssm_conv1d.weight", shape: [shape[0], shape[2]], values, hf };
    case "A_log": return { name: at + "ssm_a", shape: [shape[0], 1], values: values.map((v) => -Math.exp(v)), hf };
    case "D": return { name: at + "ssm_d", shape: [shape[0], 1], values, hf };
    case "norm.weight": return { name: at + "ssm_norm.weight", shape: [groups, shape[0] / groups], values, hf };
  }
  const name = MIXER_NAMES[m[3]];
  if (!name) throw new Error(`No GGUF name for ${hf}`);
  return { name: at + name, shape, values, hf };
}

/** A nemotron_h GGUF's own metadata: per-layer KV heads and feed-forward widths, the SSM's geometry. */
export function nemotronHGgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  const n = spec.nemotronH!;
  const perLayer = (kinds: string, v: number) => gguf.arr(GgufType.UINT32, Array.from({ length: spec.layers }, (_, i) => (kinds.includes(nemotronKind(spec, i)) ? v : 0)));
  const e = spec.experts;
  // As the converter writes Nemotron 3's experts (nemotron_h_moe): one shared expert of its own width, sigmoid scores renormalised.
  const experts: [string, GgufEntry][] = e
    ? [
      [`${a}.expert_shared_feed_forward_length`, gguf.u32(e.sharedFfn ?? 0)],
      [`${a}.expert_shared_count`, gguf.u32(e.sharedFfn ? 1 : 0)],
      [`${a}.expert_weights_norm`, gguf.bool(true)],
      [`${a}.expert_weights_scale`, gguf.f32(e.scale ?? 1)],
      [`${a}.expert_group_count`, gguf.u32(1)],
    ]
    : [];
  return [
    ...experts,
    [`${a}.attention.head_count_kv`, perLayer("*", spec.kvHeads)],
    [`${a}.feed_forward_length`, perLayer("-E", spec.ffn)],
    [`${a}.ssm.conv_kernel`, gguf.u32(n.conv)],
    [`${a}.ssm.inner_size`, gguf.u32(n.heads * n.headDim)],
    [`${a}.ssm.state_size`, gguf.u32(n.stateSize)],
    [`${a}.ssm.time_step_rank`, gguf.u32(n.heads)],
    [`${a}.ssm.group_count`, gguf.u32(n.groups)],
    // The (MTP head's) layer norm epsilon, which llama.cpp requires of every nemotron_h file.
    [`${a}.attention.layer_norm_epsilon`, gguf.f32(1e-5)],
  ];
}

/** The weights under a Nemotron-H checkpoint's names: `backbone.embeddings`, `backbone.layers.N.`, `backbone.norm_f`. */
export function nemotronHHfWeights(weights: HfWeights): HfWeights {
  const renamed = (name: string) =>
    name === "model.embed_tokens.weight" ? "backbone.embeddings.weight" : name === "model.norm.weight" ? "backbone.norm_f.weight" : name.replace(/^model\.layers\./, "backbone.layers.");
  return new Map([...weights].map(([name, w]) => [renamed(name), w]));
}

/** NemotronHConfig's own fields: the pattern, the Mamba-2 geometry, biases, the norm epsilon (not rms_norm_eps). */
export function nemotronHHfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const n = spec.nemotronH!;
  return {
    hybrid_override_pattern: n.pattern,
    mamba_num_heads: n.heads,
    mamba_head_dim: n.headDim,
    ssm_state_size: n.stateSize,
    mamba_n_groups: n.groups,
    mamba_d_conv: n.conv,
    mlp_hidden_act: "relu2",
    attention_bias: n.attnBias === true,
    mlp_bias: n.mlpBias === true,
    layer_norm_epsilon: 1e-5,
    // Nemotron 3's experts, as NemotronHConfig names them.
    ...(spec.experts
      ? {
        n_routed_experts: spec.experts.count, num_experts_per_tok: spec.experts.used, moe_intermediate_size: spec.ffn,
        moe_shared_expert_intermediate_size: spec.experts.sharedFfn ?? 0, n_shared_experts: spec.experts.sharedFfn ? 1 : 0,
        norm_topk_prob: true, routed_scaling_factor: spec.experts.scale ?? 1, n_group: 1, topk_group: 1,
      }
      : {}),
  };
}

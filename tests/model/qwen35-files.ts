/**
 * Qwen3.5 test files as its checkpoints and llama.cpp's converter have them. Hugging Face: Gated
 * DeltaNet layers under `linear_attn.` (value heads grouped by key head, `A_log`, conv1d [C, 1, K]),
 * gated attention (q_proj giving each head its query, then its gate), zero-centred norms (weighing by
 * 1 + w) but for `linear_attn.norm`. GGUF (convert_hf_to_gguf.py): the norms' 1 + w stored, value
 * heads reordered to tiled order in every tensor that carries them, `ssm_a` = −exp(A_log), conv1d as
 * [C, K], the qwen35 metadata (`ssm.*`, `full_attention_interval`, RoPE sections).
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import type { SafetensorsEntry } from "../../src/model/safetensors.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { ModelFileSpec } from "./model-files.ts";

/** A tensor on its way into a test GGUF. */
export interface GgufPart {
  name: string;
  shape: number[];
  values: Float32Array;
  hf: string;
}

/** Whether layer i of `spec` is a Gated DeltaNet layer (all but every `interval`-th). */
export function isLinearLayer(spec: ModelFileSpec, i: number): boolean {
  return (i + 1) % spec.deltaNet!.interval !== 0;
}

/** Draws a Qwen3.5's weights in HF naming with `put` (name, shape, scale, offset). */
export function qwen35HfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void, p = `model.layers.${i}.`): void {
  const d = spec.deltaNet!;
  const { hidden, heads, kvHeads, headDim: hd } = spec;
  // Zero-centred norms: the checkpoint's w, weighing by 1 + w.
  put(p + "input_layernorm.weight", [hidden], 0.2);
  put(p + "post_attention_layernorm.weight", [hidden], 0.2);
  // The multi-token-prediction block's layer (past the layers) attends.
  if (i < spec.layers && isLinearLayer(spec, i)) {
    const keys = d.kHeads * d.dim;
    const values = d.vHeads * d.dim;
    const a = p + "linear_attn.";
    if (spec.architecture === "qwen3next") {
      // Qwen3-Next fuses them per key head (qwen3next-files.ts).
      put(a + "in_proj_qkvz.weight", [2 * keys + 2 * values, hidden], 1 / Math.sqrt(hidden));
      put(a + "in_proj_ba.weight", [2 * d.vHeads, hidden], 3 / Math.sqrt(hidden));
    } else {
      put(a + "in_proj_qkv.weight", [2 * keys + values, hidden], 1 / Math.sqrt(hidden));
      put(a + "in_proj_z.weight", [values, hidden], 1 / Math.sqrt(hidden));
      // Beta's and alpha's projections sharp enough that the gates differ token to token.
      put(a + "in_proj_b.weight", [d.vHeads, hidden], 3 / Math.sqrt(hidden));
      put(a + "in_proj_a.weight", [d.vHeads, hidden], 3 / Math.sqrt(hidden));
    }
    put(a + "conv1d.weight", [2 * keys + values, 1, d.conv], 0.6);
    put(a + "dt_bias", [d.vHeads], 1);
    put(a + "A_log", [d.vHeads], 1);
    put(a + "norm.weight", [d.dim], 0.2, 1);
    put(a + "out_proj.weight", [hidden, values], 1 / Math.sqrt(values));
  } else {
    put(p + "self_attn.q_proj.weight", [heads * hd * 2, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.k_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.v_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.o_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
    put(p + "self_attn.q_norm.weight", [hd], 0.2);
    put(p + "self_attn.k_norm.weight", [hd], 0.2);
  }
}

/** Blocks of `width` along a row range: value heads from grouped (by key head) to tiled order (the converter's `_reorder_v_heads`). */
export function tileHeads(values: Float32Array, rows: number, cols: number, from: number, spec: ModelFileSpec, width: number, alongColumns: boolean): Float32Array {
  const d = spec.deltaNet!;
  // Qwen3-Next's converter leaves them grouped.
  if (spec.architecture === "qwen3next") return values;
  const per = d.vHeads / d.kHeads;
  const out = new Float32Array(values);
  for (let k = 0; k < d.kHeads; k++) {
    for (let j = 0; j < per; j++) {
      const g = from + (k * per + j) * width;
      const t = from + (j * d.kHeads + k) * width;
      for (let x = 0; x < width; x++) {
        if (alongColumns) for (let r = 0; r < rows; r++) out[r * cols + t + x] = values[r * cols + g + x];
        else out.set(values.subarray((g + x) * cols, (g + x + 1) * cols), (t + x) * cols);
      }
    }
  }
  return out;
}

const GGUF_LINEAR: Record<string, string> = {
  "in_proj_qkv.weight": "attn_qkv.weight",
  "in_proj_z.weight": "attn_gate.weight",
  "in_proj_b.weight": "ssm_beta.weight",
  "in_proj_a.weight": "ssm_alpha.weight",
  "conv1d.weight": "ssm_conv1d.weight",
  "dt_bias": "ssm_dt.bias",
  "A_log": "ssm_a",
  "norm.weight": "ssm_norm.weight",
  "out_proj.weight": "ssm_out.weight",
};

/**
 * One Qwen3.5 weight as convert_hf_to_gguf.py writes it, or undefined where the generic naming
 * applies (with the norms' 1 + w added here).
 */
export function qwen35GgufPart(spec: ModelFileSpec, hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  const d = spec.deltaNet!;
  const nextn = /^model\.layers\.(\d+)\.(enorm|hnorm|shared_head\.norm)\.weight$/.exec(hf);
  if (nextn) return { name: `blk.${nextn[1]}.nextn.${nextn[2] === "shared_head.norm" ? "shared_head_norm" : nextn[2]}.weight`, shape, values: values.map((v) => v + 1), hf };
  const m = /^model\.layers\.(\d+)\.linear_attn\.(.+)$/.exec(hf);
  if (!m) {
    if (!/(layernorm|_norm|model\.norm)\.weight$/.test(hf)) return undefined;
    const name = hf === "model.norm.weight" ? "output_norm.weight" : hf.replace(/^model\.layers\.(\d+)\./, "blk.$1.")
      .replace("input_layernorm", "attn_norm").replace("post_attention_layernorm", "post_attention_norm")
      .replace("self_attn.q_norm", "attn_q_norm").replace("self_attn.k_norm", "attn_k_norm");
    return { name, shape, values: values.map((v) => v + 1), hf };
  }
  const name = `blk.${m[1]}.${GGUF_LINEAR[m[2]]}`;
  const keys = d.kHeads * d.dim;
  const rowsOf = shape[0];
  switch (m[2]) {
    case "in_proj_qkv.weight":
      return { name, shape, values: tileHeads(values, rowsOf, shape[1], 2 * keys, spec, d.dim, false), hf };
    case "in_proj_z.weight":
      return { name, shape, values: tileHeads(values, rowsOf, shape[1], 0, spec, d.dim, false), hf };
    case "in_proj_b.weight":
    case "in_proj_a.weight":
      return { name, shape, values: tileHeads(values, rowsOf, shape[1], 0, spec, 1, false), hf };
    case "conv1d.weight":
      return { name, shape: [shape[0], shape[2]], values: tileHeads(values, rowsOf, shape[2], 2 * keys, spec, d.dim, false), hf };
    case "dt_bias":
      return { name, shape, values: tileHeads(values, rowsOf, 1, 0, spec, 1, false), hf };
    case "A_log":
      return { name, shape, values: tileHeads(values.map((v) => -Math.exp(v)), rowsOf, 1, 0, spec, 1, false), hf };
    case "out_proj.weight":
      return { name, shape, values: tileHeads(values, rowsOf, shape[1], 0, spec, d.dim, true), hf };
    default:
      return { name, shape, values, hf };
  }
}

/**
 * A Qwen3.5 checkpoint's multi-token-prediction tensor (`mtp.*`) under the name of the layer after the
 * last (`model.layers.N.`, its own tensors as GLM-4.5's NextN names them), as the converter numbers it.
 */
export function qwen35MtpAsLayer(spec: ModelFileSpec, hf: string): string {
  const at = `model.layers.${spec.layers}.`;
  const own: Record<string, string> = {
    "mtp.fc.weight": "eh_proj.weight", "mtp.pre_fc_norm_embedding.weight": "enorm.weight", "mtp.pre_fc_norm_hidden.weight": "hnorm.weight", "mtp.norm.weight": "shared_head.norm.weight",
  };
  return own[hf] !== undefined ? at + own[hf] : hf.replace(/^mtp\.layers\.0\./, at);
}

/** A qwen35 (or qwen3next) GGUF's own metadata: the DeltaNet sizes and the RoPE sections (text turns every section by its position; Qwen3-Next has none). */
export function qwen35GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const d = spec.deltaNet!;
  // As Qwen3.5's [11, 11, 10, 0] for 32 pairs: interleaved, the three sections cover every pair.
  const pairs = (spec.rotaryDim ?? spec.headDim) / 2;
  const sections = [Math.ceil(pairs / 3), Math.ceil((pairs - 1) / 3), Math.floor(pairs / 3), 0];
  const a = spec.architecture;
  return [
    [`${a}.ssm.conv_kernel`, gguf.u32(d.conv)],
    [`${a}.ssm.inner_size`, gguf.u32(d.vHeads * d.dim)],
    [`${a}.ssm.state_size`, gguf.u32(d.dim)],
    [`${a}.ssm.time_step_rank`, gguf.u32(d.vHeads)],
    [`${a}.ssm.group_count`, gguf.u32(d.kHeads)],
    [`${a}.full_attention_interval`, gguf.u32(d.interval)],
    ...(spec.nextn ? [[`${a}.nextn_predict_layers`, gguf.u32(spec.nextn)] as [string, GgufEntry]] : []),
    // Qwen3-Next turns by plain NeoX RoPE: no sections.
    ...(a === "qwen3next" ? [] : [[`${a}.rope.dimension_sections`, gguf.arr(GgufType.INT32, sections)] as [string, GgufEntry]]),
  ];
}

/** config.json's Qwen3.5 fields: the linear attention's sizes, its layer types, the gated attention. */
export function qwen35HfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const d = spec.deltaNet!;
  return {
    linear_num_key_heads: d.kHeads,
    linear_num_value_heads: d.vHeads,
    linear_key_head_dim: d.dim,
    linear_value_head_dim: d.dim,
    linear_conv_kernel_dim: d.conv,
    // Qwen3NextConfig: an interval (its layer_types derive from it), the output gate implied.
    ...(spec.architecture === "qwen3next"
      ? { full_attention_interval: d.interval }
      : { layer_types: Array.from({ length: spec.layers }, (_, i) => (isLinearLayer(spec, i) ? "linear_attention" : "full_attention")), attn_output_gate: true }),
    ...(spec.nextn ? { mtp_num_hidden_layers: spec.nextn } : {}),
  };
}

/**
 * A Qwen3.5 checkpoint as released (unless `deltaNet.unwrapped`): Qwen3_5ForConditionalGeneration,
 * the text config under `text_config` (RoPE's base and partial factor under `rope_parameters`, as
 * transformers 5 writes them), the text model's weights under `model.language_model.`, and a vision
 * tower's config and a weight of it that the loader leaves alone.
 */
export function qwen35HfCheckpoint(spec: ModelFileSpec, config: Record<string, unknown>, tensors: SafetensorsEntry[]): { config: Record<string, unknown>; tensors: SafetensorsEntry[] } {
  if (spec.deltaNet!.fusedExperts) tensors = fuseExperts(spec, tensors);
  // Qwen3-Next is a text model: no wrapper.
  if (spec.deltaNet!.unwrapped || spec.architecture === "qwen3next") return { config, tensors };
  const { rope_theta: theta, partial_rotary_factor: factor, tie_word_embeddings: tied, ...text } = config;
  const vision: SafetensorsEntry = { name: "model.visual.patch_embed.proj.weight", shape: [4, 3], dtype: "f32", data: new Uint8Array(48) };
  const moe = spec.architecture === "qwen35moe";
  return {
    config: {
      architectures: [moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"],
      model_type: moe ? "qwen3_5_moe" : "qwen3_5",
      tie_word_embeddings: tied,
      text_config: {
        ...text, model_type: moe ? "qwen3_5_moe_text" : "qwen3_5_text",
        rope_parameters: { rope_type: "default", rope_theta: theta, partial_rotary_factor: factor, mrope_section: [1, 1, 0], mrope_interleaved: true },
      },
      vision_config: { model_type: "qwen3_5", depth: 1 },
    },
    tensors: [...tensors.map((t) => ({ ...t, name: t.name.replace(/^model\./, "model.language_model.") })), vision],
  };
}

/** Each layer's per-expert matrices fused as transformers 5 saves Qwen3.5-MoE: `mlp.experts.gate_up_proj` [E, 2·ff, H] (gate rows first) and `mlp.experts.down_proj` [E, H, ff]. */
function fuseExperts(spec: ModelFileSpec, tensors: SafetensorsEntry[]): SafetensorsEntry[] {
  const count = spec.experts!.count;
  const per = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$/;
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const out = tensors.filter((t) => !per.test(t.name));
  for (let i = 0; i < spec.layers; i++) {
    const get = (e: number, role: string) => byName.get(`model.layers.${i}.mlp.experts.${e}.${role}_proj.weight`)!;
    const first = get(0, "gate");
    const cat = (parts: Uint8Array[]) => {
      const data = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
      let at = 0;
      for (const p of parts) {
        data.set(p, at);
        at += p.length;
      }
      return data;
    };
    const experts = Array.from({ length: count }, (_, e) => e);
    out.push({ name: `model.layers.${i}.mlp.experts.gate_up_proj`, shape: [count, 2 * first.shape[0], first.shape[1]], dtype: first.dtype, data: cat(experts.flatMap((e) => [get(e, "gate").data, get(e, "up").data])) });
    const down = get(0, "down");
    out.push({ name: `model.layers.${i}.mlp.experts.down_proj`, shape: [count, ...down.shape], dtype: down.dtype, data: cat(experts.map((e) => get(e, "down").data)) });
  }
  return out;
}

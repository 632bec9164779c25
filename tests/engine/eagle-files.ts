/**
 * Random EAGLE heads written as their checkpoints are (config.json and model.safetensors, d2t as
 * I64) for the eagle tests, and the target they draft for.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import type { ModelFileSpec } from "../model/model-files.ts";
import { seededRandom } from "../model/model-files.ts";

/** The target: a small Llama whose KV heads (2 of 8) an EAGLE head's cache shares. */
export const EAGLE_TARGET_SPEC: ModelFileSpec = { architecture: "llama", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 701 };

/** What a head file holds. */
export interface EagleHeadSpec {
  method: "eagle" | "eagle3";
  hidden?: number;
  /** The head's own query heads (its key/value heads are the target's unless `kvHeads`). */
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  layers?: number;
  ffn?: number;
  vocab?: number;
  /** EAGLE-3: a vocabulary of its own, and each id's offset to the target's (d2t); absent: the target's. */
  draftVocab?: number;
  d2t?: number[];
  /** Names under `midlayer.` (EAGLE-3's own checkpoints) rather than `layers.0.`. */
  midlayer?: boolean;
  /** EAGLE: `fc.bias`. */
  fcBias?: boolean;
  /** An `embed_tokens.weight` of its own. */
  embedding?: boolean;
  /** The speculators format (`transformer_layer_config`). */
  speculators?: boolean;
  auxLayerIds?: number[];
  normBeforeResidual?: boolean;
  ropeTheta?: number;
  seed: number;
  /** Tensors left out, by name. */
  omit?: string[];
  /** EAGLE-3's norm before fc: `norm_before_fc` ("whole": `input_norm.weight`) or `fc_norm` ("each": `fc_norm.{0,1,2}.weight`). */
  fcNorm?: "whole" | "each";
  /** EAGLE-3's `norm_output`. */
  normOutput?: boolean;
  /** Qwen3's layer: q/k norms per head, `model_type` "qwen3". */
  qkNorm?: boolean;
  /** More config.json keys (the layer's config too, for the speculators format). */
  extraConfig?: Record<string, unknown>;
  /** Tensors replaced, by name. */
  replace?: Record<string, Float32Array>;
}

/** Writes a head into `dir` (made) and returns its tensors' values by name. */
export function writeEagleHead(dir: string, s: EagleHeadSpec): Map<string, { shape: number[]; values: Float32Array }> {
  const h = s.hidden ?? 32, heads = s.heads ?? 4, kv = s.kvHeads ?? 2, hd = s.headDim ?? 8, ff = s.ffn ?? 48, vocab = s.vocab ?? 300;
  const draftVocab = s.draftVocab ?? vocab;
  const rand = seededRandom(s.seed);
  const t = new Map<string, { shape: number[]; values: Float32Array }>();
  const add = (name: string, shape: number[], scale: number, around = 0) => {
    const n = shape.reduce((a, b) => a * b, 1);
    t.set(name, { shape, values: s.replace?.[name] ?? Float32Array.from({ length: n }, () => around + (rand() * 2 - 1) * scale) });
  };
  const p = s.midlayer ? "midlayer." : "layers.0.";
  const inW = s.method === "eagle3" ? 2 * h : h;
  add("fc.weight", [h, s.method === "eagle3" ? 3 * h : 2 * h], 0.3);
  if (s.fcBias) add("fc.bias", [h], 0.1);
  add(`${p}self_attn.q_proj.weight`, [heads * hd, inW], 0.3);
  add(`${p}self_attn.k_proj.weight`, [kv * hd, inW], 0.3);
  add(`${p}self_attn.v_proj.weight`, [kv * hd, inW], 0.3);
  add(`${p}self_attn.o_proj.weight`, [h, heads * hd], 0.3);
  add(`${p}post_attention_layernorm.weight`, [h], 0.2, 1);
  add(`${p}mlp.gate_proj.weight`, [ff, h], 0.3);
  add(`${p}mlp.up_proj.weight`, [ff, h], 0.3);
  add(`${p}mlp.down_proj.weight`, [h, ff], 0.3);
  if (s.method === "eagle3") {
    add(`${p}input_layernorm.weight`, [h], 0.2, 1);
    add(`${p}hidden_norm.weight`, [h], 0.2, 1);
    add("norm.weight", [h], 0.2, 1);
    add("lm_head.weight", [draftVocab, h], 0.5);
  }
  if (s.embedding) add("embed_tokens.weight", [vocab, h], 1);
  if (s.fcNorm === "whole") add("input_norm.weight", [3 * h], 0.2, 1);
  if (s.fcNorm === "each") for (const j of [0, 1, 2]) add(`fc_norm.${j}.weight`, [h], 0.2, 1);
  if (s.qkNorm) {
    add(`${p}self_attn.q_norm.weight`, [hd], 0.2, 1);
    add(`${p}self_attn.k_norm.weight`, [hd], 0.2, 1);
  }
  for (const name of s.omit ?? []) t.delete(name);
  const layer = { hidden_size: h, num_attention_heads: heads, num_key_value_heads: kv, head_dim: hd, intermediate_size: ff, num_hidden_layers: s.layers ?? 1, rms_norm_eps: 1e-5, rope_theta: s.ropeTheta ?? 10000, max_position_embeddings: 4096, vocab_size: vocab, hidden_act: "silu", model_type: s.qkNorm ? "qwen3" : "llama" };
  const head = {
    ...(s.fcNorm === "whole" ? { norm_before_fc: true } : s.fcNorm === "each" ? { fc_norm: true } : {}),
    ...(s.normOutput ? { norm_output: true } : {}),
    ...(s.method === "eagle3" ? { draft_vocab_size: draftVocab } : {}), ...(s.normBeforeResidual ? { norm_before_residual: true } : {}), ...(s.auxLayerIds ? { eagle_aux_hidden_state_layer_ids: s.auxLayerIds } : {}) };
  const extra = s.extraConfig ?? {};
  const config = s.speculators
    ? { architectures: ["Eagle3Speculator"], speculators_model_type: "eagle3", transformer_layer_config: { ...layer, ...extra }, ...head, ...extra }
    : { architectures: [s.method === "eagle3" ? "LlamaForCausalLMEagle3" : "LlamaForCausalLM"], ...layer, ...head, ...extra };
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/config.json`, JSON.stringify(config));
  writeFileSync(`${dir}/model.safetensors`, safetensors(t, s.d2t));
  return t;
}

/** f32 tensors, then `d2t` as I64 where given, in one safetensors file. */
function safetensors(t: Map<string, { shape: number[]; values: Float32Array }>, d2t?: number[]): Uint8Array {
  const parts: [string, string, number[], Uint8Array][] = [...t].map(([name, { shape, values }]) => [name, "F32", shape, new Uint8Array(values.buffer.slice(0))]);
  if (d2t) parts.push(["d2t", "I64", [d2t.length], new Uint8Array(BigInt64Array.from(d2t, BigInt).buffer)]);
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const [name, dtype, shape, data] of parts) {
    header[name] = { dtype, shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - ((8 + json.length) % 8)) % 8);
  const head = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const [, , , data] of parts) {
    out.set(data, at);
    at += data.byteLength;
  }
  return out;
}

/**
 * Qwen3.5's text model (llama.cpp's `qwen35`): three layers of four are Gated DeltaNet layers
 * (ModelConfig.deltaNet: a causal convolution over q, k and v, then the gated delta rule, whose state
 * per sequence replaces the KV cache; forward-delta-net.ts), every fourth gated attention (the query
 * projection gives each head a gate for its output, ModelConfig.attnOutputGate; q/k norms; RoPE on a
 * quarter of each head). Its multimodal RoPE sections turn text alike: every section takes the token's
 * position, so the rotation is NeoX's over `rope.dimension_count` dims. Hugging Face checkpoints
 * (Qwen3_5ForConditionalGeneration, its text model under `model.language_model.` and its sizes under
 * `text_config`; or Qwen3_5ForCausalLM) keep value heads grouped by key head, `A_log`, the convolution
 * as [C, 1, K] and zero-centred norms (1 + w), all taken as they are here.
 */
import type { DeltaNetConfig, ModelConfig } from "./config.ts";
import { ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { numel } from "../backend/types.ts";
import type { HostTensor } from "./config.ts";
import { isJsonObject, type Json, positiveInt } from "./hf-json.ts";
import type { TensorSource } from "./weights.ts";

/** The config fields a Qwen3.5 file sets beyond a dense model's. */
export type Qwen35Fields = Pick<ModelConfig, "deltaNet" | "attnOutputGate" | "qkNorm">;

/**
 * Refuses RoPE sections that leave a rotated pair to the fourth section: llama.cpp's interleaved
 * multimodal RoPE gives pair i to section i mod 3 while i < 3 · that section's size, and turns the
 * rest by the fourth position, which text leaves at 0 (Qwen3.5's [11, 11, 10, 0] covers all 32 pairs).
 */
function checkSections(meta: GgufMetadata, arch: string, path: string): void {
  const key = `${arch}.rope.dimension_sections`;
  const sections = meta.entries.get(key)?.value;
  if (!Array.isArray(sections)) return;
  const s = sections.map(Number);
  const pairs = meta.number(`${arch}.rope.dimension_count`, 0) / 2;
  for (let i = 0; i < pairs; i++) {
    if (i < 3 * (s[i % 3] ?? 0)) continue;
    throw new ModelLoadError(`Model "${path}" has RoPE sections [${s.join(", ")}] that leave rotated pair ${i} of ${pairs} to the fourth (non-text) position; not supported`);
  }
}

/** A positive whole number from `key`, or an error naming it. */
function size(meta: GgufMetadata, key: string, path: string, fallback?: number): number {
  const v = meta.number(key, fallback);
  if (!Number.isInteger(v) || v < 1) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should be a positive whole number, got ${v}`);
  return v;
}

/**
 * A qwen35 GGUF's Gated DeltaNet geometry, as llama.cpp reads it: `ssm.group_count` key heads of
 * `ssm.state_size` dims, `ssm.time_step_rank` value heads sharing `ssm.inner_size`, a convolution of
 * `ssm.conv_kernel`; the recurrent layers from `attention.recurrent_layers` or, absent, all but every
 * `full_attention_interval`-th (4). The converter lays value heads out tiled over the key heads.
 */
export function ggufQwen35(meta: GgufMetadata, arch: string, numLayers: number, path: string): Qwen35Fields {
  const numKHeads = size(meta, `${arch}.ssm.group_count`, path);
  const numVHeads = size(meta, `${arch}.ssm.time_step_rank`, path);
  const headKDim = size(meta, `${arch}.ssm.state_size`, path);
  const inner = size(meta, `${arch}.ssm.inner_size`, path);
  if (numVHeads % numKHeads !== 0 || inner % numVHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numVHeads} value heads over ${numKHeads} key heads and ${inner} inner dims; expected whole multiples`);
  }
  const listed = meta.entries.get(`${arch}.attention.recurrent_layers`)?.value;
  let layers: boolean[];
  if (Array.isArray(listed)) {
    layers = listed.slice(0, numLayers).map((v) => Boolean(v));
    if (layers.length !== numLayers) throw new ModelLoadError(`GGUF metadata "${arch}.attention.recurrent_layers" in "${path}" lists ${listed.length} layers of ${numLayers}`);
  } else {
    const interval = size(meta, `${arch}.full_attention_interval`, path, 4);
    layers = Array.from({ length: numLayers }, (_, i) => (i + 1) % interval !== 0);
  }
  checkSections(meta, arch, path);
  const deltaNet: DeltaNetConfig = {
    layers,
    numKHeads,
    numVHeads,
    headKDim,
    headVDim: inner / numVHeads,
    convKernel: size(meta, `${arch}.ssm.conv_kernel`, path),
    vHeadOrder: "tiled",
  };
  return { deltaNet, attnOutputGate: true, qkNorm: true };
}

/**
 * The model_types and architectures whose config.json nests the text model's sizes under
 * `text_config` and its weights under `model.language_model.` (the checkpoints as released, with
 * their vision tower, which is not loaded).
 */
const WRAPPED = new Set(["Qwen3_5ForConditionalGeneration", "qwen3_5"]);

/**
 * config.json as the text model reads it, and the prefix of its weights' names: a Qwen3.5 checkpoint
 * with its vision tower has its text config under `text_config` (its architecture then reads as the
 * text model's) and its weights under `model.language_model.`; any other is as it is, under `model.`.
 */
export function hfTextModel(cfg: Json): { cfg: Json; prefix: string } {
  const arch = Array.isArray(cfg.architectures) ? String(cfg.architectures[0]) : String(cfg.model_type ?? "");
  if (!WRAPPED.has(arch) || !isJsonObject(cfg.text_config)) return { cfg, prefix: "model." };
  const text = cfg.text_config;
  return {
    // The outer config's token ids and tying apply where the text config leaves them out.
    cfg: { eos_token_id: cfg.eos_token_id, bos_token_id: cfg.bos_token_id, tie_word_embeddings: cfg.tie_word_embeddings, ...text, architectures: ["Qwen3_5ForCausalLM"] },
    prefix: "model.language_model.",
  };
}

/** A Qwen3.5 config.json's Gated DeltaNet layers and gated attention (value heads grouped, as transformers has them). */
export function hfQwen35(cfg: Json, numLayers: number, path: string): Qwen35Fields {
  const numKHeads = positiveInt(cfg, "linear_num_key_heads", path);
  const numVHeads = positiveInt(cfg, "linear_num_value_heads", path);
  if (numVHeads % numKHeads !== 0) throw new ModelLoadError(`Model "${path}" has ${numVHeads} linear value heads over ${numKHeads} key heads; expected a whole multiple`);
  const types = cfg.layer_types;
  let layers: boolean[];
  if (Array.isArray(types)) {
    if (types.length < numLayers || !types.every((t) => t === "linear_attention" || t === "full_attention")) {
      throw new ModelLoadError(`"layer_types" in "${path}" should name linear_attention or full_attention for each of the ${numLayers} layers, got ${JSON.stringify(types)}`);
    }
    layers = types.slice(0, numLayers).map((t) => t === "linear_attention");
  } else {
    const interval = positiveInt(cfg, "full_attention_interval", path, 4);
    layers = Array.from({ length: numLayers }, (_, i) => (i + 1) % interval !== 0);
  }
  const deltaNet: DeltaNetConfig = {
    layers,
    numKHeads,
    numVHeads,
    headKDim: positiveInt(cfg, "linear_key_head_dim", path),
    headVDim: positiveInt(cfg, "linear_value_head_dim", path),
    convKernel: positiveInt(cfg, "linear_conv_kernel_dim", path, 4),
    vHeadOrder: "grouped",
  };
  if (cfg.attn_output_gate === false) throw new ModelLoadError(`Model "${path}" sets attn_output_gate false, which Qwen3.5 support here does not run`);
  return { deltaNet, attnOutputGate: true, qkNorm: true };
}

/**
 * A Qwen3.5 checkpoint's tensors as the forward takes them: the convolution [C, 1, K] as [C, K] and
 * `A_log` as the decay rates −exp(A_log) (f32). Its zero-centred norms get their 1 after assembly.
 */
export function qwen35HfTensors(source: TensorSource): TensorSource {
  return {
    ...source,
    read: async (name) => {
      const t = await source.read(name);
      if (name.endsWith("linear_attn.conv1d.weight") && t.shape.length === 3 && t.shape[1] === 1) return { ...t, shape: [t.shape[0], t.shape[2]] };
      if (name.endsWith("linear_attn.A_log")) return negExp(t);
      return t;
    },
  };
}

function negExp(t: HostTensor): HostTensor {
  const v = decodeToF32(t.data, t.dtype, numel(t.shape)).map((x) => -Math.exp(x));
  return { name: t.name, shape: t.shape, dtype: "f32", data: new Uint8Array(v.buffer) };
}

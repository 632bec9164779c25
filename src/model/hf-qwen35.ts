/**
 * Qwen3.5 and Qwen3.5-MoE Hugging Face checkpoints: as released (Qwen3_5ForConditionalGeneration,
 * Qwen3_5MoeForConditionalGeneration: the text model under `model.language_model.`, its sizes under
 * `text_config`, a vision tower left alone) or text-only (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM).
 * Value heads stay grouped by key head (DeltaNetConfig.vHeadOrder), `A_log` is read as −exp(A_log),
 * the convolution [C, 1, K] as [C, K]; the zero-centred norms get their 1 after assembly (hf-loader.ts);
 * experts fused per layer (`mlp.experts.gate_up_proj` [E, 2·ff, H], `mlp.experts.down_proj`) are read
 * as the stacks per-expert checkpoints give.
 */
import { byteSize, decodeToF32 } from "../backend/dtype-codec.ts";
import { numel } from "../backend/types.ts";
import { type DeltaNetConfig, type HostTensor, ModelLoadError } from "./config.ts";
import { EXPERT } from "./expert-stack.ts";
import { isJsonObject, type Json, positiveInt } from "./hf-json.ts";
import type { Qwen35Fields } from "./qwen35.ts";
import type { TensorSource } from "./weights.ts";

/**
 * The model_types and architectures whose config.json nests the text model's sizes under
 * `text_config` and its weights under `model.language_model.` (the checkpoints as released, with
 * their vision tower, which is not loaded): Qwen3.5's, and Ministral 3's (mistral3.ts).
 */
const WRAPPED: ReadonlyMap<string, string> = new Map([
  ["Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"],
  ["qwen3_5", "Qwen3_5ForCausalLM"],
  ["Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"],
  ["qwen3_5_moe", "Qwen3_5MoeForCausalLM"],
  // Ministral 3 (mistral3.ts) and Mistral Small 3.x / Devstral ("mistral" text) as transformers 5 saves them.
  ["Mistral3ForConditionalGeneration", "Ministral3ForCausalLM"],
  ["mistral3", "Ministral3ForCausalLM"],
]);

/**
 * config.json as the text model reads it, and the prefix of its weights' names: a Qwen3.5 checkpoint
 * with its vision tower has its text config under `text_config` (its architecture then reads as the
 * text model's) and its weights under `model.language_model.`; any other is as it is, under `model.`.
 */
export function hfTextModel(cfg: Json): { cfg: Json; prefix: string } {
  const arch = Array.isArray(cfg.architectures) ? String(cfg.architectures[0]) : String(cfg.model_type ?? "");
  let text = WRAPPED.get(arch);
  if (text === undefined || !isJsonObject(cfg.text_config)) return { cfg, prefix: "model." };
  // A Mistral3 checkpoint's text model is named by its own model_type: Ministral 3's "ministral3", or
  // Mistral Small 3.x's and Devstral's "mistral" (Llama's layout).
  if (text === "Ministral3ForCausalLM" && cfg.text_config.model_type !== "ministral3") {
    text = cfg.text_config.model_type === "mistral" ? "MistralForCausalLM" : `${String(cfg.text_config.model_type)} (the text model of ${arch})`;
  }
  return {
    // The outer config's token ids and tying apply where the text config leaves them out.
    cfg: { eos_token_id: cfg.eos_token_id, bos_token_id: cfg.bos_token_id, tie_word_embeddings: cfg.tie_word_embeddings, ...cfg.text_config, architectures: [text] },
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

/** The per-expert role a fused tensor gives: gate (the first ff rows of gate_up), up (the rest), down. */
const FUSED: readonly [RegExp, string, "gate" | "up" | "down"][] = [
  [/^(.*mlp\.experts\.)\{expert\}\.gate_proj\.weight$/, "gate_up_proj", "gate"],
  [/^(.*mlp\.experts\.)\{expert\}\.up_proj\.weight$/, "gate_up_proj", "up"],
  [/^(.*mlp\.experts\.)\{expert\}\.down_proj\.weight$/, "down_proj", "down"],
];

/**
 * `stacked` (per-expert names stacked, expert-stack.ts) that also reads a layer whose experts are fused
 * (`…mlp.experts.gate_up_proj` [E, 2·ff, H], gate rows first; `…mlp.experts.down_proj` [E, H, ff],
 * with or without `.weight`): the stack of a role is cut from the fused tensor.
 */
export function fusedQwenExperts(stacked: TensorSource, raw: TensorSource): TensorSource {
  const fusedOf = (name: string): { tensor: string; part: "gate" | "up" | "down" } | undefined => {
    if (!name.includes(EXPERT) || stacked.has(name)) return undefined;
    for (const [re, fused, part] of FUSED) {
      const m = re.exec(name);
      if (!m) continue;
      const tensor = [m[1] + fused, m[1] + fused + ".weight"].find((n) => raw.has(n));
      if (tensor) return { tensor, part };
    }
    return undefined;
  };
  return {
    has: (name) => stacked.has(name) || fusedOf(name) !== undefined,
    byteLength: (name) => {
      const f = fusedOf(name);
      return !f ? stacked.byteLength(name) : f.part === "down" ? raw.byteLength(f.tensor) : raw.byteLength(f.tensor) / 2;
    },
    async read(name) {
      const f = fusedOf(name);
      if (!f) return stacked.read(name);
      const t = await raw.read(f.tensor);
      if (f.part === "down") return { ...t, name };
      if (t.shape.length !== 3 || t.shape[1] % 2 !== 0) throw new ModelLoadError(`Fused experts "${t.name}" have shape [${t.shape}]; expected [experts, 2·ff, hidden]`);
      const [experts, rows, cols] = t.shape;
      const half = byteSize(t.dtype, (rows / 2) * cols);
      const data = new Uint8Array(experts * half);
      for (let e = 0; e < experts; e++) data.set(t.data.subarray((2 * e + (f.part === "up" ? 1 : 0)) * half, (2 * e + (f.part === "up" ? 1 : 0) + 1) * half), e * half);
      return { name, shape: [experts, rows / 2, cols], dtype: t.dtype, data };
    },
  };
}

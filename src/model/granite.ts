/**
 * IBM Granite 3.x dense models (llama.cpp's `granite`, transformers' GraniteForCausalLM) as llama.cpp
 * runs them: Llama's layout with four multipliers — the token embeddings scaled
 * (`embedding_scale`, HF `embedding_multiplier`), the attention scores scaled by a number of their
 * own instead of 1/√headDim (`attention.scale`, `attention_multiplier`), each block's output scaled
 * before its residual add (`residual_scale`, `residual_multiplier`), and the logits divided
 * (`logit_scale`, `logits_scaling`). Granite's mixture-of-experts and hybrid models are other
 * architectures, not read here.
 */
import { type ModelConfig, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { type Json, num } from "./hf-json.ts";

/** The config fields Granite's multipliers set. */
export type GraniteFields = Pick<ModelConfig, "embeddingScale" | "attentionScale" | "residualScale" | "logitScale">;

/** A multiplier as a finite positive number, or an error naming the key. */
function positive(v: number, key: string, path: string): number {
  if (!(Number.isFinite(v) && v > 0)) throw new ModelLoadError(`"${key}" in "${path}" should be a positive number, got ${v}`);
  return v;
}

/** Fields of the multipliers that are not 1 (attention: the scale itself, whatever it is). */
function fields(embedding: number, attention: number | undefined, residual: number, logit: number): GraniteFields {
  return {
    ...(embedding !== 1 ? { embeddingScale: embedding } : {}),
    ...(attention !== undefined ? { attentionScale: attention } : {}),
    ...(residual !== 1 ? { residualScale: residual } : {}),
    ...(logit !== 1 ? { logitScale: logit } : {}),
  };
}

/**
 * A granite GGUF's multipliers (llama.cpp reads `logit_scale` as required, the others as given; an
 * attention scale of 0 means 1/√headDim). A file that says its RoPE was not fine-tuned
 * (`rope.scaling.finetuned` false), which llama.cpp runs without any rotation, is refused.
 */
export function ggufGranite(meta: GgufMetadata, arch: string, path: string, hybrid = false): GraniteFields {
  // Granite 4.0-H (granitehybrid): the logit scale optional, and its files without RoPE (granite-hybrid.ts) read.
  if (!hybrid && !meta.has(`${arch}.logit_scale`)) throw new ModelLoadError(`Model "${path}" lacks "${arch}.logit_scale", which Granite files carry`);
  if (!hybrid && meta.has(`${arch}.rope.scaling.finetuned`) && !meta.bool(`${arch}.rope.scaling.finetuned`, true)) {
    throw new ModelLoadError(`Model "${path}" sets "${arch}.rope.scaling.finetuned" false (run without RoPE by llama.cpp), which is not supported`);
  }
  const attention = meta.number(`${arch}.attention.scale`, 0);
  return fields(
    positive(meta.number(`${arch}.embedding_scale`, 1), `${arch}.embedding_scale`, path),
    attention === 0 ? undefined : positive(attention, `${arch}.attention.scale`, path),
    positive(meta.number(`${arch}.residual_scale`, 1), `${arch}.residual_scale`, path),
    positive(meta.number(`${arch}.logit_scale`, 1), `${arch}.logit_scale`, path),
  );
}

/** GraniteConfig's multipliers (transformers' defaults 1; `attention_multiplier` is the score scale itself). */
export function hfGranite(cfg: Json, path: string): GraniteFields {
  const attention = cfg.attention_multiplier === undefined || cfg.attention_multiplier === null ? 1 : num(cfg, "attention_multiplier", path);
  return fields(
    positive(num(cfg, "embedding_multiplier", path, 1), "embedding_multiplier", path),
    positive(attention, "attention_multiplier", path),
    positive(num(cfg, "residual_multiplier", path, 1), "residual_multiplier", path),
    positive(num(cfg, "logits_scaling", path, 1), "logits_scaling", path),
  );
}

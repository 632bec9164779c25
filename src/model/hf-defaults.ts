/**
 * config.json's `tie_word_embeddings` as transformers reads it: absent (or null), each config class's
 * own default, which differs by architecture (PretrainedConfig's is true; LlamaConfig, MixtralConfig,
 * Qwen2/Qwen3 (MoE) configs, Glm4MoeConfig, DeepseekV3Config, GptOssConfig, Phi3Config, GraniteConfig, Olmo2Config, Exaone4Config, Qwen3_5TextConfig, NemotronHConfig, FalconH1Config, MiniMaxM2Config and SeedOssConfig set false;
 * Gemma2Config, Gemma3TextConfig and SmolLM3Config true); and the check that an untied checkpoint has its output projection.
 */
import { type Architecture, ModelLoadError } from "./config.ts";
import type { Json } from "./hf-json.ts";

/**
 * transformers' `tie_word_embeddings` default for each architecture's config class (Mixtral's,
 * MixtralConfig, is Llama's; Kimi K2's, DeepSeek V3's).
 */
export const HF_TIE_WORD_EMBEDDINGS: Readonly<Record<Architecture, boolean>> = {
  llama: false,
  qwen2: false,
  qwen3: false,
  qwen2moe: false,
  qwen3moe: false,
  glm4moe: false,
  deepseek2: false,
  "gpt-oss": false,
  gemma3: true,
  phi3: false,
  smollm3: true,
  granite: false,
  olmo2: false,
  exaone4: false,
  gemma2: true,
  qwen35: false,
  qwen35moe: false,
  qwen3next: false,
  mistral3: false,
  lfm2: true,
  granitehybrid: false,
  nemotron_h: false,
  nemotron_h_moe: false,
  lfm2moe: true,
  "falcon-h1": false,
  "minimax-m2": false,
  seed_oss: false,
  gemma4: true,
};

/** Whether the output projection is the token embedding: config.json's boolean, else the architecture's default; anything else is an error quoting it. */
export function hfTiedEmbeddings(cfg: Json, architecture: Architecture, path: string): boolean {
  const v = cfg.tie_word_embeddings;
  if (v === undefined || v === null) return HF_TIE_WORD_EMBEDDINGS[architecture];
  if (typeof v !== "boolean") throw new ModelLoadError(`"tie_word_embeddings" in "${path}" should be true or false, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Checks that an untied model's checkpoint holds its output projection `name` (lm_head.weight), saying
 * why it is wanted: transformers would start it from random numbers, vLLM refuses the checkpoint. A
 * tied model's lm_head.weight, if any, is left unread (its output is the embedding).
 */
export function checkOutputHead(tied: boolean, cfg: Json, architecture: Architecture, name: string, has: (name: string) => boolean, dir: string): void {
  if (tied || has(name)) return;
  const absent = cfg.tie_word_embeddings === undefined || cfg.tie_word_embeddings === null;
  const why = absent
    ? `config.json leaves out tie_word_embeddings, which is false by default for ${architecture}; set it to true if the output shares the token embedding`
    : "config.json's tie_word_embeddings is false";
  throw new ModelLoadError(`Model "${dir}" lacks the tensor "${name}", its output projection (${why})`);
}

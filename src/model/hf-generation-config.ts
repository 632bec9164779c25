/**
 * A Hugging Face directory's generation_config.json: the end-of-turn tokens instruct models list there
 * and the sampling defaults their authors recommend.
 */
import { type ModelConfig, ModelLoadError, type SamplingDefaults } from "./config.ts";
import type { Json } from "./hf-json.ts";

/** generation_config.json keys that sampling here cannot follow (reported, not applied), with the value that changes nothing. */
const UNSUPPORTED_GENERATION_KEYS: Record<string, number> = { typical_p: 1, no_repeat_ngram_size: 0, epsilon_cutoff: 0, eta_cutoff: 0 };

/**
 * What a directory's generation_config.json adds to its config: its `eos_token_id`s (instruct models
 * list their end-of-turn tokens there, Llama 3's `<|eot_id|>` and Qwen's `<|endoftext|>` beside
 * config.json's one, and vLLM stops at them too) and its sampling defaults (`temperature`, `top_p`,
 * `top_k`, `min_p`, `repetition_penalty`, `max_new_tokens`). A value of the wrong type is a ModelLoadError naming it.
 */
export function applyGenerationConfig(config: ModelConfig, gen: Json): void {
  const numberAt = (key: string, ok: (v: number) => boolean): number | undefined => {
    const v = gen[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== "number" || !ok(v)) throw new ModelLoadError(`generation_config.json's ${key} must be a valid number, got ${JSON.stringify(v)}`);
    return v;
  };
  const eos = gen.eos_token_id;
  for (const id of Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]) {
    if (!Number.isInteger(id) || (id as number) < 0 || (id as number) >= config.vocabSize) {
      throw new ModelLoadError(`generation_config.json's eos_token_id must be token ids of the vocabulary of ${config.vocabSize}, got ${JSON.stringify(id)}`);
    }
    if (!config.eosTokenIds.includes(id as number)) config.eosTokenIds.push(id as number);
  }
  const temperature = numberAt("temperature", (v) => v >= 0);
  const topP = numberAt("top_p", (v) => v > 0 && v <= 1);
  const topK = numberAt("top_k", (v) => Number.isInteger(v));
  const minP = numberAt("min_p", (v) => v >= 0 && v <= 1);
  const repetitionPenalty = numberAt("repetition_penalty", (v) => v > 0 && Number.isFinite(v));
  const maxTokens = numberAt("max_new_tokens", (v) => Number.isSafeInteger(v) && v > 0);
  const unsupported = Object.keys(UNSUPPORTED_GENERATION_KEYS).filter((k) => gen[k] !== undefined && gen[k] !== null && gen[k] !== UNSUPPORTED_GENERATION_KEYS[k]);
  const d: SamplingDefaults = {
    ...(temperature !== undefined ? { temperature } : {}), ...(topP !== undefined ? { topP } : {}),
    ...(topK !== undefined && topK > 0 ? { topK } : {}), ...(minP !== undefined && minP > 0 ? { minP } : {}),
    ...(repetitionPenalty !== undefined && repetitionPenalty !== 1 ? { repetitionPenalty } : {}),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    ...(unsupported.length > 0 ? { unsupported } : {}),
  };
  if (Object.keys(d).length > 0) config.samplingDefaults = d;
}

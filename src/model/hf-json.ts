/** Reading Hugging Face config.json values with one-line errors that quote the file and the key. */
import { ModelLoadError } from "./config.ts";

/** A parsed JSON object (config.json, tokenizer_config.json). */
export type Json = Record<string, unknown>;

/** `cfg[key]` as a number; `fallback` when absent (or null); a clear error when neither. */
export function num(cfg: Json, key: string, path: string, fallback?: number): number {
  const v = cfg[key];
  if (typeof v === "number") return v;
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ModelLoadError(`"${path}" lacks "${key}"`);
  }
  throw new ModelLoadError(`"${key}" in "${path}" should be a number, got ${JSON.stringify(v)}`);
}

/** `cfg[key]` as a whole number from 1 (a count or size); `fallback` when absent; a clear error otherwise. */
export function positiveInt(cfg: Json, key: string, path: string, fallback?: number): number {
  const v = num(cfg, key, path, fallback);
  if (!Number.isSafeInteger(v) || v < 1) throw new ModelLoadError(`"${key}" in "${path}" should be a positive whole number, got ${v}`);
  return v;
}

/** `cfg[key]` as a whole number of at least `least` (`fallback` when absent); a clear error otherwise. */
export function wholeAtLeast(cfg: Json, key: string, path: string, fallback: number, least: number): number {
  const v = num(cfg, key, path, fallback);
  if (!Number.isInteger(v) || v < least) throw new ModelLoadError(`"${key}" in "${path}" should be a whole number of at least ${least}, got ${v}`);
  return v;
}

/** True when `v` is a JSON object (not null, not an array). */
export function isJsonObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * A head's size: config.json's `head_dim` (a whole number from 1), else transformers' default
 * `hidden_size // num_attention_heads`, which must not come to 0.
 */
export function hfHeadDim(cfg: Json, hiddenSize: number, numHeads: number, path: string): number {
  if (cfg.head_dim !== undefined && cfg.head_dim !== null) return positiveInt(cfg, "head_dim", path);
  const derived = Math.floor(hiddenSize / numHeads);
  if (derived < 1) {
    throw new ModelLoadError(`Model "${path}" has hidden_size ${hiddenSize} over ${numHeads} attention heads (head size ${derived}); config.json should give a positive head_dim`);
  }
  return derived;
}

/**
 * Phi-3 (llama.cpp's `phi3` architecture: Phi-3-mini/medium, Phi-3.5-mini, Phi-4, Phi-4-mini) as
 * llama.cpp runs it (its phi3 graph): a Llama-shaped decoder with NeoX RoPE (partial on Phi-4-mini)
 * whose checkpoints fuse the q, k and v projections into one matrix (`attn_qkv`, HF `qkv_proj`) and
 * the gate and up projections into one (`ffn_up` of 2·ffn rows, gate first; HF `gate_up_proj`).
 * The fused matrices are cut into the plain roles as they are read, so the forward is Llama's.
 *
 * LongRoPE (the 128K models): per-pair frequency divisors, `rope_factors_long` or
 * `rope_factors_short`, chosen for the context served as llama.cpp chooses them (the long ones when
 * its per-sequence context passes the original 4K): at load by the model's context, then by each
 * engine's (`longRopeFor`, engine-factory.ts; `--max-model-len` 4096 takes the short ones),
 * and a magnitude factor on RoPE's rotation (`rope.scaling.attn_factor`, √(1 + ln s / ln original))
 * on q's and k's rotated dims (ModelConfig.ropeMagnitude; the dims a partial rotation leaves keep theirs).
 *
 * Phi-3's sliding window (`attention.sliding_window`, 2047 on Phi-3-mini) is not applied: llama.cpp
 * disables it for this architecture (its converters do not say which layers slide), and so do we, to
 * run what it runs.
 */
import { type ModelConfig, ModelLoadError } from "./config.ts";
import { isJsonObject, type Json } from "./hf-json.ts";
import { checkFreqFactors } from "./rope-scaling.ts";
import { type FusedPart, splittingFused } from "./fused-rows.ts";
import type { TensorNames, TensorSource } from "./weights.ts";

/** What LongRoPE needs at load: both factor sets, the context they switch at, and the magnitude factor. */
export interface LongRope {
  long: readonly number[];
  short: readonly number[];
  /** The context the model was first trained at (`original_max_position_embeddings`). */
  originalContext: number;
  /** The magnitude factor on q and k (1 where absent). */
  attnFactor: number;
}

/** The fields LongRoPE sets on a config: the divisors for `contextLength`, and the rotation's magnitude. */
export function longRopeFields(
  rope: LongRope, contextLength: number, rotaryDim: number, path: string,
): { ropeFreqFactors: number[]; ropeMagnitude?: number; longRope: NonNullable<ModelConfig["longRope"]> } {
  if (!(Number.isInteger(rope.originalContext) && rope.originalContext > 0)) {
    throw new ModelLoadError(`Model "${path}" has an original context length of ${rope.originalContext}; expected a positive integer`);
  }
  const longRope = { long: checkFreqFactors(rope.long, rotaryDim, path), short: checkFreqFactors(rope.short, rotaryDim, path), originalContext: rope.originalContext };
  return { ropeFreqFactors: contextLength > rope.originalContext ? longRope.long : longRope.short, ...ropeMagnitude(rope.attnFactor, path), longRope };
}

/**
 * `config` with LongRoPE's divisors for a context of `context` positions (the long ones past the
 * original context, else the short ones), as llama.cpp chooses them by its context; `config` itself
 * where it has no LongRoPE or already holds that set.
 */
export function longRopeFor(config: ModelConfig, context: number): ModelConfig {
  const r = config.longRope;
  if (!r) return config;
  const factors = context > r.originalContext ? r.long : r.short;
  return factors === config.ropeFreqFactors ? config : { ...config, ropeFreqFactors: factors };
}

/**
 * LongRoPE's magnitude factor as a config field: it multiplies the rotated dims only (not the scores:
 * with Phi-4-mini's partial rotation the last quarter of each head is not scaled); none for 1.
 */
export function ropeMagnitude(attnFactor: number, path: string): { ropeMagnitude?: number } {
  if (!(attnFactor > 0 && Number.isFinite(attnFactor))) {
    throw new ModelLoadError(`Model "${path}" has a RoPE attention factor of ${attnFactor}; expected a positive number`);
  }
  return attnFactor === 1 ? {} : { ropeMagnitude: attnFactor };
}

/** A config.json list of positive numbers, or an error naming the key. */
function factorList(v: unknown, key: string, path: string): number[] {
  if (!Array.isArray(v) || !v.every((x) => typeof x === "number")) {
    throw new ModelLoadError(`"rope_scaling.${key}" in "${path}" should be a list of numbers, got ${JSON.stringify(v)}`);
  }
  return v as number[];
}

/**
 * Phi3Config's LongRoPE (`rope_scaling` type "longrope", or "su" as the first Phi-3 configs wrote it;
 * transformers 5's `rope_parameters`): `long_factor`, `short_factor`, `original_max_position_embeddings`
 * (config.json's own, or the scaling's), and `attention_factor` where given, else transformers' and the
 * GGUF converter's √(1 + ln s / ln original) for s = max_position_embeddings / original (1 for s ≤ 1).
 * Nothing for a config without scaling (Phi-3-mini-4k, Phi-4); another scaling type is refused.
 */
export function hfLongRope(cfg: Json, contextLength: number, rotaryDim: number, path: string): Partial<Pick<ModelConfig, "ropeFreqFactors" | "ropeMagnitude" | "longRope">> {
  const raw = cfg.rope_scaling ?? cfg.rope_parameters;
  if (raw === undefined || raw === null) return {};
  if (!isJsonObject(raw)) throw new ModelLoadError(`"rope_scaling" in "${path}" should be an object, got ${JSON.stringify(raw)}`);
  const type = raw.rope_type ?? raw.type ?? "default";
  if (type === "default" && raw.long_factor === undefined) return {};
  if (type !== "longrope" && type !== "su") {
    throw new ModelLoadError(`Model "${path}" uses rope_scaling type ${JSON.stringify(type)}; Phi-3 checkpoints use "longrope"`);
  }
  const original = cfg.original_max_position_embeddings ?? raw.original_max_position_embeddings;
  if (typeof original !== "number") throw new ModelLoadError(`Model "${path}" uses LongRoPE but gives no original_max_position_embeddings`);
  const scale = contextLength / original;
  const given = raw.attention_factor;
  if (given !== undefined && given !== null && typeof given !== "number") {
    throw new ModelLoadError(`"rope_scaling.attention_factor" in "${path}" should be a number, got ${JSON.stringify(given)}`);
  }
  const attnFactor = typeof given === "number" ? given : scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(original)) : 1;
  return longRopeFields(
    { long: factorList(raw.long_factor, "long_factor", path), short: factorList(raw.short_factor, "short_factor", path), originalContext: original, attnFactor },
    contextLength, rotaryDim, path,
  );
}

/** The shape a fused Phi-3 checkpoint declares, for cutting its fused tensors. */
export interface Phi3Shape {
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
}

/**
 * A tensor source that serves q, k, v, gate and up under `names` from Phi-3's fused tensors
 * (`qkv(i)`: [(heads + 2·kvHeads)·headDim, hidden]; `gateUp(i)`: [2·ffn, hidden], gate first) where
 * the plain ones are absent. `gateUp` may share its name with the plain up role (GGUF's `ffn_up`):
 * a tensor of 2·ffn rows under that name is the fused one. The last fused tensor read is kept, so
 * each is read once for its parts.
 */
export function splittingPhi3Fused(
  source: TensorSource,
  shape: Phi3Shape,
  names: TensorNames,
  fusedNames: { qkv: (layer: number) => string; gateUp: (layer: number) => string },
  rowsOf: (name: string) => number | undefined,
  path: string,
): TensorSource {
  const parts = new Map<string, FusedPart>();
  const q = shape.numHeads * shape.headDim;
  const kv = shape.numKvHeads * shape.headDim;
  const ffn = shape.intermediateSize;
  for (let i = 0; i < shape.numLayers; i++) {
    const qkv = fusedNames.qkv(i);
    if (!source.has(names.layer(i, "wq")) && source.has(qkv)) {
      parts.set(names.layer(i, "wq"), { fused: qkv, ranges: [[0, q]] });
      parts.set(names.layer(i, "wk"), { fused: qkv, ranges: [[q, kv]] });
      parts.set(names.layer(i, "wv"), { fused: qkv, ranges: [[q + kv, kv]] });
    }
    const gateUp = fusedNames.gateUp(i);
    if (!source.has(names.layer(i, "wGate")) && source.has(gateUp) && rowsOf(gateUp) === 2 * ffn) {
      parts.set(names.layer(i, "wGate"), { fused: gateUp, ranges: [[0, ffn]] });
      parts.set(names.layer(i, "wUp"), { fused: gateUp, ranges: [[ffn, ffn]] });
    }
  }
  return splittingFused(source, parts, rowsOf, path);
}

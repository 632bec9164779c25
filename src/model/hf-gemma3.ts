/**
 * Gemma 3 Hugging Face checkpoints, text only (`Gemma3ForCausalLM`, model_type `gemma3_text`:
 * google/gemma-3-1b-it and the text models of the larger ones): config.json's fields as
 * transformers' Gemma3TextConfig reads them, and the norms' `1 +`, which Gemma's RMSNorm applies
 * at run time (output · (1 + w)) and llama.cpp's converter bakes into the GGUF: added here on load, so
 * both formats run through the same plain RMS norms (gguf-gemma3.ts has the rest of the model).
 */
import { type HostTensor, type LayerWeights, ModelLoadError, type ModelWeights, type SlidingWindow, slidingLayers } from "./config.ts";
import type { Gemma2Fields, Gemma3Fields } from "./gguf-gemma3.ts";
import { hfSlidingWindow } from "./hf-gpt-oss.ts";
import { type Json, num } from "./hf-json.ts";

/** The config fields a Gemma 3 config.json sets beyond the common ones, as a GGUF's (tied embeddings: hf-defaults.ts). */
export type HfGemma3 = Gemma3Fields;

/**
 * Reads config.json's Gemma 2 fields (Gemma2ForCausalLM), with transformers' Gemma2Config defaults:
 * `sliding_window` (4096) on the layers `layer_types` marks (older configs: the even ones), at the
 * model's RoPE base; `query_pre_attn_scalar` (256); the scores' and logits' soft-capping
 * (`attn_logit_softcapping` 50, `final_logit_softcapping` 30; null turns one off).
 */
export function hfGemma2(cfg: Json, hiddenSize: number, numLayers: number, path: string): Gemma2Fields {
  const act = cfg.hidden_activation ?? cfg.hidden_act ?? "gelu_pytorch_tanh";
  if (act !== "gelu_pytorch_tanh") throw new ModelLoadError(`"hidden_activation" in "${path}" is ${JSON.stringify(act)}; Gemma 2 runs "gelu_pytorch_tanh"`);
  const cap = (key: string, fallback: number) => {
    if (cfg[key] === null) return undefined;
    const v = num(cfg, key, path, fallback);
    if (!(Number.isFinite(v) && v > 0)) throw new ModelLoadError(`"${key}" in "${path}" should be a positive number or null, got ${v}`);
    return v;
  };
  const attnSoftcap = cap("attn_logit_softcapping", 50);
  const finalSoftcap = cap("final_logit_softcapping", 30);
  const { slidingWindow } = hfSlidingWindow({ ...cfg, sliding_window: cfg.sliding_window === undefined ? 4096 : cfg.sliding_window }, numLayers, path);
  return {
    ...(slidingWindow ? { slidingWindow } : {}),
    embeddingScale: Math.sqrt(hiddenSize),
    postNorms: true,
    ffnActivation: "gelu",
    attentionScale: 1 / Math.sqrt(num(cfg, "query_pre_attn_scalar", path, 256)),
    ...(attnSoftcap !== undefined ? { attnSoftcap } : {}),
    ...(finalSoftcap !== undefined ? { finalSoftcap } : {}),
    tiedEmbeddings: true,
  };
}

/** transformers' Gemma3TextConfig defaults where config.json leaves a field out. */
const DEFAULTS = { slidingWindowPattern: 6, ropeLocalBaseFreq: 10_000 };

/**
 * Reads config.json's Gemma 3 fields: `sliding_window` on the layers `layer_types` marks
 * "sliding_attention" (older configs: all but every `sliding_window_pattern`-th), those layers' RoPE
 * base `rope_local_base_freq`, the global layers' linear `rope_scaling`, `query_pre_attn_scalar`,
 * and the activation and soft-capping it must not differ in.
 */
export function hfGemma3(cfg: Json, hiddenSize: number, headDim: number, rotaryDim: number, numLayers: number, path: string): HfGemma3 {
  const act = cfg.hidden_activation ?? cfg.hidden_act ?? "gelu_pytorch_tanh";
  if (act !== "gelu_pytorch_tanh") throw new ModelLoadError(`"hidden_activation" in "${path}" is ${JSON.stringify(act)}; Gemma 3 runs "gelu_pytorch_tanh"`);
  for (const key of ["final_logit_softcapping", "attn_logit_softcapping"]) {
    const v = cfg[key];
    if (v !== undefined && v !== null) throw new ModelLoadError(`"${key}" in "${path}" is ${JSON.stringify(v)}; Gemma 3 does not soft-cap (Gemma 2 does: its checkpoints are Gemma2ForCausalLM)`);
  }
  return {
    ...hfSlidingLayers(cfg, numLayers, path),
    embeddingScale: Math.sqrt(hiddenSize),
    postNorms: true,
    ffnActivation: "gelu",
    attentionScale: 1 / Math.sqrt(num(cfg, "query_pre_attn_scalar", path, headDim)),
    ...hfLinearRope(cfg, rotaryDim, path),
  };
}

function hfSlidingLayers(cfg: Json, numLayers: number, path: string): { slidingWindow?: SlidingWindow } {
  const size = cfg.sliding_window;
  if (size === undefined || size === null) return {};
  if (typeof size !== "number" || !Number.isInteger(size) || size < 1) {
    throw new ModelLoadError(`"sliding_window" in "${path}" should be a positive whole number of positions, got ${JSON.stringify(size)}`);
  }
  const ropeTheta = num(cfg, "rope_local_base_freq", path, DEFAULTS.ropeLocalBaseFreq);
  const types = cfg.layer_types;
  if (types === undefined || types === null) {
    const pattern = num(cfg, "sliding_window_pattern", path, DEFAULTS.slidingWindowPattern);
    if (!Number.isInteger(pattern) || pattern < 1) throw new ModelLoadError(`"sliding_window_pattern" in "${path}" should be a positive whole number, got ${pattern}`);
    return { slidingWindow: { size, layers: slidingLayers(numLayers, pattern), ropeTheta } };
  }
  if (!Array.isArray(types) || types.length !== numLayers || !types.every((t) => t === "sliding_attention" || t === "full_attention")) {
    throw new ModelLoadError(`"layer_types" in "${path}" should list "sliding_attention" or "full_attention" for each of its ${numLayers} layers, got ${JSON.stringify(types)}`);
  }
  return { slidingWindow: { size, layers: types.map((t) => t === "sliding_attention"), ropeTheta } };
}

/** The global layers' linear RoPE scaling (4B and up: factor 8) as per-pair divisors; none for the 1B. */
function hfLinearRope(cfg: Json, rotaryDim: number, path: string): { ropeFreqFactors?: number[] } {
  const raw = cfg.rope_scaling;
  if (raw === undefined || raw === null) return {};
  const s = raw as Json;
  const type = s.rope_type ?? s.type;
  if (type === "default") return {};
  const factor = s.factor;
  if (type !== "linear" || typeof factor !== "number" || !(factor > 0)) {
    throw new ModelLoadError(`"rope_scaling" in "${path}" is ${JSON.stringify(raw)}; Gemma 3 scales its global layers' RoPE linearly ("linear" with a positive factor)`);
  }
  return factor === 1 ? {} : { ropeFreqFactors: new Array(rotaryDim / 2).fill(factor) };
}

/** Gemma's norms weigh by 1 + w: the stored w's of every norm, layers' and final, with 1 added (f32, as norms are loaded). */
export function gemmaNormsPlusOne(weights: ModelWeights<HostTensor>): ModelWeights<HostTensor> {
  const roles = ["attnNorm", "ffnNorm", "attnPostNorm", "ffnPostNorm", "qNorm", "kNorm"] as const;
  const layerPlusOne = (l: LayerWeights<HostTensor>) => {
    const out: LayerWeights<HostTensor> = { ...l };
    for (const r of roles) if (l[r]) out[r] = plusOne(l[r]!);
    return out;
  };
  // Qwen3.5's multi-token-prediction block weighs its norms by 1 + w too.
  const m = weights.mtp;
  const mtp = m && { ...m, layer: layerPlusOne(m.layer), ...(m.enorm ? { enorm: plusOne(m.enorm) } : {}), ...(m.hnorm ? { hnorm: plusOne(m.hnorm) } : {}), ...(m.headNorm ? { headNorm: plusOne(m.headNorm) } : {}) };
  return { ...weights, layers: weights.layers.map(layerPlusOne), outputNorm: plusOne(weights.outputNorm), ...(mtp ? { mtp } : {}) };
}

function plusOne(t: HostTensor): HostTensor {
  if (t.dtype !== "f32") throw new ModelLoadError(`Norm "${t.name}" was loaded as ${t.dtype}, not f32`);
  const v = new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
  for (let i = 0; i < v.length; i++) v[i] += 1;
  return { ...t, data: new Uint8Array(v.buffer) };
}

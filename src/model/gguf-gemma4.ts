/**
 * What Gemma 4's text model (llama.cpp's `gemma4` architecture: the 31B dense model and its kin) adds
 * to a GGUF's config, the way llama.cpp's graph runs it:
 * - Gemma 3's √hidden embedding scale, sandwich norms (`post_attention_norm`, `post_ffw_norm`), q/k
 *   norms and GeGLU; norm weights stored as they apply (its converter adds no 1);
 * - sliding layers told by a per-layer `attention.sliding_window_pattern`, window
 *   `attention.sliding_window`, with heads of their own size (`attention.key_length_swa`), their own
 *   KV heads (a per-layer `attention.head_count_kv`), their own rotated dims
 *   (`rope.dimension_count_swa`) and RoPE base (`rope.freq_base_swa`); the full-attention layers turn
 *   with `rope_freqs` (the converter's "proportional" RoPE: pairs past the rotated fraction divided by
 *   1e30, so they stay put);
 * - scores unscaled (llama.cpp's f_attention_scale 1), the values RMS-normed per head without a weight,
 *   a layer without `attn_v` taking its keys' projection as values;
 * - each layer's output multiplied by its `layer_output_scale` (read with the weights: gguf-loader.ts);
 * - the logits soft-capped where `final_logit_softcapping` says.
 * - the 26B-A4B's experts beside a dense feed-forward ({@link gemma4Moe});
 * - E2B/E4B's per-layer inputs (`embedding_length_per_layer_input`: forward-gemma4.ts), their last
 *   `attention.shared_kv_layers` layers reading the cache of the last sliding or full layer before
 *   them, and per-layer feed-forward widths (the shared layers' double-wide).
 */
import { ModelLoadError, type MoeConfig, plainMoe, type SlidingWindow } from "./config.ts";
import { type GgufMetadata, perLayerNumber } from "./gguf-metadata.ts";

/** The config fields a Gemma 4 GGUF sets beyond the common ones. */
export interface Gemma4Fields {
  numKvHeads: number;
  headDim: number;
  rotaryDim?: number;
  slidingWindow: SlidingWindow;
  embeddingScale: number;
  postNorms: true;
  ffnActivation: "gelu";
  attentionScale: number;
  valueNorm: true;
  qkNorm: true;
  keyAsValue: boolean[];
  finalSoftcap?: number;
  moe?: MoeConfig;
  perLayerInput?: { width: number };
  kvShareFrom?: (number | undefined)[];
  intermediateSize?: number;
  layerIntermediateSizes?: number[];
}

/**
 * The 26B-A4B's experts as llama.cpp's gemma4 graph runs them: softmax scores, the chosen weights
 * renormalised, GELU experts beside a dense GeGLU feed-forward (`feed_forward_length` wide), the router
 * reading its own norm of the residual, each expert's output scaled (MoeConfig.gemma4).
 */
function gemma4Moe(meta: GgufMetadata, arch: string, experts: number, path: string): MoeConfig {
  const used = meta.number(`${arch}.expert_used_count`);
  if (!Number.isInteger(used) || used < 1 || used > experts) throw new ModelLoadError(`Model "${path}" uses ${used} of its ${experts} experts per token; expected 1 to ${experts}`);
  const dense = perLayerNumber(meta, `${arch}.feed_forward_length`, path);
  return { ...plainMoe(experts, used, true), sharedIntermediateSize: dense, gemma4: true };
}

/** Reads Gemma 4's own fields (see the module comment); `has` tells which tensors the file holds. */
export function ggufGemma4(meta: GgufMetadata, arch: string, shape: { hiddenSize: number; numLayers: number; ropeTheta: number }, has: (tensor: string) => boolean, path: string): Gemma4Fields {
  const n = shape.numLayers;
  const whole = (key: string, fallback?: number) => {
    const v = fallback === undefined ? meta.number(`${arch}.${key}`) : meta.number(`${arch}.${key}`, fallback);
    if (!Number.isInteger(v) || v < 0) throw new ModelLoadError(`GGUF metadata "${arch}.${key}" in "${path}" should be a whole number, got ${v}`);
    return v;
  };
  const ple = whole("embedding_length_per_layer_input", 0);
  const shared = whole("attention.shared_kv_layers", 0);
  const experts = whole("expert_count", 0);
  const moe = experts > 0 ? gemma4Moe(meta, arch, experts, path) : undefined;
  const patternKey = `${arch}.attention.sliding_window_pattern`;
  const flags = meta.entries.get(patternKey)?.value;
  if (!Array.isArray(flags) || flags.length < n) throw new ModelLoadError(`Model "${path}" has no per-layer "${patternKey}" for its ${n} layers`);
  const layers = flags.slice(0, n).map(Boolean);
  const size = whole("attention.sliding_window");
  if (size < 1) throw new ModelLoadError(`Model "${path}" has a sliding window of ${size} positions; expected a positive integer`);
  const headDim = whole("attention.key_length");
  const swaHeadDim = whole("attention.key_length_swa");
  for (const [k, v, want] of [["attention.value_length", whole("attention.value_length", headDim), headDim], ["attention.value_length_swa", whole("attention.value_length_swa", swaHeadDim), swaHeadDim]] as const) {
    if (v !== want) throw new ModelLoadError(`Model "${path}" has "${arch}.${k}" ${v} unlike its key length ${want}; Gemma 4's keys and values are as wide`);
  }
  const kvKey = `${arch}.attention.head_count_kv`;
  const raw = meta.entries.get(kvKey)?.value;
  const perLayer = Array.isArray(raw) ? raw.map(Number) : Array<number>(n).fill(meta.number(kvKey));
  if (perLayer.length < n || perLayer.some((h) => !Number.isInteger(h) || h < 1)) throw new ModelLoadError(`Model "${path}" has "${kvKey}" ${JSON.stringify(raw)}; expected a KV head count from 1 for each of its ${n} layers`);
  const kvOf = (sliding: boolean) => {
    const counts = [...new Set(perLayer.slice(0, n).filter((_, i) => layers[i] === sliding))];
    if (counts.length > 1) throw new ModelLoadError(`Model "${path}" has ${sliding ? "sliding" : "full-attention"} layers of differing KV head counts (${counts.join(", ")}); only one each is supported`);
    return counts[0];
  };
  const fullKv = kvOf(false) ?? kvOf(true)!;
  const swaKv = kvOf(true) ?? fullKv;
  const rot = whole("rope.dimension_count", headDim);
  const rotSwa = whole("rope.dimension_count_swa", swaHeadDim);
  if (rot > headDim || rot % 2 !== 0 || rotSwa > swaHeadDim || rotSwa % 2 !== 0) {
    throw new ModelLoadError(`Model "${path}" rotates ${rot} of ${headDim} and ${rotSwa} of ${swaHeadDim} head dims; expected even counts within the heads`);
  }
  const swaTheta = meta.number(`${arch}.rope.freq_base_swa`, shape.ropeTheta);
  // E2B/E4B: the last `shared` layers read the cache of the last sliding or full layer before them (llama.cpp's reuse).
  const firstShared = n - shared;
  if (shared > 0 && (firstShared < 2 || layers[firstShared - 2] !== true || layers[firstShared - 1] !== false)) {
    throw new ModelLoadError(`Model "${path}" shares the KV caches of its last ${shared} layers, but the two layers before them are not a sliding and a full-attention one`);
  }
  const kvShareFrom = shared > 0 ? layers.map((sliding, i) => (i < firstShared ? undefined : firstShared - (sliding ? 2 : 1))) : undefined;
  const ffKey = `${arch}.feed_forward_length`;
  const ffRaw = meta.entries.get(ffKey)?.value;
  const widths = Array.isArray(ffRaw) && !experts ? ffRaw.map(Number).slice(0, n) : undefined;
  const cap = meta.optionalNumber(`${arch}.final_logit_softcapping`);
  return {
    numKvHeads: fullKv,
    headDim,
    ...(rot !== headDim ? { rotaryDim: rot } : {}),
    slidingWindow: {
      // Always the sliding layers' own base: that keeps the full layers' rope_freqs off them.
      size, layers, ropeTheta: swaTheta,
      headDim: swaHeadDim, numKvHeads: swaKv, ...(rotSwa !== swaHeadDim ? { rotaryDim: rotSwa } : {}),
    },
    embeddingScale: Math.sqrt(shape.hiddenSize),
    postNorms: true,
    ffnActivation: "gelu",
    attentionScale: 1,
    valueNorm: true,
    qkNorm: true,
    keyAsValue: Array.from({ length: n }, (_, i) => !has(`blk.${i}.attn_v.weight`)),
    ...(cap !== undefined && cap > 0 ? { finalSoftcap: cap } : {}),
    ...(moe ? { moe } : {}),
    ...(ple > 0 ? { perLayerInput: { width: ple } } : {}),
    ...(kvShareFrom ? { kvShareFrom } : {}),
    ...(widths ? { intermediateSize: Math.max(...widths), ...(new Set(widths).size > 1 ? { layerIntermediateSizes: widths } : {}) } : {}),
  };
}

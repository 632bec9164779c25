/**
 * What Gemma 3's text model (llama.cpp's `gemma3` architecture: gemma-3-1b/4b/12b/27b) adds to a
 * GGUF's config, the way llama.cpp runs it (its build_gemma3 graph):
 * - token embeddings scaled by √hidden;
 * - "sandwich" norms: the attention's and the feed-forward's outputs are RMS-normed before the
 *   residual adds (`post_attention_norm`, `post_ffw_norm`); every norm weight is stored with Gemma's
 *   `1 +` already added by llama.cpp's converter, so all run as plain RMS norms;
 * - q/k norms, and a GeGLU feed-forward (GELU, tanh approximation);
 * - five layers of six slide (window `attention.sliding_window`, 512 or 1024), turning RoPE with base
 *   10 000 unscaled; every sixth is global, with `rope.freq_base` (1 000 000) and, from 4B up,
 *   linear scaling (`rope.scaling.factor` 8);
 * - scores scaled by 1/√headDim, except the 27B's (62 layers) by 1/√(hidden / heads), Google's
 *   `query_pre_attn_scalar`;
 * - answers end with `<end_of_turn>`.
 * Gemma 2's soft-capping is gone in Gemma 3; a gemma3 file that declares it is refused (Gemma 2's own
 * files: {@link ggufGemma2}).
 */
import { ModelLoadError, type SlidingWindow, slidingLayers } from "./config.ts";
import { ggufSlidingWindow } from "./gguf-gpt-oss.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";

/** The config fields a Gemma 2 GGUF sets: Gemma 3's, with soft-capping, and its output always the embedding. */
export interface Gemma2Fields extends Gemma3Fields {
  attnSoftcap?: number;
  finalSoftcap?: number;
  tiedEmbeddings: true;
}

/** The config fields a Gemma 3 GGUF sets beyond the common ones. */
export interface Gemma3Fields {
  slidingWindow?: SlidingWindow;
  embeddingScale: number;
  postNorms: true;
  ffnActivation: "gelu";
  attentionScale: number;
  /** Linear RoPE scaling of the global layers, as per-pair divisors. */
  ropeFreqFactors?: number[];
}

/** The shape a Gemma 3 GGUF declares, as read by the common loader. */
export interface Gemma3Shape {
  hiddenSize: number;
  numHeads: number;
  headDim: number;
  rotaryDim: number;
  numLayers: number;
  ropeTheta: number;
}

/** llama.cpp's RoPE base of Gemma 3's sliding layers. */
const GEMMA3_SWA_THETA = 10_000;
/** llama.cpp's sliding-layer period for Gemma 3: every sixth layer is global. */
const GEMMA3_SWA_PATTERN = 6;

/**
 * Reads Gemma 2's fields (llama.cpp's `gemma2`: gemma-2-2b/9b/27b): Gemma 3's embeddings, sandwich
 * norms and GeGLU, without q/k norms; even layers slide (`attention.sliding_window`, 4096 where the
 * file names none; `attention.sliding_window_pattern` 2), at `rope.freq_base_swa` where the file gives
 * one; scores soft-capped (`attn_logit_softcapping`, 50 where absent) and the logits too
 * (`final_logit_softcapping`, 30); the 27B's (46 layers) score scale hidden / heads; the output is the
 * token embedding, as llama.cpp runs every Gemma 2.
 */
export function ggufGemma2(meta: GgufMetadata, arch: string, shape: Gemma3Shape, path: string): Gemma2Fields {
  const cap = (key: string, fallback: number) => {
    const v = meta.number(`${arch}.${key}`, fallback);
    if (!(Number.isFinite(v) && v >= 0)) throw new ModelLoadError(`GGUF metadata "${arch}.${key}" in "${path}" should be a number from 0, got ${v}`);
    return v === 0 ? undefined : v;
  };
  const attnSoftcap = cap("attn_logit_softcapping", 50);
  const finalSoftcap = cap("final_logit_softcapping", 30);
  // ggufSlidingWindow reads a window only where the file names one; Gemma 2's default is 4096.
  const named = meta.has(`${arch}.attention.sliding_window`);
  const slidingWindow = named
    ? ggufSlidingWindow(meta, arch, shape.numLayers, shape.ropeTheta, path, { pattern: 2, swaTheta: shape.ropeTheta })
    : { size: 4096, layers: slidingLayers(shape.numLayers, meta.number(`${arch}.attention.sliding_window_pattern`, 2)) };
  return {
    ...gemmaFields(shape, slidingWindow, 46),
    ...(attnSoftcap !== undefined ? { attnSoftcap } : {}),
    ...(finalSoftcap !== undefined ? { finalSoftcap } : {}),
    tiedEmbeddings: true,
  };
}

/**
 * What Gemma 2 and 3 share: embeddings scaled by √hidden, sandwich norms, GeGLU, the window, and the
 * scores' scale: Google's query_pre_attn_scalar, the head width but hidden / heads for the 27B (its
 * head is narrower; llama.cpp tells it by its layer count, `layers27B`).
 */
function gemmaFields(shape: Gemma3Shape, slidingWindow: SlidingWindow | undefined, layers27B: number): Gemma3Fields {
  const scoreWidth = shape.numLayers === layers27B ? shape.hiddenSize / shape.numHeads : shape.headDim;
  return {
    ...(slidingWindow ? { slidingWindow } : {}),
    embeddingScale: Math.sqrt(shape.hiddenSize),
    postNorms: true,
    ffnActivation: "gelu",
    attentionScale: 1 / Math.sqrt(scoreWidth),
  };
}

/** Reads Gemma 3's own fields (see the module comment). */
export function ggufGemma3(meta: GgufMetadata, arch: string, shape: Gemma3Shape, path: string): Gemma3Fields {
  for (const key of ["attn_logit_softcapping", "final_logit_softcapping"]) {
    const v = meta.optionalNumber(`${arch}.${key}`);
    if (v !== undefined && v !== 0) throw new ModelLoadError(`Model "${path}" soft-caps its logits ("${arch}.${key}" ${v}), which Gemma 3 does not (Gemma 2 does: a "gemma2" file)`);
  }
  const slidingWindow = ggufSlidingWindow(meta, arch, shape.numLayers, shape.ropeTheta, path, { pattern: GEMMA3_SWA_PATTERN, swaTheta: GEMMA3_SWA_THETA });
  const scaling = meta.string(`${arch}.rope.scaling.type`, "none");
  const factor = meta.number(`${arch}.rope.scaling.factor`, 1);
  if (scaling !== "none" && scaling !== "linear" && factor !== 1) {
    throw new ModelLoadError(`Model "${path}" uses RoPE scaling type "${scaling}"; Gemma 3 files use "linear"`);
  }
  if (!(factor > 0)) throw new ModelLoadError(`Model "${path}" has a RoPE scaling factor of ${factor}; expected a positive number`);
  return {
    ...gemmaFields(shape, slidingWindow, 62),
    ...(scaling === "linear" && factor !== 1 ? { ropeFreqFactors: new Array(shape.rotaryDim / 2).fill(factor) } : {}),
  };
}

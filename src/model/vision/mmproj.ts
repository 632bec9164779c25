/**
 * A vision tower for image input: llama.cpp's multimodal projector files (`mmproj-*.gguf`, general
 * architecture "clip"), as `llama-server --mmproj` reads them. A ViT (CLIP's or SigLIP's: patch
 * embedding, learned positions, an optional class token and pre-norm, pre-norm encoder layers with
 * LayerNorm, biased projections and GELU) and a projector into the language model's embedding width:
 * LLaVA's (`mlp`: linear, GELU, linear) or Gemma 3's (`gemma3`: the patch grid average-pooled 4 × 4,
 * an RMS norm, one matrix; its images attend to themselves both ways in the language model) or
 * Idefics3's (`idefics3`, SmolVLM's: each 4 × 4 square of patches shuffled into one position's
 * features, one matrix). Other projector types are refused by name.
 */
import { encodeFromF32 } from "../../backend/dtype-codec.ts";
import { decodeToF32 } from "../../backend/dtype-codec.ts";
import { openRandomAccess, type RandomAccessFile } from "../../runtime/fs.ts";
import { type HostTensor, ModelLoadError } from "../config.ts";
import { GgufMetadata, positiveInteger, showGgufValue } from "../gguf-metadata.ts";
import { type GgufTensorInfo, readGgufHeader, readGgufTensor } from "../gguf-reader.ts";
import type { PreprocessSpec } from "./image-preprocess.ts";

/** The projector types this engine runs (llama.cpp's `clip.projector_type`). */
export const VISION_PROJECTORS = ["mlp", "gemma3", "idefics3"] as const;
/** {@link VISION_PROJECTORS}. */
export type VisionProjector = typeof VISION_PROJECTORS[number];

/** The vision tower's shape and how an image becomes its input. */
export interface VisionConfig {
  projector: VisionProjector;
  /** The square side images are resized to, in pixels, and the patches' side. */
  imageSize: number;
  patchSize: number;
  /** The encoder's width, feed-forward width and heads. */
  hidden: number;
  ffn: number;
  heads: number;
  /** LayerNorm's epsilon. */
  eps: number;
  /** Encoder layers run (the features come from the state after them: LLaVA's penultimate layer). */
  layers: number;
  /** The feed-forward activation: GELU (tanh approximation, SigLIP's) or CLIP's quick GELU, x · σ(1.702x). */
  activation: "gelu" | "quick_gelu";
  /** The width of the embeddings it gives: the language model's hidden size. */
  projectionDim: number;
  /** How an image's pixels are prepared (mean, std; LLaVA pads to a square first). */
  preprocess: PreprocessSpec;
  /** Language-model positions one image takes: its patches ((imageSize / patchSize)²), or Gemma 3's pooled cells. */
  tokensPerImage: number;
  /** Gemma 3: the side of the square of patches averaged into one position (4: 64 × 64 patches → 256). */
  pooling?: number;
  /** Idefics3: the side of the square of patches whose features one position takes side by side (4: 32 × 32 patches → 64). */
  shuffle?: number;
  /**
   * The image's positions attend to each other both ways in the language model (Gemma 3, as
   * llama.cpp's non-causal image batches): an image is computed in one step (the scheduler does not
   * cut one), and each of its rows sees the whole image.
   */
  bidirectional: boolean;
  /** Text around each image in the prompt (Gemma 3: "\n\n<start_of_image>" before, "<end_of_image>\n\n" after, as its processor writes it). */
  wrap?: { before: string; after: string };
}

/** A LayerNorm's weight and bias. */
export interface VisionNorm<T> {
  weight: T;
  bias: T;
}

/** One encoder layer. Every projection has a bias. */
export interface VisionLayer<T> {
  norm1: VisionNorm<T>;
  wq: T;
  bq: T;
  wk: T;
  bk: T;
  wv: T;
  bv: T;
  wo: T;
  bo: T;
  norm2: VisionNorm<T>;
  wUp: T;
  bUp: T;
  wDown: T;
  bDown: T;
}

/** The vision tower's weights, generic over host or device storage. */
export interface VisionWeights<T> {
  /** The patch convolution as a matrix [hidden, 3 · patch²] (columns in (channel, y, x) order). */
  patchEmbedding: T;
  patchBias?: T;
  /** The class token [hidden] (CLIP); absent for SigLIP. */
  classEmbedding?: T;
  /** [positions, hidden]: the class token's first, then the patches' in raster order. */
  positionEmbedding: T;
  preNorm?: VisionNorm<T>;
  layers: VisionLayer<T>[];
  postNorm?: VisionNorm<T>;
  /** The projector ({@link VisionProjector}). */
  projector: MlpProjector<T> | Gemma3Projector<T> | Idefics3Projector<T>;
}

/** Idefics3's (SmolVLM's): after the pixel shuffle, one matrix [projectionDim, hidden · shuffle²], no bias. */
export interface Idefics3Projector<T> {
  kind: "idefics3";
  w: T;
}

/** LLaVA's projector: mm.0 (hidden → projectionDim), GELU, mm.2 (projectionDim → projectionDim). */
export interface MlpProjector<T> {
  kind: "mlp";
  w0: T;
  b0: T;
  w2: T;
  b2: T;
}

/** Gemma 3's: after pooling, an RMS norm (its weight with Gemma's +1 already in, as the converter writes it) and one matrix [projectionDim, hidden]. */
export interface Gemma3Projector<T> {
  kind: "gemma3";
  norm: T;
  w: T;
}

/** A loaded vision tower. */
export interface VisionModel<T = HostTensor> {
  config: VisionConfig;
  weights: VisionWeights<T>;
  source: string;
}

/** Reads the numbers of a metadata array, or fails naming the key. */
function numbers(meta: GgufMetadata, key: string, path: string): number[] | undefined {
  const v = meta.array(key);
  if (v === undefined) return undefined;
  if (!v.every((x) => typeof x === "number" || typeof x === "bigint")) {
    throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should be an array of numbers, got ${showGgufValue(v)}`);
  }
  return v.map(Number);
}

/** Three per-channel numbers (image mean or std), or the fallback. */
function channels(meta: GgufMetadata, key: string, path: string, fallback: readonly number[]): [number, number, number] {
  const v = numbers(meta, key, path) ?? fallback;
  if (v.length !== 3 || !v.every((x) => Number.isFinite(x))) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should hold 3 finite numbers, got ${showGgufValue([...v])}`);
  return [v[0], v[1], v[2]];
}

/** The projector type a file names (newer files: `clip.projector_type` or `clip.vision.projector_type`; legacy LLaVA files only flag it). */
function projectorOf(meta: GgufMetadata, path: string): VisionProjector {
  const named = meta.has("clip.vision.projector_type") ? meta.string("clip.vision.projector_type") : meta.has("clip.projector_type") ? meta.string("clip.projector_type") : meta.bool("clip.has_llava_projector", false) ? "mlp" : undefined;
  if (named === undefined) throw new ModelLoadError(`Projector file "${path}" names no projector type (clip.projector_type)`);
  if (!(VISION_PROJECTORS as readonly string[]).includes(named)) {
    throw new ModelLoadError(`Projector file "${path}" has projector type "${named}"; this engine runs ${VISION_PROJECTORS.map((p) => `"${p}"`).join(", ")} (LLaVA's, Gemma 3's and SmolVLM's)`);
  }
  return named as VisionProjector;
}

/** The encoder layers run: up to the file's one feature layer, else for LLaVA all but the last stored, for Gemma 3 all (llama.cpp's rule). */
function layersRun(meta: GgufMetadata, stored: number, projector: VisionProjector, path: string): number {
  const features = numbers(meta, "clip.vision.feature_layer", path);
  if (features === undefined || features.length === 0) return projector === "mlp" ? stored - 1 : stored;
  const distinct = [...new Set(features)];
  if (distinct.length > 1) throw new ModelLoadError(`Projector file "${path}" stacks the states of layers ${showGgufValue(features)} (clip.vision.feature_layer); only one feature layer is supported`);
  const layer = distinct[0];
  if (!Number.isInteger(layer) || layer < 1 || layer > stored) throw new ModelLoadError(`Projector file "${path}" takes its features after layer ${layer}, outside its ${stored} layers`);
  return layer;
}

/**
 * Reads a llama.cpp projector file (`--mmproj`) whose embeddings are `lmHidden` wide. Every tensor the
 * tower needs is read and checked for shape; a file for another model (another width) or of a
 * projector type not run here is refused by name.
 */
export async function loadVisionModel(path: string, lmHidden: number): Promise<VisionModel> {
  let file: RandomAccessFile;
  try {
    file = await openRandomAccess(path);
  } catch {
    throw new ModelLoadError(`Projector file not found: "${path}"`);
  }
  try {
    const header = await readGgufHeader(file);
    const meta = new GgufMetadata(header.metadata, path);
    const arch = meta.string("general.architecture", "clip");
    if (arch !== "clip") throw new ModelLoadError(`"${path}" is a "${arch}" GGUF file, not a projector file (general.architecture "clip"); pass the language model with --model and its mmproj file with --mmproj`);
    if (!meta.bool("clip.has_vision_encoder", true)) throw new ModelLoadError(`Projector file "${path}" has no vision encoder (clip.has_vision_encoder false)`);
    const projector = projectorOf(meta, path);
    const int = (key: string, fallback?: number) => positiveInteger(meta.number(key, fallback), key, path);
    const imageSize = int("clip.vision.image_size");
    const patchSize = int("clip.vision.patch_size");
    const hidden = int("clip.vision.embedding_length");
    const ffn = int("clip.vision.feed_forward_length");
    const heads = int("clip.vision.attention.head_count");
    const stored = int("clip.vision.block_count");
    const eps = meta.number("clip.vision.attention.layer_norm_epsilon");
    if (!(eps > 0)) throw new ModelLoadError(`GGUF metadata "clip.vision.attention.layer_norm_epsilon" in "${path}" should be positive, got ${eps}`);
    if (imageSize % patchSize !== 0) throw new ModelLoadError(`Projector file "${path}" has images of ${imageSize} pixels, not a whole number of ${patchSize}-pixel patches`);
    if (hidden % heads !== 0) throw new ModelLoadError(`Projector file "${path}" has width ${hidden}, not a whole number of its ${heads} heads`);
    if (meta.bool("clip.use_silu", false)) throw new ModelLoadError(`Projector file "${path}" uses SiLU in its encoder (clip.use_silu); only GELU and quick GELU are run`);
    const grid = imageSize / patchSize;
    const tensors = new Map(header.tensors.map((t) => [t.name, t]));
    const read = async (name: string, shape: readonly number[]): Promise<HostTensor> => {
      const info = tensors.get(name);
      if (!info) throw new ModelLoadError(`Projector file "${path}" lacks the tensor "${name}"`);
      if (info.shape.length !== shape.length || info.shape.some((d, i) => d !== shape[i])) {
        throw new ModelLoadError(`Tensor "${name}" in "${path}" is [${info.shape}]; expected [${shape}]`);
      }
      return await readGgufTensor(file, info);
    };
    const optional = async (name: string, shape: readonly number[]) => tensors.has(name) ? await read(name, shape) : undefined;
    const norm = async (prefix: string): Promise<VisionNorm<HostTensor>> => ({ weight: await read(`${prefix}.weight`, [hidden]), bias: await read(`${prefix}.bias`, [hidden]) });
    const optionalNorm = async (prefix: string) => tensors.has(`${prefix}.weight`) ? await norm(prefix) : undefined;
    const classEmbedding = await optional("v.class_embd", [hidden]);
    const positions = grid * grid + (classEmbedding ? 1 : 0);
    const conv = await read("v.patch_embd.weight", [hidden, 3, patchSize, patchSize]);
    const layers: VisionLayer<HostTensor>[] = [];
    const run = layersRun(meta, stored, projector, path);
    for (let i = 0; i < run; i++) {
      const p = `v.blk.${i}`;
      const square = async (name: string) => ({ w: await read(`${p}.${name}.weight`, [hidden, hidden]), b: await read(`${p}.${name}.bias`, [hidden]) });
      const [q, k, v, o] = [await square("attn_q"), await square("attn_k"), await square("attn_v"), await square("attn_out")];
      const ffnPair = await feedForward(tensors, p, hidden, ffn, path, read);
      layers.push({ norm1: await norm(`${p}.ln1`), wq: q.w, bq: q.b, wk: k.w, bk: k.b, wv: v.w, bv: v.b, wo: o.w, bo: o.b, norm2: await norm(`${p}.ln2`), ...ffnPair });
    }
    const out = projector === "mlp" ? tensors.get("mm.0.weight")?.shape[0] : projector === "gemma3" ? tensors.get("mm.input_projection.weight")?.shape[1] : tensors.get("mm.model.fc.weight")?.shape[0];
    if (out !== undefined && out !== lmHidden) {
      throw new ModelLoadError(`Projector file "${path}" gives embeddings ${out} wide; the language model's are ${lmHidden} (is it this model's mmproj file?)`);
    }
    // Gemma 3 averages each 4 × 4 square of patches into one position (clip.vision.projector.scale_factor where a file sets another).
    const pooling = projector === "gemma3" ? int("clip.vision.projector.scale_factor", 4) : undefined;
    if (pooling !== undefined && grid % pooling !== 0) throw new ModelLoadError(`Projector file "${path}" pools ${pooling} × ${pooling} patches, which do not divide its ${grid} × ${grid} grid`);
    // Idefics3 shuffles each square of patches into one position (SmolVLM's files set 4; its default is 3 as transformers').
    const shuffle = projector === "idefics3" ? int("clip.vision.projector.scale_factor", 3) : undefined;
    if (shuffle !== undefined && grid % shuffle !== 0) throw new ModelLoadError(`Projector file "${path}" shuffles ${shuffle} × ${shuffle} patches, which do not divide its ${grid} × ${grid} grid`);
    const weights: VisionWeights<HostTensor> = {
      patchEmbedding: { ...conv, shape: [hidden, 3 * patchSize * patchSize] },
      positionEmbedding: await read("v.position_embd.weight", [positions, hidden]),
      layers,
      projector: projector === "mlp"
        ? { kind: "mlp", w0: await read("mm.0.weight", [lmHidden, hidden]), b0: await read("mm.0.bias", [lmHidden]), w2: await read("mm.2.weight", [lmHidden, lmHidden]), b2: await read("mm.2.bias", [lmHidden]) }
        : projector === "gemma3"
        ? { kind: "gemma3", norm: await read("mm.soft_emb_norm.weight", [hidden]), w: transposed(await read("mm.input_projection.weight", [hidden, lmHidden])) }
        : { kind: "idefics3", w: await read("mm.model.fc.weight", [lmHidden, hidden * shuffle! * shuffle!]) },
    };
    const patchBias = await optional("v.patch_embd.bias", [hidden]);
    if (patchBias) weights.patchBias = patchBias;
    if (classEmbedding) weights.classEmbedding = classEmbedding;
    const preNorm = await optionalNorm("v.pre_ln");
    if (preNorm) weights.preNorm = preNorm;
    const postNorm = await optionalNorm("v.post_ln");
    if (postNorm) weights.postNorm = postNorm;
    const config: VisionConfig = {
      projector, imageSize, patchSize, hidden, ffn, heads, eps, layers: run,
      activation: meta.bool("clip.use_gelu", false) ? "gelu" : "quick_gelu",
      projectionDim: lmHidden,
      preprocess: {
        size: imageSize,
        mean: channels(meta, "clip.vision.image_mean", path, [0.48145466, 0.4578275, 0.40821073]),
        std: channels(meta, "clip.vision.image_std", path, [0.26862954, 0.26130258, 0.27577711]),
        // LLaVA pads to a square (expand2square); Gemma 3's processor resizes the whole image to the square.
        padToSquare: projector === "mlp",
        // As each model's Hugging Face processor resizes: CLIP's BICUBIC (LLaVA), SigLIP's BILINEAR (Gemma 3), Idefics3's LANCZOS.
        resample: projector === "mlp" ? "bicubic" : projector === "gemma3" ? "bilinear" : "lanczos",
      },
      tokensPerImage: pooling ? (grid / pooling) ** 2 : shuffle ? (grid / shuffle) ** 2 : grid * grid,
      bidirectional: projector === "gemma3",
      ...(pooling ? { pooling, wrap: { before: "\n\n<start_of_image>", after: "<end_of_image>\n\n" } } : {}),
      // SmolVLM's global image as llama.cpp writes it (one image, no tiles).
      ...(shuffle ? { shuffle, wrap: { before: "<fake_token_around_image><global-img>", after: "<fake_token_around_image>" } } : {}),
    };
    if (config.preprocess.std.some((s) => s === 0)) throw new ModelLoadError(`GGUF metadata "clip.vision.image_std" in "${path}" holds a zero`);
    return { config, weights, source: path };
  } finally {
    await file.close();
  }
}

/**
 * A layer's feed-forward matrices. Files from llama.cpp's legacy LLaVA converter swap the names
 * `ffn_up` and `ffn_down`; as llama.cpp does, the shapes tell which is which.
 */
async function feedForward(
  tensors: Map<string, GgufTensorInfo>, p: string, hidden: number, ffn: number, path: string,
  read: (name: string, shape: readonly number[]) => Promise<HostTensor>,
): Promise<Pick<VisionLayer<HostTensor>, "wUp" | "bUp" | "wDown" | "bDown">> {
  const down = tensors.get(`${p}.ffn_down.weight`);
  const swapped = down !== undefined && down.shape[0] === ffn && down.shape[1] === hidden && ffn !== hidden;
  const [up, dn] = swapped ? ["ffn_down", "ffn_up"] : ["ffn_up", "ffn_down"];
  if (!tensors.has(`${p}.${up}.weight`)) throw new ModelLoadError(`Projector file "${path}" lacks the tensor "${p}.${up}.weight"`);
  return {
    wUp: await read(`${p}.${up}.weight`, [ffn, hidden]),
    bUp: await read(`${p}.${up}.bias`, [ffn]),
    wDown: await read(`${p}.${dn}.weight`, [hidden, ffn]),
    bDown: await read(`${p}.${dn}.bias`, [hidden]),
  };
}

/** A matrix [rows, cols] as [cols, rows], in its dtype where that encodes from f32 (else f32): Gemma 3's projection is stored for x · W. */
function transposed(t: HostTensor): HostTensor {
  const [rows, cols] = t.shape;
  const v = hostValues(t);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = v[r * cols + c];
  const dtype = t.dtype === "f16" || t.dtype === "bf16" ? t.dtype : "f32";
  return { name: t.name, shape: [cols, rows], dtype, data: encodeFromF32(out, dtype) };
}

/** A host tensor's values as f32. */
export function hostValues(t: HostTensor): Float32Array {
  return decodeToF32(t.data, t.dtype, t.shape.reduce((a, b) => a * b, 1));
}

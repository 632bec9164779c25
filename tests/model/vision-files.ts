/**
 * Random vision towers written as llama.cpp's projector files (mmproj GGUF, LLaVA's "mlp" projector)
 * for the vision tests, and the tower's arithmetic written out on the host, plainly, as the check
 * the backends' composed ops are held to.
 */
import { writeFileSync } from "node:fs";
import { hostValues, type VisionModel } from "../../src/model/vision/mmproj.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { HostTensor } from "../../src/model/config.ts";
import { imagePatches } from "../../src/model/vision/image-preprocess.ts";
import { seededRandom } from "./model-files.ts";

/** What a projector file holds. */
export interface MmprojSpec {
  /** The language model's width (mm.0's and mm.2's outputs). */
  lmHidden: number;
  hidden?: number;
  ffn?: number;
  heads?: number;
  /** Layers stored (llama.cpp runs all but the last, or up to `featureLayers`). */
  layers?: number;
  imageSize?: number;
  patchSize?: number;
  /** CLIP's class token and pre-norm (default true); SigLIP's have neither. */
  clip?: boolean;
  postNorm?: boolean;
  /** clip.use_gelu (default false: quick GELU). */
  gelu?: boolean;
  /** The legacy converter's swapped ffn_up/ffn_down names. */
  legacyFfnNames?: boolean;
  featureLayers?: number[];
  projectorType?: string;
  /** Gemma 3's pooling square's side, Idefics3's shuffle's (clip.vision.projector.scale_factor; absent: the defaults, 4 and 3). */
  pooling?: number;
  /** The patch convolution in f16, as converters store it (default true). */
  f16Patch?: boolean;
  seed: number;
  omit?: string[];
  /** Metadata replaced or added. */
  extraMeta?: [string, GgufEntry][];
}

/** Writes a random projector file to `path`; returns the values of every tensor written, by name (as written: Gemma 3's projection [hidden, lmHidden]). */
export function writeMmproj(path: string, spec: MmprojSpec): Map<string, Float32Array> {
  const hidden = spec.hidden ?? 32, ffn = spec.ffn ?? 48, heads = spec.heads ?? 4, layers = spec.layers ?? 3;
  const imageSize = spec.imageSize ?? 28, patch = spec.patchSize ?? 14, clip = spec.clip ?? true;
  const rand = seededRandom(spec.seed);
  const tensors: HostTensor[] = [];
  const written = new Map<string, Float32Array>();
  const add = (name: string, shape: number[], scale: number, offset = 0, dtype: "f32" | "f16" = "f32") => {
    if (spec.omit?.includes(name)) return;
    const n = shape.reduce((a, b) => a * b, 1);
    const values = Float32Array.from({ length: n }, () => offset + (rand() * 2 - 1) * scale);
    written.set(name, values);
    tensors.push(hostTensorFromF32(name, shape, values, dtype));
  };
  const grid = imageSize / patch;
  add("v.patch_embd.weight", [hidden, 3, patch, patch], 0.1, 0, spec.f16Patch === false ? "f32" : "f16");
  add("v.patch_embd.bias", [hidden], 0.1);
  if (clip) add("v.class_embd", [hidden], 0.5);
  add("v.position_embd.weight", [grid * grid + (clip ? 1 : 0), hidden], 0.3);
  const norm = (p: string) => {
    add(`${p}.weight`, [hidden], 0.2, 1);
    add(`${p}.bias`, [hidden], 0.2);
  };
  if (clip) norm("v.pre_ln");
  for (let i = 0; i < layers; i++) {
    const p = `v.blk.${i}`;
    for (const m of ["attn_q", "attn_k", "attn_v", "attn_out"]) {
      add(`${p}.${m}.weight`, [hidden, hidden], 0.3);
      add(`${p}.${m}.bias`, [hidden], 0.1);
    }
    norm(`${p}.ln1`);
    norm(`${p}.ln2`);
    const [up, down] = spec.legacyFfnNames ? ["ffn_down", "ffn_up"] : ["ffn_up", "ffn_down"];
    add(`${p}.${up}.weight`, [ffn, hidden], 0.3);
    add(`${p}.${up}.bias`, [ffn], 0.1);
    add(`${p}.${down}.weight`, [hidden, ffn], 0.3);
    add(`${p}.${down}.bias`, [hidden], 0.1);
  }
  if (spec.postNorm) norm("v.post_ln");
  if (spec.projectorType === "idefics3") {
    add("mm.model.fc.weight", [spec.lmHidden, hidden * (spec.pooling ?? 3) ** 2], 0.2);
  } else if (spec.projectorType === "gemma3") {
    add("mm.soft_emb_norm.weight", [hidden], 0.2, 1);
    // Stored for x · W, as Gemma 3's checkpoint and llama.cpp's converter keep it.
    add("mm.input_projection.weight", [hidden, spec.lmHidden], 0.3);
  } else {
    add("mm.0.weight", [spec.lmHidden, hidden], 0.3);
    add("mm.0.bias", [spec.lmHidden], 0.1);
    add("mm.2.weight", [spec.lmHidden, spec.lmHidden], 0.3);
    add("mm.2.bias", [spec.lmHidden], 0.1);
  }
  const f32s = (xs: number[]) => gguf.arr(GgufType.FLOAT32, xs);
  const meta = new Map<string, GgufEntry>([
    ["general.architecture", gguf.str("clip")],
    ["clip.has_text_encoder", gguf.bool(false)],
    ["clip.has_vision_encoder", gguf.bool(true)],
    ["clip.has_llava_projector", gguf.bool(true)],
    ["clip.projector_type", gguf.str(spec.projectorType ?? "mlp")],
    ["clip.vision.image_size", gguf.u32(imageSize)],
    ["clip.vision.patch_size", gguf.u32(patch)],
    ["clip.vision.embedding_length", gguf.u32(hidden)],
    ["clip.vision.feed_forward_length", gguf.u32(ffn)],
    ["clip.vision.projection_dim", gguf.u32(spec.lmHidden)],
    ["clip.vision.attention.head_count", gguf.u32(heads)],
    ["clip.vision.attention.layer_norm_epsilon", gguf.f32(1e-5)],
    ["clip.vision.block_count", gguf.u32(layers)],
    ["clip.vision.image_mean", f32s([0.48145466, 0.4578275, 0.40821073])],
    ["clip.vision.image_std", f32s([0.26862954, 0.26130258, 0.27577711])],
    ["clip.use_gelu", gguf.bool(spec.gelu ?? false)],
  ]);
  if (spec.featureLayers) meta.set("clip.vision.feature_layer", gguf.arr(GgufType.INT32, spec.featureLayers));
  if (spec.pooling !== undefined) meta.set("clip.vision.projector.scale_factor", gguf.u32(spec.pooling));
  for (const [k, v] of spec.extraMeta ?? []) meta.set(k, v);
  writeFileSync(path, encodeGguf({ metadata: meta, tensors }));
  return written;
}

/** x [rows, d] · Wᵀ + b, W [out, d]. */
function linear(x: Float32Array, rows: number, w: HostTensor, b: HostTensor | undefined): Float32Array {
  const [out, d] = w.shape;
  const wv = hostValues(w), bv = b ? hostValues(b) : undefined;
  const y = new Float32Array(rows * out);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < out; o++) {
      let s = bv ? bv[o] : 0;
      for (let i = 0; i < d; i++) s += x[r * d + i] * wv[o * d + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

/** LayerNorm of each row: (x − mean) / √(var + eps) · w + b. */
function layerNorm(x: Float32Array, rows: number, n: { weight: HostTensor; bias: HostTensor }, eps: number): Float32Array {
  const w = hostValues(n.weight), b = hostValues(n.bias), d = w.length;
  const y = new Float32Array(x.length);
  for (let r = 0; r < rows; r++) {
    const row = x.subarray(r * d, (r + 1) * d);
    const mean = row.reduce((a, v) => a + v, 0) / d;
    const variance = row.reduce((a, v) => a + (v - mean) ** 2, 0) / d;
    for (let i = 0; i < d; i++) y[r * d + i] = ((row[i] - mean) / Math.sqrt(variance + eps)) * w[i] + b[i];
  }
  return y;
}

const gelu = (v: number) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
const quickGelu = (v: number) => v / (1 + Math.exp(-1.702 * v));

/**
 * The tower's embeddings of preprocessed pixels, [tokensPerImage, lmHidden], computed on the host in
 * f64 steps. Gemma 3's projection is taken as written (`written`, from {@link writeMmproj}: [hidden,
 * lmHidden] for x · W), not as the loader turned it.
 */
export function hostVision(model: VisionModel, pixels: Float32Array, written?: Map<string, Float32Array>): Float32Array {
  const c = model.config, w = model.weights;
  const grid = c.imageSize / c.patchSize, patches = grid * grid;
  const cls = w.classEmbedding !== undefined;
  const n = patches + (cls ? 1 : 0), d = c.hidden;
  const emb = linear(imagePatches(pixels, c.imageSize, c.patchSize), patches, w.patchEmbedding, w.patchBias);
  let x: Float32Array = new Float32Array(n * d);
  // The class token first, then the patches; each with its learned position.
  if (cls) x.set(hostValues(w.classEmbedding!), 0);
  x.set(emb, cls ? d : 0);
  const pos = hostValues(w.positionEmbedding);
  for (let i = 0; i < n * d; i++) x[i] += pos[i];
  if (w.preNorm) x = layerNorm(x, n, w.preNorm, c.eps);
  const heads = c.heads, hd = d / heads;
  for (const l of w.layers) {
    const h = layerNorm(x, n, l.norm1, c.eps);
    const q = linear(h, n, l.wq, l.bq), k = linear(h, n, l.wk, l.bk), v = linear(h, n, l.wv, l.bv);
    const att = new Float32Array(n * d);
    for (let hh = 0; hh < heads; hh++) {
      for (let i = 0; i < n; i++) {
        const scores = Array.from({ length: n }, (_, j) => {
          let s = 0;
          for (let t = 0; t < hd; t++) s += q[i * d + hh * hd + t] * k[j * d + hh * hd + t];
          return s / Math.sqrt(hd);
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let t = 0; t < hd; t++) att[i * d + hh * hd + t] = e.reduce((a, p, j) => a + (p / z) * v[j * d + hh * hd + t], 0);
      }
    }
    const o = linear(att, n, l.wo, l.bo);
    for (let i = 0; i < n * d; i++) x[i] += o[i];
    const h2 = layerNorm(x, n, l.norm2, c.eps);
    const up = linear(h2, n, l.wUp, l.bUp).map(c.activation === "gelu" ? gelu : quickGelu);
    const down = linear(up, n, l.wDown, l.bDown);
    for (let i = 0; i < n * d; i++) x[i] += down[i];
  }
  if (w.postNorm) x = layerNorm(x, n, w.postNorm, c.eps);
  const features = cls ? x.slice(d) : x;
  const p = w.projector;
  if (p.kind === "idefics3") {
    // transformers' pixel_shuffle written out: position (Y, X) takes patches (Y·s + dy, X·s + dx), dy then dx.
    const s = c.shuffle!, side = grid / s, wide = d * s * s;
    const shuffled = new Float32Array(side * side * wide);
    for (let Y = 0; Y < side; Y++) for (let X = 0; X < side; X++) {
      for (let dy = 0; dy < s; dy++) for (let dx = 0; dx < s; dx++) {
        const patch = (Y * s + dy) * grid + X * s + dx;
        shuffled.set(features.subarray(patch * d, (patch + 1) * d), (Y * side + X) * wide + (dy * s + dx) * d);
      }
    }
    return linear(shuffled, side * side, p.w, undefined);
  }
  if (p.kind === "gemma3") {
    // Average each k × k square of the g × g patch grid, RMS-norm with the weight, then x · W.
    const k = c.pooling!, side = grid / k, cells = side * side, lm = c.projectionDim;
    const pooled = new Float32Array(cells * d);
    for (let r = 0; r < cells; r++) {
      const [Y, X] = [Math.floor(r / side), r % side];
      for (let dy = 0; dy < k; dy++) for (let dx = 0; dx < k; dx++) {
        const patch = (Y * k + dy) * grid + X * k + dx;
        for (let i = 0; i < d; i++) pooled[r * d + i] += features[patch * d + i] / (k * k);
      }
    }
    const nw = hostValues(p.norm);
    const proj = written!.get("mm.input_projection.weight")!;
    const out = new Float32Array(cells * lm);
    for (let r = 0; r < cells; r++) {
      const row = pooled.subarray(r * d, (r + 1) * d);
      const rms = Math.sqrt(row.reduce((a, v) => a + v * v, 0) / d + c.eps);
      for (let o = 0; o < lm; o++) {
        let sum = 0;
        for (let i = 0; i < d; i++) sum += (row[i] / rms) * nw[i] * proj[i * lm + o];
        out[r * lm + o] = sum;
      }
    }
    return out;
  }
  const hidden = linear(features, patches, p.w0, p.b0).map(gelu);
  return linear(hidden, patches, p.w2, p.b2);
}

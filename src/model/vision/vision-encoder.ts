/**
 * The vision tower on a backend: an image's pixels → its embeddings [tokensPerImage, projectionDim],
 * the rows a prompt's image positions take instead of token embeddings (model/forward.ts
 * `inputRows`). Built from the ops every backend has, so it runs wherever the language model does:
 * LayerNorm is the backend's `layerNorm` where it has one (WebGPU, the reference), else a centring
 * matmul (x · (I − 1/d)) then RMS norm (the same arithmetic); the layers' norms' biases are folded
 * into the next projection's at upload either way. GELU is the backend's `gelu`, else geluMul(x, 1).
 * The encoder's bidirectional attention is paged attention over a scratch cache with every query at
 * the last position, so nothing is masked.
 */
import type { AttentionBatch, Backend, Tensor } from "../../backend/types.ts";
import { Scratch, scaled } from "../forward-layers.ts";
import type { HostTensor } from "../config.ts";
import { imagePatches } from "./image-preprocess.ts";
import { type Gemma3Projector, hostValues, type Idefics3Projector, type MlpProjector, type VisionConfig, type VisionModel, type VisionNorm } from "./mmproj.ts";

/**
 * A LayerNorm on the device: the weight, and its bias (absent where a projection took it): a vector
 * for the backend's layerNorm, or rows to add without it.
 */
interface DeviceNorm {
  weight: Tensor;
  bias?: Tensor;
  biasRows?: Tensor;
}

/** One encoder layer on the device; the first norm's bias is in bq/bk/bv, the second's in bUp. */
interface DeviceVisionLayer {
  norm1: DeviceNorm;
  wq: Tensor;
  bq: Tensor;
  wk: Tensor;
  bk: Tensor;
  wv: Tensor;
  bv: Tensor;
  wo: Tensor;
  bo: Tensor;
  norm2: DeviceNorm;
  wUp: Tensor;
  bUp: Tensor;
  wDown: Tensor;
  bDown: Tensor;
}

/** A vision tower uploaded to a backend ({@link uploadVision}); free it with {@link freeVision}. */
export interface DeviceVision {
  config: VisionConfig;
  /** Positions the encoder runs over: the patches, and the class token where there is one. */
  positions: number;
  hasClass: boolean;
  patchEmbedding: Tensor;
  patchBias?: Tensor;
  classRow?: Tensor;
  positionEmbedding: Tensor;
  /** I − 1/d [hidden, hidden]: x · it centres each row (a backend without layerNorm). */
  centring?: Tensor;
  preNorm?: DeviceNorm;
  layers: DeviceVisionLayer[];
  postNorm?: DeviceNorm;
  projector: MlpProjector<Tensor> | Gemma3Projector<Tensor> | Idefics3Projector<Tensor>;
  /** Ones [positions, ffn] (and for LLaVA's projector [tokens, projectionDim]): GELU is geluMul(x, 1) (a backend without gelu). */
  onesFfn?: Tensor;
  onesOut?: Tensor;
  /** Gemma 3's pooling: for each cell of the pooling square, the patch row each output position takes there. */
  poolRows?: Tensor[];
  /** Idefics3's pixel shuffle: the patch rows in the order their features sit side by side, each position's square together. */
  shuffleRows?: Tensor;
}

/** b + W · β: a projection's bias once the norm before it adds β (W [out, in]). */
function foldedBias(w: HostTensor, bias: HostTensor, normBias: HostTensor): Float32Array {
  const [out, inWidth] = w.shape;
  const wv = hostValues(w);
  const beta = hostValues(normBias);
  const b = hostValues(bias);
  const result = new Float32Array(out);
  for (let o = 0; o < out; o++) {
    let sum = b[o];
    for (let i = 0; i < inWidth; i++) sum += wv[o * inWidth + i] * beta[i];
    result[o] = sum;
  }
  return result;
}

/** Uploads a vision tower's weights (and the constants its forward uses) to `backend`. */
export function uploadVision(backend: Backend, model: VisionModel): DeviceVision {
  const c = model.config;
  const w = model.weights;
  const hasClass = w.classEmbedding !== undefined;
  const positions = (c.imageSize / c.patchSize) ** 2 + (hasClass ? 1 : 0);
  const vector = (t: HostTensor) => backend.upload(hostValues(t), [t.shape[0]]);
  const values = (v: Float32Array) => backend.upload(v, [v.length]);
  const matrix = (t: HostTensor) => backend.uploadWeight(t.data, t.shape, t.dtype);
  const rowsOf = (t: HostTensor, n: number) => {
    const v = hostValues(t);
    const out = new Float32Array(n * v.length);
    for (let r = 0; r < n; r++) out.set(v, r * v.length);
    return backend.upload(out, [n, v.length]);
  };
  const fused = backend.layerNorm !== undefined;
  const outerNorm = (n: VisionNorm<HostTensor>): DeviceNorm => ({ weight: vector(n.weight), ...(fused ? { bias: vector(n.bias) } : { biasRows: rowsOf(n.bias, positions) }) });
  const centring = () => {
    const m = new Float32Array(c.hidden * c.hidden).fill(-1 / c.hidden);
    for (let i = 0; i < c.hidden; i++) m[i * c.hidden + i] += 1;
    return backend.uploadWeight(new Uint8Array(m.buffer), [c.hidden, c.hidden], "f32");
  };
  const ones = (rows: number, cols: number) => backend.upload(new Float32Array(rows * cols).fill(1), [rows, cols]);
  return {
    config: c,
    positions,
    hasClass,
    patchEmbedding: matrix(w.patchEmbedding),
    ...(w.patchBias ? { patchBias: vector(w.patchBias) } : {}),
    ...(w.classEmbedding ? { classRow: backend.upload(hostValues(w.classEmbedding), [1, c.hidden]) } : {}),
    positionEmbedding: backend.upload(hostValues(w.positionEmbedding), [positions, c.hidden]),
    ...(fused ? {} : { centring: centring() }),
    ...(w.preNorm ? { preNorm: outerNorm(w.preNorm) } : {}),
    ...(w.postNorm ? { postNorm: outerNorm(w.postNorm) } : {}),
    layers: w.layers.map((l) => ({
      norm1: { weight: vector(l.norm1.weight) },
      wq: matrix(l.wq), bq: values(foldedBias(l.wq, l.bq, l.norm1.bias)),
      wk: matrix(l.wk), bk: values(foldedBias(l.wk, l.bk, l.norm1.bias)),
      wv: matrix(l.wv), bv: values(foldedBias(l.wv, l.bv, l.norm1.bias)),
      wo: matrix(l.wo), bo: vector(l.bo),
      norm2: { weight: vector(l.norm2.weight) },
      wUp: matrix(l.wUp), bUp: values(foldedBias(l.wUp, l.bUp, l.norm2.bias)),
      wDown: matrix(l.wDown), bDown: vector(l.bDown),
    })),
    projector: w.projector.kind === "mlp"
      ? { kind: "mlp", w0: matrix(w.projector.w0), b0: vector(w.projector.b0), w2: matrix(w.projector.w2), b2: vector(w.projector.b2) }
      : w.projector.kind === "gemma3"
      ? { kind: "gemma3", norm: vector(w.projector.norm), w: matrix(w.projector.w) }
      : { kind: "idefics3", w: matrix(w.projector.w) },
    ...(backend.gelu || c.activation !== "gelu" ? {} : { onesFfn: ones(positions, c.ffn) }),
    ...(w.projector.kind === "mlp" && !backend.gelu ? { onesOut: ones(c.tokensPerImage, c.projectionDim) } : {}),
    ...(c.pooling ? { poolRows: poolRows(backend, c.imageSize / c.patchSize, c.pooling) } : {}),
    ...(c.shuffle ? { shuffleRows: shuffleRows(backend, c.imageSize / c.patchSize, c.shuffle) } : {}),
  };
}

/**
 * Idefics3's pixel shuffle as a row order (transformers' `pixel_shuffle`): position (Y, X) of the
 * (g / s)² takes the s × s patches (Y·s + dy, X·s + dx) side by side, dy then dx, so its features
 * are rows t·s² … t·s² + s² − 1 of the gathered patches, read as one row of s² · hidden.
 */
function shuffleRows(backend: Backend, grid: number, s: number): Tensor {
  const side = grid / s;
  const rows = new Int32Array(grid * grid);
  for (let t = 0; t < side * side; t++) {
    const [Y, X] = [Math.floor(t / side), t % side];
    for (let dy = 0; dy < s; dy++) for (let dx = 0; dx < s; dx++) rows[t * s * s + dy * s + dx] = (Y * s + dy) * grid + X * s + dx;
  }
  return backend.upload(rows, [rows.length]);
}

/** For each (dy, dx) of a k × k pooling square, the patch of each pooled cell there (raster order both): g × g patches → (g / k)² cells. */
function poolRows(backend: Backend, grid: number, k: number): Tensor[] {
  const side = grid / k;
  const out: Tensor[] = [];
  for (let dy = 0; dy < k; dy++) {
    for (let dx = 0; dx < k; dx++) {
      const rows = Int32Array.from({ length: side * side }, (_, r) => (Math.floor(r / side) * k + dy) * grid + (r % side) * k + dx);
      out.push(backend.upload(rows, [rows.length]));
    }
  }
  return out;
}

/** Frees every tensor {@link uploadVision} made. */
export function freeVision(backend: Backend, v: DeviceVision): void {
  const norms = (n: DeviceNorm | undefined) => (n ? [n.weight, n.bias, n.biasRows] : []);
  const all = [
    v.patchEmbedding, v.patchBias, v.classRow, v.positionEmbedding, v.centring, ...norms(v.preNorm), ...norms(v.postNorm),
    ...v.layers.flatMap((l) => [...norms(l.norm1), l.wq, l.bq, l.wk, l.bk, l.wv, l.bv, l.wo, l.bo, ...norms(l.norm2), l.wUp, l.bUp, l.wDown, l.bDown]),
    ...(v.projector.kind === "mlp" ? [v.projector.w0, v.projector.b0, v.projector.w2, v.projector.b2] : v.projector.kind === "gemma3" ? [v.projector.norm, v.projector.w] : [v.projector.w]),
    v.onesFfn, v.onesOut, ...(v.poolRows ?? []), v.shuffleRows,
  ];
  for (const t of all) if (t) backend.free(t);
}

/**
 * Overwrites rows `rows` (i32 [m], distinct) of x f32 [n, d] with `values` f32 [m, d]. Mutates x.
 * It is the KV write with x viewed as a one-slot-a-block f32 cache serving keys and values both,
 * an op every backend has.
 */
export function writeRows(backend: Backend, x: Tensor, rows: Tensor, values: Tensor): void {
  const [n, d] = x.shape;
  const [m] = rows.shape;
  const cache = backend.reshape(x, [n, 1, 1, d]);
  const v = backend.reshape(values, [m, 1, d]);
  backend.kvWrite(v, v, cache, cache, rows);
}

/** LayerNorm of x [rows, hidden]: the backend's, or centred by a matmul and RMS-normed with the weight, the bias added where it is not folded. */
function layerNorm(backend: Backend, v: DeviceVision, x: Tensor, norm: DeviceNorm, s: Scratch): Tensor {
  if (backend.layerNorm) return backend.layerNorm(x, norm.weight, norm.bias, v.config.eps);
  const centred = s.keep(backend.matmul(x, v.centring!));
  const normed = backend.rmsnorm(centred, norm.weight, v.config.eps);
  if (!norm.biasRows) return normed;
  s.keep(normed);
  return backend.add(normed, norm.biasRows);
}

/** GELU (tanh form; the backend's, or geluMul with `ones` of x's shape) or quick GELU, x · σ(1.702x), of x [rows, width]. */
function activate(backend: Backend, x: Tensor, kind: VisionConfig["activation"], ones: Tensor | undefined, s: Scratch): Tensor {
  if (kind === "gelu") return backend.gelu ? backend.gelu(x) : backend.geluMul(x, ones!);
  if (!backend.sigmoidMul) throw new RangeError("This backend has no sigmoidMul, which quick GELU needs");
  return backend.sigmoidMul(s.keep(scaled(backend, x, 1.702)), x);
}

/** Bidirectional multi-head attention over all rows of q, k, v [positions, hidden]. */
function fullAttention(backend: Backend, v: DeviceVision, q: Tensor, k: Tensor, val: Tensor, s: Scratch): Tensor {
  const n = v.positions;
  const heads = v.config.heads;
  const headDim = v.config.hidden / heads;
  const blockSize = 16;
  const blocks = Math.ceil(n / blockSize);
  const kCache = s.keep(backend.zeros([blocks, blockSize, heads, headDim], "f32"));
  const vCache = s.keep(backend.zeros([blocks, blockSize, heads, headDim], "f32"));
  const slots = s.keep(backend.upload(Int32Array.from({ length: n }, (_, i) => i), [n]));
  backend.kvWrite(backend.reshape(k, [n, heads, headDim]), backend.reshape(val, [n, heads, headDim]), kCache, vCache, slots);
  // Every query at the last position sees every key: no mask.
  const batch: AttentionBatch = {
    tokenSeq: s.keep(backend.upload(new Int32Array(n), [n])),
    tokenPos: s.keep(backend.upload(new Int32Array(n).fill(n - 1), [n])),
    blockTables: s.keep(backend.upload(Int32Array.from({ length: blocks }, (_, i) => i), [1, blocks])),
    maxContext: n,
  };
  const out = backend.pagedAttention(backend.reshape(q, [n, heads, headDim]), kCache, vCache, batch, 1 / Math.sqrt(headDim));
  return backend.reshape(out, [n, v.config.hidden]);
}

/**
 * An image's embeddings: `pixels` (channels-first [3, size, size], preprocessed: image-preprocess.ts)
 * through the encoder and the projector → f32 [tokensPerImage, projectionDim], owned by the caller.
 */
export function encodeImage(backend: Backend, v: DeviceVision, pixels: Float32Array): Tensor {
  const c = v.config;
  const expected = 3 * c.imageSize * c.imageSize;
  if (pixels.length !== expected) throw new RangeError(`An image's pixels hold ${pixels.length} values; this vision tower takes ${expected} (3 × ${c.imageSize} × ${c.imageSize})`);
  const patches = imagePatches(pixels, c.imageSize, c.patchSize);
  const width = 3 * c.patchSize * c.patchSize;
  // The class token's row first (zeros, overwritten below), then the patches.
  const input = v.hasClass ? new Float32Array(v.positions * width) : patches;
  if (v.hasClass) input.set(patches, width);
  const s = new Scratch(backend);
  try {
    const embedded = s.keep(backend.matmul(s.keep(backend.upload(input, [v.positions, width])), v.patchEmbedding, v.patchBias));
    if (v.classRow) writeRows(backend, embedded, s.keep(backend.upload(new Int32Array(1), [1])), v.classRow);
    let x = backend.add(embedded, v.positionEmbedding);
    if (v.preNorm) x = layerNorm(backend, v, s.keep(x), v.preNorm, s);
    for (const l of v.layers) {
      const h = s.keep(layerNorm(backend, v, x, l.norm1, s));
      const q = s.keep(backend.matmul(h, l.wq, l.bq));
      const k = s.keep(backend.matmul(h, l.wk, l.bk));
      const val = s.keep(backend.matmul(h, l.wv, l.bv));
      const att = s.keep(fullAttention(backend, v, q, k, val, s));
      const afterAttn = s.keep(backend.add(s.keep(x), s.keep(backend.matmul(att, l.wo, l.bo))));
      const h2 = s.keep(layerNorm(backend, v, afterAttn, l.norm2, s));
      const up = s.keep(backend.matmul(h2, l.wUp, l.bUp));
      const act = s.keep(activate(backend, up, c.activation, v.onesFfn, s));
      x = backend.add(afterAttn, s.keep(backend.matmul(act, l.wDown, l.bDown)));
      // Each layer's temporaries go now: a tower of 24 layers would otherwise hold them all.
      s.release();
    }
    if (v.postNorm) x = layerNorm(backend, v, s.keep(x), v.postNorm, s);
    s.keep(x);
    const numPatches = (c.imageSize / c.patchSize) ** 2;
    const features = v.hasClass ? s.keep(backend.gatherRows(x, s.keep(backend.upload(Int32Array.from({ length: numPatches }, (_, i) => i + 1), [numPatches])))) : x;
    const p = v.projector;
    if (p.kind === "idefics3") {
      const shuffled = s.keep(backend.gatherRows(features, v.shuffleRows!));
      return backend.matmul(backend.reshape(shuffled, [c.tokensPerImage, c.hidden * c.shuffle! * c.shuffle!]), p.w);
    }
    if (p.kind === "gemma3") {
      // The average of each pooling square: its cells' rows gathered and summed, then scaled.
      let sum: Tensor | undefined;
      for (const rows of v.poolRows!) {
        const cell = s.keep(backend.gatherRows(features, rows));
        sum = sum ? s.keep(backend.add(sum, cell)) : cell;
      }
      const pooled = s.keep(scaled(backend, sum!, 1 / v.poolRows!.length));
      return backend.matmul(s.keep(backend.rmsnorm(pooled, p.norm, c.eps)), p.w);
    }
    const hidden = s.keep(backend.matmul(features, p.w0, p.b0));
    const act = s.keep(activate(backend, hidden, "gelu", v.onesOut, s));
    return backend.matmul(act, p.w2, p.b2);
  } finally {
    s.release();
  }
}

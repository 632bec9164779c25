/**
 * The one backend interface every implementation (reference, webgpu, cuda) provides.
 *
 * Conventions
 * - Ops *enqueue* work and return result tensors synchronously; only `download` is async. The
 *   reference backend computes eagerly; webgpu/cuda record into a command stream and submit on
 *   `download`/`flush`. Callers never depend on when work actually runs.
 * - Activations are f32. Weights may be f32, f16, bf16, q8_0 (GGUF block layout: per 32 values
 *   one f16 scale then 32 int8) or GGUF's other block formats as files hold them (q4_0, q4_1, q5_0,
 *   q5_1 per 32 values; the k-quants q2_k, q3_k, q4_k, q5_k, q6_k per 256; mxfp4, 32 FP4 values under one
 *   power-of-two scale: quant-blocks.ts). A block format's rows hold whole blocks. Index tensors are i32.
 * - Matrices are row-major. A weight matrix of shape [rows=out, cols=in] is applied as y = x·Wᵀ
 *   (GGUF and Hugging Face both store linear weights this way). A mixture-of-experts layer stacks
 *   its experts' matrices into one weight [experts, out, in] (GGUF's `ffn_*_exps` layout).
 * - Every op allocates a fresh output tensor; callers `free` what they no longer need. Inputs are
 *   never modified except by ops whose name says so (`kvWrite`).
 * - Shapes are checked; a mismatch throws a `BackendShapeError` that quotes the shapes.
 */

import type { BlockQuantDType } from "./quant-blocks.ts";

/** Weight element types a matmul/embedding accepts. */
export type WeightDType = "f32" | "f16" | "bf16" | "q8_0" | BlockQuantDType;

/** Element types a tensor can hold. */
export type DType = WeightDType | "i32";

/**
 * Element types of a paged KV cache. f16 halves its memory (the default of vLLM, SGLang and
 * llama.cpp for 16-bit models): `kvWrite` rounds the f32 keys and values it is given to f16, and
 * `pagedAttention` widens them back to f32 as it reads. f8_e4m3 (vLLM's `--kv-cache-dtype fp8`)
 * holds each cache row as blocks of 32 E4M3 codes under a power-of-two f32 scale, 9 bits a value
 * (the weight dtype's layout, quant-blocks-fp8.ts): `kvWrite` encodes each block as it writes; the
 * head dimension must be a multiple of 32, so a head's values are whole blocks.
 * {@link BackendInfo.kvDtypes} says which a backend takes.
 */
export type KvDType = "f32" | "f16" | "f8_e4m3";

/** Every weight dtype, for checks and listings. */
export const WEIGHT_DTYPES: readonly WeightDType[] = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m",
  "f8_e4m3",
];

/** An opaque device tensor. Its storage belongs to the backend that made it. */
export interface Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  /** Name of the backend that owns it ("reference", "webgpu", "cuda"). */
  readonly backend: string;
}

/** Rotary embedding layouts: "normal" rotates pairs (2i, 2i+1) (Llama GGUF, llama.cpp
 * LLAMA_ROPE_TYPE_NORM); "neox" rotates pairs (i, i + d/2) (Qwen, HF Llama safetensors). */
export type RopeLayout = "normal" | "neox";

/** The gate's activation of a gated feed-forward (Backend.matmulGlu): SwiGLU's or GeGLU's. */
export type GluActivation = "silu" | "gelu";

/** A rotary embedding's parameters, as {@link Backend.rope} takes them (for {@link Backend.rotateAndWriteKv}). */
export interface RopeSpec {
  theta: number;
  layout: RopeLayout;
  /** Dims rotated (default the head dimension). */
  rotaryDim?: number;
  /** f32 [rotaryDim / 2]: divides each pair's frequency. */
  freqFactors?: Tensor;
}

/** Per-row sampling parameters. `uniform` is a random number in [0, 1) drawn on the CPU from a
 * seeded generator, so every backend samples the same token for the same inputs. */
export interface SamplingRow {
  temperature: number; // 0 = greedy
  topK: number; // 0 = disabled
  topP: number; // 1 = disabled
  uniform: number;
  /**
   * min-p (vLLM's `min_p`): tokens whose probability is below minP × the largest are dropped, before
   * top-k and top-p; 0 or absent = disabled. Dropped means exp((logit − max) / T) < minP.
   */
  minP?: number;
}

/** Rejects a sampling row the samplers cannot follow, quoting the value (every backend's check). */
export function checkSamplingRow(row: SamplingRow, r: number): void {
  const bad = (field: string, value: number) => new BackendShapeError(`Sampling row ${r} has an invalid ${field} ${value}`);
  if (!(row.temperature >= 0) || !Number.isFinite(row.temperature)) throw bad("temperature", row.temperature);
  if (!Number.isInteger(row.topK) || row.topK < 0) throw bad("topK", row.topK);
  if (!(row.topP > 0 && row.topP <= 1)) throw bad("topP", row.topP);
  if (!(row.uniform >= 0 && row.uniform < 1)) throw bad("uniform", row.uniform);
  if (row.minP !== undefined && !(row.minP >= 0 && row.minP <= 1)) throw bad("minP", row.minP);
}

/**
 * The smallest temperature that samples; below it every backend takes the argmax. 1/T must stay
 * finite in the device samplers' f32 arithmetic, and logits / T must not overflow it either
 * (kernels-cuda/sample.cu scales the logits before subtracting their maximum): 2^-100 keeps
 * |logit| · 1/T finite for logits up to 2^27. At such a temperature softmax(logits / T) puts all
 * its mass on the largest logit anyway (unless two logits differ by less than ~10^-28).
 */
export const MIN_SAMPLING_TEMPERATURE = 2 ** -100;

/** The temperature a backend samples with: `temperature`, or 0 (argmax) when it is below {@link MIN_SAMPLING_TEMPERATURE}. */
export function effectiveTemperature(temperature: number): number {
  return temperature < MIN_SAMPLING_TEMPERATURE ? 0 : temperature;
}

/**
 * Metadata for paged attention over a ragged batch. Query row `t` belongs to sequence
 * `tokenSeq[t]` at absolute position `tokenPos[t]`; it attends to that sequence's cached keys at
 * positions 0..tokenPos[t] inclusive (causal). Keys of position p live in block
 * `blockTables[seq * maxBlocksPerSeq + floor(p / blockSize)]`, slot `p % blockSize`.
 * The KV of the new tokens must already be written (`kvWrite`) before `pagedAttention` runs.
 * This one formulation covers prefill chunks over a cached prefix and decode alike.
 */
export interface AttentionBatch {
  /** i32 [numTokens] */
  tokenSeq: Tensor;
  /** i32 [numTokens] */
  tokenPos: Tensor;
  /** i32 [numSeqs, maxBlocksPerSeq]; unused entries may hold any value. */
  blockTables: Tensor;
  /** Longest context (tokenPos+1) of any row: lets kernels bound their loops. */
  maxContext: number;
}

/**
 * What some models add to {@link Backend.pagedAttention}. Both are off when absent.
 * - `window`: a sliding window of that many positions: the query at position p attends to keys at
 *   max(0, p - window + 1)..p only (llama.cpp's standard SWA; GPT-OSS's 128 on every other layer).
 *   Blocks wholly before every row's window are never read, so their table entries may be stale.
 * - `sinks`: f32 [heads], one logit per query head that joins its softmax's denominator and
 *   carries no value (GPT-OSS's learned attention sinks), so a head may attend to little. It is not
 *   multiplied by `scale`.
 * - `softcap`: each scaled score s becomes softcap · tanh(s / softcap) before the softmax (Gemma 2's
 *   `attn_logit_softcapping`, 50); a positive number.
 */
export interface AttentionOptions {
  window?: number;
  sinks?: Tensor;
  softcap?: number;
}

/**
 * The sequences of a step whose layers carry recurrent state (Gated DeltaNet: Qwen3.5, Qwen3-Next).
 * Each sequence's rows are contiguous in the step's flat batch and in position order; its state lives
 * in one slot of each recurrent layer's state tensors.
 */
export interface RecurrentBatch {
  /**
   * i32 [numSeqs, 4], per sequence: its first row, its row count (at least 1), its state slot, and 1
   * where it starts from a zero state (its first tokens: the slot's old contents are ignored), else 0.
   */
  seqs: Tensor;
  numSeqs: number;
}

/** A Mamba-2 layer's geometry ({@link Backend.ssmScan}). */
export interface SsmSpec {
  heads: number;
  headDim: number;
  stateDim: number;
  /** Groups of heads sharing one B and C (heads is a multiple of it). */
  groups: number;
}

/** A Gated DeltaNet layer's geometry ({@link Backend.gatedDeltaNet}). */
export interface DeltaNetSpec {
  numKHeads: number;
  numVHeads: number;
  headKDim: number;
  headVDim: number;
  /**
   * Which key head value head h reads (numVHeads is a multiple of numKHeads): "tiled", h mod
   * numKHeads (llama.cpp's GGUF order, whose converter permutes the value heads), or "grouped",
   * floor(h / (numVHeads / numKHeads)) (Hugging Face's).
   */
  vHeadOrder: "tiled" | "grouped";
  /** The L2 norm's floor: q and k are divided by max(‖x‖, eps) (ggml's `l2_norm`). */
  eps: number;
}

/** Geometry of one layer's paged KV cache: tensor shape [numBlocks, blockSize, kvHeads, headDim]. */
export interface KvGeometry {
  numBlocks: number;
  blockSize: number;
  kvHeads: number;
  headDim: number;
}

/** Facts a backend reports about itself (for `--backend auto` and for benchmarks). */
export interface BackendInfo {
  name: string;
  /** Human-readable device description, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)". */
  device: string;
  /** Whether `f16` storage is supported natively (shader-f16 on WebGPU). */
  f16: boolean;
  /** The KV cache dtypes `kvWrite` and `pagedAttention` take; absent means f32 only. */
  kvDtypes?: readonly KvDType[];
  /** True when GGUF's block formats other than q8_0 are kept as their f16 dequantization (bf16 for
   * an mxfp4 weight past f16's range; `denseBlockQuantStorage()` is the rule), not natively: each
   * such weight is rounded once more, and `download` returns the rounded values. */
  denseBlockQuants?: boolean;
  /** The largest head dimension `pagedAttention` takes; undefined for any. */
  maxHeadDim?: number;
  /**
   * True where a kernel is made ready at its first use, per variant (WebGPU compiles a pipeline for
   * each shape class and option set; CUDA loads a kernel's module at its first launch): an engine's
   * warm-up then runs every shape serving uses (engine-warmup.ts). Absent: nothing to warm.
   */
  preparesKernelsLazily?: boolean;
  /** Peak figures for reports, when known (undefined on software devices). */
  peakGflops?: number;
  peakGBps?: number;
}

/** The backend interface. */
export interface Backend {
  readonly info: BackendInfo;

  // --- memory -------------------------------------------------------------------------------
  /** Uploads f32 or i32 data. */
  upload(data: Float32Array | Int32Array, shape: readonly number[]): Tensor;
  /** Uploads a weight from its raw little-endian bytes in `dtype`'s GGUF/safetensors layout. */
  uploadWeight(raw: Uint8Array, shape: readonly number[], dtype: WeightDType): Tensor;
  /** Allocates a tensor filled with zeros: f32 or i32, or f16 or f8_e4m3 (a KV cache) where `info.kvDtypes` has it. */
  zeros(shape: readonly number[], dtype: "i32" | KvDType): Tensor;
  /** Reads a tensor back (f32 → Float32Array, i32 → Int32Array; weights are dequantized to f32). */
  download(t: Tensor): Promise<Float32Array | Int32Array>;
  /** Same storage, new shape with the same element count (no copy). */
  reshape(t: Tensor, shape: readonly number[]): Tensor;
  /** Releases a tensor's storage (a reshaped view shares it: free only one of them). */
  free(t: Tensor): void;
  /** Submits queued work and waits for it (benchmarks; not needed for correctness). */
  flush(): Promise<void>;
  /** Releases everything the backend holds. */
  destroy(): void;

  // --- ops ----------------------------------------------------------------------------------
  /** out[i, :] = table[ids[i], :] as f32. table [vocab, dim] (any weight dtype), ids i32 [n]. */
  embedding(table: Tensor, ids: Tensor): Tensor;
  /**
   * Row-wise RMS norm over the last dim: x / sqrt(mean(x²) + eps) * weight. x f32 [..., d], weight f32
   * [d], or [g, d] where row r takes weight row r mod g (a grouped norm: Mamba-2's with several groups
   * views each token's width as g rows of d).
   */
  rmsnorm(x: Tensor, weight: Tensor, eps: number): Tensor;
  /** y [n, out] = x [n, in] · Wᵀ, W [out, in] of any weight dtype; optional f32 bias [out]. */
  matmul(x: Tensor, w: Tensor, bias?: Tensor): Tensor;
  /**
   * Optional: {@link matmul} with a residual added as it is written, x · Wᵀ (+ bias) + residual,
   * residual f32 [n, out] (a decoder layer's skip connection: one dispatch instead of two). Without
   * it the forward adds the residual with {@link add}.
   */
  matmulAdd?(x: Tensor, w: Tensor, residual: Tensor, bias?: Tensor): Tensor;
  /**
   * Optional: a gated feed-forward's first half in one pass, act(x · Gᵀ) ⊙ (x · Uᵀ) → [n, out], with
   * `activation` "silu" ({@link siluMul}) or "gelu" ({@link geluMul}); G and U of one dtype and shape
   * [out, in]. Without it the forward runs two matmuls and the gated product.
   */
  matmulGlu?(x: Tensor, wGate: Tensor, wUp: Tensor, activation: GluActivation): Tensor;
  /**
   * Optional: three matmuls of one input, [x · Wqᵀ, x · Wkᵀ, x · Wvᵀ] (an attention layer's q, k and
   * v projections), the weights of one dtype and input width. Without it the forward runs three.
   */
  matmulQkv?(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor): [Tensor, Tensor, Tensor];
  /**
   * Optional: the routed experts' gated feed-forward first half in one pass, act(x · G[e]ᵀ) ⊙
   * (x · U[e]ᵀ) per routed row ({@link matmulExperts}'s rows and ids), G and U stacked expert weights
   * of one dtype and shape. Without it the forward runs two expert matmuls and the gated product.
   */
  matmulExpertsGlu?(x: Tensor, wGate: Tensor, wUp: Tensor, ids: Tensor, activation: GluActivation): Tensor;
  /** Rotary embedding on x f32 [n, heads, headDim] with positions i32 [n]; rotates the first
   * `rotaryDim` (default headDim) dims with frequencies theta^(-2i/rotaryDim).
   * `freqFactors` f32 [rotaryDim/2] (llama.cpp's `rope_freqs`, Llama 3.1+ frequency scaling) divides
   * pair i's frequency: angle = pos · theta^(-2i/rotaryDim) / freqFactors[i]. `magnitude` (default 1)
   * multiplies each rotated pair, cos and sin alike, and leaves the dims past `rotaryDim` as they are
   * (llama.cpp's `attn_factor`, transformers' `attention_factor`: LongRoPE's). theta and magnitude must
   * be finite and positive (shape-checks.ts `expectRopeArgs`, every backend's check). */
  rope(x: Tensor, positions: Tensor, theta: number, layout: RopeLayout, rotaryDim?: number, freqFactors?: Tensor, magnitude?: number): Tensor;
  /**
   * Optional: rope(q) and rope(k) with `spec`, then kvWrite of the rotated k and v, in one pass: q
   * f32 [n, heads, headDim] is rotated in place (it must be no other op's input afterwards but the
   * caller's); k is left as it is, its rotation written to the cache. Separate key and value caches
   * only. Without it the forward calls rope twice and kvWrite.
   */
  rotateAndWriteKv?(q: Tensor, k: Tensor, v: Tensor, positions: Tensor, spec: RopeSpec, kCache: Tensor, vCache: Tensor, slots: Tensor): void;
  /** Writes k, v f32 [n, kvHeads, headDim] into the caches [numBlocks, blockSize, kvHeads, headDim]
   * at flat slots i32 [n] (slot = block * blockSize + offset). Mutates the caches. The caches share
   * one dtype ({@link KvDType}; f16 rounds to nearest even as ggml's f32 → f16 copy: from ±65520 on
   * a value is ±inf, NaN stays NaN). A slot outside the cache is a RangeError naming it, before
   * anything is written, wherever the slots' values are on the host (an `upload`ed tensor, on every
   * backend); a device kernel skips it in an op's result. One cache may serve as both (`vCache` is
   * `kCache`, multi-head latent attention, whose value is part of its key): then `v` must be `k`,
   * and it is written once. */
  kvWrite(k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor): void;
  /** Paged causal attention. q f32 [n, heads, headDim] → f32 [n, heads, headDim]. Query head h uses
   * KV head floor(h / (heads / kvHeads)) (GQA). The caches are f32 or f16 alike, and may be one
   * tensor (see `kvWrite`). Scores are scaled by `scale` (usually 1/√headDim);
   * `options` adds a sliding window and attention sinks ({@link AttentionOptions}). A row's sequence,
   * position or a block id it reads that is out of range is a RangeError naming it, on every backend,
   * wherever the batch's tensors were `upload`ed (the engine's are: model/forward-batch.ts). */
  pagedAttention(q: Tensor, kCache: Tensor, vCache: Tensor, batch: AttentionBatch, scale: number, options?: AttentionOptions): Tensor;
  /** silu(gate) * up, elementwise, f32. */
  siluMul(gate: Tensor, up: Tensor): Tensor;
  /**
   * gelu(gate) * up, elementwise, f32, with GELU's tanh approximation (ggml's `gelu`, PyTorch's
   * `gelu(approximate="tanh")`): 0.5 · g · (1 + tanh(√(2/π) · (g + 0.044715 · g³))) (Gemma's GeGLU).
   */
  geluMul(gate: Tensor, up: Tensor): Tensor;
  /**
   * GPT-OSS's clamped SwiGLU, elementwise, f32: with g = min(gate, limit) and u = clamp(up, -limit,
   * limit), g · sigmoid(alpha · g) · (u + 1) (ggml's `swiglu_oai`).
   */
  swigluOai(gate: Tensor, up: Tensor, alpha: number, limit: number): Tensor;
  /** Optional: sigmoid(gate) * x, elementwise, f32, same shape (Qwen3.5's gated attention output). */
  sigmoidMul?(gate: Tensor, x: Tensor): Tensor;
  /** Optional: max(x, 0)², elementwise, f32 (Nemotron-H's feed-forward activation, ggml's `relu` then `sqr`). */
  reluSquared?(x: Tensor): Tensor;
  /**
   * Optional: row-wise LayerNorm over the last dim, (x − mean) / sqrt(var + eps) · weight (+ bias),
   * the variance the mean square about the mean; x f32 [..., d], weight and bias f32 [d] (a vision
   * tower's norms). Without it the tower centres rows with a matmul and takes {@link rmsnorm}.
   */
  layerNorm?(x: Tensor, weight: Tensor, bias: Tensor | undefined, eps: number): Tensor;
  /** Optional: GELU, tanh approximation, elementwise, f32 ({@link geluMul}'s gelu without the product). */
  gelu?(x: Tensor): Tensor;
  /**
   * Optional: a depthwise causal convolution with SiLU over each sequence's rows, carrying the last
   * inputs across steps. x f32 [n, channels], weight f32 [channels, K], state f32 [slots, K - 1,
   * channels] → f32 [n, channels]: y[t, c] = silu(Σ_j weight[c, j] · u[t - (K - 1) + j, c] + bias[c]),
   * where u is the sequence's inputs preceded by its slot's state (zeros for a fresh sequence) and
   * bias f32 [channels] is optional (Mamba-2's; 0 without). The slot then holds the sequence's last
   * K - 1 inputs (older state where it has fewer rows). A slot outside 0..slots-1 or a row range
   * outside x is a RangeError naming it, before anything is written.
   */
  causalConv1d?(x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, bias?: Tensor): Tensor;
  /**
   * Optional: LFM2's gated short convolution. bcx f32 [n, 3·channels] holds each row's B, C and x
   * (in that order); the depthwise causal convolution, with no activation, runs over B ⊙ x, carrying
   * each sequence's last K - 1 of them in its slot: y[t, c] = C[t, c] · Σ_j weight[c, j] ·
   * u[t - (K - 1) + j, c] with u = B ⊙ x preceded by the slot's state (zeros for a fresh sequence) →
   * f32 [n, channels]. weight [channels, K], state [slots, K - 1, channels]. Range errors as
   * {@link causalConv1d}.
   */
  shortConv?(bcx: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch): Tensor;
  /**
   * Optional: the gated delta rule over each sequence's rows, its state carried across steps. x f32
   * [n, 2·numKHeads·headKDim + numVHeads·headVDim] holds each row's q, k and v (a causal
   * convolution's output); alpha and beta f32 [n, numVHeads]; decay f32 [numVHeads] (−exp(A_log), the
   * negative rate) and dtBias f32 [numVHeads]; state f32 [slots, numVHeads, headKDim, headVDim].
   * Per row and value head h (key head by `spec.vHeadOrder`): q and k L2-normed, q scaled by
   * 1/√headKDim; g = decay[h] · softplus(alpha + dtBias[h]); S ← S · exp(g); u = (v − Sᵀk) ·
   * sigmoid(beta); S ← S + k uᵀ; out = Sᵀq → f32 [n, numVHeads · headVDim]. A fresh sequence's S
   * starts at zero; the slot then holds the last S. Range errors as {@link causalConv1d}.
   */
  gatedDeltaNet?(x: Tensor, alpha: Tensor, beta: Tensor, decay: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: DeltaNetSpec): Tensor;
  /**
   * Optional: Mamba-2's selective state-space scan over each sequence's rows, its state carried
   * across steps. xbc f32 [n, heads·headDim + 2·groups·stateDim] holds each row's x, B and C (a
   * causal convolution's output); dt f32 [n, heads]; a (the negative rate, −exp(A_log)), d and dtBias
   * f32 [heads]; state f32 [slots, heads, headDim, stateDim]. Per row and head h (group g = h /
   * (heads / groups)): δ = softplus(dt + dtBias[h]); S ← S · exp(δ · a[h]) + δ · x_h B_gᵀ; out_h =
   * S C_g + d[h] · x_h → f32 [n, heads · headDim]. A fresh sequence's S starts at zero; the slot then
   * holds the last S. Range errors as {@link causalConv1d}.
   */
  ssmScan?(xbc: Tensor, dt: Tensor, a: Tensor, d: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: SsmSpec): Tensor;
  /** cap · tanh(x / cap), elementwise, f32, for a positive finite cap (Gemma 2's final logit soft-capping). */
  softcap(x: Tensor, cap: number): Tensor;
  /** a + b, elementwise, f32, same shape. */
  add(a: Tensor, b: Tensor): Tensor;
  /** Row-wise softmax over the last dim, f32. */
  softmax(x: Tensor): Tensor;
  /** Row-wise argmax over the last dim → i32 [rows] (lowest index wins ties). NaN is never the max
   * (a row of NaN only gives 0); a row of -inf gives 0 by the tie rule. */
  argmax(x: Tensor): Tensor;
  /** Row-wise sampling from logits f32 [rows, vocab] → i32 [rows]; one SamplingRow per row.
   * temperature 0 (or below {@link MIN_SAMPLING_TEMPERATURE}) means argmax. Otherwise: softmax(logits / T), drop tokens below minP × the largest, keep the top-k, then the smallest
   * prefix (by descending probability, ties by lower index) whose mass ≥ top-p, renormalise, and
   * pick the first token whose cumulative probability exceeds uniform · total. NaN logits count as
   * -inf (no probability); a row without a finite largest logit (every token -inf or NaN, or a +inf)
   * gives its argmax, as greedy does: 0 for a row whose every token is -inf. (A row barred whole by
   * {@link maskLogits} holds finite {@link MASKED_LOGIT}s and samples among them: the engine never
   * bars a whole row, output-constraint.ts allows EOS at a grammar's dead end.) */
  sample(logits: Tensor, rows: readonly SamplingRow[]): Tensor;
  /** out[i, :] = x[idx[i], :]. x f32 [n, d], idx i32 [m] → [m, d]. */
  gatherRows(x: Tensor, idx: Tensor): Tensor;
  /**
   * Optional: rows `idx` of an f16 table x [n, d] (d even) downloaded as IEEE half bits [m · d], at
   * two bytes a value (host copies of an f16 KV cache; without it they download f32 and pack).
   */
  downloadHalfRows?(x: Tensor, idx: Tensor): Promise<Uint16Array>;
  /**
   * Optional: writes IEEE half bits [m · d] into rows `idx` (distinct) of an f16 table x [n, d] (d
   * even), uploaded at two bytes a value (the way back of {@link downloadHalfRows}). Mutates x.
   */
  writeHalfRows?(x: Tensor, idx: Tensor, bits: Uint16Array): void;
  /** Columns start..start+width-1 of the last dim: x f32 [..., d] → [..., width] (a copy). */
  sliceColumns(x: Tensor, start: number, width: number): Tensor;
  /** a f32 [..., da] and b f32 [..., db] side by side along the last dim → [..., da + db]; the leading dims must match. */
  concatColumns(a: Tensor, b: Tensor): Tensor;
  /**
   * x.flat[index[i]] += values[i] for each i (logit biases and penalties before sampling). x f32 of
   * any shape, index i32 [m] of distinct flat offsets inside x, values f32 [m]. Mutates x.
   */
  scatterAdd(x: Tensor, index: Tensor, values: Tensor): void;
  /**
   * Bars tokens (output grammars): logits[rows[k], v] = {@link MASKED_LOGIT} wherever bit v of mask
   * row k is 0 (word v >> 5, bit v & 31). logits f32 [n, vocab]; rows i32 [m] of distinct rows of
   * logits; bits i32 [m, ceil(vocab / 32)]. Mutates logits. A vocabulary-sized mask costs vocab / 8
   * bytes to upload where a scatter of the barred tokens costs 8 per token.
   */
  maskLogits(logits: Tensor, rows: Tensor, bits: Tensor): void;
  /**
   * Repetition penalty (HF's and vLLM's `repetition_penalty`): wherever bit v of row k is 1 (the
   * tokens a request's prompt and output hold), logits[rows[k], v] is divided by factors[k] if it is
   * positive and multiplied by it if not. Shapes as {@link maskLogits}; factors f32 [m], each > 0.
   * Mutates logits.
   */
  penalizeRepeats(logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor): void;
  /**
   * Optional (multi-step decoding with penalties): the penalties of the tokens a request sampled on
   * the device since the host last counted its tokens. First history[k, count - 1] = sampled[rows[k]]
   * (the ids the step before sampled, one per logits row), then for each distinct token t of
   * history[k, 0..count-1] (ids outside the vocabulary skipped), with c its occurrences there, on
   * logits row rows[k]: where bit t of `seen` row k is 0 (not among the prompt and output tokens
   * the host counted) the repetition penalty params[k, 0] as {@link penalizeRepeats} applies it;
   * then params[k, 2] · c is subtracted (frequency), and params[k, 1] too where bit t of `present`
   * row k is 0 (presence: not in the output the host counted). Goes after `penalizeRepeats` with the
   * host's mask and before the host's additions (the scaling precedes them, as in one step).
   * logits f32 [n, vocab]; rows i32 [m] distinct; sampled i32 [n]; history i32 [m, h] with
   * 1 ≤ count ≤ h; seen, present i32 [m, ceil(vocab / 32)]; params f32 [m, 3], factors > 0.
   * Mutates logits and history.
   */
  penalizeSampled?(logits: Tensor, rows: Tensor, sampled: Tensor, history: Tensor, count: number, seen: Tensor, present: Tensor, params: Tensor): void;

  // --- mixture of experts -------------------------------------------------------------------
  /**
   * Expert routing: per row of router logits f32 [n, experts], the `k` experts with the highest
   * selection scores (descending; ties to the lower index) → `ids` i32 [n, k] and `weights` f32
   * [n, k]. Each expert's probability is its softmax over the row (Mixtral, Qwen) or the sigmoid of
   * its logit (GLM-4.5, DeepSeek V3), per `options.gating`. Its selection score is its logit, or
   * with `options.selectionBias` its probability plus its bias (llama.cpp's `exp_probs_b`). Weights
   * are the chosen probabilities (never biased), divided by their sum (at least {@link MIN_ROUTE_SHARE})
   * when `options.normalize` (llama.cpp's `norm_w`), then multiplied by `options.scale`. With
   * `options.groups` experts are chosen within the best groups only. 1 ≤ k ≤ experts.
   */
  moeRoute(logits: Tensor, k: number, options: MoeRouteOptions): MoeRouting;
  /**
   * Expert matmul (llama.cpp's mul_mat_id): w [experts, out, in] of any weight dtype, ids i32 [n, k];
   * y f32 [n·k, out] with row t·k+j = x[r] · W[ids[t, j]]ᵀ, where r = t when x has n rows (a token's
   * input to each of its experts) and r = t·k+j when it has n·k rows (each expert's own input).
   * An id outside 0..experts-1 is the caller's bug: the reference throws, device backends clamp.
   */
  matmulExperts(x: Tensor, w: Tensor, ids: Tensor): Tensor;
  /** Weighted sum of each token's expert outputs: out [n, d] = Σ_j weights[t, j] · y[t·k+j, :]; y f32 [n·k, d], weights f32 [n, k]. */
  moeCombine(y: Tensor, weights: Tensor): Tensor;
}

/** How {@link Backend.moeRoute} turns router logits into expert probabilities. */
export type MoeGating = "softmax" | "sigmoid";

/**
 * The least share {@link Backend.moeRoute} renormalises by: the smallest normal f16, where llama.cpp
 * clamps the chosen weights' sum, so a token whose chosen sigmoids all vanish gets tiny weights, not NaN.
 */
export const MIN_ROUTE_SHARE = 6.103515625e-5;

/** Options of {@link Backend.moeRoute}. */
export interface MoeRouteOptions {
  /** Rescale the chosen experts' weights to sum to 1 (Mixtral, Qwen3-MoE, GLM-4.5). */
  normalize: boolean;
  /** Softmax over the experts (default) or each expert's own sigmoid. */
  gating?: MoeGating;
  /**
   * f32 [experts], added to the probabilities to choose the experts and nowhere else (DeepSeek V3's
   * and GLM-4.5's `e_score_correction_bias`).
   */
  selectionBias?: Tensor;
  /** Multiplies the weights after any normalising (`routed_scaling_factor`); default 1. */
  scale?: number;
  /**
   * Grouped top-k (DeepSeek V3's `n_group` / `topk_group`, llama.cpp's expert groups): the experts
   * split into `count` consecutive groups of at least 2, each scored by the sum of its two highest
   * selection scores; experts are chosen only from the `used` best groups (ties to the lower group).
   * Selection scores are then probabilities (plus any bias), never logits. k ≤ used · groupSize.
   */
  groups?: ExpertGroups;
}

/** {@link MoeRouteOptions.groups}. */
export interface ExpertGroups {
  count: number;
  used: number;
}

/** The most expert groups {@link Backend.moeRoute} takes (a row's chosen groups are one 32-bit mask). */
export const MAX_EXPERT_GROUPS = 32;

/** The result of {@link Backend.moeRoute}; the caller frees both tensors. */
export interface MoeRouting {
  /** i32 [n, k] */
  ids: Tensor;
  /** f32 [n, k] */
  weights: Tensor;
}

/** The logit a barred token gets ({@link Backend.maskLogits}): finite, and never sampled while any token is not barred. */
export const MASKED_LOGIT = -1e30;

/** Thrown when tensor shapes or dtypes do not fit an op; the message quotes them. */
export class BackendShapeError extends Error {
  override name = "BackendShapeError";
}

/** Thrown when a backend cannot be created on this machine (no adapter, no CUDA device). */
export class BackendUnavailableError extends Error {
  override name = "BackendUnavailableError";
}

/** Number of elements of a shape. */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

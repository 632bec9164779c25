/**
 * Model description shared by the loaders (GGUF, safetensors) and the forward pass.
 * Loaders translate their file's names into these; the forward knows nothing of file formats.
 */
import type { RopeLayout, WeightDType } from "../backend/types.ts";

/** Architectures the forward supports ("llama" includes Mixtral: a llama with {@link MoeConfig experts}). */
export type Architecture = "llama" | "qwen2" | "qwen3" | "qwen3moe";

/**
 * A mixture-of-experts feed-forward (Mixtral, Qwen3-MoE): a router picks `numExpertsUsed` of
 * `numExperts` SwiGLU experts per token and sums their outputs weighted by its softmax
 * probabilities. Every layer is an MoE layer when a config has one.
 */
export interface MoeConfig {
  numExperts: number;
  numExpertsUsed: number;
  /** Rescale the chosen experts' probabilities to sum to 1 (Mixtral and Qwen3-MoE do; llama.cpp's `norm_w`). */
  normalizeTopK: boolean;
}

/** Hyper-parameters of a decoder-only transformer of the Llama/Qwen families. */
export interface ModelConfig {
  architecture: Architecture;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** The feed-forward width; with `moe`, each expert's. */
  intermediateSize: number;
  /** Present for mixture-of-experts models. */
  moe?: MoeConfig;
  rmsNormEps: number;
  ropeTheta: number;
  ropeLayout: RopeLayout;
  /** Per-pair RoPE frequency divisors, length headDim/2 (Llama 3.1+ "llama3" scaling; llama.cpp's
   * `rope_freqs.weight`): pair i turns at pos · ropeTheta^(-2i/headDim) / ropeFreqFactors[i]. */
  ropeFreqFactors?: number[];
  /** Maximum context the model was trained for. */
  contextLength: number;
  /** True when the output projection reuses the token embedding. */
  tiedEmbeddings: boolean;
  /** Qwen2 has biases on the q/k/v projections. */
  qkvBias: boolean;
  /** Qwen3 normalises q and k per head before RoPE. */
  qkNorm: boolean;
  bosTokenId?: number;
  eosTokenIds: number[];
  /** Whether prompts start with BOS (GGUF tokenizer.ggml.add_bos_token; Llama yes, Qwen no). */
  addBos: boolean;
}

/** A tensor as read from a file, before upload: raw little-endian bytes in its dtype's layout. */
export interface HostTensor {
  name: string;
  shape: number[]; // row-major, outermost first (e.g. [out, in] for a linear weight)
  dtype: WeightDType;
  data: Uint8Array;
}

/**
 * Host-side weights of one layer, named for their role. In a mixture-of-experts layer `wGate`,
 * `wUp` and `wDown` stack every expert's matrix: [experts, out, in] (GGUF's `ffn_*_exps`), and
 * `router` [experts, hidden] scores the experts.
 */
export interface LayerWeights<T> {
  attnNorm: T;
  wq: T;
  wk: T;
  wv: T;
  wo: T;
  bq?: T;
  bk?: T;
  bv?: T;
  qNorm?: T;
  kNorm?: T;
  ffnNorm: T;
  wGate: T;
  wUp: T;
  wDown: T;
  router?: T;
}

/** All weights of a model, generic over host (HostTensor) or device (Tensor) storage. */
export interface ModelWeights<T> {
  tokenEmbedding: T;
  layers: LayerWeights<T>[];
  outputNorm: T;
  /** Absent when tied to the token embedding. */
  output?: T;
}

/** The tokenizer contract the engine and server use. */
export interface Tokenizer {
  readonly vocabSize: number;
  /** Encodes text to ids; adds BOS only when `addBos` is true. */
  encode(text: string, options?: { addBos?: boolean }): number[];
  /**
   * Decodes ids to text: control tokens (`<|im_end|>`, Mistral's `[TOOL_CALLS]`) are skipped unless
   * `special` is true (vLLM's `skip_special_tokens` false), which writes each as its vocabulary string.
   */
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** Text of one token as it would appear in streamed output (may be a partial UTF-8 piece); see {@link decode} for `special`. */
  tokenText?(id: number, options?: DecodeOptions): string;
  /**
   * The bytes one token stands for in the output (empty for special tokens), where they are known: a
   * piece of a UTF-8 character has no text of its own, and output grammars place such pieces by
   * their bytes (src/engine/token-trie.ts).
   */
  tokenBytes?(id: number): Uint8Array | undefined;
  /**
   * The most UTF-16 code units of input text one token can stand for (its longest vocabulary
   * piece, special tokens included; a byte-fallback token stands for at most one), so
   * `Math.ceil(text.length / maxCharsPerToken())` tokens at least come out of `encode(text)`.
   * Undefined when no such bound holds (a tokenizer that can drop or fuse input).
   */
  maxCharsPerToken?(): number | undefined;
}

/** How {@link Tokenizer.decode} writes control tokens. */
export interface DecodeOptions {
  /** Write control tokens as their vocabulary strings (default false: skip them). */
  special?: boolean;
}

/** A token's text as it streams: the tokenizer's piece for it, or its decoding where it has none. */
export function tokenTextOf(tokenizer: Tokenizer, id: number, options?: DecodeOptions): string {
  return tokenizer.tokenText?.(id, options) ?? tokenizer.decode([id], options);
}

/** A loaded model: configuration, host weights, tokenizer and its chat template if any. */
export interface LoadedModel {
  config: ModelConfig;
  weights: ModelWeights<HostTensor>;
  tokenizer: Tokenizer;
  chatTemplate?: string;
  /** Where it came from (path), for logs. */
  source: string;
}

/** A clear, one-line error about a model file: missing, truncated, corrupt or unsupported. */
export class ModelLoadError extends Error {
  override name = "ModelLoadError";
}

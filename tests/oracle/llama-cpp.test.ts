/**
 * Independent oracle: random-weight Llama / Qwen2 / Qwen3 / Qwen2-MoE / Qwen3-MoE / Mixtral / GLM-4.5 / DeepSeek V3 / GPT-OSS / Gemma 3 / Phi-3 / Qwen3.5 GGUFs (MXFP4 experts among the quantized ones) written by our own writer are run
 * through llama.cpp (node-llama-cpp 3.21.1, CPU, offline, in a Node child process) and through our
 * loader + forward on every available backend. Per model: next-token log-probabilities after the
 * prompt and at each of 32 greedy steps, and the 32 greedy tokens. The same weights as a
 * safetensors directory (llama q/k rows un-permuted, neox RoPE) must match llama.cpp too.
 * ORACLE_BACKENDS (comma list, default "reference,webgpu") narrows the backends for local runs.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type { Backend, KvDType, WeightDType } from "../../src/backend/types.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { longRopeFor } from "../../src/model/phi3.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { projectRoot, test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "../model/model-files.ts";
import { greedySteps, type LlamaCppResult, maxLogProbError, oracleBackends, runLlamaCpp } from "./oracle-compare.ts";

const STEPS = 32;
const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64];
const BASE = { hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32" } as const;
/** Rows of 256 and 512 values, so every matrix holds whole k-quant blocks. */
const K_BASE = { ...BASE, hidden: 256, heads: 4, kvHeads: 2, headDim: 64, ffn: 512 } as const;

/** llama.cpp's Q4_K_M mix, as its quantizer picks it: Q6_K for the output and attn_v / ffn_down, Q4_K elsewhere. */
function q4KM(name: string): WeightDType {
  return /^output\.|attn_v|ffn_down/.test(name) ? "q6_k" : "q4_k";
}

/**
 * llama.cpp's Q2_K mix, roughly as its quantizer picks it: Q6_K for the output, Q4_K for attn_v and
 * Q3_K for ffn_down (the tensors most sensitive to error get more bits), Q2_K elsewhere.
 */
function q2K(name: string): WeightDType {
  if (/^output\./.test(name)) return "q6_k";
  if (/attn_v/.test(name)) return "q4_k";
  return /ffn_down/.test(name) ? "q3_k" : "q2_k";
}

/** llama.cpp's Q3_K_M mix, roughly: Q6_K for the output, Q5_K for attn_v, Q4_K for ffn_down and attn_output, Q3_K elsewhere. */
function q3KM(name: string): WeightDType {
  if (/^output\./.test(name)) return "q6_k";
  if (/attn_v/.test(name)) return "q5_k";
  return /ffn_down|attn_output/.test(name) ? "q4_k" : "q3_k";
}

/**
 * llama.cpp's IQ4_XS mix, roughly: Q6_K for the output, IQ4_NL for ffn_down (32-value blocks), IQ4_XS
 * elsewhere — both non-linear codebook formats in one file.
 */
function iq4XS(name: string): WeightDType {
  if (/^output\./.test(name)) return "q6_k";
  return /ffn_down/.test(name) ? "iq4_nl" : "iq4_xs";
}

/** A mix of the 32-value legacy formats (Q4_K_M's fallbacks on rows that are not whole 256 blocks). */
function legacyMix(name: string): WeightDType {
  if (/attn_v|ffn_down/.test(name)) return "q5_0";
  if (/attn_output|token_embd/.test(name)) return "q5_1";
  return /ffn_up|attn_k/.test(name) ? "q4_1" : "q4_0";
}

/** llama.cpp's MXFP4_MOE mix, gpt-oss's files: MXFP4 for the expert stacks, Q8_0 for every other matrix. */
function mxfp4Moe(name: string): WeightDType {
  return /_exps\./.test(name) ? "mxfp4" : "q8_0";
}

interface OracleCase {
  name: string;
  spec: ModelFileSpec;
  /** Max |Δ log-prob| allowed, relative to the spread of llama.cpp's log-probs. */
  tol: number;
  /** Also compare a safetensors directory of the same weights. */
  hf: boolean;
  /** KV cache dtype on both sides (default f32; llama.cpp's default, f16, rounds as our f16 cache does). */
  kv?: KvDType;
  /** llama.cpp's context (default 256), and ours: where it is within Phi-3's original context, LongRoPE's short divisors. */
  context?: number;
}

// llama.cpp rounds activations to the weight type for f16/bf16/q8_0 dot products; we keep them
// f32. Those cases get a tolerance that covers that rounding and are excluded from exact greedy.
const CASES: OracleCase[] = [
  { name: "llama GQA 4/2, untied, f32", spec: { ...BASE, architecture: "llama", seed: 101 }, tol: 1e-4, hf: true },
  { name: "llama 3 heads / 1 KV head, tied, f32", spec: { ...BASE, architecture: "llama", heads: 3, kvHeads: 1, hidden: 24, tied: true, seed: 102 }, tol: 1e-4, hf: true },
  { name: "qwen2 qkv bias, tied, f32", spec: { ...BASE, architecture: "qwen2", tied: true, seed: 103 }, tol: 1e-4, hf: true },
  { name: "qwen3 q/k norm, 3/1 heads, head_dim 16, f32", spec: { ...BASE, architecture: "qwen3", heads: 3, kvHeads: 1, headDim: 16, seed: 104 }, tol: 1e-4, hf: true },
  { name: "llama GQA f16", spec: { ...BASE, architecture: "llama", dtype: "f16", seed: 105 }, tol: 2e-3, hf: false },
  { name: "qwen3 bf16, tied", spec: { ...BASE, architecture: "qwen3", dtype: "bf16", tied: true, seed: 106 }, tol: 1e-2, hf: false },
  { name: "qwen2 q8_0", spec: { ...BASE, architecture: "qwen2", dtype: "q8_0", seed: 107 }, tol: 1.5e-2, hf: false },
  // Quantized files as users download them. llama.cpp rounds activations to 8 bits per block for
  // these dot products (Q8_K / Q8_0 / Q8_1), so the tolerance is q8_0's order.
  { name: "llama Q4_K_M mix (q4_k, q6_k), untied", spec: { ...K_BASE, architecture: "llama", dtype: "q4_k", ggufDtype: q4KM, seed: 110 }, tol: 2e-2, hf: false },
  { name: "qwen3 q5_k, tied", spec: { ...K_BASE, architecture: "qwen3", dtype: "q5_k", tied: true, seed: 111 }, tol: 2e-2, hf: false },
  { name: "llama Q2_K mix (q2_k, q3_k, q4_k, q6_k), untied", spec: { ...K_BASE, architecture: "llama", dtype: "q2_k", ggufDtype: q2K, seed: 150 }, tol: 2e-2, hf: false },
  { name: "qwen2 Q3_K_M mix (q3_k, q4_k, q5_k, q6_k), untied", spec: { ...K_BASE, architecture: "qwen2", dtype: "q3_k", ggufDtype: q3KM, seed: 151 }, tol: 2e-2, hf: false },
  { name: "llama IQ4_XS mix (iq4_xs, iq4_nl, q6_k), untied", spec: { ...K_BASE, architecture: "llama", dtype: "iq4_xs", ggufDtype: iq4XS, seed: 152 }, tol: 2e-2, hf: false },
  { name: "qwen2 legacy mix (q4_0, q4_1, q5_0, q5_1)", spec: { ...BASE, architecture: "qwen2", dtype: "q4_0", ggufDtype: legacyMix, seed: 112 }, tol: 2e-2, hf: false },
  // Mixture of experts: Qwen3-MoE (8 experts, 2 per token) and Mixtral (a llama with 4 experts, 2 per
  // token), the HF directories storing each expert apart; then a quantized Qwen3-MoE.
  { name: "qwen3moe 8 experts / 2 used, f32", spec: { ...BASE, architecture: "qwen3moe", experts: { count: 8, used: 2 }, seed: 113 }, tol: 1e-4, hf: true },
  { name: "mixtral (llama, 4 experts / 2 used), f32", spec: { ...BASE, architecture: "llama", experts: { count: 4, used: 2 }, seed: 114 }, tol: 1e-4, hf: true },
  {
    name: "qwen3moe Q4_K_M mix, 8 experts / 3 used, tied",
    spec: { ...K_BASE, architecture: "qwen3moe", dtype: "q4_k", ggufDtype: q4KM, tied: true, experts: { count: 8, used: 3 }, seed: 115 },
    tol: 2e-2,
    hf: false,
  },
  {
    name: "mixtral legacy mix (q4_0, q4_1, q5_0, q5_1 experts), 4 experts / 2 used",
    spec: { ...BASE, architecture: "llama", dtype: "q4_0", ggufDtype: legacyMix, experts: { count: 4, used: 2 }, seed: 116 },
    tol: 2e-2,
    hf: false,
  },
  // MXFP4 experts (what gpt-oss ships) in llama.cpp's MXFP4_MOE mix; llama.cpp multiplies them
  // with activations rounded to Q8_0 blocks, so the tolerance is q8_0's.
  {
    name: "qwen3moe MXFP4_MOE mix (mxfp4 experts, q8_0 elsewhere), 8 experts / 2 used",
    spec: { ...BASE, architecture: "qwen3moe", dtype: "mxfp4", ggufDtype: mxfp4Moe, experts: { count: 8, used: 2 }, seed: 139 },
    tol: 2e-2,
    hf: false,
  },
  {
    name: "mixtral MXFP4_MOE mix (mxfp4 experts, q8_0 elsewhere), 4 experts / 2 used, tied",
    spec: { ...BASE, architecture: "llama", dtype: "mxfp4", ggufDtype: mxfp4Moe, tied: true, experts: { count: 4, used: 2 }, seed: 140 },
    tol: 2e-2,
    hf: false,
  },
  // GLM-4.5's layout: sigmoid routing with a selection bias and a 2.5 scale, a shared expert, a
  // leading dense layer, qkv biases, RoPE over half of each head, and a NextN block after the last
  // layer that llama.cpp loads and never runs. Then Qwen2-MoE's sigmoid-gated shared expert.
  {
    name: "glm4moe 8 experts / 2 used, shared expert, dense layer 0, partial RoPE, NextN block, f32",
    spec: {
      ...BASE, architecture: "glm4moe", layers: 3, headDim: 16, rotaryDim: 8, nextn: 1, seed: 117,
      experts: { count: 8, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "qwen2moe 8 experts / 2 used, gated shared expert, f32",
    spec: { ...BASE, architecture: "qwen2moe", experts: { count: 8, used: 2, sharedFfn: 96 }, seed: 118 },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "glm4moe Q4_K_M mix, 8 experts / 3 used, tied",
    spec: {
      ...K_BASE, architecture: "glm4moe", dtype: "q4_k", ggufDtype: q4KM, tied: true, rotaryDim: 32, nextn: 1, seed: 119,
      experts: { count: 8, used: 3, sharedFfn: 512, denseLayers: 1, scale: 1.8 },
    },
    tol: 2e-2,
    hf: false,
  },
  // DeepSeek V3 / Kimi K2 (deepseek2): multi-head latent attention — q through a low-rank bottleneck,
  // one cached latent + RoPE key per token (48 wide here), per-head W_kb / W_vb — with Kimi K2's
  // routing (sigmoid, selection bias, one group, scale) and a shared expert after a dense layer 0.
  // Then the older file layout (one attn_kv_b, per-head key/value lengths), q projected directly
  // (DeepSeek-V2-Lite), and YaRN with mscale_all_dim 0.8 at positions past the original context.
  {
    name: "deepseek2 (Kimi K2 layout) MLA, 8 experts / 2 used, shared expert, dense layer 0, f32",
    spec: {
      ...BASE, architecture: "deepseek2", layers: 3, ropeTheta: 10000, seed: 120, tokenizer: "kimi-k2",
      mla: { qLora: 24, kvLora: 40, nope: 16, rope: 8, v: 12 },
      experts: { count: 8, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
    },
    tol: 1e-4,
    hf: true,
  },
  // DeepSeek V3's own routing: experts chosen within the best groups (16 experts in 4 groups, 2 used),
  // and its pre-tokenizer (three regexes in turn: digits, CJK and kana runs, words and punctuation).
  {
    name: "deepseek2 (DeepSeek V3 layout) MLA, grouped routing 16 experts / 4 groups / 2 used / 4 per token, f32",
    spec: {
      ...BASE, architecture: "deepseek2", layers: 3, ropeTheta: 10000, seed: 122, tokenizer: "deepseek-v3",
      mla: { qLora: 24, kvLora: 32, nope: 16, rope: 8, v: 16 },
      experts: { count: 16, used: 4, sharedFfn: 64, denseLayers: 1, scale: 2.5, groups: { count: 4, used: 2 } },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "deepseek2 MLA from a combined kv_b, q without low rank, YaRN, f32",
    spec: {
      ...BASE, architecture: "deepseek2", ropeTheta: 10000, seed: 121,
      mla: { qLora: 0, kvLora: 32, nope: 8, rope: 16, v: 16, combinedKvB: true },
      yarn: { factor: 4, originalContext: 16, betaFast: 32, betaSlow: 1, mscaleAllDim: 0.8 },
      experts: { count: 8, used: 3, sharedFfn: 64, denseLayers: 1, scale: 1.5 },
    },
    tol: 1e-4,
    hf: true,
  },
  // GPT-OSS: a 5-position sliding window on layers 0 and 2 (positions run to 39), attention sinks,
  // q/k/v/o biases, a biased router whose top 2 of 4 experts are weighted by a softmax over them,
  // expert biases that push the clamped SwiGLU past its ±7 limits, and YaRN that scales RoPE's magnitude.
  {
    name: "gpt-oss sliding window 5, sinks, biases, 4 experts / 2 used, clamped SwiGLU, YaRN, f32",
    spec: {
      ...BASE, architecture: "gpt-oss", layers: 3, ropeTheta: 10000, seed: 123, slidingWindow: 5, tokenizer: "gpt-4o",
      yarn: { factor: 4, originalContext: 16, betaFast: 32, betaSlow: 1 },
      experts: { count: 4, used: 2 },
    },
    tol: 1e-4,
    hf: true,
  },
  // As gpt-oss GGUFs ship: MXFP4 experts (their biases f32), q8_0 elsewhere.
  {
    name: "gpt-oss MXFP4 experts, q8_0 elsewhere, sliding window 7",
    spec: {
      ...BASE, architecture: "gpt-oss", layers: 2, ropeTheta: 150000, seed: 124, slidingWindow: 7, tokenizer: "gpt-4o",
      dtype: "mxfp4", ggufDtype: mxfp4Moe, experts: { count: 4, used: 2 },
    },
    tol: 2e-2,
    hf: true,
  },
  // Gemma 3: embeddings scaled by √hidden, sandwich norms, q/k norms, GeGLU, tied output; layers
  // 0-4 and 6 slide (window 5) with RoPE base 10 000, layer 5 is global with base 1e6 scaled
  // linearly by 8. llama.cpp's CPU GELU reads a table of f16 inputs, hence 3e-4 rather than 1e-4.
  // The safetensors form stores Gemma's norms as w (weighing by 1 + w), as Google's checkpoints do.
  {
    name: "gemma3 sliding window 5 on five layers of six, linear RoPE 8 on the global one, tied, f32",
    spec: { ...BASE, architecture: "gemma3", layers: 7, tied: true, seed: 160, slidingWindow: 5, ropeLinearFactor: 8 },
    tol: 3e-4,
    hf: true,
  },
  {
    name: "gemma3 q8_0, head_dim 16, window 7, f16 KV cache",
    spec: { ...BASE, architecture: "gemma3", layers: 6, headDim: 16, tied: true, dtype: "q8_0", seed: 161, slidingWindow: 7 },
    tol: 2e-2,
    hf: false,
    kv: "f16",
  },
  // Phi-3: q/k/v and gate/up fused in the file; Phi-4-mini's partial RoPE (12 of 16 dims) with
  // LongRoPE past an original context of 64 (llama.cpp's context is 256: the long divisors, and the
  // magnitude factor on q and k); then a quantized file within its original context (short divisors).
  {
    name: "phi3 fused qkv and gate_up, partial RoPE, LongRoPE long factors, f32",
    spec: {
      ...BASE, architecture: "phi3", hidden: 64, headDim: 16, rotaryDim: 12, seed: 170, ropeTheta: 10000,
      longRope: { originalContext: 64, long: [1, 1.5, 2, 4, 8, 16], short: [1, 1, 1.25, 1.5, 2, 3] },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "phi3 q8_0, LongRoPE short factors, tied",
    spec: {
      ...BASE, architecture: "phi3", tied: true, dtype: "q8_0", seed: 171, ropeTheta: 10000,
      longRope: { originalContext: 512, long: [2, 4, 8, 16], short: [1, 2, 3, 5] },
    },
    tol: 2e-2,
    hf: false,
  },
  // A phi3 file of context 1024 served at 256, within its original 256: llama.cpp (whose context is a
  // multiple of 256) and we both take the short divisors, where loading alone would take the long ones.
  {
    name: "phi3 LongRoPE served within the original context (short factors), f32",
    spec: {
      ...BASE, architecture: "phi3", hidden: 64, headDim: 16, rotaryDim: 12, seed: 180, ropeTheta: 10000, contextLength: 1024,
      longRope: { originalContext: 256, long: [1, 1.5, 2, 4, 8, 16], short: [1, 1, 1.25, 1.5, 2, 3] },
    },
    tol: 1e-4,
    hf: false,
    context: 256,
  },
  // SmolLM3: Llama's layout (q/k permuted in the GGUF) with every fourth layer turning nothing (NoPE);
  // 8 layers, so layers 3 and 7 skip RoPE. The safetensors form states no_rope_layers' default.
  {
    name: "smollm3 NoPE every fourth layer, tied, f32",
    spec: { ...BASE, architecture: "smollm3", layers: 8, tied: true, seed: 172, tokenizer: "llama-bpe" },
    tol: 1e-4,
    hf: true,
  },
  // Granite 3.x: Llama's layout with its four multipliers (embeddings ×2, scores ×0.9 instead of
  // 1/√8, each block's output ×0.6 before its residual add, logits ÷2.5), as in its GGUF and config.json.
  {
    name: "granite multipliers (embedding, attention, residual, logit), f32",
    spec: { ...BASE, architecture: "granite", seed: 173, granite: { embedding: 2, attention: 0.9, residual: 0.6, logit: 2.5 } },
    tol: 1e-4,
    hf: true,
  },
  // OLMo 2: no pre-norms, the blocks' outputs normed before their residual adds, q and k normed over
  // the whole projection; OLMo 3 (same architecture in llama.cpp): three layers of four slide (window 5).
  { name: "olmo2 post-norms only, row-wide q/k norms, f32", spec: { ...BASE, architecture: "olmo2", seed: 174, ropeTheta: 10000 }, tol: 1e-4, hf: true },
  {
    name: "olmo2 (OLMo 3) sliding window 5 on three layers of four, f32",
    spec: { ...BASE, architecture: "olmo2", layers: 8, seed: 175, ropeTheta: 10000, slidingWindow: 5 },
    tol: 1e-4,
    hf: true,
  },
  // EXAONE 4: OLMo 2's norms with per-head q/k norms. Only the 64-layer 32B slides (llama.cpp tells it by
  // its layer count): three layers of four with RoPE and a window, every fourth global without RoPE.
  { name: "exaone4 1.2B layout (no window), f32", spec: { ...BASE, architecture: "exaone4", seed: 176, ropeTheta: 10000 }, tol: 1e-4, hf: true },
  {
    name: "exaone4 32B layout: 64 layers, window 5 on three of four, global layers without RoPE, f32",
    spec: { ...BASE, architecture: "exaone4", layers: 64, seed: 177, ropeTheta: 10000, slidingWindow: 5 },
    tol: 1e-4,
    hf: true,
  },
  // Gemma 2: Gemma 3's sandwich norms and GeGLU without q/k norms, even layers sliding (window 5), and
  // soft-capping small enough to bend these scores and logits (llama.cpp's 50 and 30 would not).
  // Qwen3.5: Gated DeltaNet layers (2 value heads per key head, tiled in the GGUF) and gated attention
  // every third layer, RoPE on a quarter of each head.
  {
    name: "qwen35 Gated DeltaNet (4 value heads over 2 key heads) and gated attention, f32",
    spec: { ...BASE, architecture: "qwen35", layers: 6, headDim: 16, rotaryDim: 4, seed: 190, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 3 } },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "qwen35 q8_0, one value head per key head, head_dim 32, f16 KV cache",
    spec: { ...BASE, architecture: "qwen35", layers: 4, headDim: 32, rotaryDim: 8, dtype: "q8_0", seed: 191, deltaNet: { kHeads: 2, vHeads: 2, dim: 16, conv: 4, interval: 4 } },
    // llama.cpp rounds activations to Q8_0 blocks for q8_0 matrices: q8_0's tolerance.
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  {
    name: "qwen35moe 8 experts / 2 used (renormalised), sigmoid-gated shared expert, f32",
    spec: {
      ...BASE, architecture: "qwen35moe", layers: 4, headDim: 16, rotaryDim: 4, seed: 192, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 },
      experts: { count: 8, used: 2, sharedFfn: 48 },
    },
    tol: 1e-4,
    hf: true,
  },
  // LFM2: gated short convolution layers (width 3) with attention layers between them.
  {
    name: "lfm2 short convolutions (layers 0, 2, 3) and attention (1, 4), f32",
    spec: { ...BASE, architecture: "lfm2", layers: 5, seed: 197, shortConv: { kernel: 3, attention: [1, 4] } },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "lfm2 q8_0, tied, f16 KV cache",
    spec: { ...BASE, architecture: "lfm2", layers: 4, tied: true, dtype: "q8_0", seed: 198, shortConv: { kernel: 3, attention: [2] } },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  {
    name: "lfm2moe 4 experts / 2 used (sigmoid, selection bias, renormalised) after a leading dense layer, short convolutions and attention, f32",
    spec: { ...BASE, architecture: "lfm2moe", layers: 4, ffn: 32, seed: 214, shortConv: { kernel: 3, attention: [2] }, experts: { count: 4, used: 2, denseLayers: 1 } },
    tol: 1e-4,
    hf: true,
  },
  // Granite 4.0-H: Mamba-2 layers (inner 64 = 4 heads of 16, states of 16, a convolution of 4 with a
  // bias) around NoPE attention layers, with Granite's four multipliers.
  {
    name: "granitehybrid Mamba-2 (layers 0, 1, 3) and NoPE attention (2), Granite multipliers, f32",
    spec: {
      ...BASE, architecture: "granitehybrid", layers: 4, seed: 199, mamba2: { attention: [2], heads: 4, stateSize: 16, conv: 4 },
      granite: { embedding: 2, attention: 0.2, residual: 0.5, logit: 3 },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "granitehybrid 4 experts / 2 used (softmax, renormalised) with an ungated shared expert (Granite 4.0-H Tiny's layout), f32",
    spec: {
      ...BASE, architecture: "granitehybrid", layers: 3, seed: 201, mamba2: { attention: [1], heads: 4, stateSize: 8, conv: 4 }, experts: { count: 4, used: 2, sharedFfn: 48 },
      granite: { embedding: 1, attention: 0.3, residual: 0.6, logit: 2 },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "granitehybrid q8_0, 8 heads of 8, states of 32, attention with RoPE (Bamba-style), f16 KV cache",
    spec: {
      ...BASE, architecture: "granitehybrid", layers: 3, dtype: "q8_0", seed: 200, mamba2: { attention: [1], heads: 8, stateSize: 32, conv: 3, rope: true },
      granite: { embedding: 1.5, attention: 0.25, residual: 0.7, logit: 2 },
    },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  // Nemotron-H: each layer one block — Mamba-2 with grouped B/C and a grouped gated norm, attention
  // without positions, or an ungated ReLU² feed-forward.
  {
    name: "nemotron_h Mamba-2 (3 groups over 6 heads of 8: an inner size of 1.5 hidden), NoPE attention and ReLU² feed-forward layers (M-M*-M), f32",
    spec: { ...BASE, architecture: "nemotron_h", layers: 6, seed: 211, nemotronH: { pattern: "M-M*-M", heads: 6, headDim: 8, stateSize: 16, groups: 3, conv: 4 } },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "nemotron_h q8_0, 4 groups over 8 heads of 8, biased attention and feed-forward, f16 KV cache",
    spec: {
      ...BASE, architecture: "nemotron_h", layers: 5, dtype: "q8_0", seed: 212,
      nemotronH: { pattern: "M*-M-", heads: 8, headDim: 8, stateSize: 8, groups: 4, conv: 3, attnBias: true, mlpBias: true },
    },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  {
    name: "nemotron_h_moe 4 experts / 2 used (sigmoid, selection bias, renormalised, scale 2.5), ungated ReLU² experts and shared expert (Nemotron 3's layout), f32",
    spec: {
      ...BASE, architecture: "nemotron_h_moe", layers: 5, ffn: 32, seed: 213, experts: { count: 4, used: 2, sharedFfn: 48, scale: 2.5 },
      nemotronH: { pattern: "ME*ME", heads: 4, headDim: 16, stateSize: 8, groups: 2, conv: 4 },
    },
    tol: 1e-4,
    hf: true,
  },
  // Gemma 4 (dense): sliding layers with heads of their own size and KV heads, full layers turning a
  // quarter of their heads (proportional RoPE through rope_freqs) and taking their keys as values,
  // values normed, scores unscaled, each layer's output scaled, the logits soft-capped.
  {
    name: "gemma4 sliding layers of 2 KV heads of 8 (window 5, the full layers' RoPE base without their rope_freqs), full layers of 1 KV head of 16 with keys as values and a quarter turning, soft-capped, tied, f32",
    spec: {
      ...BASE, architecture: "gemma4", layers: 4, heads: 4, kvHeads: 1, headDim: 16, tied: true, seed: 221,
      gemma4: { pattern: [true, true, false, true], window: 5, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 1000000, partialFull: 0.25, keyAsValue: true, softcap: 30 },
    },
    // As Gemma 3's: llama.cpp's CPU GELU reads its input through an f16 table.
    tol: 3e-4,
    hf: false,
  },
  {
    name: "gemma4 q8_0 with value projections on every layer, f16 KV cache, Gemma 4's SentencePiece-style BPE vocab",
    spec: {
      ...BASE, architecture: "gemma4", layers: 3, heads: 4, kvHeads: 2, headDim: 16, dtype: "q8_0", seed: 222, tokenizer: "gemma4",
      gemma4: { pattern: [true, false, true], window: 4, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 5000, partialFull: 0.5 },
    },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  {
    name: "gemma4 experts (the 26B-A4B's layout): 4 GELU experts / 2 beside a dense GeGLU, the router's own norm, per-expert scales, f32",
    spec: {
      ...BASE, architecture: "gemma4", layers: 3, heads: 4, kvHeads: 2, headDim: 16, ffn: 24, tied: true, seed: 223, experts: { count: 4, used: 2 },
      gemma4: { pattern: [true, false, true], window: 5, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 10000, partialFull: 0.5, softcap: 30 },
    },
    tol: 3e-4,
    hf: false,
  },
  {
    name: "gemma4 E2B/E4B layout: per-layer inputs of 4, the last 2 of 5 layers reading the caches before them, their feed-forwards double-wide, f32",
    spec: {
      ...BASE, architecture: "gemma4", layers: 5, heads: 4, kvHeads: 2, headDim: 16, ffn: 32, tied: true, seed: 224,
      gemma4: { pattern: [true, true, false, true, false], window: 5, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 10000, partialFull: 0.5, softcap: 30, ple: 4, sharedKv: 2, doubleWide: true },
    },
    // Its per-layer gate is one more GELU through llama.cpp's f16 table: errors of 1 to 3.4e-4 over the steps.
    tol: 5e-4,
    hf: false,
  },
  // Seed-OSS: Llama's layout with q/k/v biases, NeoX RoPE, the pre-feed-forward norm under llama.cpp's attn_post_norm name.
  { name: "seed_oss q/k/v biases, 4/2 heads of 16, f32", spec: { ...BASE, architecture: "seed_oss", headDim: 16, seed: 219 }, tol: 1e-4, hf: true },
  { name: "seed_oss q8_0, f16 KV cache", spec: { ...BASE, architecture: "seed_oss", layers: 3, dtype: "q8_0", seed: 220 }, tol: 1.5e-2, hf: false, kv: "f16" },
  // MiniMax-M2: q/k normed over the whole projection, RoPE on half of each head, sigmoid-scored experts
  // chosen with a selection bias (Mixtral's block_sparse_moe names in the checkpoint).
  {
    name: "minimax-m2 4 experts / 2 used (sigmoid, selection bias, renormalised), q/k norms over the whole projection, RoPE on 8 of 16 dims, f32",
    spec: { ...BASE, architecture: "minimax-m2", headDim: 16, rotaryDim: 8, ffn: 32, seed: 217, experts: { count: 4, used: 2 } },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "minimax-m2 q8_0, 8 experts / 3 used, f16 KV cache",
    spec: { ...BASE, architecture: "minimax-m2", layers: 3, rotaryDim: 4, ffn: 32, dtype: "q8_0", seed: 218, experts: { count: 8, used: 3 } },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  // Falcon-H1: attention and a Mamba-2 scan side by side in every layer, from the same norm; its µP
  // multipliers folded into the GGUF's weights by the converter, applied to the checkpoint's as it loads.
  {
    name: "falcon-h1 attention beside a grouped Mamba-2 scan (2 groups over 4 heads of 12: an inner size of 1.5 hidden) with its gated norm, every multiplier off 1, f32",
    spec: {
      ...BASE, architecture: "falcon-h1", layers: 3, seed: 214,
      falconH1: {
        heads: 4, headDim: 12, stateSize: 8, groups: 2, conv: 4, normed: true,
        multipliers: { embedding: 1.7, lmHead: 0.6, attentionIn: 1.3, attentionOut: 0.8, key: 0.7, ssmIn: 1.2, ssmOut: 0.9, ssm: [1.4, 0.8, 1.1, 0.7, 1.5], mlp: [1.3, 0.75] },
      },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "falcon-h1 q8_0 without the scan's norm (mamba_rms_norm false), 8 heads of 8, f16 KV cache",
    spec: { ...BASE, architecture: "falcon-h1", layers: 2, dtype: "q8_0", seed: 215, falconH1: { heads: 8, headDim: 8, stateSize: 16, groups: 1, conv: 3, normed: false } },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  // Ministral 3: Llama's layout (q/k permuted for the interleaved RoPE) with YaRN over an original
  // context of 16 and Llama 4's attention temperature, whose ⌊position / 16⌋ steps within the test.
  {
    name: "mistral3 YaRN (factor 4 over 16), attention temperature 0.3, f32",
    spec: { ...BASE, architecture: "mistral3", seed: 195, yarn: { factor: 4, originalContext: 16, betaFast: 32, betaSlow: 1 }, attnTemperature: 0.3 },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "mistral3 YaRN with mscale_all_dim 0.5 (a magnitude on q and k), attention temperature 0.5, q8_0, f16 KV cache",
    spec: {
      ...BASE, architecture: "mistral3", headDim: 32, dtype: "q8_0", seed: 196, yarn: { factor: 8, originalContext: 16, betaFast: 16, betaSlow: 2, mscaleAllDim: 0.5 },
      attnTemperature: 0.5,
    },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  // Qwen3-Next: Qwen3.5-MoE's layers with fused DeltaNet input projections, value heads grouped
  // (not tiled) in its GGUF, plain NeoX RoPE on a quarter of each head.
  {
    name: "qwen3next fused qkvz/ba (4 value heads over 2 key heads), 8 experts / 2 used, shared expert, f32",
    spec: {
      ...BASE, architecture: "qwen3next", layers: 4, headDim: 16, rotaryDim: 4, seed: 193, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 },
      experts: { count: 8, used: 2, sharedFfn: 48 },
    },
    tol: 1e-4,
    hf: true,
  },
  {
    name: "qwen3next q8_0 with its first conversions' whole ssm_in, 3 value heads per key head, f16 KV cache",
    spec: {
      ...BASE, architecture: "qwen3next", layers: 4, headDim: 32, rotaryDim: 8, dtype: "q8_0", seed: 194,
      deltaNet: { kHeads: 1, vHeads: 3, dim: 32, conv: 4, interval: 4, legacySsmIn: true }, experts: { count: 4, used: 2, sharedFfn: 32 },
    },
    tol: 1.5e-2,
    hf: false,
    kv: "f16",
  },
  {
    name: "gemma2 soft-capped scores (2) and logits (3), window 5 on even layers, tied, f32",
    spec: { ...BASE, architecture: "gemma2", layers: 4, tied: true, seed: 178, ropeTheta: 10000, slidingWindow: 5, softcaps: { attn: 2, final: 3 } },
    tol: 3e-4,
    hf: true,
  },
  {
    name: "gemma2 q8_0, head_dim 16, f16 KV cache",
    spec: { ...BASE, architecture: "gemma2", layers: 3, headDim: 16, tied: true, dtype: "q8_0", seed: 179, ropeTheta: 10000, slidingWindow: 7, softcaps: { attn: 1.5, final: 4 } },
    tol: 2e-2,
    hf: false,
    kv: "f16",
  },
  { name: "llama with a Llama-3 BPE vocab, f32", spec: { ...BASE, architecture: "llama", tokenizer: "llama-bpe", seed: 108 }, tol: 1e-4, hf: false },
  // Llama 3.1 frequency scaling: the GGUF carries rope_freqs.weight, the HF dir llama3 rope_scaling.
  // Base 100 and an original context of 128 give a 16-wide head divisors from ~1.5 to 8 on every
  // pair, so a dropped factor changes the very first positions.
  {
    name: "llama 3.1 rope_freqs (llama3 scaling), head_dim 16, f32",
    spec: {
      ...BASE, architecture: "llama", headDim: 16, seed: 109, ropeTheta: 100,
      ropeScaling: { factor: 8, lowFreqFactor: 1, highFreqFactor: 32, originalMaxPositionEmbeddings: 128 },
    },
    tol: 1e-4,
    hf: true,
  },
  // f16 KV caches (llama.cpp's default, our --kv-cache-dtype auto on WebGPU): keys and values rounded
  // to f16 on both sides; llama.cpp also rounds the queries to f16 for their products with f16 keys,
  // so the tolerance is the f16 weights case's. GQA; MLA's one shared latent cache; a window with sinks.
  { name: "llama GQA 4/2, f32 weights, f16 KV cache", spec: { ...BASE, architecture: "llama", seed: 141 }, tol: 2e-3, hf: false, kv: "f16" },
  {
    name: "deepseek2 (Kimi K2 layout) MLA, f16 KV cache",
    spec: {
      ...BASE, architecture: "deepseek2", layers: 3, ropeTheta: 10000, seed: 145, tokenizer: "kimi-k2",
      mla: { qLora: 24, kvLora: 40, nope: 16, rope: 8, v: 12 },
      experts: { count: 8, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
    },
    tol: 2e-3,
    hf: false,
    kv: "f16",
  },
  {
    name: "gpt-oss sliding window 5, sinks, YaRN, f16 KV cache",
    spec: {
      ...BASE, architecture: "gpt-oss", layers: 3, ropeTheta: 10000, seed: 146, slidingWindow: 5, tokenizer: "gpt-4o",
      yarn: { factor: 4, originalContext: 16, betaFast: 32, betaSlow: 1 },
      experts: { count: 4, used: 2 },
    },
    tol: 2e-3,
    hf: false,
    kv: "f16",
  },
];

const TEXTS = [
  "Once upon a time there was a little girl named Lily.",
  "hello world 1234567, it's the agent's tool call!",
  "  two\n\nlines\tand  ünïcödé 🙂 THE'S done",
  "数字12345和日本語のテキスト, (x+y)*2; [done]",
];

const dir = mkdtempSync(`${tmpdir()}/oracle-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const jobModels = [];
for (const c of CASES) {
  const weights = randomHfWeights(c.spec);
  await writeFile(`${dir}/${c.spec.seed}.gguf`, ggufBytes(c.spec, weights));
  if (c.hf) await writeHfDirectory(`${dir}/${c.spec.seed}`, c.spec, weights);
  jobModels.push({ path: `${dir}/${c.spec.seed}.gguf`, prompt: PROMPT, steps: STEPS, texts: TEXTS, kvType: c.kv === "f16" ? "F16" : "F32", contextSize: c.context ?? 256 });
}
/** llama.cpp run once for every case; a failure is kept and reported by each test. */
const oracle = await runLlamaCpp(dir, jobModels, projectRoot);

const backends = await oracleBackends();

/** Our greedy run: log-probs after the prompt and after each generated token, and the tokens. */
async function ourRun(backend: Backend, host: LoadedModel, kvDtype: KvDType = "f32"): Promise<{ logProbs: Float64Array[]; tokens: number[] }> {
  const model = uploadModel(backend, host);
  const kv = allocatePagedKv(backend, host.config, 3, 16, kvDtype);
  try {
    return await greedySteps(backend, model, kv, PROMPT, STEPS, [2, 0, 1]);
  } finally {
    freePagedKv(backend, kv);
    freeDeviceModel(backend, model);
  }
}

/** Compares step by step; after a token differs the contexts differ, so comparison stops there. */
function compare(ours: { logProbs: Float64Array[]; tokens: number[] }, theirs: LlamaCppResult, tol: number, exact: boolean): void {
  for (let step = 0; step < STEPS; step++) {
    const ref = theirs.steps[step];
    const { error, spread } = maxLogProbError(ours.logProbs[step], ref.probs);
    assert.ok(error <= tol * spread, `step ${step}: log-prob error ${error.toExponential(2)} > ${tol} × spread ${spread.toFixed(2)}`);
    if (ours.tokens[step] !== ref.token) {
      const margin = ours.logProbs[step][ours.tokens[step]] - ours.logProbs[step][ref.token];
      assert.ok(!exact && margin <= 2 * tol * spread,
        `step ${step}: greedy token ${ours.tokens[step]} vs llama.cpp ${ref.token} (margin ${margin.toExponential(2)}); ours ${ours.tokens} vs ${theirs.steps.map((s) => s.token)}`);
      return;
    }
  }
}

CASES.forEach((c, i) => {
  for (const b of backends) {
    const skip = !b.backend && !b.required;
    if (skip && i === 0) console.error(`skipping llama.cpp oracle on ${b.name}: ${b.why}`);
    const sources = c.hf ? ["gguf", "safetensors"] : ["gguf"];
    for (const source of sources) {
      test(`forward() on ${b.name} matches llama.cpp for ${c.name} (${source}): logits and ${STEPS} greedy tokens`, async () => {
        assert.ok(oracle.results, oracle.error);
        assert.ok(b.backend, `${b.name} is unavailable: ${b.why}`);
        const loaded = await loadModel(source === "gguf" ? `${dir}/${c.spec.seed}.gguf` : `${dir}/${c.spec.seed}`);
        const host = c.context === undefined ? loaded : { ...loaded, config: longRopeFor(loaded.config, c.context) };
        const theirs = oracle.results[i];
        assert.equal(theirs.steps.length, STEPS);
        compare(await ourRun(b.backend, host, c.kv), theirs, c.tol, c.spec.dtype === "f32" && c.kv === undefined);
      }, { ignore: skip });
    }
  }
  test(`the GGUF tokenizer matches llama.cpp's tokenization for ${c.name}`, async () => {
    assert.ok(oracle.results, oracle.error);
    const host = await loadModel(`${dir}/${c.spec.seed}.gguf`);
    TEXTS.forEach((text, t) => assert.deepEqual(host.tokenizer.encode(text), oracle.results![i].tokenized[t], text));
  });
});

test("the oracle's random models give llama.cpp varied greedy tokens (the check is not vacuous)", () => {
  assert.ok(oracle.results, oracle.error);
  for (const r of oracle.results) assert.ok(new Set(r.steps.map((s) => s.token)).size >= 2, `${r.path}: ${r.steps.map((s) => s.token)}`);
});

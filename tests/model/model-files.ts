/**
 * Random-weight model files for loader and oracle tests: one set of weights in Hugging Face
 * order, written as a GGUF (llama.cpp names, llama q/k rows permuted as convert_hf_to_gguf.py
 * does) and as a safetensors directory (config.json, model.safetensors, tokenizer.json).
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import type { WeightDType } from "../../src/backend/types.ts";
import { type IqDType, isIqDType } from "../../src/backend/quant-blocks-iq.ts";
import { type Architecture, type HostTensor, ModelLoadError } from "../../src/model/config.ts";
import { GgufType, type GgufEntry } from "../../src/model/gguf-types.ts";
import { encodeGguf, gguf, type RawGgufTensor } from "../../src/model/gguf-writer.ts";
import { GGUF_ROPE_FREQS } from "../../src/model/gguf-loader.ts";
import { type Llama3RopeScaling, llama3FreqFactors } from "../../src/model/rope-scaling.ts";
import { encodeSafetensors, type SafetensorsEntry } from "../../src/model/safetensors.ts";
import { gptOssHfConfig, gptOssHfTensors } from "./gpt-oss-files.ts";
import { fusePhi3Gguf, fusePhi3Hf, phi3GgufMetadata, phi3HfConfig, phi3Vocab, TEST_CONTEXT } from "./phi3-files.ts";
import { randomIqTensor } from "./iq-blocks.ts";
import { qwen35GgufMetadata, qwen35GgufPart, qwen35HfCheckpoint, qwen35HfConfig, qwen35HfLayer, qwen35MtpAsLayer } from "./qwen35-files.ts";
import { qwen3nextGgufParts } from "./qwen3next-files.ts";
import { lfm2GgufMetadata, lfm2GgufPart, lfm2HfConfig, lfm2HfLayer } from "./lfm2-files.ts";
import { gemma4GgufMetadata, gemma4GgufPart, gemma4HfLayer, gemma4PerLayerWeights, gemma4RopeFreqs, type Gemma4Spec } from "./gemma4-files.ts";
import { falconH1GgufMetadata, falconH1GgufPart, falconH1HfConfig, falconH1HfLayer, falconH1HfWeights, type FalconH1Spec } from "./falcon-h1-files.ts";
import { nemotronHGgufMetadata, nemotronHGgufPart, nemotronHHfConfig, nemotronHHfLayer, nemotronHHfWeights, type NemotronHSpec } from "./nemotron-h-files.ts";
import { graniteHybridHfConfig, graniteHybridHfWeights, isMambaLayer, mamba2GgufMetadata, mamba2GgufPart, mamba2HfLayer } from "./granite-hybrid-files.ts";
import { bpeVocab, gemma4Vocab, spmVocab, tokenizerJson, type TestVocab } from "./test-vocab.ts";
import { writeFile } from "../../src/runtime/fs.ts";

/** Shape and storage of a random test model. */
export interface ModelFileSpec {
  architecture: Architecture;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  vocab: number;
  tied: boolean;
  /** Storage of matrices and the embedding; norms and biases stay f32. */
  dtype: WeightDType;
  /**
   * Per-tensor storage in the GGUF by GGUF name (a quantization mix such as Q4_K_M); default `dtype`.
   * An i-quant (iq2_xxs …) writes random blocks of the values' RMS instead of the values (iq-blocks.ts).
   */
  ggufDtype?: (ggufName: string) => WeightDType | IqDType;
  seed: number;
  /** GGUF vocab: default SentencePiece-style for llama, Qwen2 byte-level BPE otherwise. */
  tokenizer?: "spm" | "qwen2" | "llama-bpe" | "deepseek-v3" | "gpt-4o" | "kimi-k2" | "gemma4";
  /** RoPE base; default 10000 for llama, 1e6 for Qwen. */
  ropeTheta?: number;
  /**
   * Mixture-of-experts feed-forwards in the architecture's layout (Mixtral's for llama; `ffn` then
   * sizes each expert, and a dense layer is 3·ffn wide). `sharedFfn`: the shared expert's width
   * (qwen2moe, glm4moe; a multiple of `ffn` for glm4moe); `denseLayers`: leading dense layers and
   * `scale` the routed weights' scale (glm4moe).
   */
  experts?: { count: number; used: number; sharedFfn?: number; denseLayers?: number; scale?: number; groups?: { count: number; used: number } };
  /** GLM-4.5's multi-token-prediction blocks after the last layer, which llama.cpp loads and never runs. */
  nextn?: number;
  /** RoPE over the first `rotaryDim` dims of each head (GLM-4.5 turns half). */
  rotaryDim?: number;
  /** Llama 3.1-style "llama3" scaling: HF config `rope_scaling`, GGUF `rope_freqs.weight` (as convert_hf_to_gguf.py bakes it). */
  ropeScaling?: Llama3RopeScaling;
  /**
   * DeepSeek's multi-head latent attention (deepseek2; `heads` then counts query heads and
   * `kvHeads`/`headDim` are unused): q's low-rank width (0: q projected directly), the latent's,
   * the per-head non-RoPE, RoPE and value widths. `combinedKvB` writes the GGUF as llama.cpp did
   * before it split kv_b (one `attn_kv_b`, per-head key/value lengths).
   */
  mla?: { qLora: number; kvLora: number; nope: number; rope: number; v: number; combinedKvB?: boolean };
  /**
   * YaRN: GGUF `rope.scaling.*`; deepseek2 with HF `rope_scaling` type "yarn", mscale = mscale_all_dim
   * (GGUF `yarn_log_multiplier`); gpt-oss without (RoPE's magnitude scaled by 0.1·ln(factor) + 1).
   */
  yarn?: { factor: number; originalContext: number; betaFast: number; betaSlow: number; mscaleAllDim?: number };
  /** Ministral 3's attention temperature (GGUF `attention.temperature_scale`, HF `llama_4_scaling_beta`), floored by the YaRN original context. */
  attnTemperature?: number;
  /** Ministral 3's HF checkpoint as released: Mistral3ForConditionalGeneration, the text model under `model.language_model.`. */
  wrapped?: boolean;
  /**
   * Granite 4.0-H's Mamba-2 layers (granite-hybrid-files.ts): all but the `attention` ones; `heads`
   * scan heads over an inner size of twice the hidden size, states of `stateSize`, a convolution of
   * `conv`; `rope` keeps RoPE on the attention layers (Bamba-style; default off, as Granite 4.0-H).
   */
  mamba2?: { attention: number[]; heads: number; stateSize: number; conv: number; rope?: boolean };
  /** Nemotron-H's layers (nemotron-h-files.ts): each a Mamba-2, attention or feed-forward block, as its pattern says. */
  nemotronH?: NemotronHSpec;
  /** Gemma 4's sliding and full-attention layers of their own head sizes (gemma4-files.ts). */
  gemma4?: Gemma4Spec;
  /** Falcon-H1's scan beside every layer's attention, and its multipliers (falcon-h1-files.ts). */
  falconH1?: FalconH1Spec;
  /** LFM2's short convolution layers (lfm2-files.ts): all but the `attention` ones, of width `kernel`. */
  shortConv?: { kernel: number; attention: number[] };
  /** The sliding window in positions: GPT-OSS's every other layer, from layer 0; Gemma 3's five layers of six; OLMo 3's three of four. */
  slidingWindow?: number;
  /** Gemma 3's linear RoPE scaling of its global layers (GGUF `rope.scaling.type` "linear"). */
  ropeLinearFactor?: number;
  /** Gemma 2's soft-capping of the scores and of the logits (absent: not written, so the defaults apply). */
  softcaps?: { attn: number; final: number };
  /** Phi-3's LongRoPE (phi3-files.ts): per-pair divisors for contexts past `originalContext` and up to it. */
  longRope?: { originalContext: number; long: number[]; short: number[] };
  /** The context the files declare (default 256). */
  contextLength?: number;
  /** phi3: write q/k/v and gate/up apart instead of fused (as no converter does; the loader takes both). */
  unfused?: boolean;
  /** Granite's four multipliers (GGUF `embedding_scale`, `attention.scale`, `residual_scale`, `logit_scale`; HF `*_multiplier`, `logits_scaling`). */
  granite?: { embedding: number; attention: number; residual: number; logit: number };
  /** Qwen3.5's Gated DeltaNet layers (qwen35-files.ts): all but every `interval`-th; key and value heads of `dim` each, a convolution of `conv`. */
  deltaNet?: { kHeads: number; vHeads: number; dim: number; conv: number; interval: number; unwrapped?: boolean; fusedExperts?: boolean; legacySsmIn?: boolean };
}

/** The RoPE base a spec's files declare. */
export function ropeThetaOf(spec: ModelFileSpec): number {
  return spec.ropeTheta ?? (spec.architecture === "llama" ? 10000 : 1000000);
}

/** The `rope_freqs.weight` values a spec's GGUF carries, if any. */
export function ropeFreqsOf(spec: ModelFileSpec): number[] | undefined {
  if (spec.gemma4) return gemma4RopeFreqs(spec);
  return spec.ropeScaling && llama3FreqFactors(ropeThetaOf(spec), spec.headDim, spec.ropeScaling);
}

/** Weights in Hugging Face order and names, as f32. */
export type HfWeights = Map<string, { shape: number[]; values: Float32Array }>;

/** Seeded uniform generator in [0, 1) (mulberry32). */
export function seededRandom(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Whether a spec's attention projections have biases (Qwen2's and GLM-4.5's). */
const hasQkvBias = (spec: ModelFileSpec) => ["qwen2", "qwen2moe", "glm4moe", "gpt-oss", "seed_oss"].includes(spec.architecture);

/** Draws the weights of `spec` in HF naming. */
export function randomHfWeights(spec: ModelFileSpec): HfWeights {
  const rand = seededRandom(spec.seed);
  const w: HfWeights = new Map();
  const put = (name: string, shape: number[], scale: number, offset = 0) => {
    const n = shape.reduce((a, b) => a * b, 1);
    w.set(name, { shape, values: new Float32Array(n).map(() => offset + (rand() * 2 - 1) * scale) });
  };
  const { hidden, heads, kvHeads, headDim: hd, ffn, vocab } = spec;
  const swiglu = (prefix: string, width: number) => {
    put(prefix + "gate_proj.weight", [width, hidden], 1 / Math.sqrt(hidden));
    put(prefix + "up_proj.weight", [width, hidden], 1 / Math.sqrt(hidden));
    put(prefix + "down_proj.weight", [hidden, width], 1 / Math.sqrt(width));
  };
  put("model.embed_tokens.weight", [vocab, hidden], 1);
  /** Layer i's feed-forward: its experts (router, each expert, shared ones) where it has them, else a SwiGLU. */
  const feedForward = (i: number, p: string) => {
    const gptOss = spec.architecture === "gpt-oss";
    const experts = spec.experts;
    if (experts && i >= (experts.denseLayers ?? 0)) {
      // MiniMax-M2 names its experts as Mixtral does.
      const mixtral = spec.architecture === "llama" || spec.architecture === "minimax-m2";
      const m = mixtral ? "block_sparse_moe." : "mlp.";
      // A sharper router than the projections, so tokens disagree about their experts.
      put(p + m + "gate.weight", [experts.count, hidden], 4 / Math.sqrt(hidden));
      // GLM-4.5's selection bias, large enough next to the sigmoids to change which experts win.
      if (spec.architecture === "glm4moe" || spec.architecture === "deepseek2") put(p + "mlp.gate.e_score_correction_bias", [experts.count], 0.5);
      if (spec.architecture === "minimax-m2") put(p + "block_sparse_moe.e_score_correction_bias", [experts.count], 0.5);
      if (gptOss) put(p + "mlp.gate.bias", [experts.count], 1);
      for (let e = 0; e < experts.count; e++) {
        const x = `${p}${m}experts.${e}.`;
        if (gptOss) {
          // Gate and up biases up to ±8, past the activation's ±7 clamp for some units.
          put(x + "gate_proj.bias", [ffn], 8);
          put(x + "up_proj.bias", [ffn], 8);
          put(x + "down_proj.bias", [hidden], 0.5);
        }
        if (!mixtral) swiglu(x, ffn);
        else {
          put(x + "w1.weight", [ffn, hidden], 1 / Math.sqrt(hidden));
          put(x + "w3.weight", [ffn, hidden], 1 / Math.sqrt(hidden));
          put(x + "w2.weight", [hidden, ffn], 1 / Math.sqrt(ffn));
        }
      }
      if (experts.sharedFfn) swiglu(p + (spec.architecture === "qwen2moe" ? "mlp.shared_expert." : "mlp.shared_experts."), experts.sharedFfn);
      if (spec.architecture === "qwen2moe") put(p + "mlp.shared_expert_gate.weight", [1, hidden], 4 / Math.sqrt(hidden));
      return;
    }
    swiglu(p + "mlp.", experts ? 3 * ffn : ffn);
  };
  for (let i = 0; i < spec.layers + (spec.nextn ?? 0); i++) {
    const p = `model.layers.${i}.`;
    if (spec.shortConv) {
      lfm2HfLayer(spec, i, put);
      continue;
    }
    if (spec.nemotronH) {
      nemotronHHfLayer(spec, i, put);
      continue;
    }
    if (spec.falconH1) {
      falconH1HfLayer(spec, i, put);
      continue;
    }
    if (spec.gemma4) {
      gemma4HfLayer(spec, i, put);
      if (i === spec.layers - 1) gemma4PerLayerWeights(spec, put);
      continue;
    }
    if (spec.mamba2 && isMambaLayer(spec, i)) {
      put(p + "input_layernorm.weight", [hidden], 0.2, 1);
      mamba2HfLayer(spec, i, put);
      put(p + "post_attention_layernorm.weight", [hidden], 0.2, 1);
      feedForward(i, p);
      continue;
    }
    if (spec.deltaNet) {
      // Past the layers, Qwen3.5's multi-token-prediction block (`mtp.`): an attention layer, its input projection and norms.
      const q = i >= spec.layers ? "mtp.layers.0." : p;
      qwen35HfLayer(spec, i, put, q);
      if (i >= spec.layers) {
        put("mtp.fc.weight", [hidden, 2 * hidden], 1 / Math.sqrt(hidden));
        put("mtp.pre_fc_norm_embedding.weight", [hidden], 0.2);
        put("mtp.pre_fc_norm_hidden.weight", [hidden], 0.2);
        put("mtp.norm.weight", [hidden], 0.2);
      }
      const moe = spec.experts;
      if (!moe) {
        swiglu(q + "mlp.", ffn);
        continue;
      }
      // Qwen3.5-MoE: Qwen2-MoE's experts and sigmoid-gated shared expert.
      put(q + "mlp.gate.weight", [moe.count, hidden], 4 / Math.sqrt(hidden));
      for (let e = 0; e < moe.count; e++) swiglu(`${q}mlp.experts.${e}.`, ffn);
      swiglu(q + "mlp.shared_expert.", moe.sharedFfn ?? ffn);
      put(q + "mlp.shared_expert_gate.weight", [1, hidden], 4 / Math.sqrt(hidden));
      continue;
    }
    if (i >= spec.layers) {
      // A GLM-4.5 NextN block: its own input projection and norms, then a whole MoE layer.
      put(p + "eh_proj.weight", [hidden, 2 * hidden], 1 / Math.sqrt(hidden));
      put(p + "enorm.weight", [hidden], 0.2, 1);
      put(p + "hnorm.weight", [hidden], 0.2, 1);
      put(p + "shared_head.norm.weight", [hidden], 0.2, 1);
    }
    // OLMo 2 and EXAONE 4 norm only their blocks' outputs.
    const olmo = spec.architecture === "olmo2";
    const postOnly = olmo || spec.architecture === "exaone4";
    if (!postOnly) put(p + "input_layernorm.weight", [hidden], 0.2, 1);
    const mla = spec.mla;
    if (mla) {
      // DeepSeek V3's attention: q through a low-rank bottleneck, one latent + RoPE key per token.
      const qk = heads * (mla.nope + mla.rope);
      if (mla.qLora > 0) {
        put(p + "self_attn.q_a_proj.weight", [mla.qLora, hidden], 1 / Math.sqrt(hidden));
        put(p + "self_attn.q_a_layernorm.weight", [mla.qLora], 0.2, 1);
        put(p + "self_attn.q_b_proj.weight", [qk, mla.qLora], 1 / Math.sqrt(mla.qLora));
      } else put(p + "self_attn.q_proj.weight", [qk, hidden], 1 / Math.sqrt(hidden));
      put(p + "self_attn.kv_a_proj_with_mqa.weight", [mla.kvLora + mla.rope, hidden], 1 / Math.sqrt(hidden));
      put(p + "self_attn.kv_a_layernorm.weight", [mla.kvLora], 0.2, 1);
      put(p + "self_attn.kv_b_proj.weight", [heads * (mla.nope + mla.v), mla.kvLora], 1 / Math.sqrt(mla.kvLora));
      put(p + "self_attn.o_proj.weight", [hidden, heads * mla.v], 1 / Math.sqrt(heads * mla.v));
    } else {
      put(p + "self_attn.q_proj.weight", [heads * hd, hidden], 1 / Math.sqrt(hidden));
      put(p + "self_attn.k_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
      put(p + "self_attn.v_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
      put(p + "self_attn.o_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
    }
    if (hasQkvBias(spec)) {
      put(p + "self_attn.q_proj.bias", [heads * hd], 0.5);
      put(p + "self_attn.k_proj.bias", [kvHeads * hd], 0.5);
      put(p + "self_attn.v_proj.bias", [kvHeads * hd], 0.5);
    }
    const gptOss = spec.architecture === "gpt-oss";
    if (gptOss) {
      put(p + "self_attn.o_proj.bias", [hidden], 0.5);
      // Sinks from -3 to 3: some heads mostly attend to nothing, some hardly notice theirs.
      put(p + "self_attn.sinks", [heads], 3);
    }
    const gemma3 = spec.architecture === "gemma3";
    // Gemma 2 has Gemma 3's norms but no q/k norms.
    const gemma = gemma3 || spec.architecture === "gemma2";
    if (spec.architecture === "qwen3" || spec.architecture === "qwen3moe" || gemma3 || postOnly || spec.architecture === "minimax-m2") {
      // OLMo 2's and MiniMax-M2's norms span the whole projection.
      const whole = olmo || spec.architecture === "minimax-m2";
      put(p + "self_attn.q_norm.weight", [whole ? heads * hd : hd], 0.2, 1);
      put(p + "self_attn.k_norm.weight", [whole ? kvHeads * hd : hd], 0.2, 1);
    }
    // Gemma's post_attention_layernorm norms the attention's output; its feed-forward has a norm on
    // each side. As llama.cpp's converter writes them: Gemma's 1 + w already added.
    put(p + "post_attention_layernorm.weight", [hidden], 0.2, 1);
    if (gemma) put(p + "pre_feedforward_layernorm.weight", [hidden], 0.2, 1);
    if (gemma || postOnly) put(p + "post_feedforward_layernorm.weight", [hidden], 0.2, 1);
    feedForward(i, p);
  }
  // Signed final-norm weights: with tied embeddings a positive norm makes every token predict
  // itself, and greedy decoding would repeat one token (a weak check).
  put(spec.shortConv ? "model.embedding_norm.weight" : "model.norm.weight", [hidden], 1.5);
  if (!spec.tied) put("lm_head.weight", [spec.vocab, hidden], 1 / Math.sqrt(hidden));
  return w;
}

/** llama.cpp's permutation of Llama q/k rows (convert_hf_to_gguf.py `LlamaModel.permute`). */
export function permuteForGguf(values: Float32Array, rows: number, cols: number, heads: number): Float32Array {
  const hd = rows / heads;
  const out = new Float32Array(values.length);
  for (let h = 0; h < heads; h++) {
    for (let half = 0; half < 2; half++) {
      for (let j = 0; j < hd / 2; j++) {
        const src = h * hd + half * (hd / 2) + j;
        const dst = h * hd + j * 2 + half;
        out.set(values.subarray(src * cols, (src + 1) * cols), dst * cols);
      }
    }
  }
  return out;
}

const GGUF_LAYER: Record<string, string> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.o_proj.bias": "attn_output.bias",
  "self_attn.sinks": "attn_sinks.weight",
  "mlp.gate.bias": "ffn_gate_inp.bias",
  "self_attn.q_proj.bias": "attn_q.bias",
  "self_attn.k_proj.bias": "attn_k.bias",
  "self_attn.v_proj.bias": "attn_v.bias",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.q_a_proj.weight": "attn_q_a.weight",
  "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
  "self_attn.q_b_proj.weight": "attn_q_b.weight",
  "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
  "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
  "self_attn.kv_b_proj.weight": "attn_kv_b.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
  "post_attention_layernorm.weight": "ffn_norm.weight",
  "pre_feedforward_layernorm.weight": "ffn_norm.weight",
  "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight",
  "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
  "block_sparse_moe.e_score_correction_bias": "exp_probs_b.bias",
  "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
  "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
  "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
  "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
  "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
  "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
  "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
  "eh_proj.weight": "nextn.eh_proj.weight",
  "enorm.weight": "nextn.enorm.weight",
  "hnorm.weight": "nextn.hnorm.weight",
  "shared_head.norm.weight": "nextn.shared_head_norm.weight",
};

/** HF per-expert names → the stacked GGUF tensor they join, and the router's name. */
const EXPERT_PART = /^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe|mixer|feed_forward)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.(weight|bias)$/;
const EXPERT_ROLE: Record<string, string> = { gate_proj: "gate", w1: "gate", up_proj: "up", w3: "up", down_proj: "down", w2: "down" };
const ROUTER = /^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.gate\.weight$/;

/** The weights as GGUF tensors: llama.cpp names, experts stacked into `ffn_*_exps` [experts, out, in] (or, as the first Mixtral conversions wrote them, one `ffn_*.E` tensor each). */
function ggufTensors(
  spec: ModelFileSpec,
  weights: HfWeights,
  splitExperts: boolean,
): { name: string; shape: number[]; values: Float32Array; hf: string }[] {
  const out: { name: string; shape: number[]; values: Float32Array; hf: string }[] = [];
  const stacks = new Map<string, { shape: number[]; parts: Float32Array[]; hf: string }>();
  for (const [stored, { shape, values }] of weights) {
    // Qwen3.5's multi-token-prediction block, as convert_hf_to_gguf.py numbers it: the layer after the last.
    const hf = spec.deltaNet && stored.startsWith("mtp.") ? qwen35MtpAsLayer(spec, stored) : stored;
    const next = spec.architecture === "qwen3next" ? qwen3nextGgufParts(spec, hf, shape, values) : spec.shortConv ? lfm2GgufPart(hf, shape, values) : spec.nemotronH ? nemotronHGgufPart(spec, hf, shape, values) : spec.falconH1 ? falconH1GgufPart(spec, hf, shape, values) : spec.gemma4 ? gemma4GgufPart(hf, shape, values) : undefined;
    const own = next ?? (spec.deltaNet ? qwen35GgufPart(spec, hf, shape, values) : spec.mamba2 ? mamba2GgufPart(hf, shape, values) : undefined);
    if (own) {
      out.push(...(Array.isArray(own) ? own : [own]));
      continue;
    }
    const part = EXPERT_PART.exec(hf);
    const router = ROUTER.exec(hf);
    if (router) out.push({ name: `blk.${router[1]}.ffn_gate_inp.weight`, shape, values, hf });
    else if (hf.endsWith("kv_b_proj.weight") && spec.mla && !spec.mla.combinedKvB) out.push(...splitKvBForGguf(spec, ggufName(spec, hf), values, hf));
    // llama.cpp stores Qwen2-MoE's shared-expert gate [1, hidden] as a vector.
    else if (hf.endsWith("shared_expert_gate.weight")) out.push({ name: ggufName(spec, hf), shape: [shape[1]], values, hf });
    else if (!part) out.push({ name: ggufName(spec, hf), shape, values, hf });
    else if (splitExperts) out.push({ name: `blk.${part[1]}.ffn_${EXPERT_ROLE[part[3]]}.${part[2]}.${part[4]}`, shape, values, hf });
    else {
      const name = `blk.${part[1]}.ffn_${EXPERT_ROLE[part[3]]}_exps.${part[4]}`;
      const stack = stacks.get(name) ?? { shape, parts: [], hf };
      stack.parts.push(values);
      stacks.set(name, stack);
    }
  }
  for (const [name, { shape, parts, hf }] of stacks) {
    const values = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    parts.forEach((p, i) => values.set(p, i * p.length));
    out.push({ name, shape: [parts.length, ...shape], values, hf });
  }
  return out;
}

/**
 * convert_hf_to_gguf.py's split of DeepSeek's kv_b_proj [heads·(nope + v), kvLora]: per head, the
 * first nope rows transposed into attn_k_b [heads, kvLora, nope], the next v rows into attn_v_b.
 */
function splitKvBForGguf(spec: ModelFileSpec, kvB: string, values: Float32Array, hf: string) {
  const { nope, v, kvLora } = spec.mla!;
  const heads = spec.heads;
  const k = new Float32Array(heads * kvLora * nope);
  const vv = new Float32Array(heads * v * kvLora);
  for (let h = 0; h < heads; h++) {
    for (let r = 0; r < nope; r++) for (let c = 0; c < kvLora; c++) k[h * kvLora * nope + c * nope + r] = values[(h * (nope + v) + r) * kvLora + c];
    for (let r = 0; r < v; r++) for (let c = 0; c < kvLora; c++) vv[(h * v + r) * kvLora + c] = values[(h * (nope + v) + nope + r) * kvLora + c];
  }
  return [
    { name: kvB.replace("attn_kv_b", "attn_k_b"), shape: [heads, kvLora, nope], values: k, hf },
    { name: kvB.replace("attn_kv_b", "attn_v_b"), shape: [heads, v, kvLora], values: vv, hf },
  ];
}

function ggufName(spec: ModelFileSpec, hf: string): string {
  if (hf === "model.embed_tokens.weight") return "token_embd.weight";
  if (hf === "model.norm.weight") return "output_norm.weight";
  if (hf === "lm_head.weight") return "output.weight";
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
  if (!m || !GGUF_LAYER[m[2]]) throw new Error(`No GGUF name for ${hf}`);
  // GLM-4.5's converter names the pre-feed-forward norm after HF's; Gemma's is the attention's post-norm.
  if (["glm4moe", "gpt-oss", "gemma3", "gemma2", "olmo2", "exaone4", "qwen35", "qwen35moe", "qwen3next", "seed_oss"].includes(spec.architecture) && m[2] === "post_attention_layernorm.weight") {
    return `blk.${m[1]}.post_attention_norm.weight`;
  }
  return `blk.${m[1]}.${GGUF_LAYER[m[2]]}`;
}

/** Vectors (norms, biases) stay f32 in both formats, as converters write them. */
const isVector = (shape: number[]) => shape.length === 1;

/** The vocab a test model's GGUF carries: SentencePiece-style for llama, byte-level BPE for Qwen. */
export function vocabFor(spec: ModelFileSpec): TestVocab {
  const kind = tokenizerKind(spec);
  const vocab = kind === "spm" ? spmVocab(spec.vocab) : kind === "gemma4" ? gemma4Vocab(spec.vocab) : bpeVocab(spec.vocab);
  return spec.architecture === "phi3" ? phi3Vocab(vocab) : vocab;
}

function tokenizerKind(spec: ModelFileSpec): NonNullable<ModelFileSpec["tokenizer"]> {
  return spec.tokenizer ?? (["llama", "gemma3", "gemma2", "phi3"].includes(spec.architecture) ? "spm" : "qwen2");
}

/** GGUF metadata for `spec` (what llama.cpp needs to load it). */
export function ggufMetadata(spec: ModelFileSpec, vocab: TestVocab): [string, GgufEntry][] {
  const a = spec.architecture;
  const meta: [string, GgufEntry][] = [
    ["general.architecture", gguf.str(a)],
    ["general.name", gguf.str(`random-${a}`)],
    [`${a}.context_length`, gguf.u32(spec.contextLength ?? TEST_CONTEXT)],
    [`${a}.embedding_length`, gguf.u32(spec.hidden)],
    [`${a}.block_count`, gguf.u32(spec.layers + (spec.nextn ?? 0))],
    // Granite's experts are sized by the dense key (llama.cpp's granitehybrid reads no other);
    // MiniMax-M2's converter writes its experts' width there too (llama.cpp sizes them by it).
    [`${a}.feed_forward_length`, gguf.u32(spec.experts && a !== "llama" && a !== "granitehybrid" && a !== "minimax-m2" ? spec.ffn * 3 : spec.ffn)],
    [`${a}.attention.head_count`, gguf.u32(spec.heads)],
    ...(spec.mla ? mlaMetadata(spec) : [
      [`${a}.attention.head_count_kv`, gguf.u32(spec.kvHeads)],
      [`${a}.attention.key_length`, gguf.u32(spec.headDim)],
      [`${a}.attention.value_length`, gguf.u32(spec.headDim)],
      [`${a}.rope.dimension_count`, gguf.u32(spec.rotaryDim ?? spec.headDim)],
    ] as [string, GgufEntry][]),
    [`${a}.attention.layer_norm_rms_epsilon`, gguf.f32(1e-5)],
    [`${a}.rope.freq_base`, gguf.f32(ropeThetaOf(spec))],
    ["tokenizer.ggml.model", gguf.str(vocab.kind === "spm" ? "llama" : vocab.kind === "gemma4" ? "gemma4" : "gpt2")],
    ["tokenizer.ggml.tokens", gguf.arr(GgufType.STRING, vocab.tokens)],
    ["tokenizer.ggml.token_type", gguf.arr(GgufType.INT32, vocab.types)],
  ];
  if (spec.experts) {
    meta.push([`${a}.expert_count`, gguf.u32(spec.experts.count)], [`${a}.expert_used_count`, gguf.u32(spec.experts.used)]);
    // MoE files carry a dense width too; a loader that read it would size the experts wrong.
    if (a !== "llama") meta.push([`${a}.expert_feed_forward_length`, gguf.u32(spec.ffn)]);
    const shared = spec.experts.sharedFfn ?? 0;
    if (a === "granitehybrid" && shared > 0) meta.push([`${a}.expert_shared_feed_forward_length`, gguf.u32(shared)]);
    // MiniMax-M2's sigmoid scores, as its converter writes scoring_func.
    if (a === "minimax-m2") meta.push([`${a}.expert_gating_func`, gguf.u32(2)]);
    if (a === "qwen2moe" || a === "qwen35moe" || a === "qwen3next") {
      meta.push([`${a}.expert_shared_feed_forward_length`, gguf.u32(a === "qwen2moe" ? shared : spec.experts.sharedFfn ?? spec.ffn)]);
    }
    if (a === "glm4moe" || a === "deepseek2") {
      // As convert_hf_to_gguf.py writes GLM-4.5 and DeepSeek V3 (gating 2 = sigmoid).
      meta.push(
        [`${a}.expert_shared_count`, gguf.u32(shared / spec.ffn)],
        [`${a}.leading_dense_block_count`, gguf.u32(spec.experts.denseLayers ?? 0)],
        [`${a}.expert_weights_scale`, gguf.f32(spec.experts.scale ?? 1)],
        [`${a}.expert_weights_norm`, gguf.bool(true)],
        [`${a}.expert_gating_func`, gguf.u32(2)],
        [`${a}.nextn_predict_layers`, gguf.u32(spec.nextn ?? 0)],
      );
    }
  }
  if (spec.slidingWindow) meta.push([`${a}.attention.sliding_window`, gguf.u32(spec.slidingWindow)]);
  if (a === "phi3") meta.push(...phi3GgufMetadata(spec));
  if (a === "qwen35" || a === "qwen35moe" || a === "qwen3next") meta.push(...qwen35GgufMetadata(spec));
  if (spec.falconH1) meta.push(...falconH1GgufMetadata(spec));
  if (spec.gemma4) {
    for (const [k, v] of gemma4GgufMetadata(spec)) {
      const at = meta.findIndex(([key]) => key === k);
      if (at >= 0) meta[at] = [k, v];
      else meta.push([k, v]);
    }
  }
  if (spec.shortConv || spec.mamba2 || spec.nemotronH) {
    // The per-layer KV heads replace the uniform count.
    const own = spec.shortConv ? lfm2GgufMetadata(spec) : spec.nemotronH ? nemotronHGgufMetadata(spec) : mamba2GgufMetadata(spec);
    for (const [k, v] of own) {
      const at = meta.findIndex(([key]) => key === k);
      if (at >= 0) meta[at] = [k, v];
      else meta.push([k, v]);
    }
  }
  if (a === "gemma2" && spec.softcaps) meta.push([`${a}.attn_logit_softcapping`, gguf.f32(spec.softcaps.attn)], [`${a}.final_logit_softcapping`, gguf.f32(spec.softcaps.final)]);
  const gr = spec.granite;
  if (gr) {
    meta.push(
      [`${a}.embedding_scale`, gguf.f32(gr.embedding)], [`${a}.attention.scale`, gguf.f32(gr.attention)],
      [`${a}.residual_scale`, gguf.f32(gr.residual)], [`${a}.logit_scale`, gguf.f32(gr.logit)],
    );
  }
  if (spec.ropeLinearFactor) meta.push([`${a}.rope.scaling.type`, gguf.str("linear")], [`${a}.rope.scaling.factor`, gguf.f32(spec.ropeLinearFactor)]);
  const y = spec.yarn;
  if (y && !spec.mla) {
    // As convert_hf_to_gguf.py writes GPT-OSS's rope_scaling (no log multiplier).
    meta.push(
      [`${a}.rope.scaling.type`, gguf.str("yarn")],
      [`${a}.rope.scaling.factor`, gguf.f32(y.factor)],
      [`${a}.rope.scaling.original_context_length`, gguf.u32(y.originalContext)],
    );
    // Ministral 3's: the betas, mscale_all_dim as the log multiplier (unscaled, unlike DeepSeek's).
    if (a === "mistral3") {
      meta.push(
        [`${a}.rope.scaling.yarn_beta_fast`, gguf.f32(y.betaFast)],
        [`${a}.rope.scaling.yarn_beta_slow`, gguf.f32(y.betaSlow)],
        [`${a}.rope.scaling.yarn_log_multiplier`, gguf.f32(y.mscaleAllDim ?? 1)],
      );
    }
  }
  if (spec.attnTemperature !== undefined) meta.push([`${a}.attention.temperature_scale`, gguf.f32(spec.attnTemperature)]);
  if (vocab.kind === "spm") meta.push(["tokenizer.ggml.scores", gguf.arr(GgufType.FLOAT32, vocab.scores)]);
  else {
    meta.push(["tokenizer.ggml.merges", gguf.arr(GgufType.STRING, vocab.merges)]);
    if (vocab.kind !== "gemma4") meta.push(["tokenizer.ggml.pre", gguf.str(tokenizerKind(spec))]);
  }
  meta.push(["tokenizer.ggml.bos_token_id", gguf.u32(vocab.bosId)]);
  meta.push(["tokenizer.ggml.eos_token_id", gguf.u32(vocab.eosId)]);
  meta.push(["tokenizer.ggml.add_bos_token", gguf.bool(a === "llama")]);
  return meta;
}

/**
 * DeepSeek's attention sizes as convert_hf_to_gguf.py writes them: one KV head of latent + RoPE
 * width and the per-head widths under `*_mla`, or (before kv_b was split) per-head lengths only.
 */
function mlaMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  const m = spec.mla!;
  const meta: [string, GgufEntry][] = [
    [`${a}.attention.q_lora_rank`, gguf.u32(m.qLora)],
    [`${a}.attention.kv_lora_rank`, gguf.u32(m.kvLora)],
    [`${a}.rope.dimension_count`, gguf.u32(m.rope)],
    [`${a}.expert_group_count`, gguf.u32(spec.experts?.groups?.count ?? 1)],
    [`${a}.expert_group_used_count`, gguf.u32(spec.experts?.groups?.used ?? 1)],
  ];
  if (m.combinedKvB) {
    meta.push(
      [`${a}.attention.head_count_kv`, gguf.u32(spec.heads)],
      [`${a}.attention.key_length`, gguf.u32(m.nope + m.rope)],
      [`${a}.attention.value_length`, gguf.u32(m.v)],
    );
  } else {
    meta.push(
      [`${a}.attention.head_count_kv`, gguf.u32(1)],
      [`${a}.attention.key_length`, gguf.u32(m.kvLora + m.rope)],
      [`${a}.attention.value_length`, gguf.u32(m.kvLora)],
      [`${a}.attention.key_length_mla`, gguf.u32(m.nope + m.rope)],
      [`${a}.attention.value_length_mla`, gguf.u32(m.v)],
    );
  }
  const y = spec.yarn;
  if (y) {
    meta.push(
      [`${a}.rope.scaling.type`, gguf.str("yarn")],
      [`${a}.rope.scaling.factor`, gguf.f32(y.factor)],
      [`${a}.rope.scaling.original_context_length`, gguf.u32(y.originalContext)],
      [`${a}.rope.scaling.yarn_beta_fast`, gguf.f32(y.betaFast)],
      [`${a}.rope.scaling.yarn_beta_slow`, gguf.f32(y.betaSlow)],
      [`${a}.rope.scaling.yarn_log_multiplier`, gguf.f32(0.1 * (y.mscaleAllDim ?? 1))],
    );
  }
  return meta;
}

/** Tensors and metadata appended to a test GGUF (for malformed-file tests). */
export interface GgufExtras {
  tensors?: HostTensor[];
  /** Entries added, or replacing the spec's own of the same key. */
  metadata?: [string, GgufEntry][];
  /** Write each expert's matrices apart (`blk.N.ffn_gate.E.weight`), as the first Mixtral GGUFs did. */
  splitExperts?: boolean;
}

/** Encodes the weights as a GGUF file (llama q/k permuted for llama.cpp's "normal" RoPE). */
export function ggufBytes(spec: ModelFileSpec, weights: HfWeights, vocab = vocabFor(spec), extras: GgufExtras = {}): Uint8Array {
  const tensors: (HostTensor | RawGgufTensor)[] = [];
  const iqRand = seededRandom(spec.seed ^ 0x5eed);
  const parts = ggufTensors(spec, weights, extras.splitExperts ?? false);
  for (const { name, shape, values, hf } of spec.architecture === "phi3" && !spec.unfused ? fusePhi3Gguf(parts) : parts) {
    let v = values;
    if ((spec.architecture === "llama" || spec.architecture === "smollm3" || spec.architecture === "granite" || spec.architecture === "mistral3") && /self_attn\.[qk]_proj\.(weight|bias)$/.test(hf)) {
      const heads = hf.includes(".q_proj.") ? spec.heads : spec.kvHeads;
      v = permuteForGguf(values, shape[0], shape[1] ?? 1, heads);
    }
    // Routers stay f32, as llama.cpp's quantizer leaves them.
    // Biases too (GPT-OSS's stacked expert biases are 2-D).
    // Qwen3.5's convolution too, as convert_hf_to_gguf.py keeps it; and Mamba-2's per-head A and D ([heads, 1]) and its norm ([1, inner]).
    const ssmSmall = /\.(ssm_a|ssm_d|ssm_norm\.weight)$/.test(name);
    const dtype = isVector(shape) || ssmSmall || name.endsWith(".bias") || name.endsWith("ffn_gate_inp.weight") || name.endsWith("ssm_conv1d.weight") || name.endsWith("shortconv.conv.weight")
      ? "f32"
      : spec.ggufDtype?.(name) ?? spec.dtype;
    tensors.push(isIqDType(dtype) ? randomIqTensor(name, shape, v, dtype, iqRand) : { name, shape, dtype, data: encodeFromF32(v, dtype) });
  }
  const r = spec.longRope;
  if (r) for (const [name, f] of [["rope_factors_long.weight", r.long], ["rope_factors_short.weight", r.short]] as const) tensors.push({ name, shape: [f.length], dtype: "f32", data: encodeFromF32(Float32Array.from(f), "f32") });
  const freqs = ropeFreqsOf(spec);
  if (freqs) tensors.push({ name: GGUF_ROPE_FREQS, shape: [freqs.length], dtype: "f32", data: encodeFromF32(Float32Array.from(freqs), "f32") });
  tensors.push(...(extras.tensors ?? []));
  // An extra entry replaces the spec's own of the same key.
  const extra = extras.metadata ?? [];
  const replaced = new Set(extra.map(([key]) => key));
  return encodeGguf({ metadata: [...ggufMetadata(spec, vocab).filter(([key]) => !replaced.has(key)), ...extra], tensors });
}

/** The HF config.json form of llama3 scaling (Llama 3.1's config.json spells it this way). */
export function hfRopeScaling(s: Llama3RopeScaling): Record<string, unknown> {
  return {
    factor: s.factor,
    low_freq_factor: s.lowFreqFactor,
    high_freq_factor: s.highFreqFactor,
    original_max_position_embeddings: s.originalMaxPositionEmbeddings,
    rope_type: "llama3",
  };
}

/** config.json's expert settings, as each family's released configs spell them. */
function hfExpertConfig(spec: ModelFileSpec): Record<string, unknown> {
  const e = spec.experts;
  if (!e) return {};
  const used = { num_experts_per_tok: e.used };
  switch (spec.architecture) {
    case "llama":
      return { num_local_experts: e.count, ...used };
    case "minimax-m2":
      // MiniMaxM2Config: sigmoid scores with a routing bias, q/k norms over the whole projection, RoPE on rotary_dim.
      return {
        num_local_experts: e.count, ...used, scoring_func: "sigmoid", use_routing_bias: true, use_qk_norm: true, qk_norm_type: "per_layer",
        rotary_dim: spec.rotaryDim ?? spec.headDim, shared_intermediate_size: 0,
      };
    case "gpt-oss":
      return {}; // gpt-oss-files.ts gptOssHfConfig
    case "deepseek2":
      return {
        n_routed_experts: e.count, ...used, moe_intermediate_size: spec.ffn, n_shared_experts: (e.sharedFfn ?? 0) / spec.ffn,
        first_k_dense_replace: e.denseLayers ?? 0, routed_scaling_factor: e.scale ?? 1, norm_topk_prob: true,
        n_group: e.groups?.count ?? 1, topk_group: e.groups?.used ?? 1, scoring_func: "sigmoid", topk_method: "noaux_tc",
        num_nextn_predict_layers: spec.nextn ?? 0,
      };
    case "glm4moe":
      return {
        n_routed_experts: e.count, ...used, moe_intermediate_size: spec.ffn, n_shared_experts: (e.sharedFfn ?? 0) / spec.ffn,
        first_k_dense_replace: e.denseLayers ?? 0, routed_scaling_factor: e.scale ?? 1, norm_topk_prob: true, n_group: 1, topk_group: 1,
        num_nextn_predict_layers: spec.nextn ?? 0,
      };
    case "qwen35moe":
      // Qwen3_5MoeTextConfig: no norm_topk_prob (renormalised), no sparse-step keys.
      return { num_experts: e.count, ...used, moe_intermediate_size: spec.ffn, shared_expert_intermediate_size: e.sharedFfn ?? spec.ffn };
    case "qwen3next":
      return {
        num_experts: e.count, ...used, moe_intermediate_size: spec.ffn, shared_expert_intermediate_size: e.sharedFfn ?? spec.ffn, norm_topk_prob: true,
        decoder_sparse_step: 1, mlp_only_layers: [],
      };
    default:
      return {
        num_experts: e.count, ...used, moe_intermediate_size: spec.ffn,
        ...(spec.architecture === "qwen2moe" ? { shared_expert_intermediate_size: e.sharedFfn ?? 0, norm_topk_prob: false } : { norm_topk_prob: true }),
        decoder_sparse_step: 1, mlp_only_layers: [],
      };
  }
}

/** config.json's latent attention and YaRN settings, as DeepSeek V3's and Kimi K2's spell them. */
function hfMlaConfig(spec: ModelFileSpec): Record<string, unknown> {
  const m = spec.mla!;
  const y = spec.yarn;
  return {
    q_lora_rank: m.qLora > 0 ? m.qLora : null,
    kv_lora_rank: m.kvLora,
    qk_nope_head_dim: m.nope,
    qk_rope_head_dim: m.rope,
    v_head_dim: m.v,
    head_dim: m.rope,
    ...(y
      ? {
        rope_scaling: {
          type: "yarn", factor: y.factor, original_max_position_embeddings: y.originalContext, beta_fast: y.betaFast, beta_slow: y.betaSlow,
          mscale: y.mscaleAllDim, mscale_all_dim: y.mscaleAllDim,
        },
      }
      : {}),
  };
}

/** Writes a Hugging Face directory holding the same weights (block formats are stored as f32 there). */
export async function writeHfDirectory(dir: string, spec: ModelFileSpec, weights: HfWeights): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const dtype = spec.dtype === "f16" || spec.dtype === "bf16" ? spec.dtype : "f32";
  const gptOss = spec.architecture === "gpt-oss";
  // Gemma's checkpoints store w where its norms weigh by 1 + w (the GGUF stores 1 + w).
  const gemma = spec.architecture === "gemma3" || spec.architecture === "gemma2";
  const hfWeights = spec.architecture === "phi3" && !spec.unfused ? fusePhi3Hf(weights) : spec.mamba2 ? graniteHybridHfWeights(spec, weights) : spec.nemotronH ? nemotronHHfWeights(weights) : spec.falconH1 ? falconH1HfWeights(weights) : weights;
  const tensors: SafetensorsEntry[] = gptOss ? gptOssHfTensors(spec, weights, dtype) : [...hfWeights].map(([name, { shape, values }]) => {
    const dt = isVector(shape) ? "f32" : dtype;
    const v = gemma && name.endsWith("norm.weight") ? values.map((x) => x - 1) : values;
    return { name, shape, dtype: dt, data: encodeFromF32(v, dt) };
  });
  const vocab = bpeVocab(Math.min(spec.vocab, 300));
  const mixtral = spec.architecture === "llama" && spec.experts !== undefined;
  const names: Record<Architecture, [string, string]> = {
    llama: ["LlamaForCausalLM", "llama"],
    qwen2: ["Qwen2ForCausalLM", "qwen2"],
    qwen3: ["Qwen3ForCausalLM", "qwen3"],
    qwen2moe: ["Qwen2MoeForCausalLM", "qwen2_moe"],
    qwen3moe: ["Qwen3MoeForCausalLM", "qwen3_moe"],
    glm4moe: ["Glm4MoeForCausalLM", "glm4_moe"],
    deepseek2: ["DeepseekV3ForCausalLM", "kimi_k2"],
    "gpt-oss": ["GptOssForCausalLM", "gpt_oss"],
    gemma3: ["Gemma3ForCausalLM", "gemma3_text"],
    phi3: ["Phi3ForCausalLM", "phi3"],
    smollm3: ["SmolLM3ForCausalLM", "smollm3"],
    granite: ["GraniteForCausalLM", "granite"],
    olmo2: ["Olmo2ForCausalLM", "olmo2"],
    exaone4: ["Exaone4ForCausalLM", "exaone4"],
    gemma2: ["Gemma2ForCausalLM", "gemma2"],
    qwen35: ["Qwen3_5ForCausalLM", "qwen3_5_text"],
    qwen35moe: ["Qwen3_5MoeForCausalLM", "qwen3_5_moe_text"],
    qwen3next: ["Qwen3NextForCausalLM", "qwen3_next"],
    mistral3: ["Ministral3ForCausalLM", "ministral3"],
    lfm2: ["Lfm2ForCausalLM", "lfm2"],
    granitehybrid: ["GraniteMoeHybridForCausalLM", "granitemoehybrid"],
    nemotron_h: ["NemotronHForCausalLM", "nemotron_h"],
    nemotron_h_moe: ["NemotronHForCausalLM", "nemotron_h"],
    lfm2moe: ["Lfm2MoeForCausalLM", "lfm2_moe"],
    "falcon-h1": ["FalconH1ForCausalLM", "falcon_h1"],
    "minimax-m2": ["MiniMaxM2ForCausalLM", "minimax_m2"],
    seed_oss: ["SeedOssForCausalLM", "seed_oss"],
    gemma4: ["Gemma4ForCausalLM", "gemma4_text"],
  };
  const [archName, modelType] = mixtral ? ["MixtralForCausalLM", "mixtral"] : names[spec.architecture];
  const config = {
    architectures: [archName],
    model_type: modelType,
    ...hfExpertConfig(spec),
    hidden_size: spec.hidden,
    num_hidden_layers: spec.layers,
    num_attention_heads: spec.heads,
    num_key_value_heads: spec.kvHeads,
    head_dim: spec.headDim,
    intermediate_size: spec.experts && !mixtral && spec.architecture !== "minimax-m2" ? spec.ffn * 3 : spec.ffn,
    ...(gptOss ? gptOssHfConfig(spec) : {}),
    ...(spec.rotaryDim !== undefined ? { partial_rotary_factor: spec.rotaryDim / spec.headDim } : {}),
    ...(spec.architecture === "glm4moe" ? { attention_bias: true, use_qk_norm: false } : {}),
    ...(spec.architecture === "seed_oss" ? { attention_bias: true, attention_out_bias: false, mlp_bias: false } : {}),
    ...(gemma ? gemma3HfConfig(spec) : {}),
    ...(spec.architecture === "gemma2"
      ? { sliding_window: spec.slidingWindow ?? 4096, attn_logit_softcapping: spec.softcaps?.attn ?? null, final_logit_softcapping: spec.softcaps?.final ?? null, rope_local_base_freq: undefined }
      : {}),
    ...(spec.architecture === "phi3" ? phi3HfConfig(spec) : {}),
    ...(spec.architecture === "olmo2" && spec.slidingWindow
      ? { architectures: ["Olmo3ForCausalLM"], model_type: "olmo3", sliding_window: spec.slidingWindow, layer_types: Array.from({ length: spec.layers }, (_, i) => (i % 4 < 3 ? "sliding_attention" : "full_attention")) }
      : {}),
    ...(spec.granite
      ? { embedding_multiplier: spec.granite.embedding, attention_multiplier: spec.granite.attention, residual_multiplier: spec.granite.residual, logits_scaling: spec.granite.logit }
      : {}),
    ...(spec.deltaNet ? qwen35HfConfig(spec) : {}),
    ...(spec.shortConv ? lfm2HfConfig(spec) : {}),
    ...(spec.mamba2 ? graniteHybridHfConfig(spec) : {}),
    ...(spec.nemotronH ? nemotronHHfConfig(spec) : {}),
    ...(spec.falconH1 ? falconH1HfConfig(spec) : {}),
    ...(spec.architecture === "exaone4"
      ? { sliding_window: spec.slidingWindow ?? null, layer_types: Array.from({ length: spec.layers }, (_, i) => (spec.slidingWindow && (i + 1) % 4 !== 0 ? "sliding_attention" : "full_attention")) }
      : {}),
    rms_norm_eps: 1e-5,
    rope_theta: ropeThetaOf(spec),
    ...(spec.ropeScaling ? { rope_scaling: hfRopeScaling(spec.ropeScaling) } : {}),
    ...(spec.mla ? hfMlaConfig(spec) : {}),
    ...(spec.architecture === "mistral3" ? ministral3RopeParameters(spec) : {}),
    max_position_embeddings: spec.contextLength ?? TEST_CONTEXT,
    tie_word_embeddings: spec.tied,
    vocab_size: spec.vocab,
    bos_token_id: vocab.bosId,
    eos_token_id: vocab.eosId,
  };
  const checkpoint = spec.deltaNet ? qwen35HfCheckpoint(spec, config, tensors) : spec.wrapped ? mistral3Wrapped(config, tensors) : { config, tensors };
  await writeFile(`${dir}/config.json`, JSON.stringify(checkpoint.config, null, 2));
  await writeFile(`${dir}/model.safetensors`, encodeSafetensors(checkpoint.tensors, { format: "pt" }));
  await writeFile(`${dir}/tokenizer.json`, JSON.stringify(tokenizerJson(vocab)));
  await writeFile(`${dir}/tokenizer_config.json`, JSON.stringify({
    add_bos_token: spec.architecture === "llama",
    chat_template: "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
  }));
}

/** Ministral3Config's `rope_parameters`: YaRN (mscale 1) and Llama 4's temperature. */
function ministral3RopeParameters(spec: ModelFileSpec): Record<string, unknown> {
  const y = spec.yarn;
  return {
    rope_parameters: {
      rope_type: y ? "yarn" : "default", rope_theta: ropeThetaOf(spec),
      ...(y ? { factor: y.factor, original_max_position_embeddings: y.originalContext, beta_fast: y.betaFast, beta_slow: y.betaSlow, mscale: 1, mscale_all_dim: y.mscaleAllDim ?? 1 } : {}),
      ...(spec.attnTemperature !== undefined ? { llama_4_scaling_beta: spec.attnTemperature } : {}),
    },
  };
}

/** A Ministral 3 checkpoint as released: Mistral3ForConditionalGeneration, text config nested, its weights under `model.language_model.`, a vision weight left alone. */
function mistral3Wrapped(config: Record<string, unknown>, tensors: SafetensorsEntry[]): { config: Record<string, unknown>; tensors: SafetensorsEntry[] } {
  const vision: SafetensorsEntry = { name: "model.vision_tower.patch_conv.weight", shape: [4, 3], dtype: "f32", data: new Uint8Array(48) };
  return {
    config: { architectures: ["Mistral3ForConditionalGeneration"], model_type: "mistral3", text_config: { ...config, model_type: "ministral3" }, vision_config: { model_type: "pixtral" } },
    tensors: [...tensors.map((t) => ({ ...t, name: t.name.replace(/^model\./, "model.language_model.") })), vision],
  };
}

/** Gemma 3's config.json fields as transformers' Gemma3TextConfig writes them (pattern 6 left to its default). */
function gemma3HfConfig(spec: ModelFileSpec): Record<string, unknown> {
  return {
    hidden_activation: "gelu_pytorch_tanh",
    query_pre_attn_scalar: spec.headDim,
    sliding_window: spec.slidingWindow ?? null,
    rope_local_base_freq: 10000,
    rope_scaling: spec.ropeLinearFactor ? { rope_type: "linear", factor: spec.ropeLinearFactor } : null,
    final_logit_softcapping: null,
    attn_logit_softcapping: null,
  };
}

/** Writes `spec`'s random weights as a GGUF at `${dir}/${name}.gguf` (with `extras`) and returns its path. */
export async function writeTestGguf(dir: string, name: string, spec: ModelFileSpec, extras?: GgufExtras): Promise<string> {
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, randomHfWeights(spec), undefined, extras));
  return `${dir}/${name}.gguf`;
}

/** Writes `spec`'s random weights as a Hugging Face directory `${dir}/${name}`, its config.json edited by `edit`, and returns its path. */
export async function writeTestHfDirectory(
  dir: string, name: string, spec: ModelFileSpec, edit: (cfg: Record<string, unknown>) => Record<string, unknown> = (c) => c,
): Promise<string> {
  const path = `${dir}/${name}`;
  await writeHfDirectory(path, spec, randomHfWeights(spec));
  const cfgPath = `${path}/config.json`;
  await writeFile(cfgPath, JSON.stringify(edit(JSON.parse(readFileSync(cfgPath, "utf8")) as Record<string, unknown>)));
  return path;
}

/** `model` cut to its first `n` layers: a cheap draft that agrees with the whole model often, not always. */
export function firstLayers<M extends { config: { numLayers: number }; weights: { layers: readonly unknown[] } }>(model: M, n: number): M {
  return { ...model, config: { ...model.config, numLayers: n }, weights: { ...model.weights, layers: model.weights.layers.slice(0, n) } };
}

/** Asserts that `p` rejects with a one-line ModelLoadError matching `pattern` (what every load failure a user can cause must be). */
export async function expectLoadError(p: Promise<unknown>, pattern: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ModelLoadError, `expected ModelLoadError, got ${e}`);
    assert.match(e.message, pattern);
    assert.ok(!e.message.includes("\n"), "one line");
    return true;
  });
}

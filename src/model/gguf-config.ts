/**
 * A GGUF's ModelConfig from its `{arch}.*` and `tokenizer.ggml.*` metadata and the tensors present
 * (experts: gguf-moe.ts; DeepSeek's latent attention: gguf-deepseek.ts; GPT-OSS's and Gemma 3's
 * additions: gguf-gpt-oss.ts, gguf-gemma3.ts).
 */
import { type Architecture, ARCHITECTURES, type ModelConfig, ModelLoadError, nopeEvery, POOLING_TYPES, type SlidingWindow, slidingLayers } from "./config.ts";
import { GgufMetadata, perLayerNumber, positiveInteger } from "./gguf-metadata.ts";
import { ggufSamplingDefaults } from "./gguf-sampling.ts";
import type { GgufHeader } from "./gguf-reader.ts";
import { ggufMagnitudeYarn, ggufSlidingWindow, withHarmonyStops } from "./gguf-gpt-oss.ts";
import { ggufGemma2, ggufGemma3 } from "./gguf-gemma3.ts";
import { ggufGranite } from "./granite.ts";
import { ggufQwen35 } from "./qwen35.ts";
import { ggufMistral3 } from "./mistral3.ts";
import { ggufLfm2 } from "./lfm2.ts";
import { ggufGraniteHybrid } from "./granite-hybrid.ts";
import { ggufFalconH1 } from "./falcon-h1.ts";
import { ggufGemma4 } from "./gguf-gemma4.ts";
import { ggufNemotronH } from "./nemotron-h.ts";
import { ggufMla, ggufYarn } from "./gguf-deepseek.ts";
import { ggufMoe } from "./gguf-moe.ts";
import { GGUF_TENSOR_NAMES } from "./gguf-names.ts";
import type { LayerRole } from "./weights.ts";
import { preAddsBos } from "./tokenizer-bpe.ts";

/** SmolLM3's NoPE period: llama.cpp fixes it at 4 (no GGUF key), as transformers' default `no_rope_layer_interval`. */
const SMOLLM3_NOPE_INTERVAL = 4;

/**
 * EXAONE 4's window as llama.cpp reads it: only the 64-layer 32B slides (three layers of four, window
 * `attention.sliding_window` or 4096); the 1.2B's every layer sees the whole context, whatever the file says.
 */
function exaone4Window(meta: GgufMetadata, arch: string, numLayers: number): SlidingWindow | undefined {
  if (numLayers !== 64) return undefined;
  return { size: meta.number(`${arch}.attention.sliding_window`, 4096), layers: slidingLayers(numLayers, 4) };
}

/** Nemotron-H's query heads: a number, or a per-layer array whose attention layers share one (0 elsewhere). */
function nemotronHeads(meta: GgufMetadata, key: string, path: string): number {
  const raw = meta.entries.get(key)?.value;
  if (!Array.isArray(raw)) return meta.number(key);
  const heads = [...new Set(raw.map(Number).filter((h) => h !== 0))];
  if (heads.length !== 1) throw new ModelLoadError(`Model "${path}" has "${key}" [${raw.join(", ")}]; expected one head count for its attention layers`);
  return heads[0];
}

/**
 * The config fields a nemotron_h GGUF sets: its layers' blocks and Mamba-2 geometry, NoPE attention
 * (its attention layers turn nothing), the ReLU² feed-forward, biases where its first attention or
 * feed-forward layer has them. No `attention.scale`: llama.cpp's nemotron_h reads none (1/√headDim).
 */
function nemotronHConfig(n: NonNullable<ReturnType<typeof ggufNemotronH>>, has: (layer: number, role: LayerRole) => boolean, numLayers: number): Partial<ModelConfig> {
  const attention = n.layerBlocks.findIndex((b, i) => b === "mixer" && !n.mamba2.layers[i]);
  const ffn = n.layerBlocks.indexOf("ffn");
  return {
    mamba2: n.mamba2,
    layerBlocks: n.layerBlocks,
    ffnActivation: "relu2",
    nopeLayers: Array<boolean>(numLayers).fill(true),
    qkvBias: attention >= 0 && has(attention, "bq"),
    qkNorm: false,
    ...(attention >= 0 && has(attention, "bo") ? { outputBias: true } : {}),
    ...(ffn >= 0 && has(ffn, "bUp") ? { ffnBias: true } : {}),
  };
}

/** Builds the ModelConfig from GGUF metadata and the tensors present. */
export function ggufConfig(header: GgufHeader, path: string): ModelConfig {
  const meta = new GgufMetadata(header.metadata, path);
  const arch = meta.string("general.architecture", "");
  if (!ARCHITECTURES.includes(arch as Architecture)) {
    throw new ModelLoadError(`Unknown architecture "${arch}" in "${path}"; supported: ${ARCHITECTURES.join(", ")}`);
  }
  const architecture = arch as Architecture;
  const tensors = new Map(header.tensors.map((t) => [t.name, t]));
  const embd = tensors.get(GGUF_TENSOR_NAMES.tokenEmbedding);
  if (!embd) throw new ModelLoadError(`Model "${path}" lacks the tensor "${GGUF_TENSOR_NAMES.tokenEmbedding}"`);
  const hiddenSize = positiveInteger(meta.number(`${arch}.embedding_length`), `${arch}.embedding_length`, path);
  // Nemotron-H's layers are each a Mamba-2, attention or feed-forward block (nemotron-h.ts).
  const nemotron = architecture === "nemotron_h" || architecture === "nemotron_h_moe" ? ggufNemotronH(meta, arch, path) : undefined;
  const numHeads = positiveInteger(nemotron ? nemotronHeads(meta, `${arch}.attention.head_count`, path) : perLayerNumber(meta, `${arch}.attention.head_count`, path), `${arch}.attention.head_count`, path);
  // LFM2's convolution layers have no KV heads (0 in its per-layer array).
  const lfm2 = architecture === "lfm2" || architecture === "lfm2moe" ? ggufLfm2(meta, arch, path) : undefined;
  // Granite 4.0-H's Mamba-2 layers too (granite-hybrid.ts).
  const hybrid = architecture === "granitehybrid" ? ggufGraniteHybrid(meta, arch, hiddenSize, path) : undefined;
  // Falcon-H1: every layer a Mamba-2 layer that also attends (its scan's gated norm optional).
  const falconH1 = architecture === "falcon-h1" ? ggufFalconH1(meta, arch, tensors.has(GGUF_TENSOR_NAMES.layer(0, "ssmNorm")), path) : undefined;
  // Gemma 4: its full-attention and sliding layers' KV heads differ (gguf-gemma4.ts).
  const gemma4 = architecture === "gemma4"
    ? ggufGemma4(meta, arch, { hiddenSize, numLayers: meta.number(`${arch}.block_count`), ropeTheta: meta.number(`${arch}.rope.freq_base`, 10000) }, (name) => tensors.has(name), path)
    : undefined;
  const numKvHeads = gemma4?.numKvHeads ?? lfm2?.numKvHeads ?? hybrid?.numKvHeads ?? nemotron?.numKvHeads ?? positiveInteger(perLayerNumber(meta, `${arch}.attention.head_count_kv`, path, numHeads), `${arch}.attention.head_count_kv`, path);
  const keyLength = `${arch}.attention.key_length`;
  const headDim = meta.has(keyLength) ? positiveInteger(meta.number(keyLength), keyLength, path) : Math.floor(hiddenSize / numHeads);
  const ropeDim = meta.number(`${arch}.rope.dimension_count`, headDim);
  if (!Number.isInteger(ropeDim) || ropeDim <= 0 || ropeDim % 2 !== 0 || ropeDim > headDim) {
    throw new ModelLoadError(`Model "${path}" rotates ${ropeDim} of ${headDim} head dims; expected an even count from 2 to ${headDim}`);
  }
  // Qwen3.5's sections turn text as one NeoX rotation (qwen35.ts).
  if (meta.has(`${arch}.rope.dimension_sections`) && architecture !== "qwen35" && architecture !== "qwen35moe") {
    throw new ModelLoadError(`Model "${path}" uses multimodal RoPE sections ("${arch}.rope.dimension_sections"), which are not supported`);
  }
  const scalingType = meta.string(`${arch}.rope.scaling.type`, "none");
  // Gemma 3's linear scaling is its global layers' (gguf-gemma3.ts).
  const yarn = scalingType !== "none" && meta.number(`${arch}.rope.scaling.factor`, 1) !== 1 && architecture !== "gemma3";
  if (yarn && (scalingType !== "yarn" || (architecture !== "deepseek2" && architecture !== "gpt-oss" && architecture !== "mistral3"))) {
    throw new ModelLoadError(`Model "${path}" uses RoPE scaling type "${scalingType}"; only rope_freqs factors (and YaRN for deepseek2, gpt-oss and mistral3) are supported`);
  }
  if (numHeads % numKvHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numHeads} heads, not a multiple of its ${numKvHeads} KV heads`);
  }
  const tokModel = meta.string("tokenizer.ggml.model", "");
  const optionalId = (key: string) => meta.optionalNumber(key);
  // As llama.cpp, a special-token id outside the vocabulary is ignored.
  const validId = (id: number | undefined): id is number => id !== undefined && Number.isInteger(id) && id >= 0 && id < embd.shape[0];
  const poolingNumber = meta.optionalNumber(`${arch}.pooling_type`);
  const pooling = poolingNumber === undefined ? undefined : POOLING_TYPES[poolingNumber];
  if (poolingNumber !== undefined && pooling === undefined) {
    throw new ModelLoadError(`GGUF metadata "${arch}.pooling_type" in "${path}" is ${poolingNumber}; known types are 0 to ${POOLING_TYPES.length - 1} (${POOLING_TYPES.join(", ")})`);
  }
  const vocabTokens = meta.array("tokenizer.ggml.tokens");
  // A token id past the embedding's rows would index outside it (llama.cpp refuses such files too).
  if (vocabTokens && vocabTokens.length > embd.shape[0]) {
    throw new ModelLoadError(`Model "${path}" has ${vocabTokens.length} tokens (tokenizer.ggml.tokens) but its "${GGUF_TENSOR_NAMES.tokenEmbedding}" has only ${embd.shape[0]} rows`);
  }
  // Gemma's chat turns end with <end_of_turn>, Phi-3's with <|end|>, which their files need not name as EOT
  // (llama.cpp finds them by their text).
  // Gemma 4's turns end with <turn|>, and a tool call's answer stops at <|tool_response>, as llama.cpp stops.
  const turnEnds = architecture === "gemma3" || architecture === "gemma2" ? ["<end_of_turn>"] : architecture === "phi3" ? ["<|end|>"] : architecture === "gemma4" ? ["<turn|>", "<|tool_response>"] : [];
  const endsOfTurn = turnEnds.map((t) => vocabTokens?.indexOf(t) ?? -1);
  const eosTokenIds = withHarmonyStops(
    [
      ...new Set(
        [...["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"].map(optionalId), ...endsOfTurn]
          .filter(validId),
      ),
    ],
    vocabTokens,
  );
  const bos = optionalId("tokenizer.ggml.bos_token_id");
  const moe = ggufMoe(meta, arch, (name) => tensors.has(name), path);
  const mla = architecture === "deepseek2" ? ggufMla(meta, arch, headDim, ropeDim, tensors.has("blk.0.attn_q_a.weight"), path) : undefined;
  const ropeTheta = meta.number(`${arch}.rope.freq_base`, 10000);
  if (!(Number.isFinite(ropeTheta) && ropeTheta > 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.rope.freq_base" in "${path}" should be a positive number, got ${ropeTheta}`);
  }
  const rmsNormEps = meta.number(`${arch}.attention.layer_norm_rms_epsilon`, 1e-6);
  if (!(Number.isFinite(rmsNormEps) && rmsNormEps >= 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.attention.layer_norm_rms_epsilon" in "${path}" should be a number from 0, got ${rmsNormEps}`);
  }
  // Ministral 3's YaRN and attention temperature: mistral3.ts.
  const scaled = !yarn || architecture === "mistral3" ? undefined : mla ? ggufYarn(meta, arch, ropeTheta, mla, path) : ggufMagnitudeYarn(meta, arch, ropeTheta, ropeDim, headDim, path);
  const ffnKey = moe ? `${arch}.expert_feed_forward_length` : `${arch}.feed_forward_length`;
  // GLM-4.5 files end with multi-token-prediction blocks (NextN) that llama.cpp loads but never runs.
  const blocks = positiveInteger(meta.number(`${arch}.block_count`), `${arch}.block_count`, path);
  const nextn = meta.optionalNumber(`${arch}.nextn_predict_layers`) ?? 0;
  if (!Number.isInteger(nextn) || nextn < 0 || nextn >= blocks) {
    throw new ModelLoadError(`Model "${path}" has ${nextn} next-token-prediction layers of its ${blocks} blocks`);
  }
  const numLayers = blocks - nextn;
  // OLMo 3 (llama.cpp's olmo2 with a window): three layers of four slide, by default with the others' RoPE base.
  const slidingWindow = architecture === "gpt-oss"
    ? ggufSlidingWindow(meta, arch, numLayers, ropeTheta, path)
    : architecture === "olmo2"
    ? ggufSlidingWindow(meta, arch, numLayers, ropeTheta, path, { pattern: 4, swaTheta: ropeTheta })
    : architecture === "exaone4"
    ? exaone4Window(meta, arch, numLayers)
    : undefined;
  const gemmaShape = { hiddenSize, numHeads, headDim, rotaryDim: ropeDim, numLayers, ropeTheta };
  const gemma3 = architecture === "gemma3" ? ggufGemma3(meta, arch, gemmaShape, path) : architecture === "gemma2" ? ggufGemma2(meta, arch, gemmaShape, path) : undefined;
  // Phi-3's window is not applied, as llama.cpp does not apply it (phi3.ts).
  if (!["gpt-oss", "gemma3", "gemma2", "phi3", "olmo2", "exaone4", "gemma4"].includes(architecture) && meta.has(`${arch}.attention.sliding_window`)) {
    throw new ModelLoadError(`Model "${path}" declares a sliding window, which the "${arch}" architecture does not support`);
  }
  const sampling = ggufSamplingDefaults(meta, path);
  return {
    architecture,
    vocabSize: embd.shape[0],
    hiddenSize,
    numLayers,
    numHeads,
    // Latent attention caches one head: the latent and the shared RoPE key.
    numKvHeads: mla ? 1 : numKvHeads,
    headDim: mla ? mla.kvLoraRank + mla.ropeDim : headDim,
    intermediateSize: gemma4?.intermediateSize ?? nemotron?.intermediateSize ?? (meta.entries.has(ffnKey) ? perLayerNumber(meta, ffnKey, path) : perLayerNumber(meta, `${arch}.feed_forward_length`, path)),
    ...(moe ? { moe } : {}),
    ...(mla ? { mla } : {}),
    ...(nextn > 0 ? { nextnLayers: nextn } : {}),
    ...(scaled ? { attentionScale: scaled.attentionScale, ropeFreqFactors: scaled.freqFactors } : {}),
    rmsNormEps,
    ropeTheta,
    // llama.cpp turns DeepSeek's RoPE dims in adjacent pairs, as it does Llama's permuted ones.
    ropeLayout: architecture === "llama" || architecture === "smollm3" || architecture === "granite" || architecture === "granitehybrid" || architecture === "deepseek2" || architecture === "mistral3" ? "normal" : "neox",
    ...(architecture === "mistral3" ? ggufMistral3(meta, arch, ropeTheta, ropeDim, headDim, path) : {}),
    ...(ropeDim !== headDim || mla ? { rotaryDim: ropeDim } : {}),
    contextLength: positiveInteger(meta.number(`${arch}.context_length`, 2048), `${arch}.context_length`, path),
    tiedEmbeddings: !tensors.has(GGUF_TENSOR_NAMES.output),
    qkvBias: tensors.has(GGUF_TENSOR_NAMES.layer(0, "bq")),
    qkNorm: tensors.has(GGUF_TENSOR_NAMES.layer(0, "qNorm")),
    ...(architecture === "gpt-oss" ? { outputBias: true, attentionSinks: true } : {}),
    ...(slidingWindow ? { slidingWindow } : {}),
    ...gemma3,
    ...gemma4,
    ...(architecture === "smollm3" ? { nopeLayers: nopeEvery(numLayers, SMOLLM3_NOPE_INTERVAL) } : {}),
    ...(architecture === "granite" ? ggufGranite(meta, arch, path) : {}),
    ...(nemotron ? nemotronHConfig(nemotron, (i, role) => tensors.has(GGUF_TENSOR_NAMES.layer(i, role)), numLayers) : {}),
    ...(hybrid ? { ...ggufGranite(meta, arch, path, true), mamba2: hybrid.mamba2, ...(hybrid.rotates ? {} : { nopeLayers: Array<boolean>(numLayers).fill(true) }) } : {}),
    ...(falconH1 ? { mamba2: falconH1, foldedMultipliers: true, ...(tensors.has(GGUF_TENSOR_NAMES.layer(0, "bo")) ? { outputBias: true } : {}) } : {}),
    // After qkNorm: Qwen3.5's first layer, which the check reads, is a DeltaNet layer without q/k norms.
    ...(architecture === "qwen35" || architecture === "qwen35moe" || architecture === "qwen3next" ? ggufQwen35(meta, arch, numLayers, path) : {}),
    // After qkNorm: LFM2's first layer, which the check reads, is a convolution layer.
    ...(lfm2 ? { shortConv: lfm2.shortConv, qkNorm: true } : {}),
    // EXAONE 4: OLMo 2's norms with per-head q/k norms; its global layers (the 32B's every fourth) turn nothing.
    ...(architecture === "exaone4" ? { noPreNorms: true, postNorms: true, ...(slidingWindow ? { nopeLayers: slidingWindow.layers.map((s) => !s) } : {}) } : {}),
    // MiniMax-M2: q/k norms over the whole projection (llama.cpp's attn_q_norm [heads·headDim]).
    ...(architecture === "minimax-m2" ? { qkNormPerRow: tensors.get(GGUF_TENSOR_NAMES.layer(0, "qNorm"))?.shape[0] === numHeads * headDim } : {}),
    // OLMo 2: no pre-norms, norms of the blocks' outputs, q/k norms over the whole projection.
    ...(architecture === "olmo2" ? { noPreNorms: true, postNorms: true, qkNormPerRow: tensors.get(GGUF_TENSOR_NAMES.layer(0, "qNorm"))?.shape[0] === numHeads * headDim } : {}),
    bosTokenId: validId(bos) ? bos : undefined,
    eosTokenIds,
    // llama.cpp always adds Gemma 4's BOS, whatever its file says.
    addBos: tokModel === "gemma4" || meta.bool("tokenizer.ggml.add_bos_token", tokModel === "llama" || (tokModel === "gpt2" && preAddsBos(meta.string("tokenizer.ggml.pre", "default")))),
    ...(meta.bool("tokenizer.ggml.add_eos_token", false) && validId(optionalId("tokenizer.ggml.eos_token_id")) ? { appendEosTokenId: optionalId("tokenizer.ggml.eos_token_id") } : {}),
    ...(pooling !== undefined ? { poolingType: pooling } : {}),
    ...(sampling ? { samplingDefaults: sampling } : {}),
  };
}

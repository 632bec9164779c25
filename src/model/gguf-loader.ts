/**
 * GGUF file → LoadedModel: the config from `{arch}.*` metadata (gguf-config.ts), weights under
 * llama.cpp's tensor names (gguf-names.ts), and the file's own tokenizer (gguf-tokenizer.ts; GPT-OSS's
 * additions: gguf-gpt-oss.ts). Llama GGUFs carry q/k rows permuted by llama.cpp's
 * converter for the "normal" (interleaved) RoPE, which DeepSeek's (deepseek2) use unpermuted;
 * Qwen2/Qwen3/GLM keep the "neox" (half-split) order.
 */
import { gemma4ExpertTensors } from "./gemma4-tensors.ts";
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { openRandomAccess, type RandomAccessFile } from "../runtime/fs.ts";
import { type HostTensor, type LoadedModel, type ModelConfig, ModelLoadError } from "./config.ts";
import { GgufMetadata } from "./gguf-metadata.ts";
import { type GgufHeader, type GgufTensorInfo, readGgufHeader, readGgufTensor } from "./gguf-reader.ts";
import { checkFreqFactors } from "./rope-scaling.ts";
import { ggufConfig } from "./gguf-config.ts";
import { ggufTokenizer } from "./gguf-tokenizer.ts";
import { GGUF_KV_B, GGUF_LAYER_NAMES, GGUF_ROPE_FREQS, ggufMoeTensorNames } from "./gguf-names.ts";
import { splittingKvB } from "./mla-weights.ts";
import { assembleWeights, checkLastExpert, type LoadOptions } from "./weights.ts";
import { EXPERT, stackingExperts } from "./expert-stack.ts";
import { longRopeFields, ropeMagnitude, splittingPhi3Fused } from "./phi3.ts";
import { GGUF_QWEN3NEXT_FUSED, splittingQwen3NextFused } from "./qwen3next.ts";

export { ggufConfig } from "./gguf-config.ts";
export { ggufTokenizer } from "./gguf-tokenizer.ts";
export { GGUF_ROPE_FREQS, GGUF_TENSOR_NAMES } from "./gguf-names.ts";

async function readFreqFactors(file: RandomAccessFile, info: GgufTensorInfo, rotaryDim: number, path: string): Promise<number[]> {
  const t = await readGgufTensor(file, info);
  const count = t.shape.reduce((a, b) => a * b, 1);
  if (t.shape.length !== 1) throw new ModelLoadError(`Tensor "${GGUF_ROPE_FREQS}" in "${path}" should be 1-D, got [${t.shape.join(", ")}]`);
  return checkFreqFactors(Array.from(decodeToF32(t.data, t.dtype, count)), rotaryDim, path);
}

/**
 * Phi-3's LongRoPE from a GGUF (phi3.ts): `rope_factors_long`/`rope_factors_short` and
 * `rope.scaling.attn_factor`, as convert_hf_to_gguf.py writes them; nothing for a file without them.
 */
async function ggufLongRope(file: RandomAccessFile, header: GgufHeader, config: ModelConfig, path: string): Promise<Partial<ModelConfig>> {
  const meta = new GgufMetadata(header.metadata, path);
  const arch = config.architecture;
  const attnFactor = meta.number(`${arch}.rope.scaling.attn_factor`, 1);
  const long = header.tensors.find((t) => t.name === "rope_factors_long.weight");
  const short = header.tensors.find((t) => t.name === "rope_factors_short.weight");
  const rotaryDim = config.rotaryDim ?? config.headDim;
  if (!long && !short) return ropeMagnitude(attnFactor, path);
  if (!long || !short) throw new ModelLoadError(`Model "${path}" has ${long ? "long" : "short"} RoPE factors but no ${long ? "short" : "long"} ones`);
  const read = async (info: GgufTensorInfo) => {
    const t = await readGgufTensor(file, info);
    return Array.from(decodeToF32(t.data, t.dtype, t.shape.reduce((a, b) => a * b, 1)));
  };
  const originalContext = meta.number(`${arch}.rope.scaling.original_context_length`, config.contextLength);
  return longRopeFields({ long: await read(long), short: await read(short), originalContext, attnFactor }, config.contextLength, rotaryDim, path);
}

/** Gemma 4's per-layer output scalars (`blk.N.layer_output_scale.weight`, one value each), where the file has them. */
async function ggufLayerOutputScales(file: RandomAccessFile, header: GgufHeader, numLayers: number, path: string): Promise<Partial<ModelConfig>> {
  const infos = new Map(header.tensors.map((t) => [t.name, t]));
  const name = (i: number) => `blk.${i}.layer_output_scale.weight`;
  if (!infos.has(name(0))) return {};
  const scales: number[] = [];
  for (let i = 0; i < numLayers; i++) {
    const info = infos.get(name(i));
    if (!info) throw new ModelLoadError(`Model "${path}" lacks the tensor "${name(i)}" that its first layer has`);
    const t = await readGgufTensor(file, info);
    const v = decodeToF32(t.data, t.dtype, t.shape.reduce((a, b) => a * b, 1));
    if (v.length !== 1 || !Number.isFinite(v[0])) throw new ModelLoadError(`Model "${path}" has "${name(i)}" of shape [${t.shape}]; expected one finite value`);
    scales.push(v[0]);
  }
  return { layerOutputScales: scales };
}

/** llama.cpp stores Qwen2-MoE's shared-expert gate as a vector [hidden]; the forward multiplies by it as a [1, hidden] matrix. */
function sharedGateAsMatrix(t: HostTensor): HostTensor {
  return t.name.endsWith(GGUF_LAYER_NAMES.sharedGate) && t.shape.length === 1 ? { ...t, shape: [1, t.shape[0]] } : t;
}

/** One part of llama-gguf-split's output holds only some tensors (and only the first the metadata): refused by name. */
function checkNotSplit(header: GgufHeader, path: string): void {
  const meta = new GgufMetadata(header.metadata, path);
  const count = meta.number("split.count", 1);
  if (count === 1) return;
  const no = meta.number("split.no", 0);
  throw new ModelLoadError(
    `GGUF file "${path}" is part ${no + 1} of a ${count}-file split (split.count); merge the parts with llama-gguf-split --merge and load the merged file`,
  );
}

/** Loads a GGUF model file. */
export async function loadGguf(path: string, options: LoadOptions = {}): Promise<LoadedModel> {
  const file = await openRandomAccess(path);
  try {
    const header = await readGgufHeader(file);
    checkNotSplit(header, path);
    const config = ggufConfig(header, path);
    const freqs = header.tensors.find((t) => t.name === GGUF_ROPE_FREQS);
    if (freqs) config.ropeFreqFactors = await readFreqFactors(file, freqs, config.rotaryDim ?? config.headDim, path);
    if (config.architecture === "phi3") Object.assign(config, await ggufLongRope(file, header, config, path));
    if (config.architecture === "gemma4") Object.assign(config, await ggufLayerOutputScales(file, header, config.numLayers, path));
    const tokenizer = ggufTokenizer(header, config, path);
    const infos = new Map<string, GgufTensorInfo>(header.tensors.map((t) => [t.name, t]));
    const plain = {
      has: (n: string) => infos.has(n),
      byteLength: (n: string) => infos.get(n)!.byteLength,
      read: async (n: string) => sharedGateAsMatrix(await readGgufTensor(file, infos.get(n)!)),
    };
    // Gemma 4's experts: the router's scale as its norm's weight, fused gate/up experts in halves (gemma4-tensors.ts).
    const source = config.architecture === "gemma4" && config.moe ? gemma4ExpertTensors(plain, config.hiddenSize) : plain;
    const moe = config.moe;
    // Experts are stacked in current files; the first Mixtral conversions wrote one tensor per expert.
    const first = moe?.denseLayers ?? 0;
    const split = moe !== undefined && !infos.has(ggufMoeTensorNames(config, false).layer(first, "wGate")) &&
      infos.has(ggufMoeTensorNames(config, true).layer(first, "wGate").replace(EXPERT, "0"));
    const names = ggufMoeTensorNames(config, split);
    if (moe) checkLastExpert(names, moe, (n) => infos.has(n), path);
    let tensors = moe ? stackingExperts(source, moe.numExperts, path) : source;
    if (config.mla) {
      tensors = splittingKvB(tensors, config, names, (i) => `blk.${i}.${GGUF_KV_B}`, path);
    }
    if (config.architecture === "phi3") {
      const rowsOf = (n: string) => infos.get(n)?.shape[0];
      tensors = splittingPhi3Fused(tensors, config, names, { qkv: (i) => `blk.${i}.attn_qkv.weight`, gateUp: (i) => names.layer(i, "wUp") }, rowsOf, path);
    }
    if (config.architecture === "qwen3next" && config.deltaNet) {
      tensors = splittingQwen3NextFused(tensors, config.deltaNet, names, GGUF_QWEN3NEXT_FUSED, (n) => infos.get(n)?.shape[0], path);
    }
    const weights = await assembleWeights(config, tensors, names, path, options);
    if (weights.mtp) config.mtp = { layer: config.numLayers };
    const template = header.metadata.get("tokenizer.chat_template")?.value;
    return {
      config,
      weights,
      tokenizer,
      chatTemplate: typeof template === "string" ? template : undefined,
      source: path,
    };
  } finally {
    await file.close();
  }
}

/**
 * Hugging Face model directory → LoadedModel: config.json, *.safetensors (sharded through
 * model.safetensors.index.json or not), tokenizer.json and tokenizer_config.json (chat template).
 * HF checkpoints keep q/k rows in the half-split order, so RoPE is "neox" for every architecture.
 */
import { promises as fsp } from "node:fs";
import { openRandomAccess, pathExists, type RandomAccessFile, readTextFile } from "../runtime/fs.ts";
import { type Architecture, ARCHITECTURES, isMoeLayer, type LoadedModel, type ModelConfig, ModelLoadError, type MoeConfig, plainMoe } from "./config.ts";
import { hfRopeFreqFactors } from "./rope-scaling.ts";
import { GLM4_MOE_DEFAULTS, hfDeepseekAttention, hfDeepseekMoe } from "./hf-deepseek.ts";
import { hfHeadDim, isJsonObject, type Json, num, positiveInt } from "./hf-json.ts";
import { splittingKvB } from "./mla-weights.ts";
import { GPT_OSS_NAMES, gptOssExperts, hfGptOss } from "./hf-gpt-oss.ts";
import { gemmaNormsPlusOne, hfGemma3 } from "./hf-gemma3.ts";
import { withHarmonyStops } from "./gguf-gpt-oss.ts";
import { applyGenerationConfig } from "./hf-generation-config.ts";
import { checkOutputHead, hfTiedEmbeddings } from "./hf-defaults.ts";
import { dequantizingFp8, fp8Scheme } from "./fp8.ts";
import { readSafetensor, readSafetensorsHeader, type SafetensorsInfo } from "./safetensors.ts";
import { HfTokenizer } from "./tokenizer-hf.ts";
import { assembleWeights, checkLastExpert, type LayerRole, type LoadOptions, type TensorNames } from "./weights.ts";
import { EXPERT, stackingExperts } from "./expert-stack.ts";

const LAYER_NAMES: Record<LayerRole, string> = {
  attnNorm: "input_layernorm.weight",
  wq: "self_attn.q_proj.weight",
  wk: "self_attn.k_proj.weight",
  wv: "self_attn.v_proj.weight",
  wo: "self_attn.o_proj.weight",
  bq: "self_attn.q_proj.bias",
  bk: "self_attn.k_proj.bias",
  bv: "self_attn.v_proj.bias",
  qNorm: "self_attn.q_norm.weight",
  kNorm: "self_attn.k_norm.weight",
  // Gemma's sandwich norms; its pre-feed-forward norm is then "pre_feedforward_layernorm".
  attnPostNorm: "post_attention_layernorm.weight",
  ffnPostNorm: "post_feedforward_layernorm.weight",
  ffnNorm: "post_attention_layernorm.weight",
  wGate: "mlp.gate_proj.weight",
  wUp: "mlp.up_proj.weight",
  wDown: "mlp.down_proj.weight",
  router: "mlp.gate.weight",
  routerBias: "mlp.gate.e_score_correction_bias",
  wGateShared: "mlp.shared_experts.gate_proj.weight",
  wUpShared: "mlp.shared_experts.up_proj.weight",
  wDownShared: "mlp.shared_experts.down_proj.weight",
  sharedGate: "mlp.shared_expert_gate.weight",
  wqA: "self_attn.q_a_proj.weight",
  qANorm: "self_attn.q_a_layernorm.weight",
  wkvA: "self_attn.kv_a_proj_with_mqa.weight",
  kvANorm: "self_attn.kv_a_layernorm.weight",
  // Cut from kv_b_proj on load (mla-weights.ts).
  wkB: "self_attn.k_b_proj.weight",
  wvB: "self_attn.v_b_proj.weight",
  // GPT-OSS's roles; its experts' are read from fused tensors (hf-gpt-oss.ts GPT_OSS_NAMES).
  bo: "self_attn.o_proj.bias",
  sinks: "self_attn.sinks",
  routerLogitBias: "mlp.router.bias",
  bGate: "mlp.experts.gate_proj_bias",
  bUp: "mlp.experts.up_proj_bias",
  bDown: "mlp.experts.down_proj_bias",
};

/** DeepSeek's combined latent up-projection, split into W_kb and W_vb on load. */
const KV_B = "self_attn.kv_b_proj.weight";

/** Qwen's per-expert names, which Qwen2-MoE and GLM-4.5 share. */
const QWEN_EXPERTS: Partial<Record<LayerRole, string>> = {
  wGate: `mlp.experts.${EXPERT}.gate_proj.weight`,
  wUp: `mlp.experts.${EXPERT}.up_proj.weight`,
  wDown: `mlp.experts.${EXPERT}.down_proj.weight`,
};

/** Per-expert names of an MoE layer, stacked on load (expert-stack.ts), and each family's other MoE names. */
const EXPERT_NAMES: Record<"qwen2moe" | "qwen3moe" | "glm4moe" | "deepseek2" | "mixtral", Partial<Record<LayerRole, string>>> = {
  qwen2moe: {
    ...QWEN_EXPERTS,
    wGateShared: "mlp.shared_expert.gate_proj.weight",
    wUpShared: "mlp.shared_expert.up_proj.weight",
    wDownShared: "mlp.shared_expert.down_proj.weight",
  },
  qwen3moe: QWEN_EXPERTS,
  glm4moe: QWEN_EXPERTS,
  deepseek2: QWEN_EXPERTS,
  mixtral: {
    router: "block_sparse_moe.gate.weight",
    wGate: `block_sparse_moe.experts.${EXPERT}.w1.weight`,
    wUp: `block_sparse_moe.experts.${EXPERT}.w3.weight`,
    wDown: `block_sparse_moe.experts.${EXPERT}.w2.weight`,
  },
};

/** Hugging Face transformers' tensor names for Llama/Qwen2/Qwen3. */
export const HF_TENSOR_NAMES: TensorNames = {
  tokenEmbedding: "model.embed_tokens.weight",
  outputNorm: "model.norm.weight",
  output: "lm_head.weight",
  layer: (i, role) => `model.layers.${i}.${LAYER_NAMES[role]}`,
};

/** Gemma 3's: its post_attention_layernorm norms the attention's output; the feed-forward's input has its own. */
const GEMMA3_TENSOR_NAMES: TensorNames = {
  ...HF_TENSOR_NAMES,
  layer: (i, role) => `model.layers.${i}.${role === "ffnNorm" ? "pre_feedforward_layernorm.weight" : LAYER_NAMES[role]}`,
};

/** transformers' names for a model with experts (a leading dense layer keeps the plain names). */
function moeTensorNames(config: ModelConfig): TensorNames {
  const a = config.architecture;
  if (a === "gpt-oss") return { ...HF_TENSOR_NAMES, layer: (i, role) => `model.layers.${i}.${GPT_OSS_NAMES[role] ?? LAYER_NAMES[role]}` };
  const experts = EXPERT_NAMES[a === "qwen2moe" || a === "qwen3moe" || a === "glm4moe" || a === "deepseek2" ? a : "mixtral"];
  // DeepSeek's q up-projection follows its low-rank bottleneck.
  const own: Partial<Record<LayerRole, string>> = config.mla && config.mla.qLoraRank > 0 ? { wq: "self_attn.q_b_proj.weight" } : {};
  return {
    ...HF_TENSOR_NAMES,
    layer: (i, role) => `model.layers.${i}.${own[role] ?? (isMoeLayer(config, i) ? experts[role] : undefined) ?? LAYER_NAMES[role]}`,
  };
}

const HF_ARCHITECTURES: Record<string, Architecture> = {
  LlamaForCausalLM: "llama",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Qwen2MoeForCausalLM: "qwen2moe",
  Qwen3MoeForCausalLM: "qwen3moe",
  Glm4MoeForCausalLM: "glm4moe",
  DeepseekV3ForCausalLM: "deepseek2",
  GptOssForCausalLM: "gpt-oss",
  Gemma3ForCausalLM: "gemma3",
  MixtralForCausalLM: "llama",
  // config.json's model_type, for files without `architectures`
  qwen2_moe: "qwen2moe",
  qwen3_moe: "qwen3moe",
  glm4_moe: "glm4moe",
  deepseek_v3: "deepseek2",
  kimi_k2: "deepseek2",
  gpt_oss: "gpt-oss",
  gemma3_text: "gemma3",
  mixtral: "llama",
};

async function readJson(path: string, what: string): Promise<Json> {
  let text: string;
  try {
    text = await readTextFile(path);
  } catch {
    throw new ModelLoadError(`Model directory lacks ${what}: "${path}" not found`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ModelLoadError(`"${path}" is not valid JSON`);
  }
  if (!isJsonObject(json)) throw new ModelLoadError(`"${path}" should hold a JSON object, got ${Array.isArray(json) ? "an array" : JSON.stringify(json)}`);
  return json;
}

/** Reads the special token's string whether tokenizer_config stores it as a string or an object. */
function tokenString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as Json).content === "string") return (v as Json).content as string;
  return undefined;
}

/**
 * The special token a tokenizer ends every single text with: tokenizer_config.json's `eos_token`
 * under `add_eos_token: true`, or the last piece of tokenizer.json's TemplateProcessing post-processor
 * (alone or in a Sequence) when it is a special token, as Qwen3-Embedding's `<|endoftext|>`.
 */
export function appendedToken(tokenizerJson: Json, tokCfg: Json): string | undefined {
  if (tokCfg.add_eos_token === true) return tokenString(tokCfg.eos_token);
  const fromProcessor = (p: unknown): string | undefined => {
    if (!p || typeof p !== "object") return undefined;
    const o = p as Json;
    if (o.type === "Sequence" && Array.isArray(o.processors)) return o.processors.map(fromProcessor).find((t) => t !== undefined);
    if (o.type !== "TemplateProcessing" || !Array.isArray(o.single) || o.single.length === 0) return undefined;
    const last = o.single[o.single.length - 1] as Json;
    const special = last?.SpecialToken as Json | undefined;
    return typeof special?.id === "string" ? special.id : undefined;
  };
  return fromProcessor(tokenizerJson.post_processor);
}

/** Builds a ModelConfig from config.json (+ tokenizer_config.json for BOS handling). */
export function hfConfig(cfg: Json, tokCfg: Json, vocabSize: number, path: string): ModelConfig {
  const archName = Array.isArray(cfg.architectures) ? String(cfg.architectures[0]) : String(cfg.model_type ?? "");
  const architecture = HF_ARCHITECTURES[archName] ?? ((ARCHITECTURES as readonly string[]).includes(archName) ? archName as Architecture : undefined);
  if (archName === "Gemma3ForConditionalGeneration" || archName === "gemma3") {
    throw new ModelLoadError(`Model "${path}" is Gemma 3 with its vision tower (${archName}), which is not supported; its text model runs from a "gemma3" GGUF or a Gemma3ForCausalLM checkpoint`);
  }
  if (!architecture) {
    throw new ModelLoadError(`Unknown architecture "${archName}" in "${path}"; supported: ${Object.keys(HF_ARCHITECTURES).join(", ")}`);
  }
  const hiddenSize = positiveInt(cfg, "hidden_size", path);
  const numHeads = positiveInt(cfg, "num_attention_heads", path);
  const numKvHeads = positiveInt(cfg, "num_key_value_heads", path, numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numHeads} attention heads (num_attention_heads), not a multiple of its ${numKvHeads} KV heads (num_key_value_heads)`);
  }
  const eos = cfg.eos_token_id;
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).map((id) => tokenId(id, "eos_token_id", vocabSize, path))
    .filter((id): id is number => id !== undefined);
  const bos = cfg.bos_token_id === undefined || cfg.bos_token_id === null ? undefined : tokenId(cfg.bos_token_id, "bos_token_id", vocabSize, path);
  const addBosSetting = tokCfg.add_bos_token;
  const ropeTheta = num(cfg, "rope_theta", path, ropeParametersTheta(cfg, path) ?? 10000);
  if (!(Number.isFinite(ropeTheta) && ropeTheta > 0)) throw new ModelLoadError(`"rope_theta" in "${path}" should be a positive number, got ${ropeTheta}`);
  const deepseek = architecture === "deepseek2" ? hfDeepseekAttention(cfg, ropeTheta, path) : undefined;
  const mla = deepseek?.mla;
  // Latent attention caches one head: the latent and the shared RoPE key.
  const headDim = mla ? mla.kvLoraRank + mla.ropeDim : hfHeadDim(cfg, hiddenSize, numHeads, path);
  const numLayers = positiveInt(cfg, "num_hidden_layers", path);
  const gptOss = architecture === "gpt-oss" ? hfGptOss(cfg, ropeTheta, headDim, numLayers, path) : undefined;
  const rotaryDim = mla ? mla.ropeDim : hfRotaryDim(cfg, architecture, headDim, path);
  const gemma3 = architecture === "gemma3" ? hfGemma3(cfg, hiddenSize, headDim, rotaryDim ?? headDim, numLayers, path) : undefined;
  const ownRope = deepseek ?? gptOss ?? gemma3;
  const ropeFreqFactors = ownRope ? ownRope.ropeFreqFactors : hfRopeFreqFactors(cfg, ropeTheta, rotaryDim ?? headDim, path);
  const moe = deepseek ? hfDeepseekMoe(cfg, path) : gptOss ? gptOss.moe : hfMoe(cfg, archName, architecture, path);
  const attentionScale = deepseek?.attentionScale ?? gptOss?.attentionScale ?? gemma3?.attentionScale;
  return {
    architecture,
    vocabSize,
    hiddenSize,
    numLayers,
    numHeads,
    numKvHeads: mla ? 1 : numKvHeads,
    headDim,
    // Mixtral's and GPT-OSS's experts have the plain width; the others name theirs apart.
    intermediateSize: num(cfg, moe && architecture !== "llama" && !gptOss ? "moe_intermediate_size" : "intermediate_size", path),
    ...(moe ? { moe } : {}),
    ...(deepseek ? { mla: deepseek.mla } : {}),
    ...(attentionScale !== undefined ? { attentionScale } : {}),
    ...(gptOss ? { outputBias: true, attentionSinks: true, ...(gptOss.slidingWindow ? { slidingWindow: gptOss.slidingWindow } : {}) } : {}),
    ...(gemma3 ?? {}),
    rmsNormEps: nonNegative(cfg, "rms_norm_eps", path, 1e-6),
    ropeTheta,
    ropeLayout: deepseek?.ropeLayout ?? "neox",
    ...(rotaryDim !== undefined ? { rotaryDim } : {}),
    ...(ropeFreqFactors ? { ropeFreqFactors } : {}),
    contextLength: positiveInt(cfg, "max_position_embeddings", path, 2048),
    tiedEmbeddings: hfTiedEmbeddings(cfg, architecture, path),
    qkvBias: architecture === "qwen2" || architecture === "qwen2moe" || architecture === "gpt-oss" || cfg.attention_bias === true,
    qkNorm: architecture === "qwen3" || architecture === "qwen3moe" || architecture === "gemma3" || (architecture === "glm4moe" && cfg.use_qk_norm === true),
    bosTokenId: bos,
    eosTokenIds,
    addBos: typeof addBosSetting === "boolean" ? addBosSetting : architecture === "llama",
  };
}

/**
 * A config.json token id: a whole number from 0, else an error naming the key; undefined (ignored, as
 * llama.cpp ignores such special ids) when past the embedding's `vocabSize` rows, which it would index outside.
 */
function tokenId(v: unknown, key: string, vocabSize: number, path: string): number | undefined {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw new ModelLoadError(`"${key}" in "${path}" should be token ids (whole numbers from 0), got ${JSON.stringify(v)}`);
  }
  return v < vocabSize ? v : undefined;
}

/** `cfg[key]` as a finite number from 0 (an epsilon). */
function nonNegative(cfg: Json, key: string, path: string, fallback: number): number {
  const v = num(cfg, key, path, fallback);
  if (!(Number.isFinite(v) && v >= 0)) throw new ModelLoadError(`"${key}" in "${path}" should be a number from 0, got ${v}`);
  return v;
}

/**
 * RoPE's dims when it turns only the first ones of a head (`partial_rotary_factor`; GLM-4.5's
 * default is a half); undefined for all of them.
 */
function hfRotaryDim(cfg: Json, architecture: Architecture, headDim: number, path: string): number | undefined {
  const factor = num(cfg, "partial_rotary_factor", path, architecture === "glm4moe" ? 0.5 : 1);
  const dims = Math.floor(headDim * factor);
  if (!(factor > 0 && factor <= 1) || dims % 2 !== 0 || dims === 0) {
    throw new ModelLoadError(`"partial_rotary_factor" in "${path}" should give an even number of a head's ${headDim} dims, got ${factor}`);
  }
  return dims === headDim ? undefined : dims;
}

/** The experts of a Mixtral, Qwen2-MoE, Qwen3-MoE or GLM-4.5 config.json. */
function hfMoe(cfg: Json, archName: string, architecture: Architecture, path: string): MoeConfig | undefined {
  const mixtral = archName === "MixtralForCausalLM" || archName === "mixtral";
  // GLM-4.5's experts are DeepSeek V3's design, with transformers' Glm4MoeConfig defaults.
  if (architecture === "glm4moe") return hfDeepseekMoe(cfg, path, GLM4_MOE_DEFAULTS);
  if (!mixtral && architecture !== "qwen2moe" && architecture !== "qwen3moe") return undefined;
  const numExperts = num(cfg, mixtral ? "num_local_experts" : "num_experts", path);
  const numExpertsUsed = num(cfg, "num_experts_per_tok", path);
  if (!Number.isInteger(numExpertsUsed) || numExpertsUsed < 1 || numExpertsUsed > numExperts) {
    throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${numExpertsUsed}`);
  }
  const dense = cfg.mlp_only_layers;
  const step = cfg.decoder_sparse_step;
  if ((Array.isArray(dense) && dense.length > 0) || (typeof step === "number" && step !== 1)) {
    throw new ModelLoadError(`Model "${path}" mixes dense and MoE layers (mlp_only_layers, decoder_sparse_step); only all-MoE layers are supported`);
  }
  // Mixtral always renormalises (softmax over the chosen logits); Qwen2- and Qwen3-MoE per their
  // config (transformers' default false; true in every released Qwen3-MoE, false in Qwen2-MoE's).
  const moe = plainMoe(numExperts, numExpertsUsed, mixtral || cfg.norm_topk_prob === true);
  if (architecture !== "qwen2moe") return moe;
  return { ...moe, sharedIntermediateSize: num(cfg, "shared_expert_intermediate_size", path), sharedGate: true };
}

/** transformers 5 moves rope_theta into `rope_parameters`. */
function ropeParametersTheta(cfg: Json, path: string): number | undefined {
  const p = cfg.rope_parameters;
  const theta = isJsonObject(p) ? p.rope_theta : undefined;
  if (theta === undefined || theta === null || typeof theta === "number") return theta ?? undefined;
  throw new ModelLoadError(`"rope_parameters.rope_theta" in "${path}" should be a number, got ${JSON.stringify(theta)}`);
}

/** Opens every safetensors shard and indexes its tensors by name. */
async function openShards(dir: string): Promise<{ files: RandomAccessFile[]; index: Map<string, [RandomAccessFile, SafetensorsInfo]> }> {
  const indexPath = `${dir}/model.safetensors.index.json`;
  let shardNames: string[];
  let weightMap: Json | undefined;
  if (await pathExists(indexPath)) {
    weightMap = (await readJson(indexPath, "its safetensors index")).weight_map as Json;
    if (!isJsonObject(weightMap)) throw new ModelLoadError(`"${indexPath}" has no weight_map`);
    if (Object.keys(weightMap).length === 0) {
      throw new ModelLoadError(`"${indexPath}" has an empty weight_map; it should map each tensor name to its shard file`);
    }
    shardNames = [...new Set(Object.values(weightMap))].map((shard) => {
      // A shard is a file of the directory itself, not a path to elsewhere.
      if (typeof shard !== "string" || shard === "" || shard.includes("/") || shard.includes("\\") || shard === "." || shard === "..") {
        throw new ModelLoadError(`"${indexPath}" names shard ${JSON.stringify(shard)}; expected a file name in the model directory`);
      }
      return shard;
    });
  } else {
    shardNames = (await fsp.readdir(dir)).filter((n) => n.endsWith(".safetensors")).sort();
  }
  if (shardNames.length === 0) throw new ModelLoadError(`Model directory "${dir}" holds no .safetensors files`);
  const files: RandomAccessFile[] = [];
  const index = new Map<string, [RandomAccessFile, SafetensorsInfo]>();
  try {
    for (const name of shardNames) {
      const shardPath = `${dir}/${name}`;
      if (!(await pathExists(shardPath))) throw new ModelLoadError(`Safetensors shard not found: "${shardPath}"`);
      const file = await openRandomAccess(shardPath);
      files.push(file);
      for (const [t, info] of (await readSafetensorsHeader(file)).tensors) {
        const seen = index.get(t);
        // A tensor in two shards is read from the one the index names; without one, which is meant is unknown.
        if (seen && weightMap?.[t] !== name) {
          if (weightMap?.[t] === seen[0].path.slice(dir.length + 1)) continue;
          throw new ModelLoadError(`Tensor "${t}" is in both "${seen[0].path}" and "${shardPath}"; ${weightMap ? "the index names neither" : "remove one of them"}`);
        }
        index.set(t, [file, info]);
      }
    }
  } catch (e) {
    await Promise.all(files.map((f) => f.close()));
    throw e;
  }
  return { files, index };
}

/** Loads a Hugging Face model directory. */
export async function loadHfDirectory(dir: string, options: LoadOptions = {}): Promise<LoadedModel> {
  const cfg = await readJson(`${dir}/config.json`, "config.json");
  const tokCfgPath = `${dir}/tokenizer_config.json`;
  const tokCfg = (await pathExists(tokCfgPath)) ? await readJson(tokCfgPath, "tokenizer_config.json") : {};
  const tokenizerJson = await readJson(`${dir}/tokenizer.json`, "tokenizer.json");
  const { files, index } = await openShards(dir);
  try {
    const embd = index.get(HF_TENSOR_NAMES.tokenEmbedding);
    if (!embd) throw new ModelLoadError(`Model "${dir}" lacks the tensor "${HF_TENSOR_NAMES.tokenEmbedding}"`);
    const config = hfConfig(cfg, tokCfg, embd[1].shape[0], dir);
    const tokenizer = new HfTokenizer(tokenizerJson, tokCfg, config.bosTokenId ?? tokenString(tokCfg.bos_token), dir, config.vocabSize);
    config.bosTokenId = tokenizer.bosId;
    if (config.addBos && config.bosTokenId === undefined) config.addBos = false;
    if (config.eosTokenIds.length === 0) {
      const eosText = tokenString(tokCfg.eos_token);
      const id = eosText === undefined ? undefined : tokenizer.tokenId(eosText);
      if (id !== undefined) config.eosTokenIds.push(id);
    }
    if (config.architecture === "gpt-oss") config.eosTokenIds = withHarmonyStops(config.eosTokenIds, (t) => tokenizer.tokenId(t));
    // Gemma's chat turns end with <end_of_turn> (generation_config.json lists it; a config.json alone may not).
    const endOfTurn = config.architecture === "gemma3" ? tokenizer.tokenId("<end_of_turn>") : undefined;
    if (endOfTurn !== undefined && !config.eosTokenIds.includes(endOfTurn)) config.eosTokenIds.push(endOfTurn);
    const appended = appendedToken(tokenizerJson, tokCfg);
    const appendedId = appended === undefined ? undefined : tokenizer.tokenId(appended);
    if (appendedId !== undefined) config.appendEosTokenId = appendedId;
    const genPath = `${dir}/generation_config.json`;
    if (await pathExists(genPath)) applyGenerationConfig(config, await readJson(genPath, "generation_config.json"));
    const source = {
      has: (n: string) => index.has(n),
      byteLength: (n: string) => index.get(n)![1].end - index.get(n)![1].begin,
      read: (n: string) => readSafetensor(index.get(n)![0], index.get(n)![1]),
    };
    const raw = { info: (n: string) => index.get(n)?.[1], bytes: (n: string) => index.get(n)![0].read(index.get(n)![1].begin, index.get(n)![1].end - index.get(n)![1].begin) };
    // FP8 matrices are dequantized as they are read, before experts are stacked or kv_b split.
    const fp8 = fp8Scheme(cfg, `${dir}/config.json`);
    const stored = fp8 ? dequantizingFp8(source, raw, fp8, dir) : source;
    const moe = config.moe;
    const names = config.architecture === "gemma3" ? GEMMA3_TENSOR_NAMES : !moe ? HF_TENSOR_NAMES : moeTensorNames(config);
    if (moe && config.architecture !== "gpt-oss") checkLastExpert(names, moe, (n) => index.has(n), dir);
    let tensors = !moe ? stored : config.architecture === "gpt-oss" ? gptOssExperts(stored, raw, dir) : stackingExperts(stored, moe.numExperts, dir);
    if (config.mla) {
      tensors = splittingKvB(tensors, config, names, (i) => `model.layers.${i}.${KV_B}`, dir);
    }
    checkOutputHead(config.tiedEmbeddings, cfg, config.architecture, names.output, (n) => index.has(n), dir);
    const assembled = await assembleWeights(config, tensors, names, dir, options);
    const weights = config.architecture === "gemma3" ? gemmaNormsPlusOne(assembled) : assembled;
    return { config, weights, tokenizer, chatTemplate: await chatTemplate(dir, tokCfg), source: dir };
  } finally {
    await Promise.all(files.map((f) => f.close()));
  }
}

async function chatTemplate(dir: string, tokCfg: Json): Promise<string | undefined> {
  const t = tokCfg.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t.filter((x): x is { name?: unknown; template: string } => isJsonObject(x) && typeof x.template === "string");
    return (named.find((x) => x.name === "default") ?? named[0])?.template;
  }
  const jinja = `${dir}/chat_template.jinja`;
  return (await pathExists(jinja)) ? await readTextFile(jinja) : undefined;
}

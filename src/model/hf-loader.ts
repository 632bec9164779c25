/**
 * Hugging Face model directory → LoadedModel: config.json, *.safetensors (sharded through
 * model.safetensors.index.json or not), tokenizer.json and tokenizer_config.json (chat template).
 * HF checkpoints keep q/k rows in the half-split order, so RoPE is "neox" for every architecture.
 */
import { promises as fsp } from "node:fs";
import { openRandomAccess, pathExists, type RandomAccessFile, readTextFile } from "../runtime/fs.ts";
import { type Architecture, type LoadedModel, type ModelConfig, ModelLoadError, type MoeConfig } from "./config.ts";
import { hfRopeFreqFactors } from "./rope-scaling.ts";
import { readSafetensor, readSafetensorsHeader, type SafetensorsInfo } from "./safetensors.ts";
import { HfTokenizer } from "./tokenizer-hf.ts";
import { assembleWeights, type LayerRole, type LoadOptions, type TensorNames } from "./weights.ts";
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
  ffnNorm: "post_attention_layernorm.weight",
  wGate: "mlp.gate_proj.weight",
  wUp: "mlp.up_proj.weight",
  wDown: "mlp.down_proj.weight",
  router: "mlp.gate.weight",
};

/** Per-expert names of an MoE layer, stacked on load (expert-stack.ts): Qwen3-MoE's and Mixtral's. */
const EXPERT_NAMES: Record<"qwen3moe" | "mixtral", Partial<Record<LayerRole, string>>> = {
  qwen3moe: {
    wGate: `mlp.experts.${EXPERT}.gate_proj.weight`,
    wUp: `mlp.experts.${EXPERT}.up_proj.weight`,
    wDown: `mlp.experts.${EXPERT}.down_proj.weight`,
  },
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

/** transformers' names for a model with experts. */
function moeTensorNames(family: keyof typeof EXPERT_NAMES): TensorNames {
  const experts = EXPERT_NAMES[family];
  return { ...HF_TENSOR_NAMES, layer: (i, role) => `model.layers.${i}.${experts[role] ?? LAYER_NAMES[role]}` };
}

const HF_ARCHITECTURES: Record<string, Architecture> = {
  LlamaForCausalLM: "llama",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Qwen3MoeForCausalLM: "qwen3moe",
  MixtralForCausalLM: "llama",
  // config.json's model_type, for files without `architectures`
  qwen3_moe: "qwen3moe",
  mixtral: "llama",
};

type Json = Record<string, unknown>;

async function readJson(path: string, what: string): Promise<Json> {
  let text: string;
  try {
    text = await readTextFile(path);
  } catch {
    throw new ModelLoadError(`Model directory lacks ${what}: "${path}" not found`);
  }
  try {
    return JSON.parse(text) as Json;
  } catch {
    throw new ModelLoadError(`"${path}" is not valid JSON`);
  }
}

function num(cfg: Json, key: string, path: string, fallback?: number): number {
  const v = cfg[key];
  if (typeof v === "number") return v;
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new ModelLoadError(`"${path}" lacks "${key}"`);
  }
  throw new ModelLoadError(`"${key}" in "${path}" should be a number, got ${JSON.stringify(v)}`);
}

/** Reads the special token's string whether tokenizer_config stores it as a string or an object. */
function tokenString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as Json).content === "string") return (v as Json).content as string;
  return undefined;
}

/** Builds a ModelConfig from config.json (+ tokenizer_config.json for BOS handling). */
export function hfConfig(cfg: Json, tokCfg: Json, vocabSize: number, path: string): ModelConfig {
  const archName = Array.isArray(cfg.architectures) ? String(cfg.architectures[0]) : String(cfg.model_type ?? "");
  const architecture = HF_ARCHITECTURES[archName] ?? (["llama", "qwen2", "qwen3", "qwen3moe"].includes(archName) ? archName as Architecture : undefined);
  if (!architecture) {
    throw new ModelLoadError(`Unknown architecture "${archName}" in "${path}"; supported: ${Object.keys(HF_ARCHITECTURES).join(", ")}`);
  }
  const hiddenSize = num(cfg, "hidden_size", path);
  const numHeads = num(cfg, "num_attention_heads", path);
  const numKvHeads = num(cfg, "num_key_value_heads", path, numHeads);
  const eos = cfg.eos_token_id;
  const eosTokenIds = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).map(Number);
  const bos = typeof cfg.bos_token_id === "number" ? cfg.bos_token_id : undefined;
  const addBosSetting = tokCfg.add_bos_token;
  const headDim = num(cfg, "head_dim", path, Math.floor(hiddenSize / numHeads));
  const ropeTheta = num(cfg, "rope_theta", path, ropeParametersTheta(cfg) ?? 10000);
  const ropeFreqFactors = hfRopeFreqFactors(cfg, ropeTheta, headDim, path);
  const moe = hfMoe(cfg, archName, architecture, path);
  return {
    architecture,
    vocabSize,
    hiddenSize,
    numLayers: num(cfg, "num_hidden_layers", path),
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize: num(cfg, architecture === "qwen3moe" ? "moe_intermediate_size" : "intermediate_size", path),
    ...(moe ? { moe } : {}),
    rmsNormEps: num(cfg, "rms_norm_eps", path, 1e-6),
    ropeTheta,
    ropeLayout: "neox",
    ...(ropeFreqFactors ? { ropeFreqFactors } : {}),
    contextLength: num(cfg, "max_position_embeddings", path, 2048),
    tiedEmbeddings: cfg.tie_word_embeddings === true,
    qkvBias: architecture === "qwen2" || cfg.attention_bias === true,
    qkNorm: architecture === "qwen3" || architecture === "qwen3moe",
    bosTokenId: bos,
    eosTokenIds,
    addBos: typeof addBosSetting === "boolean" ? addBosSetting : architecture === "llama",
  };
}

/** The experts of a Mixtral or Qwen3-MoE config.json (every layer sparse: their released configs). */
function hfMoe(cfg: Json, archName: string, architecture: Architecture, path: string): MoeConfig | undefined {
  const mixtral = archName === "MixtralForCausalLM" || archName === "mixtral";
  if (!mixtral && architecture !== "qwen3moe") return undefined;
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
  // Mixtral always renormalises (softmax over the chosen logits); Qwen3-MoE per its config
  // (transformers' default false, true in every released checkpoint).
  return { numExperts, numExpertsUsed, normalizeTopK: mixtral || cfg.norm_topk_prob === true };
}

/** transformers 5 moves rope_theta into `rope_parameters`. */
function ropeParametersTheta(cfg: Json): number | undefined {
  const p = cfg.rope_parameters;
  const theta = p && typeof p === "object" ? (p as Json).rope_theta : undefined;
  return typeof theta === "number" ? theta : undefined;
}

/** Opens every safetensors shard and indexes its tensors by name. */
async function openShards(dir: string): Promise<{ files: RandomAccessFile[]; index: Map<string, [RandomAccessFile, SafetensorsInfo]> }> {
  const indexPath = `${dir}/model.safetensors.index.json`;
  let shardNames: string[];
  if (await pathExists(indexPath)) {
    const weightMap = (await readJson(indexPath, "its safetensors index")).weight_map as Record<string, string> | undefined;
    if (!weightMap) throw new ModelLoadError(`"${indexPath}" has no weight_map`);
    shardNames = [...new Set(Object.values(weightMap))];
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
      for (const [t, info] of (await readSafetensorsHeader(file)).tensors) index.set(t, [file, info]);
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
    const tokenizer = new HfTokenizer(tokenizerJson, tokCfg, config.bosTokenId ?? tokenString(tokCfg.bos_token), dir);
    config.bosTokenId = tokenizer.bosId;
    if (config.addBos && config.bosTokenId === undefined) config.addBos = false;
    if (config.eosTokenIds.length === 0) {
      const eosText = tokenString(tokCfg.eos_token);
      const id = eosText === undefined ? undefined : tokenizer.tokenId(eosText);
      if (id !== undefined) config.eosTokenIds.push(id);
    }
    const source = {
      has: (n: string) => index.has(n),
      byteLength: (n: string) => index.get(n)![1].end - index.get(n)![1].begin,
      read: (n: string) => readSafetensor(index.get(n)![0], index.get(n)![1]),
    };
    const moe = config.moe;
    const names = !moe ? HF_TENSOR_NAMES : moeTensorNames(config.architecture === "qwen3moe" ? "qwen3moe" : "mixtral");
    const weights = await assembleWeights(config, moe ? stackingExperts(source, moe.numExperts, dir) : source, names, dir, options);
    return { config, weights, tokenizer, chatTemplate: await chatTemplate(dir, tokCfg), source: dir };
  } finally {
    await Promise.all(files.map((f) => f.close()));
  }
}

async function chatTemplate(dir: string, tokCfg: Json): Promise<string | undefined> {
  const t = tokCfg.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t as { name?: string; template?: string }[];
    return (named.find((x) => x.name === "default") ?? named[0])?.template;
  }
  const jinja = `${dir}/chat_template.jinja`;
  return (await pathExists(jinja)) ? await readTextFile(jinja) : undefined;
}

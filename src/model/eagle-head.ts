/**
 * An EAGLE draft head read from its own Hugging Face directory (config.json and safetensors) and
 * attached to a loaded model as the block its speculation runs (ModelConfig.mtp with `eagle`,
 * ModelWeights.mtp; forward-eagle.ts). The layouts vLLM reads: EAGLE-3's checkpoints
 * (`LlamaForCausalLMEagle3`: `fc`, `midlayer.*` or `layers.0.*`, `norm`, `lm_head` over `draft_vocab_size`
 * ids, `d2t` offsets to the model's ids; the speculators format's `transformer_layer_config`), and
 * EAGLE's (`fc` with or without a bias, `layers.0.*` without an input norm, the model's head where the
 * file has none).
 */
import { promises as fsp } from "node:fs";
import { type EagleHeadConfig, type HostTensor, type LayerWeights, layerAttention, type LoadedModel, ModelLoadError, type MtpWeights } from "./config.ts";
import { openShards, readJson } from "./hf-files.ts";
import { hfHeadDim, isJsonObject, type Json, num, positiveInt } from "./hf-json.ts";
import { hfRopeFreqFactors } from "./rope-scaling.ts";
import { hfGptOssYarn } from "./hf-gpt-oss.ts";
import { decodeToF32, encodeFromF32 } from "../backend/dtype-codec.ts";
import type { RandomAccessFile } from "../runtime/fs.ts";
import { readSafetensor, type SafetensorsInfo } from "./safetensors.ts";

/** The speculative methods an EAGLE head serves. */
export type EagleMethod = "eagle" | "eagle3";

/**
 * Reads the EAGLE head in directory `dir` and attaches it to `model` (its config and host weights
 * change in place). Refused by name: a head whose hidden size or key/value heads differ from the
 * model's, more than one layer, a vocabulary map that leaves the model's ids, a missing or misshapen
 * tensor.
 */
export async function attachEagleHead(model: LoadedModel, method: EagleMethod, dir: string): Promise<void> {
  const c = model.config;
  if (c.mtp) throw new ModelLoadError(`Model "${model.source}" already has a draft block loaded; an EAGLE head cannot be attached beside it`);
  if (c.mla) throw new ModelLoadError(`EAGLE head "${dir}" cannot draft for "${model.source}": its latent attention caches keys and values no Llama layer writes`);
  let isDir = false;
  try {
    isDir = (await fsp.stat(dir)).isDirectory();
  } catch {
    throw new ModelLoadError(`EAGLE head not found: "${dir}"`);
  }
  if (!isDir) throw new ModelLoadError(`EAGLE head "${dir}" should be a directory with config.json and safetensors`);
  const path = `${dir}/config.json`;
  const top = await readJson(path, "config.json");
  // The speculators format keeps the layer's settings apart from the head's.
  const layerCfg: Json = isJsonObject(top.transformer_layer_config) ? top.transformer_layer_config : top;
  const hidden = positiveInt(layerCfg, "hidden_size", path);
  if (hidden !== c.hiddenSize) throw new ModelLoadError(`EAGLE head "${dir}" has hidden_size ${hidden}; the model's is ${c.hiddenSize}`);
  const target = top.target_hidden_size ?? layerCfg.target_hidden_size;
  if (target !== undefined && target !== null && target !== c.hiddenSize) throw new ModelLoadError(`EAGLE head "${dir}" was trained on states of target_hidden_size ${JSON.stringify(target)}; the model's hidden size is ${c.hiddenSize}`);
  // The layer's family: Llama's, or Qwen3's (q/k norms), as vLLM maps a speculators head's model_type.
  const family = layerCfg.model_type;
  if (family !== undefined && !["llama", "qwen2", "qwen3", "mistral"].includes(String(family))) {
    throw new ModelLoadError(`EAGLE head "${dir}" has a layer of model_type ${JSON.stringify(family)}; llama, qwen2, qwen3 and mistral ones are run`);
  }
  const layers = positiveInt(layerCfg, "num_hidden_layers", path, 1);
  if (layers !== 1) throw new ModelLoadError(`EAGLE head "${dir}" has ${layers} layers; heads of one layer are run`);
  const numHeads = positiveInt(layerCfg, "num_attention_heads", path);
  const numKvHeads = positiveInt(layerCfg, "num_key_value_heads", path, numHeads);
  const headDim = hfHeadDim(layerCfg, hidden, numHeads, path);
  // The head's cache is the model's extra layer: it must hold what the model's layers hold.
  const geometry = layerAttention(c, c.numLayers);
  if (numKvHeads !== geometry.numKvHeads || headDim !== geometry.headDim) {
    throw new ModelLoadError(`EAGLE head "${dir}" has ${numKvHeads} key/value heads of ${headDim}; its cache is the model's, of ${geometry.numKvHeads} heads of ${geometry.headDim}`);
  }
  const eagleCfg = isJsonObject(top.eagle_config) ? top.eagle_config : {};
  if (method === "eagle3" && eagleCfg.use_aux_hidden_state === false) throw new ModelLoadError(`EAGLE-3 head "${dir}" does not fuse the model's layers (use_aux_hidden_state false); such heads are not run`);
  // The newer EAGLE-3 norms (speculators' "Eagle 3.1", gpt-oss heads), wherever the config keeps them (NVIDIA's: eagle_config).
  const flag = (k: string) => [eagleCfg[k], top[k], layerCfg[k]].find((v) => typeof v === "boolean") === true;
  if (flag("norm_before_fc") && flag("fc_norm")) throw new ModelLoadError(`EAGLE head "${dir}" sets both norm_before_fc and fc_norm, which exclude each other`);
  const fcInputNorm = method !== "eagle3" ? undefined : flag("norm_before_fc") ? "whole" : flag("fc_norm") ? "each" : undefined;
  // A sliding-window head (gpt-oss heads' layer_types) sees its window of the cache it shares in full.
  const types = layerCfg.layer_types;
  if (types !== undefined && (!Array.isArray(types) || !types.every((t) => t === "sliding_attention" || t === "full_attention"))) {
    throw new ModelLoadError(`"layer_types" of EAGLE head "${dir}" should list "sliding_attention" or "full_attention", got ${JSON.stringify(types)}`);
  }
  const slides = Array.isArray(types) ? types.includes("sliding_attention") : layerCfg.use_sliding_window === true;
  const window = slides ? positiveInt(layerCfg, "sliding_window", path) : undefined;
  const auxLayers = method === "eagle3" ? auxLayersOf(top.eagle_aux_hidden_state_layer_ids ?? eagleCfg.eagle_aux_hidden_state_layer_ids, c.numLayers, path) : undefined;
  const ropeTheta = num(layerCfg, "rope_theta", path, 10000);
  // llama3 divisors, or YaRN's with its scale of the scores (gpt-oss heads'), as the models' own are read.
  const scaling = layerCfg.rope_scaling ?? layerCfg.rope_parameters;
  const yarn = isJsonObject(scaling) && (scaling.rope_type ?? scaling.type) === "yarn" ? hfGptOssYarn(layerCfg, ropeTheta, headDim, path) : undefined;
  const factors = yarn ? yarn.ropeFreqFactors : hfRopeFreqFactors(layerCfg, ropeTheta, headDim, path);
  const vocab = c.vocabSize;
  const draftVocab = method === "eagle3" ? positiveInt(top, "draft_vocab_size", path, positiveInt(layerCfg, "vocab_size", path, vocab)) : vocab;
  const { files, index } = await openShards(dir);
  try {
    // vLLM's names: `midlayer.` is layer 0's, a `model.` prefix is dropped.
    const byName = new Map<string, [RandomAccessFile, SafetensorsInfo]>();
    for (const [name, entry] of index) byName.set(name.replace(/^model\./, "").replace(/^midlayer\./, "layers.0."), entry);
    const read = async (name: string, shape: number[] | undefined, optional = false): Promise<HostTensor | undefined> => {
      const entry = byName.get(name);
      if (!entry) {
        if (optional) return undefined;
        throw new ModelLoadError(`EAGLE head "${dir}" lacks the tensor "${name}"`);
      }
      if (shape && (entry[1].shape.length !== shape.length || entry[1].shape.some((d, i) => d !== shape[i]))) {
        throw new ModelLoadError(`EAGLE head tensor "${name}" in "${dir}" is [${entry[1].shape}]; expected [${shape}]`);
      }
      return await readSafetensor(entry[0], entry[1], `eagle.${name}`);
    };
    const need = async (name: string, shape: number[]) => (await read(name, shape))!;
    const inWidth = method === "eagle3" ? 2 * hidden : hidden;
    const ff = positiveInt(layerCfg, "intermediate_size", path);
    const p = "layers.0.";
    const layer: LayerWeights<HostTensor> = {
      wq: await need(`${p}self_attn.q_proj.weight`, [numHeads * headDim, inWidth]),
      wk: await need(`${p}self_attn.k_proj.weight`, [numKvHeads * headDim, inWidth]),
      wv: await need(`${p}self_attn.v_proj.weight`, [numKvHeads * headDim, inWidth]),
      wo: await need(`${p}self_attn.o_proj.weight`, [hidden, numHeads * headDim]),
      ffnNorm: await need(`${p}post_attention_layernorm.weight`, [hidden]),
      wGate: await need(`${p}mlp.gate_proj.weight`, [ff, hidden]),
      wUp: await need(`${p}mlp.up_proj.weight`, [ff, hidden]),
      wDown: await need(`${p}mlp.down_proj.weight`, [hidden, ff]),
    };
    for (const [role, name, rows] of [["bq", "q", numHeads], ["bk", "k", numKvHeads], ["bv", "v", numKvHeads]] as const) {
      const bias = await read(`${p}self_attn.${name}_proj.bias`, [rows * headDim], true);
      if (bias) layer[role] = bias;
    }
    const bo = await read(`${p}self_attn.o_proj.bias`, [hidden], true);
    if (bo) layer.bo = bo;
    // Qwen3's layer norms each head's query and key.
    const qNorm = await read(`${p}self_attn.q_norm.weight`, [headDim], family !== "qwen3");
    const kNorm = await read(`${p}self_attn.k_norm.weight`, [headDim], family !== "qwen3");
    if (qNorm && kNorm) [layer.qNorm, layer.kNorm] = [qNorm, kNorm];
    else if (qNorm || kNorm) throw new ModelLoadError(`EAGLE head "${dir}" has ${qNorm ? "q_norm" : "k_norm"} without ${qNorm ? "k_norm" : "q_norm"}`);
    const embedding = await read("embed_tokens.weight", [vocab, hidden], true);
    const head = await read("lm_head.weight", [draftVocab, hidden], draftVocab === vocab);
    const draftToTarget = method === "eagle3" ? await draftIds(byName.get("d2t"), draftVocab, vocab, dir) : undefined;
    const fc = await need("fc.weight", [hidden, method === "eagle3" ? 3 * hidden : 2 * hidden]);
    // norm_before_fc: one weight over the three states; fc_norm: one each, folded into fc's columns (a ones weight left).
    const fcIn = fcInputNorm === "whole"
      ? { ehProj: fc, fcInNorm: await need("input_norm.weight", [3 * hidden]) }
      : fcInputNorm === "each"
      ? { ehProj: foldColumnScales(fc, await Promise.all([0, 1, 2].map((j) => need(`fc_norm.${j}.weight`, [hidden])))), fcInNorm: ones(hidden) }
      : { ehProj: fc };
    const weights: MtpWeights<HostTensor> = {
      layer,
      ...fcIn,
      ...(method === "eagle3"
        ? { enorm: await need(`${p}input_layernorm.weight`, [hidden]), hnorm: await need(`${p}hidden_norm.weight`, [hidden]), headNorm: await need("norm.weight", [hidden]) }
        : {}),
      ...(method === "eagle" ? optionalField("ehBias", await read("fc.bias", [hidden], true)) : {}),
      ...optionalField("head", head),
      ...optionalField("embedding", embedding),
      ...(draftToTarget ? { draftEmbedding: rowsOf(embedding ?? model.weights.tokenEmbedding, draftToTarget, "eagle.draft_embedding") } : {}),
      ...(factors ? { ropeFreqFactors: { name: "eagle.rope_freqs", shape: [factors.length], dtype: "f32", data: new Uint8Array(Float32Array.from(factors).buffer) } } : {}),
    };
    const eagle: EagleHeadConfig = {
      method, numHeads, headDim, rmsNormEps: num(layerCfg, "rms_norm_eps", path, 1e-6), ropeTheta, source: dir,
      ...(auxLayers ? { auxLayers } : {}),
      ...(normBeforeResidual(top, eagleCfg) ? { normBeforeResidual: true } : {}),
      ...(draftToTarget ? { draftToTarget } : {}),
      ...(fcInputNorm ? { fcInputNorm } : {}),
      ...(window !== undefined ? { window } : {}),
      ...(yarn?.attentionScale !== undefined ? { attentionScale: yarn.attentionScale } : {}),
      ...(method === "eagle3" && flag("norm_output") ? { normOutput: true } : {}),
    };
    c.mtp = { layer: c.numLayers, eagle };
    model.weights.mtp = weights;
  } finally {
    await Promise.all(files.map((f) => f.close()));
  }
}

/**
 * EAGLE-3's `norm_before_residual`: the config's (NVIDIA's nest it in `eagle_config`), else the
 * speculators format's default, true, as vLLM converts that format; false for the others.
 */
function normBeforeResidual(top: Json, eagleCfg: Json): boolean {
  const given = eagleCfg.norm_before_residual ?? top.norm_before_residual;
  if (typeof given === "boolean") return given;
  return top.speculators_model_type !== undefined;
}

/** f32 ones [n]: the weight of a norm whose own weights were folded elsewhere. */
function ones(n: number): HostTensor {
  return { name: "eagle.fc_norm_unit", shape: [n], dtype: "f32", data: new Uint8Array(new Float32Array(n).fill(1).buffer) };
}

/** `fc` [out, k·n] with column block j scaled by `scales[j]` [n] (an RMS norm's weight moved past it), in fc's own dtype. */
function foldColumnScales(fc: HostTensor, scales: readonly HostTensor[]): HostTensor {
  const [rows, cols] = fc.shape;
  const w = decodeToF32(fc.data, fc.dtype, rows * cols);
  const per = cols / scales.length;
  const s = scales.map((t) => decodeToF32(t.data, t.dtype, per));
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) w[r * cols + c] *= s[Math.floor(c / per)][c % per];
  return { ...fc, data: encodeFromF32(w, fc.dtype) };
}

/** `{[key]: value}` where value is present, `{}` where not. */
function optionalField<K extends string>(key: K, value: HostTensor | undefined): Partial<Record<K, HostTensor>> {
  return value ? { [key]: value } as Record<K, HostTensor> : {};
}

/**
 * The model's layers whose entering states an EAGLE-3 head fuses: its config's
 * `eagle_aux_hidden_state_layer_ids`, else vLLM's default (2, layers / 2, layers − 3).
 */
function auxLayersOf(ids: unknown, numLayers: number, path: string): number[] {
  const chosen = ids ?? [2, Math.floor(numLayers / 2), numLayers - 3];
  if (!Array.isArray(chosen) || chosen.length !== 3 || chosen.some((i) => !Number.isInteger(i) || i < 0 || i >= numLayers)) {
    const what = ids === undefined ? `the default layers ${JSON.stringify(chosen)}` : `eagle_aux_hidden_state_layer_ids ${JSON.stringify(ids)} ("${path}")`;
    throw new ModelLoadError(`An EAGLE-3 head fuses three of the model's ${numLayers} layers; ${what} are not three of them`);
  }
  return chosen as number[];
}

/** The model's id of each of the head's ids: d + d2t[d] (an I64 tensor); the identity where the head has the model's vocabulary and no map. */
async function draftIds(entry: [RandomAccessFile, SafetensorsInfo] | undefined, draftVocab: number, vocab: number, dir: string): Promise<Int32Array | undefined> {
  if (!entry) {
    if (draftVocab === vocab) return undefined;
    throw new ModelLoadError(`EAGLE head "${dir}" drafts over ${draftVocab} ids of the model's ${vocab} but lacks the tensor "d2t" that maps them`);
  }
  const [file, info] = entry;
  if (info.dtype !== "I64" || info.shape.length !== 1 || info.shape[0] !== draftVocab) {
    throw new ModelLoadError(`EAGLE head tensor "d2t" in "${dir}" is ${info.dtype} [${info.shape}]; expected I64 [${draftVocab}]`);
  }
  const bytes = await file.read(info.begin, info.end - info.begin);
  const offsets = new BigInt64Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const out = new Int32Array(draftVocab);
  for (let d = 0; d < draftVocab; d++) {
    const t = d + Number(offsets[d]);
    if (!Number.isInteger(t) || t < 0 || t >= vocab) throw new ModelLoadError(`EAGLE head "${dir}" maps its id ${d} to ${t} (d2t), outside the model's ${vocab} ids`);
    out[d] = t;
  }
  return out.every((t, d) => t === d) && draftVocab === vocab ? undefined : out;
}

/** Rows `ids` of a [rows, width] tensor in any row-major format (a quantized row's blocks are its own bytes). */
function rowsOf(t: HostTensor, ids: Int32Array, name: string): HostTensor {
  const rowBytes = t.data.byteLength / t.shape[0];
  const data = new Uint8Array(ids.length * rowBytes);
  ids.forEach((id, i) => data.set(t.data.subarray(id * rowBytes, (id + 1) * rowBytes), i * rowBytes));
  return { name, shape: [ids.length, ...t.shape.slice(1)], dtype: t.dtype, data };
}

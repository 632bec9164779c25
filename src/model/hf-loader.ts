/**
 * Hugging Face model directory → LoadedModel: config.json (hf-config.ts), *.safetensors (sharded
 * through model.safetensors.index.json or not; hf-files.ts), tokenizer.json and tokenizer_config.json
 * (chat template; hf-tokenizer-config.ts), weights under transformers' names (hf-names.ts).
 * HF checkpoints keep q/k rows in the half-split order, so RoPE is "neox" for every architecture.
 */
import { falconH1HfTensors, hfFalconH1 } from "./falcon-h1.ts";
import { pathExists } from "../runtime/fs.ts";
import { type LoadedModel, ModelLoadError } from "./config.ts";
import { hfConfig } from "./hf-config.ts";
import { openShards, readJson } from "./hf-files.ts";
import { HF_KV_B, HF_TENSOR_NAMES, hfTensorNames, prefixed } from "./hf-names.ts";
import { fusedQwenExperts, hfTextModel, qwen35HfTensors } from "./hf-qwen35.ts";
import { hfQwen3NextFused, splittingQwen3NextFused } from "./qwen3next.ts";
import { lfm2HfTensors } from "./lfm2.ts";
import { graniteHybridHfTensors } from "./granite-hybrid.ts";
import { NEMOTRON_H_HF_NAMES } from "./nemotron-h.ts";
import { appendedToken, chatTemplate, tokenString } from "./hf-tokenizer-config.ts";
import { splittingKvB } from "./mla-weights.ts";
import { gptOssExperts } from "./hf-gpt-oss.ts";
import { gemmaNormsPlusOne } from "./hf-gemma3.ts";
import { splittingPhi3Fused } from "./phi3.ts";
import { withHarmonyStops } from "./gguf-gpt-oss.ts";
import { applyGenerationConfig } from "./hf-generation-config.ts";
import { checkOutputHead } from "./hf-defaults.ts";
import { type Fp8Scheme, fp8KeepsBlocks, fp8Scheme, readingFp8 } from "./fp8.ts";
import { readSafetensor } from "./safetensors.ts";
import { HfTokenizer } from "./tokenizer-hf.ts";
import { assembleWeights, checkLastExpert, type LoadOptions, withLoadNote } from "./weights.ts";
import { stackingExperts } from "./expert-stack.ts";

export { hfConfig } from "./hf-config.ts";
export { appendedToken } from "./hf-tokenizer-config.ts";
export { HF_TENSOR_NAMES } from "./hf-names.ts";

/** Loads a Hugging Face model directory. */
export async function loadHfDirectory(dir: string, options: LoadOptions = {}): Promise<LoadedModel> {
  // Qwen3.5 as released: its text model's config and weights inside a vision-language checkpoint.
  const { cfg, prefix } = hfTextModel(await readJson(`${dir}/config.json`, "config.json"));
  const plainEmbedding = prefixed(HF_TENSOR_NAMES, prefix).tokenEmbedding;
  const tokCfgPath = `${dir}/tokenizer_config.json`;
  const tokCfg = (await pathExists(tokCfgPath)) ? await readJson(tokCfgPath, "tokenizer_config.json") : {};
  const tokenizerJson = await readJson(`${dir}/tokenizer.json`, "tokenizer.json");
  const { files, index } = await openShards(dir);
  try {
    // Nemotron-H's checkpoints keep theirs under `backbone.`.
    const tokenEmbedding = !index.has(plainEmbedding) && index.has(NEMOTRON_H_HF_NAMES.tokenEmbedding) ? NEMOTRON_H_HF_NAMES.tokenEmbedding : plainEmbedding;
    const embd = index.get(tokenEmbedding);
    if (!embd) throw new ModelLoadError(`Model "${dir}" lacks the tensor "${tokenEmbedding}"`);
    const config = hfConfig(cfg, tokCfg, embd[1].shape[0], dir);
    // Qwen3-Next's released config.json names no block its checkpoint holds: one, as vLLM reads it.
    if (config.architecture === "qwen3next" && config.nextnLayers === undefined && index.has("mtp.fc.weight")) config.nextnLayers = 1;
    const tokenizer = new HfTokenizer(tokenizerJson, tokCfg, config.bosTokenId ?? tokenString(tokCfg.bos_token), dir, config.vocabSize);
    config.bosTokenId = tokenizer.bosId;
    if (config.addBos && config.bosTokenId === undefined) config.addBos = false;
    if (config.eosTokenIds.length === 0) {
      const eosText = tokenString(tokCfg.eos_token);
      const id = eosText === undefined ? undefined : tokenizer.tokenId(eosText);
      if (id !== undefined) config.eosTokenIds.push(id);
    }
    if (config.architecture === "gpt-oss") config.eosTokenIds = withHarmonyStops(config.eosTokenIds, (t) => tokenizer.tokenId(t));
    // Gemma's chat turns end with <end_of_turn>, Phi-3's with <|end|> (generation_config.json lists it; a config.json alone may not).
    const gemma = config.architecture === "gemma3" || config.architecture === "gemma2";
    const turnEnd = gemma ? "<end_of_turn>" : config.architecture === "phi3" ? "<|end|>" : undefined;
    const endOfTurn = turnEnd === undefined ? undefined : tokenizer.tokenId(turnEnd);
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
    // FP8 matrices become f8_e4m3 blocks (or bf16) as they are read, before experts are stacked or kv_b split.
    const fp8 = fp8Scheme(cfg, `${dir}/config.json`);
    const read = fp8 ? readingFp8(source, raw, fp8, dir) : source;
    const mamba2 = config.mamba2 ? graniteHybridHfTensors(read, config.mamba2.groups) : undefined;
    // Falcon-H1's multipliers fold into its weights as they are read (falcon-h1.ts).
    const falconH1 = mamba2 && config.architecture === "falcon-h1" ? falconH1HfTensors(mamba2, hfFalconH1(cfg, config.hiddenSize, config.numLayers, dir).multipliers, config.mamba2!) : undefined;
    const stored = config.deltaNet ? qwen35HfTensors(read) : config.shortConv ? lfm2HfTensors(read) : falconH1 ?? mamba2 ?? read;
    const moe = config.moe;
    const names = prefixed(hfTensorNames(config), prefix);
    // Qwen3.5-MoE's experts may be fused per layer (hf-qwen35.ts), with no per-expert names to check.
    const fused = config.architecture === "qwen35moe" || config.architecture === "qwen3next";
    // Granite 4.0-H's experts are stacked already (`block_sparse_moe.input_linear` [E, 2·ff, H]).
    const stacked = config.architecture === "gpt-oss" || config.architecture === "granitehybrid";
    if (moe && !stacked && !fused) checkLastExpert(names, moe, (n) => index.has(n), dir);
    let tensors = !moe || config.architecture === "granitehybrid" ? stored : config.architecture === "gpt-oss" ? gptOssExperts(stored, raw, dir) : stackingExperts(stored, moe.numExperts, dir);
    if (fused) tensors = fusedQwenExperts(tensors, stored);
    if (config.mla) {
      tensors = splittingKvB(tensors, config, names, (i) => `model.layers.${i}.${HF_KV_B}`, dir);
    }
    if (config.architecture === "phi3") {
      const fused = { qkv: (i: number) => `model.layers.${i}.self_attn.qkv_proj.weight`, gateUp: (i: number) => `model.layers.${i}.mlp.gate_up_proj.weight` };
      tensors = splittingPhi3Fused(tensors, config, names, fused, (n) => index.get(n)?.[1].shape[0], dir);
    }
    if (config.architecture === "qwen3next" && config.deltaNet) {
      tensors = splittingQwen3NextFused(tensors, config.deltaNet, names, hfQwen3NextFused(prefix), (n) => index.get(n)?.[1].shape[0], dir);
    }
    checkOutputHead(config.tiedEmbeddings, cfg, config.architecture, names.output, (n) => index.has(n), dir);
    const assembled = await assembleWeights(config, tensors, names, dir, withLoadNote(options, fp8 ? fp8Note(index, fp8, options) : undefined));
    if (assembled.mtp) config.mtp = { layer: config.numLayers };
    // Gemma's and Qwen3.5's norms weigh by 1 + w (Qwen3.5's gated DeltaNet norm, another role, by w).
    const weights = gemma || config.deltaNet ? gemmaNormsPlusOne(assembled) : assembled;
    return { config, weights, tokenizer, chatTemplate: await chatTemplate(dir, tokCfg), source: dir };
  } finally {
    await Promise.all(files.map((f) => f.close()));
  }
}

/** What the load says about an FP8 checkpoint's matrices (fp8.ts): how many, and what they are held as. */
function fp8Note(index: ReadonlyMap<string, readonly [unknown, { dtype: string; shape: number[] }]>, scheme: Fp8Scheme, options: LoadOptions): string | undefined {
  const fp8 = [...index.values()].filter(([, info]) => info.dtype === "F8_E4M3");
  if (fp8.length === 0) return undefined;
  const widened = fp8.filter(([, info]) => !fp8KeepsBlocks(info.shape, scheme)).length;
  const head = `the checkpoint holds ${fp8.length} FP8 (F8_E4M3) matri${fp8.length === 1 ? "x" : "ces"}`;
  const bf16 = `${widened} whose rows are not whole 32-value blocks dequantized to bf16`;
  if (options.quantize && options.quantize !== "f8_e4m3") return `${head}, quantized to ${options.quantize} as they load` + (widened ? ` (${bf16} first)` : "");
  if (widened === fp8.length) return `${head}, none with rows of whole 32-value blocks: dequantized to bf16 as they load, twice their size in the file`;
  return `${head}: ${widened ? `${fp8.length - widened} ` : ""}kept as f8_e4m3 (their codes with an f32 scale per 32 values, 9 bits a weight)` + (widened ? `; ${bf16}` : "");
}

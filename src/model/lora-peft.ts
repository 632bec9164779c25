/**
 * Reads Hugging Face PEFT LoRA adapter directories, vLLM's format: `adapter_config.json` (`r`,
 * `lora_alpha`, `use_rslora`, ...) and `adapter_model.safetensors`, whose tensors
 * `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight` [rank, in] and `.lora_B.weight`
 * [out, rank] name the projections in Hugging Face's row order. PEFT's scale: alpha / rank (alpha /
 * √rank with rsLoRA), times the loader's. A Llama base read from GGUF has its q and k rows permuted
 * for llama.cpp's interleaved RoPE (convert_hf_to_gguf.py), so B's rows of q and k are permuted the same.
 * Gated DeltaNet projections (`linear_attn.*`; Qwen3-Next's fused per key head) hold value heads
 * grouped, as Hugging Face's do: moved to tiled order for a Qwen3.5 GGUF base. The released Qwen3.5
 * checkpoints' text model is under `model.language_model.`, and so are adapters trained on them.
 */
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { openRandomAccess, pathExists, readTextFile } from "../runtime/fs.ts";
import { ModelLoadError, type ModelConfig } from "./config.ts";
import { isJsonObject, type Json } from "./hf-json.ts";
import { assembleAdapter, checkFusedPair, fusedParts, gatheredParts, type LoraAdapter, type LoraLoadOptions, type LoraTarget, type LoraWeight, reorderValueHeads } from "./lora.ts";
import { qwen3nextFusedRanges } from "./qwen3next.ts";
import { readSafetensor, readSafetensorsHeader } from "./safetensors.ts";

/** Hugging Face module names of the targets (`model.layers.N.<module>`). */
const MODULES: Readonly<Record<string, LoraTarget>> = {
  "self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv", "self_attn.o_proj": "wo",
  "mlp.gate_proj": "wGate", "mlp.up_proj": "wUp", "mlp.down_proj": "wDown",
  "linear_attn.in_proj_qkv": "ssmQkv", "linear_attn.in_proj_z": "ssmZ", "linear_attn.in_proj_b": "ssmBeta", "linear_attn.in_proj_a": "ssmAlpha",
  "linear_attn.out_proj": "ssmOut",
  // Falcon-H1's feed-forward (its scan's mamba.* as Granite's, its attention as every model's).
  "feed_forward.gate_proj": "wGate", "feed_forward.up_proj": "wUp", "feed_forward.down_proj": "wDown",
  // Granite 4.0-H's Mamba-2 mixer (on a granitehybrid base).
  "mamba.in_proj": "ssmIn", "mamba.out_proj": "ssmOut",
  // Nemotron-H's one block per layer, whichever it is (`backbone.layers.N.mixer.*`).
  "mixer.in_proj": "ssmIn", "mixer.out_proj": "ssmOut", "mixer.q_proj": "wq", "mixer.k_proj": "wk", "mixer.v_proj": "wv", "mixer.o_proj": "wo",
  "mixer.up_proj": "wUp", "mixer.down_proj": "wDown",
};

/** LFM2's module names (lfm2.ts): its attention output, feed-forward and short convolution projections. */
const LFM2_MODULES: Readonly<Record<string, LoraTarget>> = {
  "self_attn.out_proj": "wo", "feed_forward.w1": "wGate", "feed_forward.w3": "wUp", "feed_forward.w2": "wDown", "conv.in_proj": "convIn", "conv.out_proj": "convOut",
};

/** Qwen3-Next's projections fused per key head (qwen3next.ts): B's rows gathered per part. */
const PER_KEY_HEAD: ReadonlySet<string> = new Set(["linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"]);

/**
 * Phi-3's fused modules (phi3.ts): one lora_A for the parts, lora_B's rows the parts' in order, so each
 * part is an adapter of its own with the shared A and its rows of B.
 */
const FUSED_MODULES: Readonly<Record<string, readonly LoraTarget[]>> = {
  "self_attn.qkv_proj": ["wq", "wk", "wv"],
  "mlp.gate_up_proj": ["wGate", "wUp"],
  "linear_attn.in_proj_qkvz": ["ssmQkv", "ssmZ"],
  "linear_attn.in_proj_ba": ["ssmBeta", "ssmAlpha"],
};

/** Layer, module, targets (several for a fused module) and side of a PEFT tensor name; undefined when it names none we can adapt. */
function parsePeftName(name: string): { layer: number; module: string; targets: readonly LoraTarget[]; side: "A" | "B" } | undefined {
  const m = /^(?:base_model\.model\.)?(?:(model|backbone)\.(language_model\.)?layers\.(\d+)\.([a-z_.]+)|(lm_head))\.lora_([AB])(?:\.default)?\.weight$/.exec(name);
  if (!m) return undefined;
  const side = m[6] as "A" | "B";
  if (m[5] === "lm_head") return { layer: -1, module: "lm_head", targets: ["output"], side };
  const one = MODULES[m[4]] ?? LFM2_MODULES[m[4]];
  const targets = one !== undefined ? [one] : FUSED_MODULES[m[4]];
  // Nemotron-H's checkpoints name their layers under `backbone.` (its PEFT adapters under either).
  return targets === undefined ? undefined : { layer: Number(m[3]), module: `${m[1]}.${m[2] ?? ""}layers.${m[3]}.${m[4]}`, targets, side };
}

/** llama.cpp's q/k row permutation (convert_hf_to_gguf.py `permute`) of a [rows, cols] matrix with `heads` heads. */
export function permuteRowsForGguf(values: Float32Array, rows: number, cols: number, heads: number): Float32Array {
  const out = new Float32Array(values.length);
  const d = rows / heads, half = d / 2;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < half; j++) {
      for (let t = 0; t < 2; t++) {
        const from = h * d + t * half + j, to = h * d + j * 2 + t;
        out.set(values.subarray(from * cols, (from + 1) * cols), to * cols);
      }
    }
  }
  return out;
}

/** Refuses PEFT settings the forward would not honour, naming the key. */
function checkPeftConfig(cfg: Json, path: string): void {
  const fail = (why: string) => new ModelLoadError(`PEFT adapter "${path}": ${why}`);
  if (cfg.peft_type !== undefined && cfg.peft_type !== "LORA") throw fail(`peft_type is ${JSON.stringify(cfg.peft_type)}; only "LORA" adapters are supported`);
  if (cfg.use_dora === true) throw fail("use_dora is true; DoRA adapters are not supported");
  if (cfg.fan_in_fan_out === true) throw fail("fan_in_fan_out is true (Conv1D weights); only Linear layers are supported");
  if (cfg.bias !== undefined && cfg.bias !== "none") throw fail(`bias is ${JSON.stringify(cfg.bias)}; only "none" is supported`);
  const saved = cfg.modules_to_save;
  if (Array.isArray(saved) && saved.length > 0) throw fail(`modules_to_save lists ${JSON.stringify(saved)}; adapters that replace whole modules are not supported`);
  for (const key of ["rank_pattern", "alpha_pattern"]) {
    const v = cfg[key];
    if (v && typeof v === "object" && Object.keys(v).length > 0) throw fail(`${key} is set; per-module ranks and alphas are not supported`);
  }
}

/** Reads a PEFT LoRA directory for a base model with `config` (see the module comment). Throws ModelLoadError naming the fault. */
export async function loadPeftLora(dir: string, config: ModelConfig, options: LoraLoadOptions = {}): Promise<LoraAdapter> {
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new ModelLoadError(`LoRA scale should be a finite number, got ${scale}`);
  const cfgPath = `${dir}/adapter_config.json`, filePath = `${dir}/adapter_model.safetensors`;
  if (!(await pathExists(cfgPath))) throw new ModelLoadError(`LoRA adapter directory "${dir}" has no adapter_config.json`);
  if (!(await pathExists(filePath))) {
    const bin = await pathExists(`${dir}/adapter_model.bin`);
    throw new ModelLoadError(`LoRA adapter directory "${dir}" has no adapter_model.safetensors${bin ? " (adapter_model.bin is a pickle, which is not read: convert it to safetensors)" : ""}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readTextFile(cfgPath));
  } catch (e) {
    throw new ModelLoadError(`"${cfgPath}" is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!isJsonObject(parsed)) throw new ModelLoadError(`"${cfgPath}" should hold a JSON object, got ${Array.isArray(parsed) ? "an array" : JSON.stringify(parsed)}`);
  const cfg: Json = parsed;
  checkPeftConfig(cfg, dir);
  if (config.foldedMultipliers) {
    throw new ModelLoadError(
      `PEFT adapter "${dir}" cannot run on this ${config.architecture} base: its multipliers are folded into the base's weights, and the adapter's deltas would need the same scaling (a GGUF adapter converted for the GGUF base applies as llama.cpp applies it)`,
    );
  }
  const alpha = typeof cfg.lora_alpha === "number" ? cfg.lora_alpha : undefined;
  if (alpha === undefined || !Number.isFinite(alpha)) {
    // JSON.stringify would quote an Infinity (1e400 in the file) as null.
    const shown = typeof cfg.lora_alpha === "number" ? String(cfg.lora_alpha) : JSON.stringify(cfg.lora_alpha);
    throw new ModelLoadError(`PEFT adapter "${dir}": lora_alpha should be a finite number, got ${shown}`);
  }
  const rslora = cfg.use_rslora === true;
  const permute = (config.architecture === "llama" || config.architecture === "smollm3" || config.architecture === "granite" || config.architecture === "mistral3") && config.ropeLayout === "normal";
  const file = await openRandomAccess(filePath);
  try {
    const header = await readSafetensorsHeader(file);
    const pairs = new Map<string, { layer: number; module: string; targets: readonly LoraTarget[]; A?: string; B?: string }>();
    for (const name of header.tensors.keys()) {
      const p = parsePeftName(name);
      if (!p) {
        throw new ModelLoadError(
          `PEFT adapter "${dir}" has tensor "${name}", which names no projection we can adapt (q/k/v/o_proj, gate/up/down_proj, lm_head; Phi-3's qkv_proj, gate_up_proj; Gated DeltaNet's linear_attn in_proj_qkv/z/b/a, out_proj, in_proj_qkvz/ba; LFM2's conv.in_proj/out_proj; Mamba-2's mamba.in_proj/out_proj; Nemotron-H's mixer.* of each)`,
        );
      }
      const key = p.module;
      const pair = pairs.get(key) ?? { layer: p.layer, module: p.module, targets: p.targets };
      // `…lora_A.weight` and `…lora_A.default.weight` name the same matrix: which one is meant is unknown.
      const other = pair[p.side];
      if (other !== undefined) throw new ModelLoadError(`PEFT adapter "${dir}" has both "${other}" and "${name}" for one matrix`);
      pair[p.side] = name;
      pairs.set(key, pair);
    }
    if (pairs.size === 0) throw new ModelLoadError(`PEFT adapter "${dir}" has no lora_A/lora_B tensors`);
    const weights: LoraWeight[] = [];
    const hasOutput = options.hasOutput ?? !config.tiedEmbeddings;
    for (const { layer, module, targets, A, B } of pairs.values()) {
      const a = A === undefined ? undefined : header.tensors.get(A)!, b = B === undefined ? undefined : header.tensors.get(B)!;
      const { rank, inDim, rows } = checkFusedPair(`PEFT adapter "${dir}"`, module, ["lora_A", "lora_B"], layer, targets, a?.shape, b?.shape, config, hasOutput);
      // PEFT scales by alpha / r with r from the config: tensors of another rank would be scaled wrong (PEFT itself cannot load them).
      if (cfg.r !== undefined && cfg.r !== rank) {
        throw new ModelLoadError(`PEFT adapter "${dir}" has "${module}" of rank ${rank}, but its adapter_config.json gives r ${JSON.stringify(cfg.r)}`);
      }
      const at = await readSafetensor(file, a!), bt = await readSafetensor(file, b!);
      const av = decodeToF32(at.data, at.dtype, rank * inDim);
      const bv = decodeToF32(bt.data, bt.dtype, b!.shape[0] * rank);
      const s = scale * (rslora ? alpha / Math.sqrt(rank) : alpha / rank);
      for (let i = 0; i < bv.length; i++) bv[i] *= s;
      const d = config.deltaNet;
      const stem = module.replace(/^model\.(?:language_model\.)?layers\.\d+\./, "");
      const r = d && PER_KEY_HEAD.has(stem) ? qwen3nextFusedRanges(d) : undefined;
      const parts = r ? gatheredParts(layer, targets, stem.endsWith("qkvz") ? [r.qkv, r.z] : [r.beta, r.alpha], rank, inDim, av, bv) : fusedParts(layer, targets, rows, rank, inDim, av, bv);
      for (const w of parts) {
        const permuted = permute && (w.target === "wq" || w.target === "wk");
        weights.push(permuted ? { ...w, b: permuteRowsForGguf(w.b, w.outDim, rank, w.target === "wq" ? config.numHeads : config.numKvHeads) } : d ? reorderValueHeads(w, config, "grouped", d.vHeadOrder) : w);
      }
    }
    return assembleAdapter(dir, alpha, scale, weights);
  } finally {
    await file.close();
  }
}

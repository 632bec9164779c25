/**
 * Reads llama.cpp's GGUF LoRA adapter files (what `convert_lora_to_gguf.py` writes from a PEFT
 * directory): `general.type` "adapter", `adapter.type` "lora", `adapter.lora.alpha`, and per adapted
 * projection `<base tensor>.lora_a` (ne [in, rank]) and `.lora_b` (ne [rank, out]), already in the
 * base GGUF's row order. llama.cpp's scale: scale · alpha / rank, or the scale alone where alpha is 0.
 * A Gated DeltaNet model's projections (`attn_qkv`, `attn_gate`, `ssm_beta`, `ssm_alpha`, `ssm_out`;
 * Qwen3-Next's `ssm_ba` and first conversions' `ssm_in`, fused per key head) have their value heads in
 * its GGUF's order (tiled for Qwen3.5, grouped for Qwen3-Next), moved to the base's where it differs.
 */
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { openRandomAccess } from "../runtime/fs.ts";
import { ModelLoadError, type ModelConfig } from "./config.ts";
import { GgufMetadata, showGgufValue } from "./gguf-metadata.ts";
import { readGgufHeader, readGgufTensor } from "./gguf-reader.ts";
import { assembleAdapter, checkFusedPair, fusedParts, gatheredParts, type LoraAdapter, type LoraLoadOptions, type LoraTarget, type LoraWeight, reorderValueHeads } from "./lora.ts";
import { qwen3nextFusedRanges } from "./qwen3next.ts";

/** GGUF tensor stems of the per-layer targets (`blk.N.<stem>.weight`). */
const LAYER_STEMS: Readonly<Record<string, LoraTarget>> = {
  attn_q: "wq", attn_k: "wk", attn_v: "wv", attn_output: "wo", ffn_gate: "wGate", ffn_up: "wUp", ffn_down: "wDown",
};

/** Phi-3's fused q/k/v (`attn_qkv`); its fused gate/up shares `ffn_up` with the plain up (told apart by B's height). */
const FUSED_STEMS: Readonly<Record<string, readonly LoraTarget[]>> = { attn_qkv: ["wq", "wk", "wv"] };

/** A Gated DeltaNet model's stems (its `attn_qkv` is the DeltaNet q/k/v); Qwen3-Next's fused per key head. */
const DELTA_NET_STEMS: Readonly<Record<string, readonly LoraTarget[]>> = {
  attn_qkv: ["ssmQkv"], attn_gate: ["ssmZ"], ssm_beta: ["ssmBeta"], ssm_alpha: ["ssmAlpha"], ssm_out: ["ssmOut"], ssm_ba: ["ssmBeta", "ssmAlpha"], ssm_in: ["ssmQkv", "ssmZ"],
};

/** Granite 4.0-H's Mamba-2 layers' projections. */
const MAMBA2_STEMS: Readonly<Record<string, readonly LoraTarget[]>> = { ssm_in: ["ssmIn"], ssm_out: ["ssmOut"] };

/** LFM2's short convolution layers' projections. */
const SHORT_CONV_STEMS: Readonly<Record<string, readonly LoraTarget[]>> = { "shortconv.in_proj": ["convIn"], "shortconv.out_proj": ["convOut"] };

/** Splits `blk.N.<stem>.weight.lora_a` (or `output.weight.lora_b`) into layer, stem, targets and side; undefined when it is none of them. */
function parseName(name: string, config: ModelConfig): { layer: number; stem: string; targets: readonly LoraTarget[]; side: "a" | "b" } | undefined {
  const m = /^(?:blk\.(\d+)\.([a-z_.]+)|(output))\.weight\.lora_([ab])$/.exec(name);
  if (!m) return undefined;
  const side = m[4] as "a" | "b";
  if (m[3] === "output") return { layer: -1, stem: "output", targets: ["output"], side };
  const own = config.deltaNet ? DELTA_NET_STEMS[m[2]] : config.shortConv ? SHORT_CONV_STEMS[m[2]] : config.mamba2 ? MAMBA2_STEMS[m[2]] : undefined;
  const targets = own ?? (LAYER_STEMS[m[2]] !== undefined ? [LAYER_STEMS[m[2]]] : FUSED_STEMS[m[2]]);
  return targets === undefined ? undefined : { layer: Number(m[1]), stem: m[2], targets, side };
}

/**
 * Reads a GGUF LoRA adapter for a base model with `config`: checks it is an adapter for the same
 * architecture, that every tensor pairs up and fits the base projection it names, and scales B.
 * Throws {@link ModelLoadError} naming the file and the tensor or key at fault.
 */
export async function loadGgufLora(path: string, config: ModelConfig, options: LoraLoadOptions = {}): Promise<LoraAdapter> {
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new ModelLoadError(`LoRA scale should be a finite number, got ${scale}`);
  const file = await openRandomAccess(path);
  try {
    const header = await readGgufHeader(file);
    const meta = new GgufMetadata(header.metadata, path);
    const type = meta.has("general.type") ? meta.string("general.type") : undefined;
    if (type !== "adapter") throw new ModelLoadError(`"${path}" is not a LoRA adapter: its general.type is ${showGgufValue(type)}, expected "adapter"`);
    const kind = meta.has("adapter.type") ? meta.string("adapter.type") : undefined;
    if (kind !== "lora") throw new ModelLoadError(`"${path}" is an adapter of type ${showGgufValue(kind)}; only "lora" adapters are supported`);
    const arch = meta.string("general.architecture", "");
    if (arch !== config.architecture) {
      throw new ModelLoadError(`LoRA adapter "${path}" is for architecture "${arch}", the base model is "${config.architecture}"`);
    }
    if (meta.has("adapter.alora.invocation_tokens")) {
      throw new ModelLoadError(`LoRA adapter "${path}" is an activated LoRA (adapter.alora.invocation_tokens); only plain LoRA adapters are supported`);
    }
    const alpha = meta.number("adapter.lora.alpha", 0);
    if (!Number.isFinite(alpha)) throw new ModelLoadError(`LoRA adapter "${path}" has adapter.lora.alpha ${alpha}; expected a finite number`);
    const pairs = new Map<string, { layer: number; stem: string; targets: readonly LoraTarget[]; a?: (typeof header.tensors)[number]; b?: (typeof header.tensors)[number] }>();
    for (const t of header.tensors) {
      // llama.cpp skips norm deltas (it cannot apply them); so do we.
      if (/_norm\.weight\.lora_[ab]$/.test(t.name)) continue;
      const p = parseName(t.name, config);
      if (!p) {
        const own = config.deltaNet ? "; Gated DeltaNet's attn_qkv, attn_gate, ssm_beta/alpha/out, ssm_ba, ssm_in" : config.mamba2 ? "; Mamba-2's ssm_in, ssm_out" : "; Phi-3's attn_qkv";
        throw new ModelLoadError(`LoRA adapter "${path}" has tensor "${t.name}", which names no projection we can adapt (attn_q/k/v/output, ffn_gate/up/down, output${own})`);
      }
      const key = `${p.layer}.${p.stem}`;
      const pair = pairs.get(key) ?? { layer: p.layer, stem: p.stem, targets: p.targets };
      pair[p.side] = t;
      pairs.set(key, pair);
    }
    if (pairs.size === 0) throw new ModelLoadError(`LoRA adapter "${path}" has no lora_a/lora_b tensors`);
    const weights: LoraWeight[] = [];
    for (const { layer, stem, targets: named, a, b } of pairs.values()) {
      const name = layer < 0 ? "output.weight" : `blk.${layer}.${stem}.weight`;
      // Phi-3's ffn_up holds gate and up (2·ffn rows), as its base's does.
      const targets = config.architecture === "phi3" && stem === "ffn_up" && b?.shape[0] === 2 * config.intermediateSize ? ["wGate", "wUp"] as const : named;
      const { rank, inDim, rows } = checkFusedPair(`LoRA adapter "${path}"`, name, ["lora_a", "lora_b"], layer, targets, a?.shape, b?.shape, config, options.hasOutput ?? !config.tiedEmbeddings);
      const at = await readGgufTensor(file, a!);
      const av = decodeToF32(at.data, at.dtype, rank * inDim);
      const bt = await readGgufTensor(file, b!);
      const bv = decodeToF32(bt.data, bt.dtype, b!.shape[0] * rank);
      const s = alpha !== 0 ? scale * alpha / rank : scale;
      for (let i = 0; i < bv.length; i++) bv[i] *= s;
      // Qwen3-Next's ssm_ba and ssm_in hold their parts' rows per key head.
      const r = config.deltaNet && (stem === "ssm_ba" || stem === "ssm_in") ? qwen3nextFusedRanges(config.deltaNet) : undefined;
      weights.push(...(r ? gatheredParts(layer, targets, stem === "ssm_ba" ? [r.beta, r.alpha] : [r.qkv, r.z], rank, inDim, av, bv) : fusedParts(layer, targets, rows, rank, inDim, av, bv)));
    }
    const d = config.deltaNet;
    // llama.cpp's Qwen3.5 GGUFs hold value heads tiled, its Qwen3-Next ones grouped.
    const order = config.architecture === "qwen3next" ? "grouped" : "tiled";
    return assembleAdapter(path, alpha, scale, d ? weights.map((w) => reorderValueHeads(w, config, order, d.vHeadOrder)) : weights);
  } finally {
    await file.close();
  }
}

/**
 * LoRA adapters: low-rank deltas on a base model's projections, y = W·x + s·B·(A·x), read from
 * llama.cpp's GGUF adapter files (what `convert_lora_to_gguf.py` writes from a PEFT directory).
 * The scale is llama.cpp's: s = scale · alpha / rank, or the scale alone where the file's alpha is 0.
 * B is stored here already multiplied by s, so the forward adds B·(A·x) as it is.
 */
import { createHash } from "node:crypto";
import { decodeToF32 } from "../backend/dtype-codec.ts";
import { openRandomAccess } from "../runtime/fs.ts";
import { isMoeLayer, ModelLoadError, type ModelConfig } from "./config.ts";
import { GgufMetadata } from "./gguf-metadata.ts";
import { readGgufHeader, readGgufTensor } from "./gguf-reader.ts";

/** The projections an adapter may change (LayerWeights' names; "output" is the model's output projection). */
export type LoraTarget = "wq" | "wk" | "wv" | "wo" | "wGate" | "wUp" | "wDown" | "output";

/** GGUF tensor stems of the per-layer targets (`blk.N.<stem>.weight`). */
const LAYER_STEMS: Readonly<Record<string, LoraTarget>> = {
  attn_q: "wq", attn_k: "wk", attn_v: "wv", attn_output: "wo", ffn_gate: "wGate", ffn_up: "wUp", ffn_down: "wDown",
};

/** One adapted projection: A [rank, in] and B [out, rank] (B scaled), both f32 row-major. */
export interface LoraWeight {
  /** The layer, or -1 for the output projection. */
  layer: number;
  target: LoraTarget;
  rank: number;
  inDim: number;
  outDim: number;
  a: Float32Array;
  b: Float32Array;
}

/** A loaded adapter. */
export interface LoraAdapter {
  /** Where it was read from. */
  source: string;
  /** The file's `adapter.lora.alpha` (0: none given) and the scale asked for when loading. */
  alpha: number;
  scale: number;
  /** Largest rank of its weights. */
  maxRank: number;
  weights: LoraWeight[];
  /** Hex SHA-256 of its weights after scaling: equal for the same adapter loaded at the same scale. */
  fingerprint: string;
}

/** Key of an adapted projection in a set: "<layer>.<target>" ("-1.output" for the output projection). */
export function loraKey(layer: number, target: LoraTarget): string {
  return `${layer}.${target}`;
}

/** Options of {@link loadLoraAdapter}. */
export interface LoraLoadOptions {
  /** Multiplies the adapter's delta (llama.cpp's `--lora-scaled`); default 1. */
  scale?: number;
  /** The base model has its own output projection (not tied to the embedding): only then may an adapter change it. */
  hasOutput?: boolean;
}

/** The [in, out] widths the base model's projection `target` of layer `layer` has, or an error naming why none can be adapted. */
export function targetDims(config: ModelConfig, layer: number, target: LoraTarget, hasOutput: boolean): [number, number] | string {
  const q = config.numHeads * config.headDim, kv = config.numKvHeads * config.headDim;
  if (target === "output") return hasOutput ? [config.hiddenSize, config.vocabSize] : "the base model's output projection is its token embedding (tied)";
  if (layer < 0 || layer >= config.numLayers) return `the base model has ${config.numLayers} layers`;
  if (config.mla && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "latent attention projections cannot be adapted";
  if (target === "wGate" || target === "wUp" || target === "wDown") {
    if (isMoeLayer(config, layer)) return "expert feed-forwards cannot be adapted";
    const ffn = config.moe ? config.moe.denseIntermediateSize : config.intermediateSize;
    return target === "wDown" ? [ffn, config.hiddenSize] : [config.hiddenSize, ffn];
  }
  if (target === "wo") return [q, config.hiddenSize];
  return [config.hiddenSize, target === "wq" ? q : kv];
}

/** Splits `blk.N.<stem>.weight.lora_a` (or `output.weight.lora_b`) into layer, target and side; undefined when it is none of them. */
function parseName(name: string): { layer: number; target: LoraTarget; side: "a" | "b" } | undefined {
  const m = /^(?:blk\.(\d+)\.([a-z_]+)|(output))\.weight\.lora_([ab])$/.exec(name);
  if (!m) return undefined;
  const side = m[4] as "a" | "b";
  if (m[3] === "output") return { layer: -1, target: "output", side };
  const target = LAYER_STEMS[m[2]];
  return target === undefined ? undefined : { layer: Number(m[1]), target, side };
}

/**
 * Reads a GGUF LoRA adapter for a base model with `config`: checks it is an adapter for the same
 * architecture, that every tensor pairs up and fits the base projection it names, and scales B.
 * Throws {@link ModelLoadError} naming the file and the tensor or key at fault.
 */
export async function loadLoraAdapter(path: string, config: ModelConfig, options: LoraLoadOptions = {}): Promise<LoraAdapter> {
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new ModelLoadError(`LoRA scale should be a finite number, got ${scale}`);
  const file = await openRandomAccess(path);
  try {
    const header = await readGgufHeader(file);
    const meta = new GgufMetadata(header.metadata, path);
    const type = meta.has("general.type") ? meta.string("general.type") : undefined;
    if (type !== "adapter") throw new ModelLoadError(`"${path}" is not a LoRA adapter: its general.type is ${JSON.stringify(type ?? null)}, expected "adapter"`);
    const kind = meta.has("adapter.type") ? meta.string("adapter.type") : undefined;
    if (kind !== "lora") throw new ModelLoadError(`"${path}" is an adapter of type ${JSON.stringify(kind ?? null)}; only "lora" adapters are supported`);
    const arch = meta.string("general.architecture", "");
    if (arch !== config.architecture) {
      throw new ModelLoadError(`LoRA adapter "${path}" is for architecture "${arch}", the base model is "${config.architecture}"`);
    }
    if (meta.has("adapter.alora.invocation_tokens")) {
      throw new ModelLoadError(`LoRA adapter "${path}" is an activated LoRA (adapter.alora.invocation_tokens); only plain LoRA adapters are supported`);
    }
    const alpha = meta.number("adapter.lora.alpha", 0);
    const pairs = new Map<string, { layer: number; target: LoraTarget; a?: (typeof header.tensors)[number]; b?: (typeof header.tensors)[number] }>();
    for (const t of header.tensors) {
      // llama.cpp skips norm deltas (it cannot apply them); so do we.
      if (/_norm\.weight\.lora_[ab]$/.test(t.name)) continue;
      const p = parseName(t.name);
      if (!p) throw new ModelLoadError(`LoRA adapter "${path}" has tensor "${t.name}", which names no projection we can adapt (attn_q/k/v/output, ffn_gate/up/down, output)`);
      const key = loraKey(p.layer, p.target);
      const pair = pairs.get(key) ?? { layer: p.layer, target: p.target };
      pair[p.side] = t;
      pairs.set(key, pair);
    }
    if (pairs.size === 0) throw new ModelLoadError(`LoRA adapter "${path}" has no lora_a/lora_b tensors`);
    const weights: LoraWeight[] = [];
    const hash = createHash("sha256");
    for (const [key, { layer, target, a, b }] of pairs) {
      const name = layer < 0 ? "output.weight" : `blk.${layer}.${Object.keys(LAYER_STEMS).find((s) => LAYER_STEMS[s] === target)}.weight`;
      if (!a || !b) throw new ModelLoadError(`LoRA adapter "${path}" has ${a ? "lora_a" : "lora_b"} for "${name}" but not ${a ? "lora_b" : "lora_a"}`);
      const dims = targetDims(config, layer, target, options.hasOutput ?? !config.tiedEmbeddings);
      if (typeof dims === "string") throw new ModelLoadError(`LoRA adapter "${path}" adapts "${name}", but ${dims}`);
      const [inDim, outDim] = dims;
      const rank = a.shape[0];
      if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[1] !== inDim || b.shape[0] !== outDim || b.shape[1] !== rank || rank < 1) {
        throw new ModelLoadError(
          `LoRA adapter "${path}" has "${name}" lora_a of shape [${a.shape}] and lora_b of shape [${b.shape}]; ` +
            `expected [rank, ${inDim}] and [${outDim}, rank] (rows outermost)`,
        );
      }
      const at = await readGgufTensor(file, a);
      const av = decodeToF32(at.data, at.dtype, rank * inDim);
      const bt = await readGgufTensor(file, b);
      const bv = decodeToF32(bt.data, bt.dtype, outDim * rank);
      const s = alpha !== 0 ? scale * alpha / rank : scale;
      for (let i = 0; i < bv.length; i++) bv[i] *= s;
      hash.update(key);
      hash.update(new Uint8Array(av.buffer, av.byteOffset, av.byteLength));
      hash.update(new Uint8Array(bv.buffer, bv.byteOffset, bv.byteLength));
      weights.push({ layer, target, rank, inDim, outDim, a: av, b: bv });
    }
    weights.sort((x, y) => x.layer - y.layer || x.target.localeCompare(y.target));
    return { source: path, alpha, scale, maxRank: Math.max(...weights.map((w) => w.rank)), weights, fingerprint: hash.digest("hex").slice(0, 32) };
  } finally {
    await file.close();
  }
}

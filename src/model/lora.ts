/**
 * LoRA adapters: low-rank deltas on a base model's projections, y = W·x + s·B·(A·x), as loaded
 * (lora-load.ts: llama.cpp GGUF files, lora-gguf.ts; Hugging Face PEFT directories, lora-peft.ts)
 * and checked against the base. B is kept already multiplied by its format's scale s, so the forward
 * (forward.ts, lora-set.ts) adds B·(A·x) as it is.
 */
import { createHash } from "node:crypto";
import { attendsInParallel, hasFeedForward, layerAttention, isDeltaNetLayer, isFeedForwardOnlyLayer, isMamba2Layer, isMoeLayer, isShortConvLayer, ModelLoadError, type ModelConfig } from "./config.ts";

/**
 * The projections an adapter may change (LayerWeights' names; "output" is the model's output
 * projection; the `ssm*` ones a Gated DeltaNet layer's).
 */
export type LoraTarget = "wq" | "wk" | "wv" | "wo" | "wGate" | "wUp" | "wDown" | "output" | DeltaNetLoraTarget | "convIn" | "convOut" | "ssmIn";

/** A Gated DeltaNet layer's projections: q/k/v together, z (the output gate), beta, alpha, and the output. */
export type DeltaNetLoraTarget = "ssmQkv" | "ssmZ" | "ssmBeta" | "ssmAlpha" | "ssmOut";

const DELTA_NET_TARGETS: readonly LoraTarget[] = ["ssmQkv", "ssmZ", "ssmBeta", "ssmAlpha", "ssmOut"];

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
  if (target === "output") return hasOutput ? [config.hiddenSize, config.vocabSize] : "the base model's output projection is its token embedding (tied)";
  if (layer < 0 || layer >= config.numLayers) return `the base model has ${config.numLayers} layers`;
  // Gemma 4's sliding layers have heads of their own size; its layers without a value projection have none to adapt.
  const geometry = layerAttention(config, layer);
  const q = config.numHeads * geometry.headDim, kv = geometry.numKvHeads * geometry.headDim;
  if ((target === "wk" || target === "wv") && config.kvShareFrom?.[layer] !== undefined) return `it reads layer ${config.kvShareFrom[layer]}'s KV cache and projects no keys or values`;
  if (target === "wv" && config.keyAsValue?.[layer]) return "it has no value projection (its values are its keys')";
  if (config.mla && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "latent attention projections cannot be adapted";
  if (isDeltaNetLayer(config, layer) && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "it is a Gated DeltaNet layer, which has no attention projections";
  if (isShortConvLayer(config, layer) && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "it is a short convolution layer, which has no attention projections";
  if (isMamba2Layer(config, layer) && !attendsInParallel(config, layer) && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "it is a Mamba-2 layer, which has no attention projections";
  if (isFeedForwardOnlyLayer(config, layer) && (target === "wq" || target === "wk" || target === "wv" || target === "wo")) return "it is a feed-forward layer, which has no attention projections";
  const ffnTarget = target === "wGate" || target === "wUp" || target === "wDown";
  if (ffnTarget && !hasFeedForward(config, layer)) return "it is an attention or Mamba-2 layer alone, which has no feed-forward";
  if (target === "wGate" && config.ffnActivation === "relu2") return "the model's feed-forward is ungated (no gate projection)";
  if (target === "ssmIn" || (target === "ssmOut" && config.mamba2)) {
    const m = config.mamba2;
    if (!m || !isMamba2Layer(config, layer)) return "it is not a Mamba-2 layer";
    // The input projection gives z, then x, B and C, then dt.
    return target === "ssmIn" ? [config.hiddenSize, 2 * m.innerSize + 2 * m.groups * m.stateSize + m.heads] : [m.innerSize, config.hiddenSize];
  }
  if (target === "convIn" || target === "convOut") {
    if (!isShortConvLayer(config, layer)) return "it is not a short convolution layer";
    return target === "convIn" ? [config.hiddenSize, 3 * config.hiddenSize] : [config.hiddenSize, config.hiddenSize];
  }
  if (DELTA_NET_TARGETS.includes(target)) {
    const d = config.deltaNet;
    if (!d || !isDeltaNetLayer(config, layer)) return "it is not a Gated DeltaNet layer";
    const values = d.numVHeads * d.headVDim;
    if (target === "ssmOut") return [values, config.hiddenSize];
    const out = target === "ssmQkv" ? 2 * d.numKHeads * d.headKDim + values : target === "ssmZ" ? values : d.numVHeads;
    return [config.hiddenSize, out];
  }
  if (target === "wGate" || target === "wUp" || target === "wDown") {
    if (isMoeLayer(config, layer)) return "expert feed-forwards cannot be adapted";
    const ffn = config.moe ? config.moe.denseIntermediateSize : config.layerIntermediateSizes?.[layer] ?? config.intermediateSize;
    return target === "wDown" ? [ffn, config.hiddenSize] : [config.hiddenSize, ffn];
  }
  if (target === "wo") return [q, config.hiddenSize];
  // Qwen3.5's gated attention: the query projection gives each head its query and its gate.
  return [config.hiddenSize, target === "wq" ? (config.attnOutputGate ? 2 * q : q) : kv];
}

/** An adapter of `weights` (B already scaled), in a fixed order, with its fingerprint. */
export function assembleAdapter(source: string, alpha: number, scale: number, weights: LoraWeight[]): LoraAdapter {
  weights.sort((x, y) => x.layer - y.layer || x.target.localeCompare(y.target));
  const hash = createHash("sha256");
  for (const w of weights) {
    hash.update(loraKey(w.layer, w.target));
    hash.update(new Uint8Array(w.a.buffer, w.a.byteOffset, w.a.byteLength));
    hash.update(new Uint8Array(w.b.buffer, w.b.byteOffset, w.b.byteLength));
  }
  return { source, alpha, scale, maxRank: Math.max(...weights.map((w) => w.rank)), weights, fingerprint: hash.digest("hex").slice(0, 32) };
}

/**
 * Checks a fused module's pair (Phi-3's q/k/v or gate/up in one matrix: one A shared by the parts,
 * B's rows the parts' in order) as {@link checkPair} checks each part with its rows of B. Returns the
 * rank, the input width and each part's height (B's rows to give it, in order).
 */
export function checkFusedPair(
  adapter: string, name: string, sides: [string, string], layer: number, targets: readonly LoraTarget[],
  a: readonly number[] | undefined, b: readonly number[] | undefined, config: ModelConfig, hasOutput: boolean,
): { rank: number; inDim: number; rows: number[] } {
  if (targets.length === 1) {
    const { rank, inDim, outDim } = checkPair(adapter, name, sides, layer, targets[0], a, b, config, hasOutput);
    return { rank, inDim, rows: [outDim] };
  }
  const rows = targets.map((t) => {
    const dims = targetDims(config, layer, t, hasOutput);
    return typeof dims === "string" ? 0 : dims[1];
  });
  const total = rows.reduce((x, y) => x + y, 0);
  if (a && b && (b.length !== 2 || b[0] !== total)) {
    throw new ModelLoadError(`${adapter} has "${name}" ${sides[1]} of shape [${b}]; expected [${rows.join(" + ")}, rank] (rows outermost)`);
  }
  let out = { rank: 0, inDim: 0 };
  targets.forEach((t, i) => (out = checkPair(adapter, name, sides, layer, t, a, b && [rows[i], b[1]], config, hasOutput)));
  return { ...out, rows };
}

/** A fused module's parts as adapters of their own: `a` shared, `b` ([sum of rows, rank], scaled) split by `rows`. */
export function fusedParts(layer: number, targets: readonly LoraTarget[], rows: readonly number[], rank: number, inDim: number, a: Float32Array, b: Float32Array): LoraWeight[] {
  let first = 0;
  return targets.map((target, i) => {
    const w = { layer, target, rank, inDim, outDim: rows[i], a, b: b.slice(first * rank, (first + rows[i]) * rank) };
    first += rows[i];
    return w;
  });
}

/**
 * Checks one adapted projection's pair against the base: both sides given (`sides` names them as the
 * file does), a projection the base lets be adapted, A [rank, in] and B [out, rank]. Returns the
 * rank and widths; throws ModelLoadError naming `adapter` (how the file is named) and `name` (the projection).
 */
export function checkPair(
  adapter: string, name: string, sides: [string, string], layer: number, target: LoraTarget,
  a: readonly number[] | undefined, b: readonly number[] | undefined, config: ModelConfig, hasOutput: boolean,
): { rank: number; inDim: number; outDim: number } {
  if (!a || !b) throw new ModelLoadError(`${adapter} has ${a ? sides[0] : sides[1]} for "${name}" but not ${a ? sides[1] : sides[0]}`);
  const dims = targetDims(config, layer, target, hasOutput);
  if (typeof dims === "string") throw new ModelLoadError(`${adapter} adapts "${name}", but ${dims}`);
  const [inDim, outDim] = dims;
  const rank = a[0];
  if (a.length !== 2 || b.length !== 2 || a[1] !== inDim || b[0] !== outDim || b[1] !== rank || rank < 1) {
    throw new ModelLoadError(`${adapter} has "${name}" ${sides[0]} of shape [${a}] and ${sides[1]} of shape [${b}]; expected [rank, ${inDim}] and [${outDim}, rank] (rows outermost)`);
  }
  return { rank, inDim, outDim };
}

/**
 * A fused module's parts as adapters of their own, each part's rows of B gathered from `ranges`
 * (`[first row, count]`, in order): Qwen3-Next's projections fused per key head (qwen3next.ts).
 */
export function gatheredParts(
  layer: number, targets: readonly LoraTarget[], ranges: readonly (readonly (readonly [number, number])[])[], rank: number, inDim: number, a: Float32Array, b: Float32Array,
): LoraWeight[] {
  return targets.map((target, i) => {
    const rows = ranges[i].reduce((n, [, count]) => n + count, 0);
    const part = new Float32Array(rows * rank);
    let at = 0;
    for (const [first, count] of ranges[i]) {
      part.set(b.subarray(first * rank, (first + count) * rank), at * rank);
      at += count;
    }
    return { layer, target, rank, inDim, outDim: rows, a, b: part };
  });
}

/**
 * `w` with a Gated DeltaNet projection's value heads moved from `from` order to `to` (DeltaNetConfig.vHeadOrder):
 * B's rows of the v part of q/k/v, of z, beta and alpha; A's columns of the output projection. An
 * adapter's order is its format's (PEFT: grouped; llama.cpp's Qwen3.5: tiled), the base's its file's.
 */
export function reorderValueHeads(w: LoraWeight, config: ModelConfig, from: "tiled" | "grouped", to: "tiled" | "grouped"): LoraWeight {
  const d = config.deltaNet;
  if (!d || from === to || !DELTA_NET_TARGETS.includes(w.target) || d.numKHeads === d.numVHeads) return w;
  const per = d.numVHeads / d.numKHeads;
  // Where value head h (in `from` order) goes in `to` order.
  const grouped = (k: number, j: number) => k * per + j, tiled = (k: number, j: number) => j * d.numKHeads + k;
  const dest = new Array<number>(d.numVHeads);
  for (let k = 0; k < d.numKHeads; k++) for (let j = 0; j < per; j++) dest[(from === "grouped" ? grouped : tiled)(k, j)] = (to === "grouped" ? grouped : tiled)(k, j);
  const width = w.target === "ssmBeta" || w.target === "ssmAlpha" ? 1 : d.headVDim;
  if (w.target === "ssmOut") {
    // A [rank, values]: columns per head.
    const a = new Float32Array(w.a.length);
    for (let r = 0; r < w.rank; r++) {
      for (let h = 0; h < d.numVHeads; h++) a.set(w.a.subarray(r * w.inDim + h * width, r * w.inDim + (h + 1) * width), r * w.inDim + dest[h] * width);
    }
    return { ...w, a };
  }
  const first = w.target === "ssmQkv" ? 2 * d.numKHeads * d.headKDim : 0;
  const b = new Float32Array(w.b);
  for (let h = 0; h < d.numVHeads; h++) {
    b.set(w.b.subarray((first + h * width) * w.rank, (first + (h + 1) * width) * w.rank), (first + dest[h] * width) * w.rank);
  }
  return { ...w, b };
}

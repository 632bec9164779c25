/**
 * Random LoRA adapters for tests: written as llama.cpp GGUF adapter files (A ne [in, rank], B ne
 * [rank, out]), and merged into a copy of a base model's host weights (W + s·B·A in f32), the
 * independent computation an adapter's forward must agree with.
 */
import { decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import type { WeightDType } from "../../src/backend/types.ts";
import type { HostTensor, LayerWeights, ModelConfig, ModelWeights } from "../../src/model/config.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { type LoraAdapter, type LoraTarget, targetDims } from "../../src/model/lora.ts";
import { seededRandom } from "./model-files.ts";

/** GGUF stems of the targets. */
const STEMS: Record<LoraTarget, string> = {
  wq: "attn_q", wk: "attn_k", wv: "attn_v", wo: "attn_output", wGate: "ffn_gate", wUp: "ffn_up", wDown: "ffn_down", output: "output",
  ssmQkv: "attn_qkv", ssmZ: "attn_gate", ssmBeta: "ssm_beta", ssmAlpha: "ssm_alpha", ssmOut: "ssm_out",
  convIn: "shortconv.in_proj", convOut: "shortconv.out_proj", ssmIn: "ssm_in",
};

/** What a random adapter holds. */
export interface LoraFileSpec {
  seed: number;
  rank: number;
  /** `adapter.lora.alpha`; 0 leaves the scale to the loader's. */
  alpha: number;
  /** Projections it changes: layer (-1 for the output projection) and target. */
  targets: readonly { layer: number; target: LoraTarget }[];
  /** Storage of A and B; default f32. */
  dtype?: WeightDType;
  /** Uniform half-width of the values; default 0.3. */
  magnitude?: number;
  /** Extra metadata entries, or ones replacing the defaults (tests of refusals). */
  metadata?: [string, ReturnType<typeof gguf.str>][];
  /** Fused matrices adapted whole (`blk.N.<stem>.weight`, B of `rows` rows), after `targets`: Phi-3's, Qwen3-Next's. */
  fused?: readonly { layer: number; stem: "attn_qkv" | "ffn_up" | "ssm_ba" | "ssm_in"; rows: number }[];
}

/** A GGUF LoRA adapter for a base model with `config`. */
export function loraGgufBytes(config: ModelConfig, spec: LoraFileSpec): Uint8Array {
  const rand = seededRandom(spec.seed);
  const m = spec.magnitude ?? 0.3;
  const tensors: HostTensor[] = [];
  for (const { layer, target } of spec.targets) {
    const dims = targetDims(config, layer, target, !config.tiedEmbeddings);
    if (typeof dims === "string") throw new Error(`test adapter cannot target ${layer}.${target}: ${dims}`);
    const [inDim, outDim] = dims;
    const name = layer < 0 ? "output.weight" : `blk.${layer}.${STEMS[target]}.weight`;
    const draw = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * m);
    tensors.push(hostTensorFromF32(`${name}.lora_a`, [spec.rank, inDim], draw(spec.rank * inDim), spec.dtype ?? "f32"));
    tensors.push(hostTensorFromF32(`${name}.lora_b`, [outDim, spec.rank], draw(outDim * spec.rank), spec.dtype ?? "f32"));
  }
  for (const { layer, stem, rows } of spec.fused ?? []) {
    const draw = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * m);
    tensors.push(hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_a`, [spec.rank, config.hiddenSize], draw(spec.rank * config.hiddenSize), spec.dtype ?? "f32"));
    tensors.push(hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_b`, [rows, spec.rank], draw(rows * spec.rank), spec.dtype ?? "f32"));
  }
  const meta = new Map<string, ReturnType<typeof gguf.str>>([
    ["general.architecture", gguf.str(config.architecture)],
    ["general.type", gguf.str("adapter")],
    ["adapter.type", gguf.str("lora")],
    ["adapter.lora.alpha", gguf.f32(spec.alpha)],
  ]);
  for (const [k, v] of spec.metadata ?? []) meta.set(k, v);
  return encodeGguf({ metadata: meta, tensors });
}

/** `t` + B·A (B already scaled), as an f32 host tensor. */
function merged(t: HostTensor, a: Float32Array, b: Float32Array, rank: number): HostTensor {
  const [out, inDim] = t.shape;
  const w = decodeToF32(t.data, t.dtype, out * inDim);
  for (let o = 0; o < out; o++) {
    for (let i = 0; i < inDim; i++) {
      let sum = 0;
      for (let r = 0; r < rank; r++) sum += b[o * rank + r] * a[r * inDim + i];
      w[o * inDim + i] += sum;
    }
  }
  return { ...t, dtype: "f32", data: encodeFromF32(w, "f32") };
}

/** A copy of `model` with `adapter` merged into its weights (the base is left as it was). */
export function mergeLora<M extends { weights: ModelWeights<HostTensor> }>(model: M, adapter: LoraAdapter): M {
  const layers = model.weights.layers.map((l) => ({ ...l }));
  let output = model.weights.output;
  for (const w of adapter.weights) {
    if (w.target === "output") {
      output = merged(output!, w.a, w.b, w.rank);
      continue;
    }
    const l = layers[w.layer] as LayerWeights<HostTensor>;
    const key = w.target as Exclude<LoraTarget, "output">;
    (l as unknown as Record<string, HostTensor>)[key] = merged(l[key] as HostTensor, w.a, w.b, w.rank);
  }
  return { ...model, weights: { ...model.weights, layers, output } };
}

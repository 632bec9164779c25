/**
 * IBM Granite 4.0-H (llama.cpp's `granitehybrid`, transformers' GraniteMoeHybridForCausalLM) as
 * llama.cpp runs it: Mamba-2 layers (ModelConfig.mamba2; Backend.ssmScan) and, among them, grouped
 * query attention layers, each followed by a SwiGLU feed-forward (or Granite's experts with a shared
 * one), with Granite 3.x's four multipliers (granite.ts). Its files tell the layers apart by a
 * per-layer `attention.head_count_kv` of 0 (a Mamba-2 layer), as LFM2's do. Granite 4.0-H's
 * attention layers turn nothing (`rope.scaling.finetuned` false: NoPE on every layer); Bamba-style
 * files that keep it true rotate as Granite 3.x's. The grouped norm is refused past one group (all
 * Granite 4.0-H models have one), as is an expansion other than llama.cpp's 2.
 */
import { type Mamba2Config, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";

/** A granitehybrid GGUF's Mamba-2 geometry, its attention layers' KV heads, and whether those rotate. */
export function ggufGraniteHybrid(meta: GgufMetadata, arch: string, hiddenSize: number, path: string): { mamba2: Mamba2Config; numKvHeads: number; rotates: boolean } {
  const key = `${arch}.attention.head_count_kv`;
  const raw = meta.entries.get(key)?.value;
  const blocks = meta.number(`${arch}.block_count`);
  const heads = Array.isArray(raw) ? raw.map(Number) : undefined;
  if (!heads || heads.length !== blocks) throw new ModelLoadError(`Model "${path}" is granitehybrid but "${key}" is not a per-layer array of its ${blocks} layers (0 for each Mamba-2 layer)`);
  const attention = [...new Set(heads.filter((h) => h !== 0))];
  if (attention.length > 1 || (attention.length === 1 && !(Number.isInteger(attention[0]) && attention[0] >= 1))) {
    throw new ModelLoadError(`Model "${path}" has "${key}" [${heads.join(", ")}]; expected 0 for each Mamba-2 layer and one KV head count for the attention layers`);
  }
  const whole = (name: string, least = 1) => {
    const v = meta.number(`${arch}.ssm.${name}`);
    if (!Number.isInteger(v) || v < least) throw new ModelLoadError(`GGUF metadata "${arch}.ssm.${name}" in "${path}" should be a whole number of at least ${least}, got ${v}`);
    return v;
  };
  const mamba2: Mamba2Config = {
    layers: heads.map((h) => h === 0),
    innerSize: whole("inner_size"),
    stateSize: whole("state_size"),
    heads: whole("time_step_rank"),
    groups: whole("group_count"),
    convKernel: whole("conv_kernel", 2),
  };
  if (mamba2.innerSize % mamba2.heads !== 0) throw new ModelLoadError(`Model "${path}" has an SSM inner size ${mamba2.innerSize} that its ${mamba2.heads} heads do not divide`);
  if (mamba2.innerSize !== 2 * hiddenSize) throw new ModelLoadError(`Model "${path}" has an SSM inner size ${mamba2.innerSize}, not twice its hidden size ${hiddenSize} (the only expansion llama.cpp runs)`);
  if (mamba2.groups !== 1) throw new ModelLoadError(`Model "${path}" has ${mamba2.groups} SSM groups; only one (every Granite 4.0-H model's) is supported`);
  const rotates = meta.bool(`${arch}.rope.scaling.finetuned`, true);
  // A model of Mamba-2 layers alone has no attention layer, and no KV head count to give: 1 keeps the shapes whole.
  return { mamba2, numKvHeads: attention[0] ?? 1, rotates };
}

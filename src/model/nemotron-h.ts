/**
 * NVIDIA Nemotron-H (llama.cpp's `nemotron_h` GGUFs: Nemotron-H 8B/47B, Nemotron Nano 9B/12B v2) as
 * llama.cpp runs it: each layer is one block behind one RMS norm — a Mamba-2 mixer (ModelConfig.mamba2,
 * with groups: the gated norm runs per group), grouped query attention without positions (NoPE), or an
 * ungated feed-forward down(max(up·x, 0)²) (ModelConfig.ffnActivation "relu2") — told apart as llama.cpp
 * tells them: a per-layer `attention.head_count_kv` and `feed_forward_length` of 0 and 0 for a Mamba-2
 * layer, a KV head count alone for attention, a width alone for a feed-forward.
 */
import { type LayerBlock, type Mamba2Config, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";

/** What a nemotron_h GGUF adds to the config. */
export interface NemotronHConfig {
  mamba2: Mamba2Config;
  layerBlocks: LayerBlock[];
  /** The attention layers' KV heads (1 where the model has none, which keeps shapes whole). */
  numKvHeads: number;
  /** The feed-forward layers' width. */
  intermediateSize: number;
}

/** A per-layer whole-number array of `blocks` entries, or a single number given to every layer. */
function perLayer(meta: GgufMetadata, key: string, blocks: number, path: string): number[] {
  const raw = meta.entries.get(key)?.value;
  const values = Array.isArray(raw) ? raw.map(Number) : meta.has(key) ? Array<number>(blocks).fill(meta.number(key)) : undefined;
  if (!values || values.length !== blocks || !values.every((v) => Number.isInteger(v) && v >= 0)) {
    throw new ModelLoadError(`Model "${path}" is nemotron_h but "${key}" is not a whole number from 0 for each of its ${blocks} layers`);
  }
  return values;
}

/** The one nonzero value a kind of layer shares, or `fallback` where no layer has one. */
function shared(values: readonly number[], key: string, what: string, path: string, fallback: number): number {
  const distinct = [...new Set(values.filter((v) => v !== 0))];
  if (distinct.length > 1) throw new ModelLoadError(`Model "${path}" has ${what} of differing "${key}" (${distinct.join(", ")}); only uniform layers are supported`);
  return distinct[0] ?? fallback;
}

/** A nemotron_h GGUF's layers, their Mamba-2 geometry, KV heads and feed-forward width. */
export function ggufNemotronH(meta: GgufMetadata, arch: string, path: string): NemotronHConfig {
  const blocks = meta.number(`${arch}.block_count`);
  const kvKey = `${arch}.attention.head_count_kv`;
  const ffKey = `${arch}.feed_forward_length`;
  const kv = perLayer(meta, kvKey, blocks, path);
  const ff = perLayer(meta, ffKey, blocks, path);
  const both = kv.findIndex((h, i) => h !== 0 && ff[i] !== 0);
  if (both >= 0) throw new ModelLoadError(`Model "${path}" gives layer ${both} both KV heads and a feed-forward width; a nemotron_h layer has one block`);
  const whole = (name: string, least = 1) => {
    const v = meta.number(`${arch}.ssm.${name}`);
    if (!Number.isInteger(v) || v < least) throw new ModelLoadError(`GGUF metadata "${arch}.ssm.${name}" in "${path}" should be a whole number of at least ${least}, got ${v}`);
    return v;
  };
  const mamba2: Mamba2Config = {
    layers: kv.map((h, i) => h === 0 && ff[i] === 0),
    innerSize: whole("inner_size"),
    stateSize: whole("state_size"),
    heads: whole("time_step_rank"),
    groups: whole("group_count"),
    convKernel: whole("conv_kernel", 2),
  };
  if (mamba2.innerSize % mamba2.heads !== 0) throw new ModelLoadError(`Model "${path}" has an SSM inner size ${mamba2.innerSize} that its ${mamba2.heads} heads do not divide`);
  if (mamba2.heads % mamba2.groups !== 0) throw new ModelLoadError(`Model "${path}" has ${mamba2.groups} SSM groups, which do not divide its ${mamba2.heads} heads`);
  return {
    mamba2,
    layerBlocks: ff.map((w) => (w !== 0 ? "ffn" : "mixer")),
    numKvHeads: shared(kv, kvKey, "attention layers", path, 1),
    intermediateSize: shared(ff, ffKey, "feed-forward layers", path, 1),
  };
}

/**
 * Qwen3.5's text model (llama.cpp's `qwen35`): three layers of four are Gated DeltaNet layers
 * (ModelConfig.deltaNet: a causal convolution over q, k and v, then the gated delta rule, whose state
 * per sequence replaces the KV cache; forward-delta-net.ts), every fourth gated attention (the query
 * projection gives each head a gate for its output, ModelConfig.attnOutputGate; q/k norms; RoPE on a
 * quarter of each head). Its multimodal RoPE sections turn text alike: every section takes the token's
 * position, so the rotation is NeoX's over `rope.dimension_count` dims. Qwen3.5-MoE (`qwen35moe`)
 * has Qwen2-MoE's experts with a sigmoid-gated shared expert, renormalised (gguf-moe.ts). Hugging
 * Face checkpoints: hf-qwen35.ts. Qwen3-Next (`qwen3next`) is Qwen3.5-MoE's text model before it, with
 * fused input projections (qwen3next.ts).
 */
import type { DeltaNetConfig, ModelConfig } from "./config.ts";
import { ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";

/** The config fields a Qwen3.5 file sets beyond a dense model's. */
export type Qwen35Fields = Pick<ModelConfig, "deltaNet" | "attnOutputGate" | "qkNorm">;

/**
 * Refuses RoPE sections that leave a rotated pair to the fourth section: llama.cpp's interleaved
 * multimodal RoPE gives pair i to section i mod 3 while i < 3 · that section's size, and turns the
 * rest by the fourth position, which text leaves at 0 (Qwen3.5's [11, 11, 10, 0] covers all 32 pairs).
 */
function checkSections(meta: GgufMetadata, arch: string, path: string): void {
  const key = `${arch}.rope.dimension_sections`;
  const sections = meta.entries.get(key)?.value;
  if (!Array.isArray(sections)) return;
  const s = sections.map(Number);
  const pairs = meta.number(`${arch}.rope.dimension_count`, 0) / 2;
  for (let i = 0; i < pairs; i++) {
    if (i < 3 * (s[i % 3] ?? 0)) continue;
    throw new ModelLoadError(`Model "${path}" has RoPE sections [${s.join(", ")}] that leave rotated pair ${i} of ${pairs} to the fourth (non-text) position; not supported`);
  }
}

/** A positive whole number from `key`, or an error naming it. */
function size(meta: GgufMetadata, key: string, path: string, fallback?: number): number {
  const v = meta.number(key, fallback);
  if (!Number.isInteger(v) || v < 1) throw new ModelLoadError(`GGUF metadata "${key}" in "${path}" should be a positive whole number, got ${v}`);
  return v;
}

/**
 * A qwen35 GGUF's Gated DeltaNet geometry, as llama.cpp reads it: `ssm.group_count` key heads of
 * `ssm.state_size` dims, `ssm.time_step_rank` value heads sharing `ssm.inner_size`, a convolution of
 * `ssm.conv_kernel`; the recurrent layers from `attention.recurrent_layers` or, absent, all but every
 * `full_attention_interval`-th (4). Qwen3.5's converter lays value heads out tiled over the key heads,
 * Qwen3-Next's leaves them grouped by key head.
 */
export function ggufQwen35(meta: GgufMetadata, arch: string, numLayers: number, path: string): Qwen35Fields {
  const numKHeads = size(meta, `${arch}.ssm.group_count`, path);
  const numVHeads = size(meta, `${arch}.ssm.time_step_rank`, path);
  const headKDim = size(meta, `${arch}.ssm.state_size`, path);
  const inner = size(meta, `${arch}.ssm.inner_size`, path);
  if (numVHeads % numKHeads !== 0 || inner % numVHeads !== 0) {
    throw new ModelLoadError(`Model "${path}" has ${numVHeads} value heads over ${numKHeads} key heads and ${inner} inner dims; expected whole multiples`);
  }
  const listed = meta.entries.get(`${arch}.attention.recurrent_layers`)?.value;
  let layers: boolean[];
  if (Array.isArray(listed)) {
    layers = listed.slice(0, numLayers).map((v) => Boolean(v));
    if (layers.length !== numLayers) throw new ModelLoadError(`GGUF metadata "${arch}.attention.recurrent_layers" in "${path}" lists ${listed.length} layers of ${numLayers}`);
  } else {
    const interval = size(meta, `${arch}.full_attention_interval`, path, 4);
    layers = Array.from({ length: numLayers }, (_, i) => (i + 1) % interval !== 0);
  }
  checkSections(meta, arch, path);
  const deltaNet: DeltaNetConfig = {
    layers,
    numKHeads,
    numVHeads,
    headKDim,
    headVDim: inner / numVHeads,
    convKernel: size(meta, `${arch}.ssm.conv_kernel`, path),
    // Qwen3-Next's converter keeps Hugging Face's grouped order (qwen3next.ts).
    vHeadOrder: arch === "qwen3next" ? "grouped" : "tiled",
  };
  return { deltaNet, attnOutputGate: true, qkNorm: true };
}

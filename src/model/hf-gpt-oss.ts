/**
 * GPT-OSS Hugging Face checkpoints (openai/gpt-oss-20b and -120b: `GptOssForCausalLM`, model_type
 * `gpt_oss`): config.json's sliding layers, experts and YaRN, and the experts' fused tensors. The
 * released files keep every expert's gate and up projections in one `gate_up_proj` whose rows
 * alternate gate, up, gate, up…, stored as MXFP4 `_blocks` (U8 [experts, rows, in/32, 16]) and
 * `_scales` (U8 E8M0 [experts, rows, in/32]); dequantized copies store `gate_up_proj` [experts, in,
 * 2·width] and `down_proj` [experts, width, out] in a float type, transposed. Both are read here into
 * the [experts, out, in] stacks the forward takes; MXFP4 stays MXFP4 (llama.cpp's block layout).
 */
import { GPT_OSS_ACTIVATION, type HostTensor, ModelLoadError, type MoeConfig, type SlidingWindow } from "./config.ts";
import { gptOssMoe } from "./gguf-gpt-oss.ts";
import { type Json, num } from "./hf-json.ts";
import { yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";
import type { SafetensorsInfo } from "./safetensors.ts";
import type { LayerRole, TensorSource } from "./weights.ts";

/** What a GPT-OSS config.json sets beyond the common fields. */
export interface HfGptOss {
  moe: MoeConfig;
  slidingWindow?: SlidingWindow;
  ropeFreqFactors?: number[];
  /** YaRN's mscale² over √headDim; absent without YaRN. */
  attentionScale?: number;
}

/**
 * Reads config.json's GPT-OSS fields: `sliding_window` on the layers `layer_types` marks
 * "sliding_attention" (transformers' default: even layers), the experts (`num_local_experts`,
 * `num_experts_per_tok`, `swiglu_limit`) and YaRN (`rope_scaling`, with its `truncate` flag: the
 * released configs say false, so the ramp's ends are not rounded, as transformers and vLLM run it;
 * llama.cpp's converter drops the flag and rounds).
 */
export function hfGptOss(cfg: Json, theta: number, headDim: number, numLayers: number, path: string): HfGptOss {
  const numExperts = num(cfg, "num_local_experts", path);
  const used = num(cfg, "num_experts_per_tok", path, typeof cfg.experts_per_token === "number" ? cfg.experts_per_token : undefined);
  if (!Number.isInteger(used) || used < 1 || used > numExperts) {
    throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${used}`);
  }
  const limit = num(cfg, "swiglu_limit", path, GPT_OSS_ACTIVATION.limit);
  if (!(limit > 0)) throw new ModelLoadError(`"swiglu_limit" in "${path}" should be a positive number, got ${limit}`);
  const moe = { ...gptOssMoe(numExperts, used), activation: { ...GPT_OSS_ACTIVATION, limit } };
  return { moe, ...hfSlidingWindow(cfg, numLayers, path), ...hfGptOssYarn(cfg, theta, headDim, path) };
}

/**
 * config.json's `sliding_window` on the layers `layer_types` marks "sliding_attention", or where it
 * lists none, on those `slides` picks (GPT-OSS's even layers by default); none for a window of 0 or null.
 */
export function hfSlidingWindow(cfg: Json, numLayers: number, path: string, slides: (layer: number) => boolean = (i) => i % 2 === 0): { slidingWindow?: SlidingWindow } {
  const size = cfg.sliding_window;
  if (size === undefined || size === null || size === 0) return {};
  if (typeof size !== "number" || !Number.isInteger(size) || size < 1) {
    throw new ModelLoadError(`"sliding_window" in "${path}" should be a positive whole number of positions, got ${JSON.stringify(size)}`);
  }
  const types = cfg.layer_types;
  if (types === undefined) return { slidingWindow: { size, layers: Array.from({ length: numLayers }, (_, i) => slides(i)) } };
  if (!Array.isArray(types) || types.length !== numLayers || !types.every((t) => t === "sliding_attention" || t === "full_attention")) {
    throw new ModelLoadError(`"layer_types" in "${path}" should list "sliding_attention" or "full_attention" for each of its ${numLayers} layers, got ${JSON.stringify(types)}`);
  }
  return { slidingWindow: { size, layers: types.map((t) => t === "sliding_attention") } };
}

/** YaRN RoPE from a config's `rope_scaling` as transformers computes it: divisors, and the scores' scale (the attention factor squared over √headDim). */
export function hfGptOssYarn(cfg: Json, theta: number, headDim: number, path: string): { ropeFreqFactors?: number[]; attentionScale?: number } {
  const raw = cfg.rope_scaling ?? cfg.rope_parameters;
  const scaling = raw && typeof raw === "object" && !Array.isArray(raw) ? raw as Json : undefined;
  const type = scaling?.rope_type ?? scaling?.type ?? "default";
  if (!scaling || type === "default") return {};
  if (type !== "yarn") throw new ModelLoadError(`Model "${path}" uses rope_scaling type ${JSON.stringify(type)}; GPT-OSS models support "yarn"`);
  const factor = num(scaling, "factor", path);
  const m = scaling.mscale;
  const mAll = scaling.mscale_all_dim;
  // transformers' `_compute_yarn_parameters`: RoPE's cos and sin are scaled by the attention factor,
  // which multiplies every score by its square.
  const ratio = typeof m === "number" && m !== 0 && typeof mAll === "number" && mAll !== 0 ? yarnMscale(factor, m) / yarnMscale(factor, mAll) : undefined;
  const attentionFactor = num(scaling, "attention_factor", path, ratio ?? yarnMscale(factor, 1));
  const ropeFreqFactors = yarnFreqFactors(theta, headDim, {
    factor,
    originalContext: num(scaling, "original_max_position_embeddings", path, num(cfg, "max_position_embeddings", path)),
    betaFast: num(scaling, "beta_fast", path, 32),
    betaSlow: num(scaling, "beta_slow", path, 1),
    truncate: scaling.truncate !== false,
  });
  return { ropeFreqFactors, attentionScale: (attentionFactor * attentionFactor) / Math.sqrt(headDim) };
}

/** transformers' GPT-OSS names of the roles other architectures name differently (experts: {@link gptOssExperts}). */
export const GPT_OSS_NAMES: Partial<Record<LayerRole, string>> = {
  router: "mlp.router.weight",
  routerLogitBias: "mlp.router.bias",
  wGate: "mlp.experts.gate_proj",
  wUp: "mlp.experts.up_proj",
  wDown: "mlp.experts.down_proj",
  bGate: "mlp.experts.gate_proj_bias",
  bUp: "mlp.experts.up_proj_bias",
  bDown: "mlp.experts.down_proj_bias",
};

/** A safetensors file's raw access, for the U8 tensors a {@link TensorSource} does not read. */
export interface RawTensors {
  info(name: string): SafetensorsInfo | undefined;
  bytes(name: string): Promise<Uint8Array>;
}

const EXPERT_NAME = /^(model\.layers\.\d+\.mlp\.experts\.)(gate_proj|up_proj|down_proj)(_bias)?$/;

/**
 * Wraps a source so that the {@link GPT_OSS_NAMES} expert names read the fused tensors: gate from
 * `gate_up_proj`'s even rows, up from its odd ones (blocks, float or bias), down as stored. The
 * fused tensor read for gate is kept for the up read that follows it (assembleWeights reads a
 * layer's roles in turn), so the file is read once.
 */
export function gptOssExperts(source: TensorSource, raw: RawTensors, path: string): TensorSource {
  let held: { name: string; value: Promise<HostTensor> } | undefined;
  const fused = (name: string): Promise<HostTensor> => {
    if (held?.name !== name) held = { name, value: readFused(source, raw, name, path) };
    return held.value;
  };
  const stored = (name: string): string[] => {
    const m = EXPERT_NAME.exec(name);
    if (!m) return [name];
    const base = m[1] + (m[2] === "down_proj" ? "down_proj" : "gate_up_proj");
    if (m[3]) return [base + "_bias"];
    return raw.info(base + "_blocks") ? [base + "_blocks", base + "_scales"] : [base];
  };
  return {
    has: (name) => stored(name).every((n) => raw.info(n) !== undefined),
    byteLength: (name) => {
      const total = stored(name).reduce((a, n) => a + raw.info(n)!.end - raw.info(n)!.begin, 0);
      return /\.(gate|up)_proj/.test(name) ? total / 2 : total;
    },
    async read(name): Promise<HostTensor> {
      const m = EXPERT_NAME.exec(name);
      if (!m) return source.read(name);
      const [base] = stored(name);
      const t = await fused(base.replace(/_blocks$/, ""));
      if (m[2] === "down_proj") {
        held = undefined;
        return { ...t, name };
      }
      if (m[2] === "up_proj") held = undefined;
      return { ...rowsOfParity(t, m[2] === "gate_proj" ? 0 : 1), name };
    },
  };
}

/**
 * Reads a fused expert tensor (`…_blocks` + `…_scales`, a float weight or a bias) as [experts, rows,
 * in] (a bias [experts, rows]), rows in the file's order.
 */
async function readFused(source: TensorSource, raw: RawTensors, name: string, path: string): Promise<HostTensor> {
  if (name.endsWith("_bias")) return source.read(name);
  const blocks = raw.info(name + "_blocks");
  if (!blocks) {
    // A dequantized copy: [experts, in, out] in a float type, transposed here.
    const t = await source.read(name);
    if (t.shape.length !== 3) throw new ModelLoadError(`Expert tensor "${name}" in "${path}" should be 3-D, got [${t.shape}]`);
    return transposeLast(t);
  }
  const scales = raw.info(name + "_scales")!;
  const [e, rows, nb, sixteen] = blocks.shape;
  if (blocks.dtype !== "U8" || scales.dtype !== "U8" || blocks.shape.length !== 4 || sixteen !== 16 || scales.shape.join() !== [e, rows, nb].join()) {
    throw new ModelLoadError(
      `MXFP4 tensors "${name}_blocks" (${blocks.dtype} [${blocks.shape}]) and "${name}_scales" (${scales.dtype} [${scales.shape}]) in "${path}" should be U8 [experts, rows, blocks, 16] and U8 [experts, rows, blocks]`,
    );
  }
  return { name, shape: [e, rows, nb * 32], dtype: "mxfp4", data: ggmlMxfp4(await raw.bytes(name + "_blocks"), await raw.bytes(name + "_scales")) };
}

/**
 * HF's MXFP4 blocks in llama.cpp's layout: a block is its E8M0 scale byte, then 16 bytes whose low
 * nibbles hold values 0-15 and high nibbles values 16-31; HF's byte j holds values 2j (low nibble)
 * and 2j+1 (high) under one scale of its own tensor (the converter's `transform_nibble_layout`).
 */
export function ggmlMxfp4(blocks: Uint8Array, scales: Uint8Array): Uint8Array {
  const count = scales.length;
  const out = new Uint8Array(count * 17);
  const codes = new Uint8Array(32);
  for (let b = 0; b < count; b++) {
    for (let j = 0; j < 16; j++) {
      const byte = blocks[b * 16 + j];
      codes[2 * j] = byte & 0xf;
      codes[2 * j + 1] = byte >> 4;
    }
    out[b * 17] = scales[b];
    for (let k = 0; k < 16; k++) out[b * 17 + 1 + k] = codes[k] | (codes[k + 16] << 4);
  }
  return out;
}

/** Bytes per row element of a tensor, or per block for block formats (rows are whole blocks). */
function rowBytes(t: HostTensor): number {
  return t.data.byteLength / t.shape.slice(0, -1).reduce((a, d) => a * d, 1);
}

/** Rows 0, 2, 4… (parity 0) or 1, 3, 5… of the second-to-last axis; a bias's entries alike. */
function rowsOfParity(t: HostTensor, parity: 0 | 1): HostTensor {
  const bias = t.shape.length === 2;
  const shape = bias ? [t.shape[0], t.shape[1] / 2] : [t.shape[0], t.shape[1] / 2, t.shape[2]];
  // A bias [experts, 2·width]: one "row" per value.
  const rowSize = bias ? t.data.byteLength / (t.shape[0] * t.shape[1]) : rowBytes(t);
  const rows = t.shape[0] * t.shape[1];
  const out = new Uint8Array(t.data.byteLength / 2);
  for (let r = parity, o = 0; r < rows; r += 2, o += rowSize) out.set(t.data.subarray(r * rowSize, (r + 1) * rowSize), o);
  return { name: t.name, shape, dtype: t.dtype, data: out };
}

/** [experts, a, b] → [experts, b, a] for a float tensor (2- or 4-byte values). */
function transposeLast(t: HostTensor): HostTensor {
  const [e, a, b] = t.shape;
  const size = t.data.byteLength / (e * a * b);
  if (size !== 2 && size !== 4) throw new ModelLoadError(`Expert tensor "${t.name}" has ${size}-byte values; expected a 16- or 32-bit float type`);
  // Whole values at a time: a copy aligns the bytes for the typed view.
  const bytes = t.data.byteOffset % size === 0 ? t.data : t.data.slice();
  const view = (d: Uint8Array) => (size === 2 ? new Uint16Array(d.buffer, d.byteOffset, d.byteLength / 2) : new Uint32Array(d.buffer, d.byteOffset, d.byteLength / 4));
  const from = view(bytes);
  const data = new Uint8Array(t.data.byteLength);
  const to = view(data);
  for (let x = 0; x < e; x++) {
    const base = x * a * b;
    for (let i = 0; i < a; i++) for (let j = 0; j < b; j++) to[base + j * a + i] = from[base + i * b + j];
  }
  return { name: t.name, shape: [e, b, a], dtype: t.dtype, data };
}

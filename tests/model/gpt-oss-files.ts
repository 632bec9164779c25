/**
 * A random GPT-OSS test model as its Hugging Face checkpoint stores it (transformers'
 * `GptOssForCausalLM`): the router as `mlp.router`, every expert's gate and up projections fused into
 * `gate_up_proj` with gate and up rows alternating, and the expert matrices either as MXFP4
 * `_blocks`/`_scales` (U8, what openai/gpt-oss-20b ships) or, in a float dtype, transposed
 * ([experts, in, out], what dequantized copies ship). The packing follows transformers'
 * `convert_moe_packed_tensors` (byte j of a block holds value 2j in its low nibble and 2j+1 in its
 * high one; the scale byte is an E8M0 exponent), written independently of the loader's repacking.
 */
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import type { WeightDType } from "../../src/backend/types.ts";
import type { SafetensorsEntry } from "../../src/model/safetensors.ts";
import type { HfWeights, ModelFileSpec } from "./model-files.ts";

const EXPERT = /^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.(weight|bias)$/;

/** The GPT-OSS checkpoint's tensors for `weights` (in the tests' per-expert naming); `float`: matrices' dtype. */
export function gptOssHfTensors(spec: ModelFileSpec, weights: HfWeights, float: "f32" | "f16" | "bf16"): SafetensorsEntry[] {
  const experts = spec.experts!.count;
  const out: SafetensorsEntry[] = [];
  const parts = new Map<string, Float32Array[]>();
  for (const [name, { shape, values }] of weights) {
    const m = EXPERT.exec(name);
    if (m) {
      const key = `${m[1]}.${m[3]}.${m[4]}`;
      const list = parts.get(key) ?? [];
      list[Number(m[2])] = values;
      parts.set(key, list);
      continue;
    }
    const renamed = name.replace(/\.mlp\.gate\.(weight|bias)$/, ".mlp.router.$1");
    const dtype: WeightDType = shape.length === 1 || renamed.includes(".mlp.router.") ? "f32" : float;
    out.push({ name: renamed, shape, dtype, data: encodeFromF32(values, dtype) });
  }
  const { hidden: h, ffn: w } = spec;
  for (let layer = 0; layer < spec.layers; layer++) {
    const get = (role: string, kind: string) => parts.get(`${layer}.${role}.${kind}`)!;
    const p = `model.layers.${layer}.mlp.experts.`;
    // Biases: gate and up alternate along the fused width.
    const gateUpBias = new Float32Array(experts * 2 * w);
    for (let e = 0; e < experts; e++) {
      for (let i = 0; i < w; i++) {
        gateUpBias[e * 2 * w + 2 * i] = get("gate", "bias")[e][i];
        gateUpBias[e * 2 * w + 2 * i + 1] = get("up", "bias")[e][i];
      }
    }
    out.push({ name: p + "gate_up_proj_bias", shape: [experts, 2 * w], dtype: "f32", data: encodeFromF32(gateUpBias, "f32") });
    out.push({ name: p + "down_proj_bias", shape: [experts, h], dtype: "f32", data: encodeFromF32(concat(get("down", "bias")), "f32") });
    if (spec.dtype === "mxfp4") {
      // Rows of the fused matrix [experts, 2w, h]: gate row i, then up row i.
      const rows: Float32Array[] = [];
      for (let e = 0; e < experts; e++) {
        for (let i = 0; i < w; i++) rows.push(get("gate", "weight")[e].subarray(i * h, (i + 1) * h), get("up", "weight")[e].subarray(i * h, (i + 1) * h));
      }
      out.push(...mxfp4Pair(p + "gate_up_proj", [experts, 2 * w], h, rows));
      const down: Float32Array[] = [];
      for (let e = 0; e < experts; e++) for (let r = 0; r < h; r++) down.push(get("down", "weight")[e].subarray(r * w, (r + 1) * w));
      out.push(...mxfp4Pair(p + "down_proj", [experts, h], w, down));
    } else {
      // Transposed: gate_up_proj [experts, h, 2w], down_proj [experts, w, h].
      const gateUp = new Float32Array(experts * h * 2 * w);
      const down = new Float32Array(experts * w * h);
      for (let e = 0; e < experts; e++) {
        for (let i = 0; i < w; i++) {
          for (let c = 0; c < h; c++) {
            gateUp[(e * h + c) * 2 * w + 2 * i] = get("gate", "weight")[e][i * h + c];
            gateUp[(e * h + c) * 2 * w + 2 * i + 1] = get("up", "weight")[e][i * h + c];
            down[(e * w + i) * h + c] = get("down", "weight")[e][c * w + i];
          }
        }
      }
      out.push({ name: p + "gate_up_proj", shape: [experts, h, 2 * w], dtype: float, data: encodeFromF32(gateUp, float) });
      out.push({ name: p + "down_proj", shape: [experts, w, h], dtype: float, data: encodeFromF32(down, float) });
    }
  }
  return out;
}

function concat(parts: Float32Array[]): Float32Array {
  const all = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  parts.forEach((p, i) => all.set(p, i * p.length));
  return all;
}

/**
 * MXFP4 `_blocks` [...lead, cols/32, 16] and `_scales` [...lead, cols/32] of `rows` (each `cols`
 * long), holding the same values as llama.cpp's quantizer gives the GGUF: its block (scale byte, then
 * values 0-15 in low nibbles and 16-31 in high ones) unpacked to codes and packed in HF's order.
 */
function mxfp4Pair(name: string, lead: number[], cols: number, rows: Float32Array[]): SafetensorsEntry[] {
  const nb = cols / 32;
  const blocks = new Uint8Array(rows.length * nb * 16);
  const scales = new Uint8Array(rows.length * nb);
  rows.forEach((row, r) => {
    const ggml = encodeFromF32(row, "mxfp4");
    for (let b = 0; b < nb; b++) {
      const src = ggml.subarray(b * 17, (b + 1) * 17);
      scales[r * nb + b] = src[0];
      const codes = new Uint8Array(32);
      for (let k = 0; k < 16; k++) {
        codes[k] = src[1 + k] & 0xf;
        codes[k + 16] = src[1 + k] >> 4;
      }
      for (let j = 0; j < 16; j++) blocks[(r * nb + b) * 16 + j] = codes[2 * j] | (codes[2 * j + 1] << 4);
    }
  });
  return [
    { name: name + "_blocks", shape: [...lead, nb, 16], dtype: "u8", data: blocks },
    { name: name + "_scales", shape: [...lead, nb], dtype: "u8", data: scales },
  ];
}

/** config.json's GPT-OSS fields for `spec` (layer_types as transformers writes them: even layers slide). */
export function gptOssHfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const y = spec.yarn;
  return {
    num_local_experts: spec.experts!.count,
    num_experts_per_tok: spec.experts!.used,
    experts_per_token: spec.experts!.used,
    intermediate_size: spec.ffn,
    attention_bias: true,
    swiglu_limit: 7.0,
    ...(spec.slidingWindow
      ? { sliding_window: spec.slidingWindow, layer_types: Array.from({ length: spec.layers }, (_, i) => (i % 2 === 0 ? "sliding_attention" : "full_attention")) }
      : {}),
    // No `truncate`: transformers' default rounds the ramp's ends, as llama.cpp does (the oracle).
    ...(y ? { rope_scaling: { rope_type: "yarn", factor: y.factor, original_max_position_embeddings: y.originalContext, beta_fast: y.betaFast, beta_slow: y.betaSlow } } : {}),
  };
}

/**
 * FP8 checkpoints on Hugging Face (what vLLM users deploy: Qwen3-*-FP8, DeepSeek-V3/R1, GLM-4.5-FP8,
 * and compressed-tensors "float-quantized" models): matrices stored as F8_E4M3 with an f32 scale —
 * one per 128×128 block (`quantization_config.weight_block_size`, the scale tensor named
 * `<weight>_scale_inv`), or one per tensor or per output row (`<weight>_scale`). Each such matrix
 * loads as `f8_e4m3` blocks (backend/quant-blocks-fp8.ts: 32 codes under an f32 scale, 9 bits a
 * weight), its codes and scales unchanged, wherever its rows are whole 32-column blocks and each scale
 * spans whole blocks (every shape of the models named); any other is dequantized (value × its
 * scale) to bf16, twice FP8's memory. Other `quantization_config` methods (AWQ, GPTQ,
 * bitsandbytes…) are refused by name; gpt-oss's "mxfp4" has its own path (hf-gpt-oss.ts).
 */
import { decodeToF32, encodeFromF32 } from "../backend/dtype-codec.ts";
import { E4M3_VALUES, e4m3ToF32, fitsFp8Blocks, fp8Blocks } from "../backend/quant-blocks-fp8.ts";
import { type HostTensor, ModelLoadError } from "./config.ts";
import { isJsonObject, type Json } from "./hf-json.ts";
import type { SafetensorsInfo } from "./safetensors.ts";
import type { TensorSource } from "./weights.ts";

/** How a checkpoint's FP8 matrices are scaled. */
export interface Fp8Scheme {
  /** Rows × columns under one scale (`weight_block_size`); absent: per tensor or per output row. */
  readonly block?: readonly [number, number];
}

/** The quantization methods read elsewhere (gpt-oss's MXFP4 experts). */
const OTHER_PATHS = new Set(["mxfp4"]);

/**
 * The FP8 scheme `config.json`'s `quantization_config` declares; undefined when it declares none
 * (or one another loader reads); a `ModelLoadError` naming the method for one we cannot load.
 */
export function fp8Scheme(cfg: Json, path: string): Fp8Scheme | undefined {
  const q = cfg.quantization_config;
  if (q === undefined || q === null) return undefined;
  if (!isJsonObject(q)) throw new ModelLoadError(`"quantization_config" in "${path}" should be an object, got ${JSON.stringify(q)}`);
  const method = q.quant_method;
  if (typeof method === "string" && OTHER_PATHS.has(method)) return undefined;
  const floatQuantized = method === "compressed-tensors" && q.format === "float-quantized";
  if (method !== "fp8" && !floatQuantized) {
    throw new ModelLoadError(
      `"${path}" holds a ${JSON.stringify(method)}-quantized model; this loader reads FP8 checkpoints (quant_method "fp8" or compressed-tensors float-quantized), GGUF files, or unquantized weights`,
    );
  }
  const fmt = q.fmt ?? "e4m3";
  if (fmt !== "e4m3") throw new ModelLoadError(`"quantization_config.fmt" in "${path}" is ${JSON.stringify(fmt)}; only e4m3 FP8 is read`);
  const block = q.weight_block_size;
  if (block === undefined || block === null) return {};
  if (!Array.isArray(block) || block.length !== 2 || !block.every((b) => Number.isSafeInteger(b) && b > 0)) {
    throw new ModelLoadError(`"quantization_config.weight_block_size" in "${path}" should be two positive whole numbers, got ${JSON.stringify(block)}`);
  }
  return { block: [block[0], block[1]] };
}

export { e4m3ToF32 };

/**
 * `codes` ([rows, cols] E4M3 bytes) times their scales: `scales` [⌈rows/br⌉, ⌈cols/bc⌉] for blocks
 * `block`, else one scale, or one per row.
 */
export function dequantizeFp8(codes: Uint8Array, rows: number, cols: number, scales: Float32Array, block?: readonly [number, number]): Float32Array {
  const out = new Float32Array(rows * cols);
  const [br, bc] = block ?? [1, cols];
  const perRow = block === undefined && scales.length === rows;
  const scaleCols = Math.ceil(cols / bc);
  for (let r = 0; r < rows; r++) {
    // One scale per run of bc columns (the whole row without blocks): billions of weights load this way.
    for (let cb = 0; cb < scaleCols; cb++) {
      const s = block !== undefined ? scales[Math.floor(r / br) * scaleCols + cb] : perRow ? scales[r] : scales[0];
      const end = r * cols + Math.min(cols, (cb + 1) * bc);
      for (let i = r * cols + cb * bc; i < end; i++) out[i] = E4M3_VALUES[codes[i]] * s;
    }
  }
  return out;
}

/** Raw access to a checkpoint's tensors, for the FP8 codes and their f32 scales. */
export interface RawTensors {
  info(name: string): SafetensorsInfo | undefined;
  bytes(name: string): Promise<Uint8Array>;
}

/**
 * Whether a checkpoint's FP8 matrix of `shape` loads as f8_e4m3 blocks under `scheme` (else it is
 * dequantized to bf16).
 */
export function fp8KeepsBlocks(shape: readonly number[], scheme: Fp8Scheme): boolean {
  return shape.length === 2 && fitsFp8Blocks(shape[1], scheme.block);
}

/**
 * `source` with its F8_E4M3 matrices read as f8_e4m3 blocks with their scale tensors (named as
 * `scheme` says), or dequantized to bf16 where the blocks do not fit (`fp8KeepsBlocks`). A NaN code
 * is refused, naming the tensor and its place. Other tensors pass through.
 */
export function readingFp8(source: TensorSource, raw: RawTensors, scheme: Fp8Scheme, path: string): TensorSource {
  const scaleName = (name: string) => `${name}${scheme.block ? "_scale_inv" : "_scale"}`;
  return {
    has: (name) => source.has(name),
    byteLength: (name) => source.byteLength(name),
    async read(name): Promise<HostTensor> {
      const info = raw.info(name);
      if (info?.dtype !== "F8_E4M3") return source.read(name);
      const [rows, cols] = info.shape.length === 2 ? info.shape : [0, 0];
      if (info.shape.length !== 2) throw new ModelLoadError(`FP8 tensor "${name}" in "${path}" should be a matrix, got shape [${info.shape.join(", ")}]`);
      const scales = await readScales(raw, scaleName(name), path);
      const want = scheme.block ? Math.ceil(rows / scheme.block[0]) * Math.ceil(cols / scheme.block[1]) : undefined;
      if (want !== undefined ? scales.length !== want : scales.length !== 1 && scales.length !== rows) {
        throw new ModelLoadError(
          `FP8 tensor "${name}" in "${path}" has ${scales.length} scales in "${scaleName(name)}"; its [${rows}, ${cols}] shape needs ${want ?? `1 or ${rows}`}`,
        );
      }
      const codes = await raw.bytes(name);
      if (!fp8KeepsBlocks(info.shape, scheme)) {
        const values = dequantizeFp8(codes, rows, cols, scales, scheme.block);
        return { name, shape: [rows, cols], dtype: "bf16", data: encodeFromF32(values, "bf16") };
      }
      const data = fp8Blocks(codes, rows, cols, scales, scheme.block, (r, c) => {
        throw new ModelLoadError(`FP8 tensor "${name}" in "${path}" holds a NaN code (0x7f or 0xff) at row ${r}, column ${c}`);
      });
      return { name, shape: [rows, cols], dtype: "f8_e4m3", data };
    },
  };
}

async function readScales(raw: RawTensors, name: string, path: string): Promise<Float32Array> {
  const info = raw.info(name);
  if (!info) throw new ModelLoadError(`FP8 checkpoint "${path}" lacks the scale tensor "${name}"`);
  // compressed-tensors stores scales in the model's dtype: F16 for a float16 model.
  const dtype = info.dtype === "F32" ? "f32" : info.dtype === "BF16" ? "bf16" : info.dtype === "F16" ? "f16" : undefined;
  if (!dtype) throw new ModelLoadError(`FP8 scale tensor "${name}" in "${path}" has dtype ${info.dtype}; F32, BF16 or F16 is read`);
  return decodeToF32(await raw.bytes(name), dtype, info.shape.reduce((a, b) => a * b, 1));
}

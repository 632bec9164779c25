/**
 * FP8 Hugging Face checkpoints for tests: each linear layer's matrix as F8_E4M3 codes under f32
 * scales (per block or per row), beside a directory of the values those codes stand for.
 */
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { e4m3ToF32 } from "../../src/model/fp8.ts";
import { type HfWeights, type ModelFileSpec, writeHfDirectory } from "./model-files.ts";

/** The E4M3 byte nearest `v` (no NaN). */
function nearestE4m3(v: number): number {
  let best = 0;
  for (let b = 0; b < 256; b++) {
    if ((b & 0x7f) === 0x7f) continue;
    if (Math.abs(e4m3ToF32(b) - v) < Math.abs(e4m3ToF32(best) - v)) best = b;
  }
  return best;
}

/** Codes and scales for `values` [rows, cols]: per block (amax / 448) or per row. */
function quantize(values: Float32Array, rows: number, cols: number, block?: [number, number]) {
  const [br, bc] = block ?? [1, cols];
  const sr = Math.ceil(rows / br);
  const sc = Math.ceil(cols / bc);
  const scales = new Float32Array(sr * sc);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    const s = Math.floor(r / br) * sc + Math.floor(c / bc);
    scales[s] = Math.max(scales[s], Math.abs(values[r * cols + c]) / 448);
  }
  const codes = new Uint8Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
    codes[r * cols + c] = nearestE4m3(values[r * cols + c] / scales[Math.floor(r / br) * sc + Math.floor(c / bc)]);
  }
  return { codes, scales, scaleShape: block ? [sr, sc] : [rows, 1] };
}

/** A safetensors file of raw entries (F8_E4M3 codes, F32 scales, F32 others). */
function safetensors(entries: { name: string; dtype: string; shape: number[]; data: Uint8Array }[]): Uint8Array {
  const header: Record<string, unknown> = {};
  let offset = 0;
  for (const e of entries) {
    header[e.name] = { dtype: e.dtype, shape: e.shape, data_offsets: [offset, offset + e.data.byteLength] };
    offset += e.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - ((8 + json.length) % 8)) % 8);
  const out = new Uint8Array(8 + json.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(new TextEncoder().encode(json), 8);
  let at = 8 + json.length;
  for (const e of entries) {
    out.set(e.data, at);
    at += e.data.byteLength;
  }
  return out;
}

const LINEAR = /(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight$/;

/** Writes the FP8 checkpoint of `weights` to `fp8Dir` and the f32 values its codes stand for to `refDir`. */
export async function writePair(spec: ModelFileSpec, fp8Dir: string, refDir: string, weights: HfWeights, quantizationConfig: Record<string, unknown>, block?: [number, number]) {
  const entries = [];
  const dequantized: HfWeights = new Map();
  for (const [name, { shape, values }] of weights) {
    if (!LINEAR.test(name)) {
      entries.push({ name, dtype: "F32", shape, data: encodeFromF32(values, "f32") });
      dequantized.set(name, { shape, values });
      continue;
    }
    const [rows, cols] = shape;
    const q = quantize(values, rows, cols, block);
    entries.push({ name, dtype: "F8_E4M3", shape, data: q.codes });
    entries.push({ name: `${name}${block ? "_scale_inv" : "_scale"}`, dtype: "F32", shape: q.scaleShape, data: new Uint8Array(q.scales.buffer) });
    // What the codes stand for, computed here (not by the loader's dequantizeFp8): code × its block's scale.
    const [br, bc] = block ?? [1, cols];
    const scaleAt = (i: number) => q.scales[Math.floor(Math.floor(i / cols) / br) * Math.ceil(cols / bc) + Math.floor((i % cols) / bc)];
    const stand = Float32Array.from({ length: rows * cols }, (_, i) => e4m3ToF32(q.codes[i]) * scaleAt(i));
    // E4M3 keeps 3 mantissa bits: each value within 1/16 of itself, or half a subnormal step (2^-10) of its scale.
    stand.forEach((v, i) => assert.ok(Math.abs(v - values[i]) <= Math.abs(values[i]) / 16 + 2 ** -10 * scaleAt(i), `${name}[${i}]`));
    dequantized.set(name, { shape, values: stand });
  }
  await writeHfDirectory(fp8Dir, spec, weights);
  await writeHfDirectory(refDir, spec, dequantized);
  const config = JSON.parse(await readFile(`${fp8Dir}/config.json`, "utf8"));
  await writeFile(`${fp8Dir}/config.json`, JSON.stringify({ ...config, quantization_config: quantizationConfig }));
  await writeFile(`${fp8Dir}/model.safetensors`, safetensors(entries));
}


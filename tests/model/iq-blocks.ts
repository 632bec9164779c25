/**
 * Random i-quant tensors for test GGUFs (iq2_xxs … iq1_m, quant-blocks-iq.ts): no quantizer is
 * needed, since any bytes are valid blocks once the f16 scale is sane — each block's grid indices,
 * signs and sub-scales are random and its d is set so the block's values have the wanted RMS.
 */
import { f32ToF16 } from "../../src/backend/half-float.ts";
import { decodeIqBlocks, IQ_BLOCKS, type IqDType } from "../../src/backend/quant-blocks-iq.ts";
import { GGML_TYPES } from "../../src/model/gguf-types.ts";
import type { RawGgufTensor } from "../../src/model/gguf-writer.ts";

/** Sets a block's f16 scale: its first two bytes, or for iq1_m the top nibbles of its four u16 scales. */
export function setIqScale(raw: Uint8Array, at: number, dtype: IqDType, d: number): void {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const h = f32ToF16(d);
  if (dtype !== "iq1_m") {
    view.setUint16(at, h, true);
    return;
  }
  for (let i = 0; i < 4; i++) {
    const sc = view.getUint16(at + 48 + 2 * i, true);
    view.setUint16(at + 48 + 2 * i, (sc & 0x0fff) | (((h >> (4 * i)) & 0xf) << 12), true);
  }
}

/** `count` values (a multiple of 256) of `dtype` as random blocks whose values have root-mean-square `rms`. */
export function randomIqBlocks(dtype: IqDType, count: number, rms: number, rand: () => number): Uint8Array {
  const { values, bytes } = IQ_BLOCKS[dtype];
  if (count % values !== 0) throw new RangeError(`A ${dtype} tensor needs a multiple of ${values} values, got ${count}`);
  const out = new Uint8Array((count / values) * bytes);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor(rand() * 256);
  const block = new Float32Array(values);
  for (let b = 0; b < count / values; b++) {
    setIqScale(out, b * bytes, dtype, 1);
    decodeIqBlocks(out.subarray(b * bytes, (b + 1) * bytes), dtype, 1, block);
    const r = Math.sqrt(block.reduce((a, v) => a + v * v, 0) / values);
    setIqScale(out, b * bytes, dtype, rms / r);
  }
  return out;
}

/** The ggml type id of an i-quant dtype. */
export function iqGgmlType(dtype: IqDType): number {
  for (const [id, t] of GGML_TYPES) if (t.dtype === dtype) return id;
  throw new RangeError(`No ggml type is "${dtype}"`);
}

/** A GGUF tensor of random `dtype` blocks with the RMS of `values` (which it replaces). */
export function randomIqTensor(name: string, shape: number[], values: Float32Array, dtype: IqDType, rand: () => number): RawGgufTensor {
  const rms = Math.sqrt(values.reduce((a, v) => a + v * v, 0) / values.length) || 0.02;
  return { name, shape: shape.slice(), ggmlType: iqGgmlType(dtype), data: randomIqBlocks(dtype, values.length, rms, rand) };
}

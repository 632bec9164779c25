/**
 * Hugging Face safetensors: an 8-byte little-endian header length, a JSON header
 * ({name: {dtype, shape, data_offsets}}), then the data. Read by range, one tensor at a time.
 */
import type { WeightDType } from "../backend/types.ts";
import type { RandomAccessFile } from "../runtime/fs.ts";
import { type HostTensor, ModelLoadError } from "./config.ts";

/** One tensor entry of a safetensors header. */
export interface SafetensorsInfo {
  name: string;
  /** The file's dtype string ("F32", "BF16", ...). */
  dtype: string;
  shape: number[];
  /** Absolute byte range in the file. */
  begin: number;
  end: number;
}

/** A parsed safetensors header. */
export interface SafetensorsHeader {
  tensors: Map<string, SafetensorsInfo>;
  metadata: Record<string, string>;
}

const DTYPES: Record<string, { dtype?: WeightDType; bytes: number }> = {
  F32: { dtype: "f32", bytes: 4 },
  F16: { dtype: "f16", bytes: 2 },
  BF16: { dtype: "bf16", bytes: 2 },
  F64: { bytes: 8 },
  I64: { bytes: 8 },
  I32: { bytes: 4 },
  I16: { bytes: 2 },
  I8: { bytes: 1 },
  U8: { bytes: 1 },
  BOOL: { bytes: 1 },
  F8_E4M3: { bytes: 1 },
  F8_E5M2: { bytes: 1 },
};

/** Byte size of one element of a safetensors dtype string (undefined for unknown ones). */
export function safetensorsElementBytes(dtype: string): number | undefined {
  return DTYPES[dtype]?.bytes;
}

/** Most bytes a header may take, as the reference implementation (safetensors' MAX_HEADER_SIZE): a larger length is corrupt. */
export const MAX_SAFETENSORS_HEADER_BYTES = 100_000_000;

/** Parses the JSON header of an open safetensors file and checks every range against the file. */
export async function readSafetensorsHeader(file: RandomAccessFile): Promise<SafetensorsHeader> {
  const path = file.path;
  if (file.size < 8) throw new ModelLoadError(`Safetensors file "${path}" is truncated: only ${file.size} bytes`);
  const lenBytes = await file.read(0, 8);
  const len = new DataView(lenBytes.buffer, lenBytes.byteOffset, 8).getBigUint64(0, true);
  if (len > BigInt(file.size - 8)) {
    throw new ModelLoadError(`Safetensors file "${path}" is corrupt or truncated: header length ${len} exceeds the file`);
  }
  if (len > BigInt(MAX_SAFETENSORS_HEADER_BYTES)) {
    throw new ModelLoadError(`Safetensors file "${path}" is corrupt: header length ${len} is over the limit of ${MAX_SAFETENSORS_HEADER_BYTES} bytes`);
  }
  const headerEnd = 8 + Number(len);
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder().decode(await file.read(8, Number(len))));
  } catch {
    throw new ModelLoadError(`Safetensors file "${path}" is corrupt: its header is not valid JSON`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ModelLoadError(`Safetensors file "${path}" is corrupt: its header is not a JSON object`);
  }
  const tensors = new Map<string, SafetensorsInfo>();
  let metadata: Record<string, string> = {};
  for (const [name, raw] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") {
      // The format's metadata is a string-to-string map.
      if (typeof raw !== "object" || raw === null || Array.isArray(raw) || !Object.values(raw).every((v) => typeof v === "string")) {
        throw new ModelLoadError(`Safetensors file "${path}" is corrupt: its __metadata__ is not a map of strings`);
      }
      metadata = raw as Record<string, string>;
      continue;
    }
    const bad = (why: string) => new ModelLoadError(`Safetensors file "${path}" is corrupt: bad header entry for "${name}": ${why}`);
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw bad(`expected an object, got ${JSON.stringify(raw)}`);
    const e = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const offsets = e.data_offsets;
    const wholeNumbers = (v: unknown): v is number[] => Array.isArray(v) && v.every((d) => Number.isSafeInteger(d) && d >= 0);
    if (typeof e.dtype !== "string") throw bad(`dtype should be a string, got ${JSON.stringify(e.dtype)}`);
    if (!wholeNumbers(e.shape)) throw bad(`shape should be whole numbers from 0, got ${JSON.stringify(e.shape)}`);
    if (!wholeNumbers(offsets) || offsets.length !== 2) throw bad(`data_offsets should be two whole numbers from 0, got ${JSON.stringify(offsets)}`);
    const shape = e.shape as number[];
    const [b, en] = offsets as number[];
    const begin = headerEnd + b;
    const end = headerEnd + en;
    if (begin > end) {
      throw new ModelLoadError(`Safetensors file "${path}" is corrupt: "${name}" has data_offsets [${b}, ${en}], which end before they begin`);
    }
    const elemBytes = safetensorsElementBytes(e.dtype);
    const count = shape.reduce((a, d) => a * d, 1);
    if (elemBytes !== undefined && en - b !== count * elemBytes) {
      throw new ModelLoadError(`Safetensors file "${path}" is corrupt: "${name}" has ${en - b} bytes for shape [${shape}]`);
    }
    if (end > file.size) {
      throw new ModelLoadError(`Safetensors file "${path}" is truncated: "${name}" ends at byte ${end} but the file has ${file.size}`);
    }
    tensors.set(name, { name, dtype: e.dtype, shape, begin, end });
  }
  // Tensors that share bytes would load one tensor's data as another's (the reference reader refuses them too).
  const byBegin = [...tensors.values()].filter((t) => t.end > t.begin).sort((x, y) => x.begin - y.begin);
  for (let i = 1; i < byBegin.length; i++) {
    if (byBegin[i].begin < byBegin[i - 1].end) {
      throw new ModelLoadError(`Safetensors file "${path}" is corrupt: the data of "${byBegin[i - 1].name}" and "${byBegin[i].name}" overlap`);
    }
  }
  return { tensors, metadata };
}

/** Reads one tensor; dtypes other than F32/F16/BF16 are refused with the tensor's name. */
export async function readSafetensor(file: RandomAccessFile, info: SafetensorsInfo, name = info.name): Promise<HostTensor> {
  const dtype = DTYPES[info.dtype]?.dtype;
  if (!dtype) {
    throw new ModelLoadError(`Tensor "${info.name}" in "${file.path}" has dtype ${info.dtype}; supported dtypes are F32, F16 and BF16`);
  }
  const data = await file.read(info.begin, info.end - info.begin);
  return { name, shape: info.shape.slice(), dtype, data };
}

/** A tensor to write: a weight, or raw bytes (MXFP4 blocks and scales ship as U8). */
export type SafetensorsEntry = HostTensor | { name: string; shape: number[]; dtype: "u8"; data: Uint8Array };

/** Serialises tensors (F32/F16/BF16, U8) into one safetensors buffer. */
export function encodeSafetensors(tensors: readonly SafetensorsEntry[], metadata: Record<string, string> = {}): Uint8Array {
  const names: Partial<Record<SafetensorsEntry["dtype"], string>> = { f32: "F32", f16: "F16", bf16: "BF16", u8: "U8" };
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const dtype = names[t.dtype];
    if (!dtype) throw new ModelLoadError(`Safetensors cannot hold tensor "${t.name}" of dtype ${t.dtype}`);
    header[t.name] = { dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  // Pad the header with spaces so the data starts 8-byte aligned, as the reference writer does.
  json += " ".repeat((8 - ((8 + new TextEncoder().encode(json).byteLength) % 8)) % 8);
  const jsonBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + jsonBytes.byteLength + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(jsonBytes.byteLength), true);
  out.set(jsonBytes, 8);
  let at = 8 + jsonBytes.byteLength;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}

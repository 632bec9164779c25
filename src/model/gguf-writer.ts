/**
 * GGUF v3 writer: metadata plus F32/F16/BF16/Q8_0 tensors, in memory. Tests use it to build
 * random-weight models that both our loader and llama.cpp read.
 */
import { blockValues, encodeFromF32 } from "../backend/dtype-codec.ts";
import type { WeightDType } from "../backend/types.ts";
import type { HostTensor } from "./config.ts";
import { alignUp, GGML_TYPES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, type GgufEntry, GgufType, type GgufValue, ggmlTypeOf } from "./gguf-types.ts";

/** Shorthands for building typed metadata entries. */
export const gguf = {
  str: (value: string): GgufEntry => ({ type: GgufType.STRING, value }),
  u32: (value: number): GgufEntry => ({ type: GgufType.UINT32, value }),
  i32: (value: number): GgufEntry => ({ type: GgufType.INT32, value }),
  u64: (value: number | bigint): GgufEntry => ({ type: GgufType.UINT64, value }),
  f32: (value: number): GgufEntry => ({ type: GgufType.FLOAT32, value }),
  f64: (value: number): GgufEntry => ({ type: GgufType.FLOAT64, value }),
  bool: (value: boolean): GgufEntry => ({ type: GgufType.BOOL, value }),
  arr: (itemType: GgufType, value: GgufValue[]): GgufEntry => ({ type: GgufType.ARRAY, itemType, value }),
};

/** Builds a HostTensor by encoding f32 values into `dtype`. */
export function hostTensorFromF32(name: string, shape: number[], values: Float32Array, dtype: WeightDType): HostTensor {
  return { name, shape: shape.slice(), dtype, data: encodeFromF32(values, dtype) };
}

/** Growable little-endian byte sink. */
class Sink {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private readonly encoder = new TextEncoder();

  private grow(n: number): number {
    if (this.length + n > this.buf.byteLength) {
      const next = new Uint8Array(Math.max(this.buf.byteLength * 2, this.length + n));
      next.set(this.buf.subarray(0, this.length));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  // grow() may swap the buffer, so it runs before `this.view`/`this.buf` are read.
  private put(n: number, write: (view: DataView, at: number) => void): void {
    const at = this.grow(n);
    write(this.view, at);
  }
  u8 = (v: number) => this.put(1, (d, at) => d.setUint8(at, v));
  i8 = (v: number) => this.put(1, (d, at) => d.setInt8(at, v));
  u16 = (v: number) => this.put(2, (d, at) => d.setUint16(at, v, true));
  i16 = (v: number) => this.put(2, (d, at) => d.setInt16(at, v, true));
  u32 = (v: number) => this.put(4, (d, at) => d.setUint32(at, v, true));
  i32 = (v: number) => this.put(4, (d, at) => d.setInt32(at, v, true));
  f32 = (v: number) => this.put(4, (d, at) => d.setFloat32(at, v, true));
  f64 = (v: number) => this.put(8, (d, at) => d.setFloat64(at, v, true));
  u64 = (v: number | bigint) => this.put(8, (d, at) => d.setBigUint64(at, BigInt(v), true));
  i64 = (v: number | bigint) => this.put(8, (d, at) => d.setBigInt64(at, BigInt(v), true));
  bytes = (b: Uint8Array) => {
    const at = this.grow(b.byteLength);
    this.buf.set(b, at);
  };
  string = (s: string) => {
    const b = this.encoder.encode(s);
    this.u64(b.byteLength);
    this.bytes(b);
  };
  padTo = (alignment: number) => this.grow(alignUp(this.length, alignment) - this.length);
  result = (): Uint8Array => this.buf.slice(0, this.length);
}

function writeValue(s: Sink, type: GgufType, value: GgufValue, itemType?: GgufType): void {
  const num = (): number => {
    if (typeof value === "number") return value;
    if (typeof value === "boolean") return value ? 1 : 0;
    if (typeof value === "bigint") return Number(value);
    throw new TypeError(`GGUF value ${JSON.stringify(value)} is not a number`);
  };
  switch (type) {
    case GgufType.UINT8: return s.u8(num());
    case GgufType.INT8: return s.i8(num());
    case GgufType.UINT16: return s.u16(num());
    case GgufType.INT16: return s.i16(num());
    case GgufType.UINT32: return s.u32(num());
    case GgufType.INT32: return s.i32(num());
    case GgufType.FLOAT32: return s.f32(num());
    case GgufType.FLOAT64: return s.f64(num());
    case GgufType.BOOL: return s.u8(value ? 1 : 0);
    case GgufType.UINT64: return s.u64(typeof value === "bigint" ? value : num());
    case GgufType.INT64: return s.i64(typeof value === "bigint" ? value : num());
    case GgufType.STRING:
      if (typeof value !== "string") throw new TypeError(`GGUF value ${JSON.stringify(value)} is not a string`);
      return s.string(value);
    case GgufType.ARRAY: {
      if (!Array.isArray(value) || itemType === undefined) throw new TypeError("A GGUF array needs an array value and an item type");
      if (itemType === GgufType.ARRAY) throw new TypeError("Nested GGUF arrays are not supported by the writer");
      s.u32(itemType);
      s.u64(value.length);
      for (const v of value) writeValue(s, itemType, v);
      return;
    }
  }
}

/** A tensor already in a ggml type's bytes, for types that are not weight dtypes (tests write i-quants so). */
export interface RawGgufTensor {
  name: string;
  shape: number[];
  /** ggml type id (gguf-types.ts GGML_TYPES). */
  ggmlType: number;
  data: Uint8Array;
}

/** What to write: metadata in order, then tensors (shape outermost first, raw bytes in their dtype). */
export interface GgufWriteInput {
  metadata: Iterable<[string, GgufEntry]>;
  tensors: readonly (HostTensor | RawGgufTensor)[];
  /** Tensor data alignment; written as general.alignment when not the default 32. */
  alignment?: number;
}

/** Serialises a GGUF v3 file into one buffer. */
export function encodeGguf(input: GgufWriteInput): Uint8Array {
  const alignment = input.alignment ?? GGUF_DEFAULT_ALIGNMENT;
  const meta = [...input.metadata].filter(([k]) => k !== "general.alignment");
  if (alignment !== GGUF_DEFAULT_ALIGNMENT) meta.push(["general.alignment", gguf.u32(alignment)]);
  const s = new Sink();
  s.u32(GGUF_MAGIC);
  s.u32(3);
  s.u64(input.tensors.length);
  s.u64(meta.length);
  for (const [key, entry] of meta) {
    s.string(key);
    s.u32(entry.type);
    writeValue(s, entry.type, entry.value, entry.itemType);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of input.tensors) {
    const type = "ggmlType" in t ? t.ggmlType : ggmlTypeOf(t.dtype);
    const [block, typeName] = "ggmlType" in t
      ? [GGML_TYPES.get(type)?.blockSize ?? 1, GGML_TYPES.get(type)?.name ?? String(type)]
      : [blockValues(t.dtype), t.dtype];
    if ((t.shape[t.shape.length - 1] ?? 0) % block !== 0) {
      throw new RangeError(`Tensor "${t.name}" of shape [${t.shape}] cannot be ${typeName}: its rows must be multiples of ${block}`);
    }
    s.string(t.name);
    s.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) s.u64(d);
    s.u32(type);
    s.u64(offset);
    offsets.push(offset);
    offset = alignUp(offset + t.data.byteLength, alignment);
  }
  s.padTo(alignment);
  const dataStart = s.length;
  input.tensors.forEach((t, i) => {
    s.padTo(alignment);
    if (s.length - dataStart !== offsets[i]) throw new Error("GGUF writer offset mismatch");
    s.bytes(t.data);
  });
  return s.result();
}

/**
 * GGUF v2/v3 reader. The header (metadata + tensor infos) is parsed from a growing window at the
 * start of the file; tensor data is read by range, one tensor at a time, so a multi-GB file is
 * never held in one buffer.
 */
import type { RandomAccessFile } from "../runtime/fs.ts";
import { type HostTensor, ModelLoadError } from "./config.ts";
import {
  alignUp,
  GGML_TYPES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  type GgufEntry,
  GgufType,
  type GgufValue,
} from "./gguf-types.ts";

/** Where one tensor's data lives and what it holds. */
export interface GgufTensorInfo {
  name: string;
  /** Row-major, outermost first (GGUF's ne[] reversed). */
  shape: number[];
  ggmlType: number;
  typeName: string;
  /** Absolute byte offset of the data in the file. */
  offset: number;
  byteLength: number;
}

/** A parsed GGUF header. */
export interface GgufHeader {
  version: number;
  alignment: number;
  metadata: Map<string, GgufEntry>;
  tensors: GgufTensorInfo[];
  /** Absolute offset of the tensor data section. */
  dataOffset: number;
}

/** Thrown internally when the window ends before the header does; the caller widens it. */
class NeedMoreBytes extends Error {}

/** Synchronous cursor over the header window. */
class Cursor {
  pos = 0;
  private readonly view: DataView;
  private readonly decoder = new TextDecoder("utf-8");

  constructor(
    private readonly bytes: Uint8Array,
    private readonly atEof: boolean,
    private readonly path: string,
    readonly fileSize: number,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private need(n: number): number {
    const at = this.pos;
    if (at + n > this.bytes.byteLength) {
      // Bytes the file does not have are never worth a wider window.
      if (this.atEof || at + n > this.fileSize) {
        throw new ModelLoadError(`GGUF file "${this.path}" is truncated: its header ends at byte ${this.fileSize}`);
      }
      if (at + n > MAX_GGUF_HEADER_BYTES) {
        throw new ModelLoadError(`GGUF file "${this.path}" is corrupt: its header runs past ${MAX_GGUF_HEADER_BYTES} bytes`);
      }
      throw new NeedMoreBytes();
    }
    this.pos += n;
    return at;
  }

  u8 = (): number => this.view.getUint8(this.need(1));
  i8 = (): number => this.view.getInt8(this.need(1));
  u16 = (): number => this.view.getUint16(this.need(2), true);
  i16 = (): number => this.view.getInt16(this.need(2), true);
  u32 = (): number => this.view.getUint32(this.need(4), true);
  i32 = (): number => this.view.getInt32(this.need(4), true);
  f32 = (): number => shortestF32(this.view.getFloat32(this.need(4), true));
  f64 = (): number => this.view.getFloat64(this.need(8), true);
  u64 = (): number | bigint => narrow(this.view.getBigUint64(this.need(8), true));
  i64 = (): number | bigint => narrow(this.view.getBigInt64(this.need(8), true));

  /** A u64 count that must fit in the file: anything larger means corruption. */
  count(what: string, limit: number): number {
    const n = this.view.getBigUint64(this.need(8), true);
    if (n > BigInt(Math.floor(limit))) {
      throw new ModelLoadError(`GGUF file "${this.path}" is corrupt: ${what} ${n} is larger than the file allows`);
    }
    return Number(n);
  }

  string(): string {
    // The length is read first: the string's bytes follow it.
    const len = this.count("string length", this.fileSize);
    const at = this.need(len);
    return this.decoder.decode(this.bytes.subarray(at, at + len));
  }
}

/** The shortest decimal that rounds to the same f32, so 1e-5 stored as f32 reads back as 1e-5. */
function shortestF32(v: number): number {
  if (!Number.isFinite(v)) return v;
  for (let p = 1; p <= 9; p++) {
    const d = Number(v.toPrecision(p));
    if (Math.fround(d) === v) return d;
  }
  return v;
}

/** A name from the file as error messages quote it: JSON-escaped (one line) and cut to 100 characters, as a corrupt length can make it any size. */
function quoted(s: string): string {
  return JSON.stringify(s.length > 100 ? `${s.slice(0, 100)}…` : s);
}

function narrow(v: bigint): number | bigint {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
}

/** Most items one metadata array may hold: far above any vocabulary, far below what would exhaust memory. */
const MAX_ARRAY_ITEMS = 1 << 26;

/**
 * Most bytes the header (metadata and tensor infos) may take: real files' headers, vocabularies
 * included, take tens of MiB; a larger one is a corrupt length that would read the weights whole.
 */
export const MAX_GGUF_HEADER_BYTES = 1 << 30;

function readValue(c: Cursor, type: GgufType, path: string, depth = 0): GgufValue {
  switch (type) {
    case GgufType.UINT8: return c.u8();
    case GgufType.INT8: return c.i8();
    case GgufType.UINT16: return c.u16();
    case GgufType.INT16: return c.i16();
    case GgufType.UINT32: return c.u32();
    case GgufType.INT32: return c.i32();
    case GgufType.FLOAT32: return c.f32();
    case GgufType.BOOL: return c.u8() !== 0;
    case GgufType.STRING: return c.string();
    case GgufType.UINT64: return c.u64();
    case GgufType.INT64: return c.i64();
    case GgufType.FLOAT64: return c.f64();
    case GgufType.ARRAY: {
      if (depth > 4) throw new ModelLoadError(`GGUF file "${path}" is corrupt: arrays nested too deep`);
      const itemType = c.u32();
      if (GgufType[itemType] === undefined) throw new ModelLoadError(`GGUF file "${path}" is corrupt: unknown metadata value type ${itemType}`);
      // Every item takes at least a byte of the file; a cut file then fails as truncated while reading the items.
      const n = c.count("array length", c.fileSize);
      if (n > MAX_ARRAY_ITEMS) throw new ModelLoadError(`GGUF file "${path}" is corrupt: array length ${n} is over the limit of ${MAX_ARRAY_ITEMS} items`);
      const out: GgufValue[] = [];
      for (let i = 0; i < n; i++) out.push(readValue(c, itemType, path, depth + 1));
      return out;
    }
    default:
      throw new ModelLoadError(`GGUF file "${path}" is corrupt: unknown metadata value type ${type}`);
  }
}

function parseHeader(bytes: Uint8Array, atEof: boolean, path: string, fileSize: number): GgufHeader {
  const c = new Cursor(bytes, atEof, path, fileSize);
  const magic = c.u32();
  if (magic !== GGUF_MAGIC) {
    const shown = Array.from(bytes.subarray(0, 4), (b) => b.toString(16).padStart(2, "0")).join(" ");
    throw new ModelLoadError(`"${path}" is not a GGUF file: bad magic bytes ${shown}`);
  }
  const version = c.u32();
  // llama.cpp writes big-endian files for big-endian machines (s390x): their version reads byte-swapped.
  if (version === 0x02000000 || version === 0x03000000) {
    throw new ModelLoadError(`GGUF file "${path}" is big-endian (its version ${version >>> 24} is byte-swapped); only little-endian GGUF files are read`);
  }
  if (version !== 2 && version !== 3) {
    throw new ModelLoadError(`GGUF file "${path}" has version ${version}; only versions 2 and 3 are supported`);
  }
  // Every tensor info and metadata entry takes at least 8 bytes: counts beyond size/8 are corrupt.
  const tensorCount = c.count("tensor count", fileSize / 8);
  const kvCount = c.count("metadata count", fileSize / 8);
  const metadata = new Map<string, GgufEntry>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string();
    if (metadata.has(key)) throw new ModelLoadError(`GGUF file "${path}" is corrupt: metadata key ${quoted(key)} appears twice`);
    const type = c.u32();
    let itemType: GgufType | undefined;
    if (type === GgufType.ARRAY) {
      // Peek the element type without consuming it: readValue reads it again.
      const at = c.pos;
      itemType = c.u32();
      c.pos = at;
    }
    const value = readValue(c, type, path);
    metadata.set(key, itemType === undefined ? { type, value } : { type, itemType, value });
  }
  const alignEntry = metadata.get("general.alignment");
  const alignment = alignEntry === undefined ? GGUF_DEFAULT_ALIGNMENT : alignEntry.value;
  // As llama.cpp (gguf.cpp): any power of two a uint32 holds. Tensors are read into buffers of their
  // own, so none needs more alignment than the file gives it.
  if (!isGgufAlignment(alignment)) {
    throw new ModelLoadError(`GGUF file "${path}" is corrupt: general.alignment is ${typeof alignment === "string" ? JSON.stringify(alignment) : String(alignment)}; expected a power of two from 1 to 2^31`);
  }
  const raw: { name: string; shape: number[]; ggmlType: number; rel: number | bigint }[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string();
    if (names.has(name)) throw new ModelLoadError(`GGUF file "${path}" is corrupt: tensor ${quoted(name)} appears twice`);
    names.add(name);
    const nDims = c.u32();
    if (nDims > 8) throw new ModelLoadError(`GGUF file "${path}" is corrupt: tensor ${quoted(name)} has ${nDims} dimensions`);
    const ne: number[] = [];
    for (let d = 0; d < nDims; d++) ne.push(c.count(`dimension of tensor ${quoted(name)}`, fileSize * 64));
    raw.push({ name, shape: ne.reverse(), ggmlType: c.u32(), rel: c.u64() });
  }
  const dataOffset = alignUp(c.pos, alignment);
  const tensors = raw.map((t) => tensorInfo(t, dataOffset, alignment, fileSize, path));
  // Tensors that share bytes would load one tensor's data as another's.
  const byOffset = tensors.filter((t) => t.byteLength > 0).sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const [prev, t] = [byOffset[i - 1], byOffset[i]];
    if (t.offset < prev.offset + prev.byteLength) {
      throw new ModelLoadError(`GGUF file "${path}" is corrupt: the data of tensors ${quoted(prev.name)} and ${quoted(t.name)} overlap`);
    }
  }
  return { version, alignment, metadata, tensors, dataOffset };
}

/** A power of two from 1 to 2^31 (`a & (a - 1)` would see only the low 32 bits of a larger number). */
function isGgufAlignment(a: GgufValue): a is number {
  return typeof a === "number" && Number.isInteger(a) && a >= 1 && a <= 2 ** 31 && (a & (a - 1)) === 0;
}

function tensorInfo(
  t: { name: string; shape: number[]; ggmlType: number; rel: number | bigint },
  dataOffset: number,
  alignment: number,
  fileSize: number,
  path: string,
): GgufTensorInfo {
  const info = GGML_TYPES.get(t.ggmlType);
  if (!info) throw new ModelLoadError(`GGUF file "${path}": tensor ${quoted(t.name)} has unknown ggml type ${t.ggmlType}`);
  const count = t.shape.reduce((a, b) => a * b, 1);
  const inner = t.shape[t.shape.length - 1] ?? 1;
  if (inner % info.blockSize !== 0) {
    throw new ModelLoadError(`GGUF file "${path}" is corrupt: tensor ${quoted(t.name)} row of ${inner} is not a multiple of ${info.name} blocks`);
  }
  const byteLength = (count / info.blockSize) * info.blockBytes;
  const offset = typeof t.rel === "number" ? dataOffset + t.rel : Infinity;
  if (typeof t.rel === "number" && t.rel % alignment !== 0) {
    throw new ModelLoadError(`GGUF file "${path}" is corrupt: tensor ${quoted(t.name)} has offset ${t.rel}, not a multiple of the alignment ${alignment}`);
  }
  if (offset + byteLength > fileSize) {
    throw new ModelLoadError(
      `GGUF file "${path}" is truncated: tensor ${quoted(t.name)} ends at byte ${offset + byteLength} but the file has ${fileSize}`,
    );
  }
  return { name: t.name, shape: t.shape, ggmlType: t.ggmlType, typeName: info.name, offset, byteLength };
}

/** Parses the header of an open GGUF file, widening the read window until the header fits. */
export async function readGgufHeader(file: RandomAccessFile): Promise<GgufHeader> {
  if (file.size < 24) throw new ModelLoadError(`GGUF file "${file.path}" is truncated: only ${file.size} bytes`);
  let window = Math.min(file.size, 1 << 20);
  for (;;) {
    const bytes = await file.read(0, window);
    try {
      return parseHeader(bytes, window === file.size, file.path, file.size);
    } catch (e) {
      if (!(e instanceof NeedMoreBytes)) throw e;
      window = Math.min(file.size, window * 4, MAX_GGUF_HEADER_BYTES);
    }
  }
}

/** Names of the ggml types we load. */
function supportedGgmlTypes(): string[] {
  return [...GGML_TYPES.values()].filter((t) => t.dtype !== undefined).map((t) => t.name);
}

/**
 * Reads one tensor's bytes as stored; a type we cannot compute with (gguf-types.ts: no `dtype`) is
 * refused with the tensor's name.
 */
export async function readGgufTensor(file: RandomAccessFile, info: GgufTensorInfo): Promise<HostTensor> {
  const { dtype } = GGML_TYPES.get(info.ggmlType) ?? {};
  if (!dtype) {
    throw new ModelLoadError(
      `Tensor ${quoted(info.name)} in "${file.path}" has type ${info.typeName}; supported types are ${supportedGgmlTypes().join(", ")}`,
    );
  }
  const data = await file.read(info.offset, info.byteLength);
  return { name: info.name, shape: info.shape.slice(), dtype, data };
}

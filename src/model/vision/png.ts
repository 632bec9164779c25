/**
 * A small PNG codec for image inputs to vision models: {@link decodePng} turns a PNG file into 8-bit
 * RGB, {@link encodePng} writes 8-bit RGB as a PNG (for tests and fixtures), and {@link sniffImageType}
 * names an image format by its magic bytes. Decoding reads every colour type and bit depth the PNG
 * specification allows, all five row filters and Adam7 interlacing; ancillary chunks (tRNS, gAMA,
 * iCCP...) are skipped and CRCs are not checked. The compressed data is inflated by `node:zlib`,
 * which Deno and Node both provide.
 */
import { deflateSync, inflateSync } from "node:zlib";

/** An image as 8-bit RGB. */
export interface DecodedImage {
  width: number;
  height: number;
  /** RGB, 8 bits a channel, row-major, 3 bytes a pixel */
  rgb: Uint8Array;
}

/** Options of {@link decodePng}. */
export interface DecodePngOptions {
  /** The most pixels (width × height) an image may have; larger ones are refused before inflating. Default 64 Mi. */
  maxPixels?: number;
}

/** A PNG that cannot be decoded: the message names the problem and quotes the offending value. */
export class ImageDecodeError extends Error {
  override name = "ImageDecodeError";
}

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10] as const;
/** Samples per pixel by colour type (0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA). */
const CHANNELS: Readonly<Record<number, number>> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
const DEPTHS: Readonly<Record<number, readonly number[]>> = { 0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16] };
/** Adam7 passes as [x0, y0, dx, dy]. */
const ADAM7: readonly (readonly [number, number, number, number])[] = [
  [0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2],
];

const u32 = (b: Uint8Array, at: number) => ((b[at] << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3]) >>> 0;
const chunkName = (b: Uint8Array, at: number) => String.fromCharCode(b[at], b[at + 1], b[at + 2], b[at + 3]);

/**
 * Decodes a PNG file to 8-bit RGB. Colour types 0, 2, 3, 4 and 6 at every bit depth the specification
 * allows are read: 16-bit samples keep their high byte, 1/2/4-bit grey is scaled to 0..255, palette
 * indices are looked up in PLTE. Alpha (colour types 4 and 6) is dropped, not composited: the RGB of a
 * transparent pixel is taken as it is, and tRNS is ignored. Adam7-interlaced images are read too.
 * @throws {ImageDecodeError} on a bad signature, a truncated file, a malformed or unsupported header,
 *   image data that does not inflate to the size the header implies, a bad filter type, a palette index
 *   past the palette, or an image of more than `maxPixels` pixels (checked before inflating).
 */
export function decodePng(bytes: Uint8Array, options: DecodePngOptions = {}): DecodedImage {
  const maxPixels = options.maxPixels ?? 64 * 1024 * 1024;
  if (bytes.length < 8 || SIGNATURE.some((v, i) => bytes[i] !== v)) {
    const head = Array.from(bytes.subarray(0, 8), (v) => v.toString(16).padStart(2, "0")).join(" ");
    throw new ImageDecodeError(`The data does not start with the PNG signature (it starts "${head}")`);
  }
  let width = 0, height = 0, depth = 0, colour = 0, interlace = 0;
  let palette: Uint8Array | undefined;
  const idat: Uint8Array[] = [];
  let at = 8, ended = false;
  while (!ended) {
    if (at + 8 > bytes.length) throw new ImageDecodeError(`The PNG data ends ${at === bytes.length ? "before its IEND chunk" : "inside a chunk header"}`);
    const length = u32(bytes, at), type = chunkName(bytes, at + 4);
    if (at + 12 + length > bytes.length) throw new ImageDecodeError(`The PNG data ends inside chunk "${type}"`);
    const data = bytes.subarray(at + 8, at + 8 + length);
    if (at === 8 && type !== "IHDR") throw new ImageDecodeError(`The first PNG chunk is "${type}", not "IHDR"`);
    at += 12 + length;
    if (type === "IHDR") {
      if (length !== 13) throw new ImageDecodeError(`The PNG IHDR chunk holds ${length} bytes, not 13`);
      [width, height, depth, colour, interlace] = [u32(data, 0), u32(data, 4), data[8], data[9], data[12]];
      if (width === 0 || height === 0) throw new ImageDecodeError(`Image is ${width} × ${height} pixels`);
      if (!(colour in CHANNELS)) throw new ImageDecodeError(`Image colour type ${colour} is not a PNG colour type`);
      if (!DEPTHS[colour].includes(depth)) throw new ImageDecodeError(`Bit depth ${depth} is not allowed for PNG colour type ${colour}`);
      if (data[10] !== 0) throw new ImageDecodeError(`PNG compression method ${data[10]} is not 0 (deflate)`);
      if (data[11] !== 0) throw new ImageDecodeError(`PNG filter method ${data[11]} is not 0`);
      if (interlace > 1) throw new ImageDecodeError(`PNG interlace method ${interlace} is neither 0 (none) nor 1 (Adam7)`);
      if (width * height > maxPixels) throw new ImageDecodeError(`Image is ${width} × ${height} pixels, more than the limit of ${maxPixels}`);
    } else if (type === "PLTE") {
      if (length === 0 || length % 3 !== 0 || length > 768) throw new ImageDecodeError(`The PNG palette holds ${length} bytes, not 3 to 768 in whole RGB entries`);
      palette = data;
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") ended = true;
  }
  if (colour === 3 && !palette) throw new ImageDecodeError("The palette image has no PLTE chunk");
  if (idat.length === 0) throw new ImageDecodeError("The PNG has no IDAT chunk");

  const bitsPerPixel = CHANNELS[colour] * depth, bpp = Math.max(1, bitsPerPixel >> 3);
  const passes = (interlace ? ADAM7 : [[0, 0, 1, 1] as const]).map(([x0, y0, dx, dy]) => {
    const w = Math.ceil((width - x0) / dx), h = Math.ceil((height - y0) / dy);
    return { x0, y0, dx, dy, w: w > 0 && h > 0 ? w : 0, h: w > 0 && h > 0 ? h : 0 };
  });
  const expected = passes.reduce((n, p) => n + p.h * (1 + Math.ceil((p.w * bitsPerPixel) / 8)), 0);
  const compressed = new Uint8Array(idat.reduce((n, c) => n + c.length, 0));
  idat.reduce((o, c) => (compressed.set(c, o), o + c.length), 0);
  let raw: Uint8Array;
  try {
    raw = inflateSync(compressed, { maxOutputLength: expected });
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ERR_BUFFER_TOO_LARGE") throw new ImageDecodeError(`The PNG image data inflates to more than the ${expected} bytes a ${width} × ${height} image needs`);
    throw new ImageDecodeError(`The PNG image data does not inflate: ${(e as Error).message}`);
  }
  if (raw.length !== expected) throw new ImageDecodeError(`The PNG image data inflates to ${raw.length} bytes; a ${width} × ${height} image needs ${expected}`);

  const rgb = new Uint8Array(width * height * 3);
  const max = (1 << Math.min(depth, 8)) - 1, entries = palette ? palette.length / 3 : 0;
  let offset = 0;
  for (const p of passes) {
    const stride = Math.ceil((p.w * bitsPerPixel) / 8);
    let prev: Uint8Array = new Uint8Array(stride);
    for (let y = 0; y < p.h; y++, offset += 1 + stride) {
      const row = raw.subarray(offset + 1, offset + 1 + stride);
      unfilter(raw[offset], row, prev, bpp, y);
      prev = row;
      for (let x = 0; x < p.w; x++) {
        const dst = ((p.y0 + y * p.dy) * width + p.x0 + x * p.dx) * 3;
        if (depth < 8) {
          const bit = x * depth, v = (row[bit >> 3] >> (8 - depth - (bit & 7))) & max;
          if (colour === 3) lookup(palette!, entries, v, rgb, dst);
          else rgb.fill((v * 255) / max, dst, dst + 3);
          continue;
        }
        const s = depth >> 3, base = x * CHANNELS[colour] * s;
        if (colour === 3) lookup(palette!, entries, row[base], rgb, dst);
        else if (colour === 0 || colour === 4) rgb.fill(row[base], dst, dst + 3);
        else for (let c = 0; c < 3; c++) rgb[dst + c] = row[base + c * s];
      }
    }
  }
  return { width, height, rgb };
}

function lookup(palette: Uint8Array, entries: number, index: number, rgb: Uint8Array, dst: number): void {
  if (index >= entries) throw new ImageDecodeError(`Palette index ${index} is past the palette's ${entries} entries`);
  rgb.set(palette.subarray(index * 3, index * 3 + 3), dst);
}

/** Reverses one scanline's filter in place; `prev` is the previous unfiltered row (zeros for the first). */
function unfilter(filter: number, row: Uint8Array, prev: Uint8Array, bpp: number, y: number): void {
  const n = row.length;
  switch (filter) {
    case 0:
      return;
    case 1:
      for (let i = bpp; i < n; i++) row[i] = row[i] + row[i - bpp];
      return;
    case 2:
      for (let i = 0; i < n; i++) row[i] = row[i] + prev[i];
      return;
    case 3:
      for (let i = 0; i < n; i++) row[i] = row[i] + (((i >= bpp ? row[i - bpp] : 0) + prev[i]) >> 1);
      return;
    case 4:
      for (let i = 0; i < n; i++) {
        const a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        row[i] = row[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
      }
      return;
    default:
      throw new ImageDecodeError(`Row ${y} has filter type ${filter}, not a PNG filter type (0 to 4)`);
  }
}

/** The CRC-32 (ISO 3309, as PNG uses) of the bytes. */
function crc32(bytes: Uint8Array): number {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  let crc = 0xffffffff;
  for (const b of bytes) crc = table[(crc ^ b) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/**
 * Encodes an RGB image as a PNG: colour type 2, bit depth 8, no interlace, filter 0 on every row,
 * one IDAT chunk compressed by `deflateSync`, CRCs computed.
 * @throws {RangeError} when the size is not a positive whole number or `rgb` does not hold width × height × 3 bytes.
 */
export function encodePng(image: DecodedImage): Uint8Array {
  const { width, height, rgb } = image;
  if (!(Number.isInteger(width) && Number.isInteger(height) && width > 0 && height > 0)) throw new RangeError(`Image is ${width} × ${height} pixels`);
  if (rgb.length !== width * height * 3) throw new RangeError(`A ${width} × ${height} RGB image needs ${width * height * 3} bytes, not ${rgb.length}`);
  const rows = new Uint8Array(height * (1 + width * 3));
  for (let y = 0; y < height; y++) rows.set(rgb.subarray(y * width * 3, (y + 1) * width * 3), y * (1 + width * 3) + 1);
  const header = new Uint8Array(13);
  const view = new DataView(header.buffer);
  view.setUint32(0, width);
  view.setUint32(4, height);
  header.set([8, 2, 0, 0, 0], 8);
  const chunks = [chunk("IHDR", header), chunk("IDAT", deflateSync(rows)), chunk("IEND", new Uint8Array(0))];
  const out = new Uint8Array(8 + chunks.reduce((n, c) => n + c.length, 0));
  out.set(SIGNATURE);
  chunks.reduce((o, c) => (out.set(c, o), o + c.length), 8);
  return out;
}

function chunk(type: string, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(12 + data.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, data.length);
  for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i);
  out.set(data, 8);
  view.setUint32(8 + data.length, crc32(out.subarray(4, 8 + data.length)));
  return out;
}

/** Names an image's format by its magic bytes: PNG, JPEG (FF D8 FF), GIF (GIF87a/GIF89a) or WebP (RIFF....WEBP); `undefined` otherwise. */
export function sniffImageType(bytes: Uint8Array): "png" | "jpeg" | "gif" | "webp" | undefined {
  const ascii = (from: number, to: number) => String.fromCharCode(...bytes.subarray(from, to));
  if (bytes.length >= 8 && SIGNATURE.every((v, i) => bytes[i] === v)) return "png";
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "jpeg";
  if (bytes.length >= 6 && (ascii(0, 6) === "GIF87a" || ascii(0, 6) === "GIF89a")) return "gif";
  if (bytes.length >= 12 && ascii(0, 4) === "RIFF" && ascii(8, 12) === "WEBP") return "webp";
  return undefined;
}

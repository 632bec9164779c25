/**
 * GIF decoding (GIF87a and GIF89a, from the GIF89a specification): the first frame as 8-bit RGB, as
 * PIL's `Image.open(f).convert("RGB")` reads it (what Hugging Face's processors, and OpenAI's
 * "non-animated GIF", take). The frame's LZW codes are expanded into palette indices (interlaced rows
 * put back in order) and looked up in its local colour table, else the global one. Transparency is
 * not composited (a transparent index keeps its palette colour, as PIL's RGB conversion does); the
 * canvas around a frame smaller than the logical screen takes the background colour.
 * Checked against Pillow (tests/model/fixtures/pil-gif.json, scripts/pil-gif-fixture.py).
 */
import { Buffer } from "node:buffer";
import { type DecodedImage, ImageDecodeError } from "./png.ts";

/** LZW codes are at most 12 bits (GIF89a appendix F). */
const MAX_CODES = 4096;

/** A byte reader that names where a file ends too soon. */
class Reader {
  at = 0;
  constructor(readonly b: Uint8Array) {}
  need(n: number, what: string): void {
    if (this.at + n > this.b.length) throw new ImageDecodeError(`The file ends inside ${what} (byte ${this.b.length} of a GIF)`);
  }
  u8(what: string): number {
    this.need(1, what);
    return this.b[this.at++];
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.b[this.at] | (this.b[this.at + 1] << 8);
    this.at += 2;
    return v;
  }
  bytes(n: number, what: string): Uint8Array {
    this.need(n, what);
    const v = this.b.subarray(this.at, this.at + n);
    this.at += n;
    return v;
  }
  /** Data sub-blocks (each a length byte, 0 ends them), joined; or only skipped. */
  subBlocks(what: string, keep: boolean): Uint8Array {
    const parts: Uint8Array[] = [];
    for (let n = this.u8(what); n !== 0; n = this.u8(what)) {
      const part = this.bytes(n, what);
      if (keep) parts.push(part);
    }
    return Buffer.concat(parts);
  }
}

/** Palette indices from a frame's LZW data: exactly `count` of them (a stream that stops short leaves the rest 0, as decoders do). */
function lzwDecode(data: Uint8Array, minCodeSize: number, count: number): Uint8Array {
  if (minCodeSize < 2 || minCodeSize > 11) throw new ImageDecodeError(`The LZW minimum code size is ${minCodeSize}; GIF allows 2 to 11`);
  const out = new Uint8Array(count);
  const clear = 1 << minCodeSize, end = clear + 1;
  // Each code's string: its last byte, its length and the code it extends.
  const suffix = new Uint8Array(MAX_CODES), length = new Uint16Array(MAX_CODES), prefix = new Int16Array(MAX_CODES);
  for (let c = 0; c < clear; c++) {
    suffix[c] = c;
    length[c] = 1;
    prefix[c] = -1;
  }
  let size = minCodeSize + 1, next = end + 1, previous = -1;
  let bits = 0, buffer = 0, at = 0, o = 0;
  while (o < count) {
    while (bits < size && at < data.length) {
      buffer |= data[at++] << bits;
      bits += 8;
    }
    if (bits < size) break;
    const code = buffer & ((1 << size) - 1);
    buffer >>>= size;
    bits -= size;
    if (code === clear) {
      size = minCodeSize + 1;
      next = end + 1;
      previous = -1;
      continue;
    }
    if (code === end) break;
    if (previous === -1) {
      if (code >= clear) throw new ImageDecodeError(`The image data's first code after a clear is ${code}, not a colour (below ${clear})`);
      out[o++] = code;
      previous = code;
      continue;
    }
    if (code > next || (code === next && next >= MAX_CODES)) throw new ImageDecodeError(`The image data holds the LZW code ${code} before it is defined (next is ${next})`);
    // The string of `code`, or (the KwKwK case) of `previous` and its own first byte.
    const known = code < next;
    const stringCode = known ? code : previous;
    const n = length[stringCode] + (known ? 0 : 1);
    let first = 0;
    // Written backwards from its last byte; bytes past the frame's end are dropped.
    let c = stringCode, p = o + length[stringCode] - 1;
    while (c !== -1) {
      first = suffix[c];
      if (p < count) out[p] = first;
      p--;
      c = prefix[c];
    }
    if (!known && o + n - 1 < count) out[o + n - 1] = first;
    o += n;
    if (next < MAX_CODES) {
      prefix[next] = previous;
      suffix[next] = first;
      length[next] = length[previous] + 1;
      next++;
      if (next === 1 << size && size < 12) size++;
    }
    previous = code;
  }
  return out;
}

/**
 * Decodes a GIF file's first frame to 8-bit RGB, the logical screen's size.
 * @throws {ImageDecodeError} on a bad signature, a file that ends too soon, no frame, a frame outside
 *   the screen, a frame with no colour table, bad LZW data, or more than `maxPixels` pixels.
 */
export function decodeGif(bytes: Uint8Array, options: { maxPixels?: number } = {}): DecodedImage {
  const maxPixels = options.maxPixels ?? 64 * 1024 * 1024;
  const r = new Reader(bytes);
  const signature = String.fromCharCode(...r.bytes(Math.min(6, bytes.length), "the signature"));
  if (signature !== "GIF87a" && signature !== "GIF89a") throw new ImageDecodeError(`The data does not start with a GIF signature (it starts ${JSON.stringify(signature)})`);
  const width = r.u16("the screen descriptor"), height = r.u16("the screen descriptor");
  const flags = r.u8("the screen descriptor"), background = r.u8("the screen descriptor");
  r.u8("the screen descriptor");
  if (width === 0 || height === 0) throw new ImageDecodeError(`The GIF's screen is ${width} × ${height}`);
  if (width * height > maxPixels) throw new ImageDecodeError(`The image is ${width} × ${height}, more than the ${maxPixels} pixels allowed`);
  const global = flags & 0x80 ? r.bytes(3 << ((flags & 7) + 1), "the global colour table") : undefined;
  for (;;) {
    const block = r.u8("the blocks after the header");
    if (block === 0x3b) throw new ImageDecodeError("The GIF holds no image");
    if (block === 0x21) {
      r.u8("an extension");
      r.subBlocks("an extension", false);
      continue;
    }
    if (block !== 0x2c) throw new ImageDecodeError(`A GIF block starts with byte 0x${block.toString(16).padStart(2, "0")}, neither an image (0x2c), an extension (0x21) nor the end (0x3b)`);
    const left = r.u16("an image descriptor"), top = r.u16("an image descriptor");
    const fw = r.u16("an image descriptor"), fh = r.u16("an image descriptor");
    const frameFlags = r.u8("an image descriptor");
    const local = frameFlags & 0x80 ? r.bytes(3 << ((frameFlags & 7) + 1), "a local colour table") : undefined;
    const table = local ?? global;
    if (!table) throw new ImageDecodeError("The GIF's first image has no colour table, local or global");
    if (left + fw > width || top + fh > height) throw new ImageDecodeError(`The first image (${fw} × ${fh} at ${left}, ${top}) lies outside the ${width} × ${height} screen`);
    const minCodeSize = r.u8("the image data");
    const indices = lzwDecode(r.subBlocks("the image data", true), minCodeSize, fw * fh);
    const rgb = new Uint8Array(width * height * 3);
    if (fw !== width || fh !== height) {
      const bg = global && background * 3 + 2 < global.length ? global.subarray(background * 3, background * 3 + 3) : new Uint8Array(3);
      for (let i = 0; i < width * height; i++) rgb.set(bg, i * 3);
    }
    const rows = frameFlags & 0x40 ? interlacedRows(fh) : undefined;
    const colours = table.length / 3;
    for (let k = 0; k < fh; k++) {
      const y = top + (rows ? rows[k] : k);
      for (let x = 0; x < fw; x++) {
        const index = indices[k * fw + x];
        // An index past a short table reads as black, as PIL's palette (padded with zeros) gives it.
        if (index >= colours) continue;
        const o = (y * width + left + x) * 3;
        rgb[o] = table[index * 3];
        rgb[o + 1] = table[index * 3 + 1];
        rgb[o + 2] = table[index * 3 + 2];
      }
    }
    return { width, height, rgb };
  }
}

/** The frame row each stored row is, for an interlaced frame of `h` rows (passes: every 8th from 0, every 8th from 4, every 4th from 2, every 2nd from 1). */
function interlacedRows(h: number): Int32Array {
  const rows = new Int32Array(h);
  let k = 0;
  for (const [start, step] of [[0, 8], [4, 8], [2, 4], [1, 2]]) for (let y = start; y < h; y += step) rows[k++] = y;
  return rows;
}

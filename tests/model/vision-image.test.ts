/**
 * Image inputs for vision models: the PNG codec (src/model/vision/png.ts) against PNGs built here
 * scanline by scanline with an independent filter encoder, and the preprocessing
 * (src/model/vision/image-preprocess.ts) against values worked out by hand.
 */
import assert from "node:assert/strict";
import { deflateSync } from "node:zlib";
import { projectRoot, test } from "../harness.ts";
import { decodePng, type DecodedImage, encodePng, sniffImageType } from "../../src/model/vision/png.ts";
import { imagePatches, preprocessImage } from "../../src/model/vision/image-preprocess.ts";
import { resizeImage, type ResizeFilter } from "../../src/model/vision/image-resize.ts";
import { readFileSync } from "node:fs";

// ---- an independent PNG writer -------------------------------------------------------------

function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const b of bytes) {
    crc ^= b;
    for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function be32(v: number): number[] {
  return [(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255];
}

function pngChunk(type: string, data: ArrayLike<number>): number[] {
  const body = [...type].map((c) => c.charCodeAt(0)).concat(Array.from(data));
  return [...be32(data.length), ...body, ...be32(crc32(Uint8Array.from(body)))];
}

const SIG = [137, 80, 78, 71, 13, 10, 26, 10];

/** Filters one raw scanline with `type`, given the previous raw scanline (zeros for the first). */
function filterRow(type: number, row: number[], prev: number[], bpp: number): number[] {
  const at = (r: number[], i: number) => (i >= 0 ? r[i] : 0);
  return row.map((v, i) => {
    const a = at(row, i - bpp), b = prev[i], c = at(prev, i - bpp);
    if (type === 0) return v;
    if (type === 1) return (v - a) & 255;
    if (type === 2) return (v - b) & 255;
    if (type === 3) return (v - Math.floor((a + b) / 2)) & 255;
    const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
    return (v - (pa <= pb && pa <= pc ? a : pb <= pc ? b : c)) & 255;
  });
}

/** Packs samples of `depth` bits (1, 2, 4, 8 or 16, big-endian) into bytes, padding the last byte. */
function pack(samples: number[], depth: number): number[] {
  if (depth === 8) return samples;
  if (depth === 16) return samples.flatMap((s) => [s >> 8, s & 255]);
  const out = new Array<number>(Math.ceil((samples.length * depth) / 8)).fill(0);
  samples.forEach((s, i) => (out[(i * depth) >> 3] |= s << (8 - depth - ((i * depth) & 7))));
  return out;
}

interface PngSpec {
  width: number;
  height: number;
  colour: number;
  depth: number;
  /** Samples of each row, channels interleaved (before packing). */
  rows: number[][];
  /** Filter type per row (cycled); 0 by default. */
  filters?: number[];
  plte?: number[];
  interlace?: boolean;
}

const CHANNELS: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
const ADAM7 = [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]];

/** Writes raw scanlines of samples (per pass when interlaced) with the chosen filters into a PNG. */
function buildPng(s: PngSpec, header: Partial<Record<"colour" | "depth" | "interlace" | "width" | "height", number>> = {}): Uint8Array {
  const ch = CHANNELS[s.colour], bpp = Math.max(1, (ch * s.depth) >> 3), filters = s.filters ?? [0];
  const passes = s.interlace ? ADAM7 : [[0, 0, 1, 1]];
  const scan: number[] = [];
  let n = 0;
  for (const [x0, y0, dx, dy] of passes) {
    const rows: number[][] = [];
    for (let y = y0; y < s.height; y += dy) {
      const row: number[] = [];
      for (let x = x0; x < s.width; x += dx) row.push(...s.rows[y].slice(x * ch, (x + 1) * ch));
      if (row.length) rows.push(pack(row, s.depth));
    }
    let prev = rows.length ? new Array<number>(rows[0].length).fill(0) : [];
    for (const row of rows) {
      const f = filters[n++ % filters.length];
      scan.push(f, ...filterRow(f, row, prev, bpp));
      prev = row;
    }
  }
  const ihdr = [
    ...be32(header.width ?? s.width), ...be32(header.height ?? s.height),
    header.depth ?? s.depth, header.colour ?? s.colour, 0, 0, header.interlace ?? (s.interlace ? 1 : 0),
  ];
  return Uint8Array.from([
    ...SIG, ...pngChunk("IHDR", ihdr), ...(s.plte ? pngChunk("PLTE", s.plte) : []),
    ...pngChunk("tEXt", [...Array.from("Comment\0hi", (c) => c.charCodeAt(0))]),
    ...pngChunk("IDAT", deflateSync(Uint8Array.from(scan))), ...pngChunk("IEND", []),
  ]);
}

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s >>> 24;
  };
}

/** A `width` × `height` grid of RGB triples from a seeded generator. */
function randomRgb(width: number, height: number, seed: number): number[][] {
  const r = random(seed);
  return Array.from({ length: height }, () => Array.from({ length: width * 3 }, r));
}

function decoded(png: Uint8Array): { size: [number, number]; rgb: number[] } {
  const img = decodePng(png);
  return { size: [img.width, img.height], rgb: Array.from(img.rgb) };
}

// ---- decodePng / encodePng ------------------------------------------------------------------

test("encodePng() and decodePng() round-trip a random 7 × 5 RGB image, with correct chunk CRCs", () => {
  const rgb = Uint8Array.from(randomRgb(7, 5, 11).flat());
  const png = encodePng({ width: 7, height: 5, rgb });
  assert.deepEqual(Array.from(png.subarray(0, 8)), SIG);
  const back = decodePng(png);
  assert.deepEqual([back.width, back.height], [7, 5]);
  assert.deepEqual(Array.from(back.rgb), Array.from(rgb));
  const types: string[] = [];
  for (let at = 8; at < png.length;) {
    const view = new DataView(png.buffer, png.byteOffset);
    const length = view.getUint32(at);
    types.push(String.fromCharCode(...png.subarray(at + 4, at + 8)));
    assert.equal(view.getUint32(at + 8 + length), crc32(png.subarray(at + 4, at + 8 + length)), `CRC of ${types.at(-1)}`);
    at += 12 + length;
  }
  assert.deepEqual(types, ["IHDR", "IDAT", "IEND"]);
  assert.deepEqual(Array.from(png.subarray(16, 29)), [0, 0, 0, 7, 0, 0, 0, 5, 8, 2, 0, 0, 0], "8-bit RGB, not interlaced");
  assert.throws(() => encodePng({ width: 2, height: 2, rgb: new Uint8Array(11) }), RangeError);
});

test("decodePng() reads 8- and 16-bit RGB images, keeping each 16-bit sample's high byte", () => {
  const rows = randomRgb(3, 2, 5);
  assert.deepEqual(decoded(buildPng({ width: 3, height: 2, colour: 2, depth: 8, rows })), { size: [3, 2], rgb: rows.flat() });
  const wide = rows.map((r) => r.map((v, i) => v * 256 + ((v + i) & 255)));
  assert.deepEqual(decoded(buildPng({ width: 3, height: 2, colour: 2, depth: 16, rows: wide })).rgb, rows.flat());
});

test("decodePng() reads 8- and 16-bit greyscale images as grey RGB", () => {
  const rows = [[0, 100, 255], [7, 8, 9]];
  const grey = (vs: number[]) => vs.flatMap((v) => [v, v, v]);
  assert.deepEqual(decoded(buildPng({ width: 3, height: 2, colour: 0, depth: 8, rows })).rgb, grey(rows.flat()));
  const wide = [[0x1234, 0xabcd, 0xff00], [0x00ff, 0x0101, 0xfffe]];
  assert.deepEqual(decoded(buildPng({ width: 3, height: 2, colour: 0, depth: 16, rows: wide })).rgb, grey([0x12, 0xab, 0xff, 0x00, 0x01, 0xff]));
});

test("decodePng() reads 1-, 2- and 4-bit greyscale images, scaling the samples to 0..255", () => {
  const grey = (vs: number[]) => vs.flatMap((v) => [v, v, v]);
  // Widths that leave the last byte of each row partly filled.
  const one = [[1, 0, 1, 1, 0, 0, 1, 0, 1, 1], [0, 1, 0, 0, 1, 1, 0, 1, 0, 0]];
  assert.deepEqual(decoded(buildPng({ width: 10, height: 2, colour: 0, depth: 1, rows: one })).rgb, grey(one.flat().map((v) => v * 255)));
  const two = [[0, 1, 2, 3, 3], [2, 1, 0, 1, 2]];
  assert.deepEqual(decoded(buildPng({ width: 5, height: 2, colour: 0, depth: 2, rows: two })).rgb, grey(two.flat().map((v) => v * 85)));
  const four = [[0, 15, 7], [8, 1, 14]];
  assert.deepEqual(decoded(buildPng({ width: 3, height: 2, colour: 0, depth: 4, rows: four })).rgb, grey(four.flat().map((v) => v * 17)));
});

test("decodePng() reads palette images with 8-bit indices", () => {
  const plte = [10, 20, 30, 40, 50, 60, 70, 80, 90];
  const rows = [[2, 0], [1, 2]];
  const out = decoded(buildPng({ width: 2, height: 2, colour: 3, depth: 8, rows, plte }));
  assert.deepEqual(out.rgb, [70, 80, 90, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
});

test("decodePng() reads palette images with 1-, 2- and 4-bit indices", () => {
  const plte = Array.from({ length: 16 * 3 }, (_, i) => (i * 5) & 255);
  const look = (vs: number[]) => vs.flatMap((v) => plte.slice(v * 3, v * 3 + 3));
  const cases: [number, number[][]][] = [
    [1, [[1, 0, 0, 1, 1, 0, 1, 0, 0], [0, 1, 1, 0, 0, 1, 0, 1, 1]]],
    [2, [[3, 2, 1, 0, 3], [0, 0, 1, 2, 2]]],
    [4, [[15, 0, 9], [4, 12, 1]]],
  ];
  for (const [depth, rows] of cases) {
    const width = rows[0].length, pal = plte.slice(0, (1 << depth) * 3);
    assert.deepEqual(decoded(buildPng({ width, height: 2, colour: 3, depth, rows, plte: pal })).rgb, look(rows.flat()), `${depth}-bit indices`);
  }
});

test("decodePng() reads grey+alpha and RGBA images at 8 and 16 bits, dropping the alpha", () => {
  const ga = [[10, 0, 200, 255], [30, 128, 40, 1]];
  const grey = (vs: number[]) => vs.flatMap((v) => [v, v, v]);
  assert.deepEqual(decoded(buildPng({ width: 2, height: 2, colour: 4, depth: 8, rows: ga })).rgb, grey([10, 200, 30, 40]));
  const ga16 = ga.map((r) => r.map((v) => v * 257 - (v ? 1 : 0)));
  assert.deepEqual(decoded(buildPng({ width: 2, height: 2, colour: 4, depth: 16, rows: ga16 })).rgb, grey([10, 200, 30, 40]));
  const rgba = [[1, 2, 3, 0, 4, 5, 6, 255], [7, 8, 9, 17, 250, 251, 252, 99]];
  const rgb = [1, 2, 3, 4, 5, 6, 7, 8, 9, 250, 251, 252];
  assert.deepEqual(decoded(buildPng({ width: 2, height: 2, colour: 6, depth: 8, rows: rgba })).rgb, rgb);
  const rgba16 = rgba.map((r) => r.map((v) => v * 256 + 0xee));
  assert.deepEqual(decoded(buildPng({ width: 2, height: 2, colour: 6, depth: 16, rows: rgba16 })).rgb, rgb);
});

test("decodePng() undoes each filter type (None, Sub, Up, Average, Paeth) alone and mixed row by row", () => {
  const rows = randomRgb(6, 5, 99);
  for (const f of [0, 1, 2, 3, 4]) {
    assert.deepEqual(decoded(buildPng({ width: 6, height: 5, colour: 2, depth: 8, rows, filters: [f] })).rgb, rows.flat(), `filter ${f}`);
  }
  assert.deepEqual(decoded(buildPng({ width: 6, height: 5, colour: 2, depth: 8, rows, filters: [4, 3, 2, 1, 0] })).rgb, rows.flat());
  // 8 bytes a pixel (16-bit RGBA) and a sub-byte depth (1 byte back for Sub, Average and Paeth).
  const r = random(3);
  const wide = Array.from({ length: 5 }, () => Array.from({ length: 4 * 4 }, () => r() * 256 + r()));
  const wideRgb = wide.flatMap((row) => row.flatMap((v, i) => (i % 4 === 3 ? [] : [v >> 8])));
  assert.deepEqual(decoded(buildPng({ width: 4, height: 5, colour: 6, depth: 16, rows: wide, filters: [1, 2, 3, 4, 0] })).rgb, wideRgb);
  const bits = Array.from({ length: 5 }, () => Array.from({ length: 13 }, () => r() & 3));
  const bitsRgb = bits.flat().flatMap((v) => [v * 85, v * 85, v * 85]);
  assert.deepEqual(decoded(buildPng({ width: 13, height: 5, colour: 0, depth: 2, rows: bits, filters: [3, 4, 1, 2, 4] })).rgb, bitsRgb);
  // Few distinct values, so that Paeth's predictor distances tie often and its tie order matters.
  const flat = Array.from({ length: 8 }, () => Array.from({ length: 16 }, () => (r() % 5) * 5));
  assert.deepEqual(decoded(buildPng({ width: 16, height: 8, colour: 0, depth: 8, rows: flat, filters: [4] })).rgb, flat.flat().flatMap((v) => [v, v, v]));
});

test("decodePng() reads Adam7-interlaced images, including ones too small to fill every pass", () => {
  for (const [w, h] of [[9, 7], [3, 2], [1, 1], [16, 1]]) {
    const rows = randomRgb(w, h, w * 31 + h);
    assert.deepEqual(decoded(buildPng({ width: w, height: h, colour: 2, depth: 8, rows, interlace: true, filters: [0, 1, 2, 3, 4] })), { size: [w, h], rgb: rows.flat() }, `${w} × ${h}`);
  }
  const bits = [[1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0], [0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1], [1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1]];
  const png = buildPng({ width: 11, height: 3, colour: 0, depth: 1, rows: bits, interlace: true, filters: [4, 1] });
  assert.deepEqual(decoded(png).rgb, bits.flat().flatMap((v) => [v * 255, v * 255, v * 255]));
});

// ---- decodePng errors -----------------------------------------------------------------------

const decodeError = (message: string | RegExp) => ({ name: "ImageDecodeError", message });
const small = { width: 2, height: 2, colour: 2, depth: 8, rows: randomRgb(2, 2, 1) };

test("decodePng() refuses data without the PNG signature, quoting its first bytes", () => {
  assert.throws(() => decodePng(Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 1, 2, 3, 4, 5])), decodeError('The data does not start with the PNG signature (it starts "ff d8 ff e0 01 02 03 04")'));
  assert.throws(() => decodePng(new Uint8Array(0)), decodeError(/PNG signature/));
});

test("decodePng() refuses truncated data, naming the chunk it ends inside", () => {
  const png = encodePng({ width: 4, height: 4, rgb: Uint8Array.from(randomRgb(4, 4, 2).flat()) });
  assert.throws(() => decodePng(png.subarray(0, 8 + 25 + 12)), decodeError('The PNG data ends inside chunk "IDAT"'));
  assert.throws(() => decodePng(png.subarray(0, 20)), decodeError('The PNG data ends inside chunk "IHDR"'));
  assert.throws(() => decodePng(png.subarray(0, 12)), decodeError("The PNG data ends inside a chunk header"));
  assert.throws(() => decodePng(png.subarray(0, png.length - 12)), decodeError("The PNG data ends before its IEND chunk"));
});

test("decodePng() refuses an unknown colour type, a bit depth the colour type does not allow, and a bad interlace method", () => {
  assert.throws(() => decodePng(buildPng(small, { colour: 5 })), decodeError("Image colour type 5 is not a PNG colour type"));
  assert.throws(() => decodePng(buildPng(small, { depth: 4 })), decodeError("Bit depth 4 is not allowed for PNG colour type 2"));
  assert.throws(() => decodePng(buildPng(small, { interlace: 2 })), decodeError(/interlace method 2/));
});

test("decodePng() refuses an image of zero size", () => {
  assert.throws(() => decodePng(buildPng(small, { width: 0, height: 12 })), decodeError("Image is 0 × 12 pixels"));
  assert.throws(() => decodePng(buildPng(small, { width: 3, height: 0 })), decodeError("Image is 3 × 0 pixels"));
});

test("decodePng() refuses an image of more than maxPixels pixels before inflating its data", () => {
  const huge = buildPng(small, { width: 70000, height: 1000 });
  assert.throws(() => decodePng(huge), decodeError(`Image is 70000 × 1000 pixels, more than the limit of ${64 * 1024 * 1024}`));
  const png = buildPng(small);
  assert.throws(() => decodePng(png, { maxPixels: 3 }), decodeError("Image is 2 × 2 pixels, more than the limit of 3"));
  assert.equal(decodePng(png, { maxPixels: 4 }).width, 2);
});

test("decodePng() refuses image data of the wrong size, a bad filter type, a missing PLTE and a palette index past the palette", () => {
  assert.throws(() => decodePng(buildPng(small, { width: 3 })), decodeError("The PNG image data inflates to 14 bytes; a 3 × 2 image needs 20"));
  assert.throws(() => decodePng(buildPng(small, { height: 1 })), decodeError(/inflates to more than the 7 bytes a 2 × 1 image needs/));
  assert.throws(() => decodePng(buildPng({ ...small, filters: [0, 5] })), decodeError("Row 1 has filter type 5, not a PNG filter type (0 to 4)"));
  const pal = { width: 2, height: 1, colour: 3, depth: 8, rows: [[0, 2]] };
  assert.throws(() => decodePng(buildPng(pal)), decodeError("The palette image has no PLTE chunk"));
  assert.throws(() => decodePng(buildPng({ ...pal, plte: [1, 2, 3, 4, 5, 6] })), decodeError("Palette index 2 is past the palette's 2 entries"));
  const garbage = Uint8Array.from([...SIG, ...pngChunk("IHDR", [0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]), ...pngChunk("IDAT", [1, 2, 3]), ...pngChunk("IEND", [])]);
  assert.throws(() => decodePng(garbage), decodeError(/^The PNG image data does not inflate: /));
});

// ---- sniffImageType -------------------------------------------------------------------------

test("sniffImageType() names PNG, JPEG, GIF and WebP by their magic bytes", () => {
  const ascii = (s: string) => Array.from(s, (c) => c.charCodeAt(0));
  assert.equal(sniffImageType(encodePng({ width: 1, height: 1, rgb: new Uint8Array(3) })), "png");
  assert.equal(sniffImageType(Uint8Array.from([0xff, 0xd8, 0xff, 0xdb, 0, 0])), "jpeg");
  assert.equal(sniffImageType(Uint8Array.from(ascii("GIF89a\x01\x00"))), "gif");
  assert.equal(sniffImageType(Uint8Array.from(ascii("GIF87a"))), "gif");
  assert.equal(sniffImageType(Uint8Array.from([...ascii("RIFF"), 1, 2, 3, 4, ...ascii("WEBPVP8 ")])), "webp");
  assert.equal(sniffImageType(Uint8Array.from([...ascii("RIFF"), 1, 2, 3, 4, ...ascii("WAVEfmt ")])), undefined, "a RIFF that is not WebP");
  assert.equal(sniffImageType(Uint8Array.from(SIG.slice(0, 7))), undefined, "a cut signature");
  assert.equal(sniffImageType(Uint8Array.from(ascii("GIF90a"))), undefined);
  assert.equal(sniffImageType(new Uint8Array(0)), undefined);
});

// ---- preprocessImage / imagePatches ---------------------------------------------------------

const CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073] as const;
const CLIP_STD = [0.26862954, 0.26130258, 0.27577711] as const;

function approx(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string, tol = 1e-5): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) assert.ok(Math.abs(actual[i] - expected[i]) <= tol, `${what}[${i}]: ${actual[i]} is not ${expected[i]}`);
}

/** Pillow's resizes of two test images (scripts/pil-resize-fixture.py): the oracle of resizeImage. */
const pil = JSON.parse(readFileSync(`${projectRoot}/tests/model/fixtures/pil-resize.json`, "utf8")) as {
  pil: string;
  cases: { name: string; png: string; outputs: { width: number; height: number; filter: ResizeFilter; rgb: string }[] }[];
};
const fromBase64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

test("resizeImage() gives Pillow's resize byte for byte: bilinear, bicubic and Lanczos, shrinking (antialiased), growing and both at once", () => {
  let checked = 0;
  for (const c of pil.cases) {
    const image = decodePng(fromBase64(c.png));
    for (const o of c.outputs) {
      const got = resizeImage(image, o.width, o.height, o.filter);
      assert.deepEqual([got.width, got.height], [o.width, o.height]);
      const want = fromBase64(o.rgb);
      const off = got.rgb.findIndex((v, i) => v !== want[i]);
      assert.equal(off, -1, `${c.name} to ${o.width} × ${o.height} ${o.filter}: byte ${off} is ${got.rgb[off]}, Pillow ${pil.pil} gives ${want[off]}`);
      checked++;
    }
  }
  assert.equal(checked, 15);
  // Shrinking averages: a 1-pixel black column shrunk 8× still darkens its output pixel, where
  // interpolating the nearest 2 × 2 pixels (source columns 11 and 12 for output 1) would miss it.
  const rule = { width: 64, height: 1, rgb: Uint8Array.from({ length: 64 * 3 }, (_, i) => (Math.floor(i / 3) === 10 ? 0 : 255)) };
  const shrunk = resizeImage(rule, 8, 1, "bilinear");
  assert.ok(shrunk.rgb[3] < 240, `output 1 is ${shrunk.rgb[3]}`);
  const image = decodePng(fromBase64(pil.cases[0].png));
  assert.throws(() => resizeImage(image, 0, 4, "bilinear"), /width must be a positive whole number, got 0/);
  assert.throws(() => resizeImage({ width: 2, height: 2, rgb: new Uint8Array(5) }, 4, 4, "bicubic"), /needs 12 bytes, not 5/);
});

test("preprocessImage() is Pillow's resize with the spec's filter, then (v / 255 - mean) / std, channels first", () => {
  const image = decodePng(fromBase64(pil.cases[0].png));
  for (const o of pil.cases[0].outputs.filter((x) => x.width === 28 && x.height === 28)) {
    const mean = [0.5, 0.25, 0] as const, std = [0.5, 2, 0.25] as const;
    const out = preprocessImage(image, { size: 28, mean, std, padToSquare: false, resample: o.filter });
    const want = fromBase64(o.rgb);
    approx(out, Array.from({ length: 3 * 28 * 28 }, (_, i) => {
      const c = Math.floor(i / 784);
      return (want[(i % 784) * 3 + c] / 255 - mean[c]) / std[c];
    }), `${o.filter}`);
  }
});

test("preprocessImage() keeps a constant image constant at (v / 255 - mean) / std, up- and downscaling", () => {
  const image: DecodedImage = { width: 5, height: 3, rgb: Uint8Array.from({ length: 45 }, (_, i) => [200, 100, 50][i % 3]) };
  for (const size of [2, 3, 7]) {
    const out = preprocessImage(image, { size, mean: CLIP_MEAN, std: CLIP_STD, padToSquare: false, resample: "bilinear" });
    const want = [200, 100, 50].flatMap((v, c) => new Array(size * size).fill((v / 255 - CLIP_MEAN[c]) / CLIP_STD[c]));
    approx(out, want, `size ${size}`);
  }
});

test("preprocessImage() with padToSquare centres a 4 × 2 image in rows of the mean colour (int(mean * 255), as LLaVA)", () => {
  const rgb = Uint8Array.from(randomRgb(4, 2, 8).flat());
  const out = preprocessImage({ width: 4, height: 2, rgb }, { size: 4, mean: CLIP_MEAN, std: CLIP_STD, padToSquare: true, resample: "bicubic" });
  const pad = [122, 116, 104]; // CLIP's mean × 255 is 122.77, 116.75, 104.09
  const norm = (v: number, c: number) => (v / 255 - CLIP_MEAN[c]) / CLIP_STD[c];
  const want: number[] = [];
  for (let c = 0; c < 3; c++) {
    for (let y = 0; y < 4; y++) for (let x = 0; x < 4; x++) want.push(norm(y === 0 || y === 3 ? pad[c] : rgb[((y - 1) * 4 + x) * 3 + c], c));
  }
  approx(out, want, "padded rows 0 and 3");
  // An odd difference puts the extra pad after the image (offset floor(1 / 2) = 0): a column on the right, a row below.
  for (const [w, h] of [[2, 3], [3, 2]]) {
    const img = Uint8Array.from(randomRgb(w, h, 9).flat());
    const got = preprocessImage({ width: w, height: h, rgb: img }, { size: 3, mean: CLIP_MEAN, std: CLIP_STD, padToSquare: true, resample: "bicubic" });
    const wantOdd: number[] = [];
    for (let c = 0; c < 3; c++) for (let y = 0; y < 3; y++) for (let x = 0; x < 3; x++) wantOdd.push(norm(x >= w || y >= h ? pad[c] : img[(y * w + x) * 3 + c], c));
    approx(got, wantOdd, `${w} × ${h} padded`);
  }
  assert.throws(() => preprocessImage({ width: 2, height: 2, rgb: new Uint8Array(5) }, { size: 4, mean: CLIP_MEAN, std: CLIP_STD, padToSquare: true, resample: "bicubic" }), RangeError);
});

test("imagePatches() lays a [3, 4, 4] tensor out as 4 raster-order patches of (channel, y, x) with patch 2", () => {
  const pixels = Float32Array.from({ length: 48 }, (_, i) => i);
  const out = imagePatches(pixels, 4, 2);
  assert.equal(out.length, 4 * 12);
  assert.deepEqual(Array.from(out.subarray(0, 12)), [0, 1, 4, 5, 16, 17, 20, 21, 32, 33, 36, 37], "top-left patch");
  assert.deepEqual(Array.from(out.subarray(12, 24)), [2, 3, 6, 7, 18, 19, 22, 23, 34, 35, 38, 39], "top-right patch");
  assert.deepEqual(Array.from(out.subarray(24, 36)), [8, 9, 12, 13, 24, 25, 28, 29, 40, 41, 44, 45], "bottom-left patch");
  assert.deepEqual(Array.from(out.subarray(36, 48)), [10, 11, 14, 15, 26, 27, 30, 31, 42, 43, 46, 47], "bottom-right patch");
  assert.throws(() => imagePatches(new Float32Array(75), 5, 2), { name: "RangeError", message: "Image size 5 is not a positive multiple of patch size 2" });
  assert.throws(() => imagePatches(new Float32Array(47), 4, 2), RangeError);
});

/**
 * The GIF decoder (src/model/vision/gif.ts) against Pillow: files Pillow wrote and the RGB pixels
 * Pillow reads from them (tests/model/fixtures/pil-gif.json, scripts/pil-gif-fixture.py: interlaced
 * and not, 2 to 256 colours, greyscale, the first frame of an animation), and hand-built files for
 * what Pillow does not write (a local colour table, a frame smaller than the screen, the KwKwK code);
 * broken files throw ImageDecodeError naming the problem, never anything else.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { projectRoot, test } from "../harness.ts";
import { decodeGif } from "../../src/model/vision/gif.ts";
import { decodeImage } from "../../src/model/vision/image-decode.ts";
import { ImageDecodeError } from "../../src/model/vision/png.ts";

const pil = JSON.parse(readFileSync(`${projectRoot}/tests/model/fixtures/pil-gif.json`, "utf8")) as {
  pil: string;
  cases: { name: string; gif: string; width: number; height: number; rgb: string }[];
};
const fromBase64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

test("decodeGif() reads what Pillow wrote as Pillow reads it: interlaced or not, 2 to 256 colours, grey, an animation's first frame", () => {
  for (const c of pil.cases) {
    const got = decodeGif(fromBase64(c.gif));
    assert.deepEqual([got.width, got.height], [c.width, c.height], c.name);
    const want = fromBase64(c.rgb);
    const off = got.rgb.findIndex((v, i) => v !== want[i]);
    assert.equal(off, -1, `${c.name}: byte ${off} is ${got.rgb[off]}, Pillow ${pil.pil} reads ${want[off]}`);
    assert.deepEqual(decodeImage(fromBase64(c.gif)).rgb, got.rgb, "decodeImage() tells a GIF by its signature");
  }
  assert.equal(pil.cases.length, 6);
});

/** LZW codes of `width` bits each, packed least significant bit first, cut into data sub-blocks. */
function packCodes(codes: readonly [number, number][]): number[] {
  const bytes: number[] = [];
  let buffer = 0, bits = 0;
  for (const [code, width] of codes) {
    buffer |= code << bits;
    bits += width;
    while (bits >= 8) {
      bytes.push(buffer & 0xff);
      buffer >>>= 8;
      bits -= 8;
    }
  }
  if (bits > 0) bytes.push(buffer & 0xff);
  const blocks: number[] = [];
  for (let i = 0; i < bytes.length; i += 255) blocks.push(Math.min(255, bytes.length - i), ...bytes.slice(i, i + 255));
  return [...blocks, 0];
}

/** A GIF89a with a screen, an optional global table, and one frame (its descriptor, optional local table, LZW data). */
function gif(o: { screen: [number, number]; background?: number; global?: number[][]; frame: [number, number, number, number]; local?: number[][]; interlaced?: boolean; minCodeSize: number; codes: [number, number][] }): Uint8Array {
  const table = (t: number[][]) => {
    const bits = Math.max(1, Math.ceil(Math.log2(t.length)));
    return { flag: bits - 1, bytes: [...t.flat(), ...new Array((1 << bits) * 3 - t.length * 3).fill(0)] };
  };
  const g = o.global && table(o.global), l = o.local && table(o.local);
  const le = (v: number) => [v & 0xff, v >> 8];
  return Uint8Array.from([
    ...[..."GIF89a"].map((c) => c.charCodeAt(0)), ...le(o.screen[0]), ...le(o.screen[1]), g ? 0x80 | 0x70 | g.flag : 0, o.background ?? 0, 0, ...(g?.bytes ?? []),
    // A graphic control extension, skipped (transparency is not composited).
    0x21, 0xf9, 4, 1, 0, 0, 1, 0,
    0x2c, ...le(o.frame[0]), ...le(o.frame[1]), ...le(o.frame[2]), ...le(o.frame[3]), (l ? 0x80 | l.flag : 0) | (o.interlaced ? 0x40 : 0), ...(l?.bytes ?? []),
    o.minCodeSize, ...packCodes(o.codes), 0x3b,
  ]);
}

const RED = [255, 0, 0], GREEN = [0, 255, 0], BLUE = [0, 0, 255], WHITE = [255, 255, 255];
const pixels = (img: { rgb: Uint8Array }) => Array.from({ length: img.rgb.length / 3 }, (_, i) => Array.from(img.rgb.subarray(i * 3, i * 3 + 3)));

test("decodeGif() reads the KwKwK code, a local colour table over the global one, and a frame smaller than the screen on its background colour", () => {
  // Colours 0 and 1 (min code size 2: clear 4, end 5). Codes: clear, 1, 6 (= "1 1", not yet defined: KwKwK), 6 again, end.
  // Indices: 1, 1 1, 1 1 → five 1s; with table entries 6 = "1 1", 7 = "1 1 1".
  const kwk = decodeGif(gif({ screen: [5, 1], global: [RED, GREEN], frame: [0, 0, 5, 1], minCodeSize: 2, codes: [[4, 3], [1, 3], [6, 3], [6, 3], [5, 3]] }));
  assert.deepEqual(pixels(kwk), new Array(5).fill(GREEN));
  // The local table wins; the frame fills the middle 2 × 1 of a 4 × 2 screen whose background is global colour 2.
  const framed = decodeGif(gif({ screen: [4, 2], background: 2, global: [RED, GREEN, BLUE, WHITE], frame: [1, 1, 2, 1], local: [WHITE, RED], minCodeSize: 2, codes: [[4, 3], [0, 3], [1, 3], [5, 3]] }));
  assert.deepEqual(pixels(framed), [BLUE, BLUE, BLUE, BLUE, BLUE, WHITE, RED, BLUE]);
  // An interlaced 1 × 5 frame stores rows 0, 4, 2, 1, 3: colours 0..3 there, a fifth row colour 0.
  const inter = decodeGif(gif({ screen: [1, 5], global: [RED, GREEN, BLUE, WHITE], frame: [0, 0, 1, 5], interlaced: true, minCodeSize: 2, codes: [[4, 3], [0, 3], [1, 3], [2, 3], [3, 3], [0, 3], [5, 3]] }));
  assert.deepEqual(pixels(inter), [RED, WHITE, BLUE, GREEN, GREEN]);
  // A stream that ends early leaves the rest index 0.
  const short = decodeGif(gif({ screen: [3, 1], global: [RED, GREEN], frame: [0, 0, 3, 1], minCodeSize: 2, codes: [[4, 3], [1, 3], [5, 3]] }));
  assert.deepEqual(pixels(short), [GREEN, RED, RED]);
});

test("decodeGif() refuses broken files with an ImageDecodeError naming the problem", () => {
  const good = gif({ screen: [2, 1], global: [RED, GREEN], frame: [0, 0, 2, 1], minCodeSize: 2, codes: [[4, 3], [0, 3], [1, 3], [5, 3]] });
  assert.deepEqual(pixels(decodeGif(good)), [RED, GREEN]);
  const cases: [Uint8Array, RegExp][] = [
    [Uint8Array.from([0x47, 0x49, 0x46, 0x38, 0x38, 0x61]), /does not start with a GIF signature \(it starts "GIF88a"\)/],
    [good.subarray(0, 8), /ends inside the screen descriptor/],
    [good.subarray(0, 20), /ends inside an extension/],
    [good.subarray(0, good.length - 6), /ends inside the image data/],
    [Uint8Array.from([...good.subarray(0, 19), 0x3b]), /holds no image/],
    [Uint8Array.from([...good.subarray(0, 19), 0x99]), /starts with byte 0x99, neither an image/],
    [gif({ screen: [2, 1], frame: [0, 0, 2, 1], minCodeSize: 2, codes: [[4, 3], [5, 3]] }), /has no colour table, local or global/],
    [gif({ screen: [2, 1], global: [RED], frame: [1, 0, 2, 1], minCodeSize: 2, codes: [[4, 3], [5, 3]] }), /first image \(2 × 1 at 1, 0\) lies outside the 2 × 1 screen/],
    [gif({ screen: [2, 1], global: [RED], frame: [0, 0, 2, 1], minCodeSize: 1, codes: [[2, 2], [3, 2]] }), /LZW minimum code size is 1; GIF allows 2 to 11/],
    [gif({ screen: [2, 1], global: [RED], frame: [0, 0, 2, 1], minCodeSize: 2, codes: [[4, 3], [0, 3], [7, 3]] }), /LZW code 7 before it is defined \(next is 6\)/],
    [gif({ screen: [2, 1], global: [RED], frame: [0, 0, 2, 1], minCodeSize: 2, codes: [[4, 3], [6, 3]] }), /first code after a clear is 6, not a colour/],
    [gif({ screen: [0, 1], global: [RED], frame: [0, 0, 0, 1], minCodeSize: 2, codes: [[5, 3]] }), /screen is 0 × 1/],
  ];
  for (const [bytes, pattern] of cases) assert.throws(() => decodeGif(bytes), (e: unknown) => e instanceof ImageDecodeError && pattern.test(e.message), String(pattern));
  assert.throws(() => decodeGif(gif({ screen: [300, 300], global: [RED], frame: [0, 0, 1, 1], minCodeSize: 2, codes: [[5, 3]] }), { maxPixels: 1000 }), /300 × 300, more than the 1000 pixels allowed/);
});

test("decodeGif() meets 500 mutated files (bytes flipped, cut, LZW noise) with an image or an ImageDecodeError, never another error", () => {
  let seed = 7;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const files = pil.cases.map((c) => fromBase64(c.gif));
  let refused = 0;
  for (let i = 0; i < 500; i++) {
    const file = Uint8Array.from(files[i % files.length]);
    const kind = i % 3;
    let bytes = file;
    if (kind === 0) for (let k = 0; k < 1 + Math.floor(next() * 8); k++) file[Math.floor(next() * file.length)] = Math.floor(next() * 256);
    else if (kind === 1) bytes = file.subarray(0, Math.floor(next() * file.length));
    else for (let k = Math.floor(file.length * 0.4); k < file.length - 1; k++) if (next() < 0.05) file[k] = Math.floor(next() * 256);
    try {
      const img = decodeGif(bytes);
      assert.equal(img.rgb.length, img.width * img.height * 3);
    } catch (e) {
      assert.ok(e instanceof ImageDecodeError, `mutation ${i}: ${e}`);
      refused++;
    }
  }
  assert.ok(refused > 100, `${refused} refused`);
});

/**
 * The JPEG decoder (src/model/vision/jpeg.ts) against files written by the independent encoder in
 * ./jpeg-encoder.ts, whose pixels are known twice over: the image that went in, and what an exact decoder
 * must make of the quantized coefficients that came out (`expected`). Baseline and progressive files of
 * the same coefficients must decode identically; broken files must throw ImageDecodeError, never hang.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { decodeJpeg } from "../../src/model/vision/jpeg.ts";
import { type DecodedImage, ImageDecodeError, sniffImageType } from "../../src/model/vision/png.ts";
import { encodeJpeg, type EncodeJpegOptions } from "./jpeg-encoder.ts";

// ---- images and measures ------------------------------------------------------------------

/** A seeded generator of numbers in [0, 1) (mulberry32). */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function image(width: number, height: number, pixel: (x: number, y: number) => [number, number, number]): DecodedImage {
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) rgb.set(pixel(x, y).map((v) => Math.min(255, Math.max(0, Math.round(v)))), (y * width + x) * 3);
  return { width, height, rgb };
}

/** Steep colour ramps corner to corner. */
const gradient = (w: number, h: number) => image(w, h, (x, y) => [(x * 255) / (w - 1), (y * 255) / (h - 1), 255 - ((x + y) * 255) / (w + h - 2)]);
/** Every channel of every pixel independent and uniform. */
const noise = (w: number, h: number, seed: number) => {
  const next = random(seed);
  return image(w, h, () => [next() * 256, next() * 256, next() * 256]);
};
/** Slow ramps (at most 2 levels a pixel), so that chroma replicated over 2 × 2 pixels stays close. */
const smooth = (w: number, h: number) => image(w, h, (x, y) => [60 + 2 * x, 90 + y, 200 - x - y]);
/** A ramp plus mild noise: photo-like content for lossy quality. */
const photo = (w: number, h: number, seed: number) => {
  const next = random(seed);
  return image(w, h, (x, y) => [40 + 3 * x + next() * 12, 200 - 2 * y + next() * 12, 100 + x - y + next() * 12]);
};
const grey = (img: DecodedImage): DecodedImage => image(img.width, img.height, (x, y) => {
  const v = img.rgb[(y * img.width + x) * 3];
  return [v, v, v];
});

function maxDiff(a: Uint8Array, b: Uint8Array): number {
  assert.equal(a.length, b.length);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]));
  return max;
}

function meanDiff(a: Uint8Array, b: Uint8Array): number {
  assert.equal(a.length, b.length);
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i] - b[i]);
  return sum / a.length;
}

/** Encodes, decodes, checks the size and that the decode is what an exact decoder makes of the coefficients (±1 for float rounding). */
function roundTrip(img: DecodedImage, options: EncodeJpegOptions, label: string): { decoded: DecodedImage; bytes: Uint8Array } {
  const { bytes, expected } = encodeJpeg(img, options);
  const decoded = decodeJpeg(bytes);
  assert.equal(decoded.width, img.width, label);
  assert.equal(decoded.height, img.height, label);
  assert.equal(decoded.rgb.length, img.width * img.height * 3, label);
  assert.ok(maxDiff(decoded.rgb, expected.rgb) <= 1, `${label}: ${maxDiff(decoded.rgb, expected.rgb)} levels from the exact decode`);
  return { decoded, bytes };
}

const SAMPLING: Readonly<Record<string, readonly (readonly [number, number])[]>> = {
  "4:4:4": [[1, 1], [1, 1], [1, 1]],
  "4:2:2": [[2, 1], [1, 1], [1, 1]],
  "4:2:0": [[2, 2], [1, 1], [1, 1]],
  "4:1:1": [[4, 1], [1, 1], [1, 1]],
  "4:4:0": [[1, 2], [1, 1], [1, 1]],
  "3:1 horizontal": [[3, 1], [1, 1], [1, 1]],
  "mixed 2×2, 1×2, 2×1": [[2, 2], [1, 2], [2, 1]],
  "chroma above luma 1×1, 2×2, 2×2": [[1, 1], [2, 2], [2, 2]],
};

/** Offset of the first segment with this marker, walking segments from SOI (not through scan data). */
function segmentAt(bytes: Uint8Array, marker: number): number {
  for (let at = 2; at + 4 <= bytes.length;) {
    if (bytes[at + 1] === marker) return at;
    assert.notEqual(bytes[at + 1], 0xda, `no marker 0x${marker.toString(16)} before the first scan`);
    at += 2 + ((bytes[at + 2] << 8) | bytes[at + 3]);
  }
  throw new Error(`No marker 0x${marker.toString(16)}`);
}

/** Every scan: where its SOS segment starts, where its entropy-coded data starts and where that ends (the next marker other than RSTn). */
function scans(bytes: Uint8Array): { at: number; data: number; end: number }[] {
  const found: { at: number; data: number; end: number }[] = [];
  for (let at = 2; at + 4 <= bytes.length && bytes[at + 1] !== 0xd9;) {
    const next = at + 2 + ((bytes[at + 2] << 8) | bytes[at + 3]);
    if (bytes[at + 1] === 0xda) {
      let end = next;
      while (!(bytes[end] === 0xff && bytes[end + 1] !== 0 && (bytes[end + 1] < 0xd0 || bytes[end + 1] > 0xd7))) end++;
      found.push({ at, data: next, end });
      at = end;
    } else at = next;
  }
  return found;
}

const patched = (bytes: Uint8Array, at: number, ...values: number[]) => {
  const copy = bytes.slice();
  copy.set(values, at);
  return copy;
};

function rejects(bytes: Uint8Array, message: RegExp, options?: { maxPixels?: number }): void {
  try {
    decodeJpeg(bytes, options);
  } catch (e) {
    assert.ok(e instanceof ImageDecodeError, `${message}: threw ${(e as Error).name}: ${(e as Error).message}`);
    assert.match(e.message, message);
    return;
  }
  assert.fail(`decoded instead of throwing ${message}`);
}

const countRestarts = (bytes: Uint8Array) => bytes.reduce((n, b, i) => n + (b === 0xff && bytes[i + 1] >= 0xd0 && bytes[i + 1] <= 0xd7 ? 1 : 0), 0);

// ---- decoding -------------------------------------------------------------------------------

test("decodeJpeg() reads greyscale baseline and progressive images within 2 levels of their pixels (all-ones tables)", () => {
  for (const [w, h] of [[13, 7], [17, 33], [8, 8], [1, 1]]) {
    for (const img of [grey(gradient(Math.max(w, 2), Math.max(h, 2))), grey(noise(w, h, w * h))]) {
      for (const progressive of [false, true]) {
        const label = `${img.width}×${img.height} grey${progressive ? " progressive" : ""}`;
        const { decoded, bytes } = roundTrip(img, { greyscale: true, quality: "ones", progressive }, label);
        assert.equal(sniffImageType(bytes), "jpeg");
        assert.ok(maxDiff(decoded.rgb, img.rgb) <= 2, `${label}: ${maxDiff(decoded.rgb, img.rgb)} levels off`);
      }
    }
  }
});

test("decodeJpeg() reads 4:4:4 colour baseline and progressive images within 3 levels of their pixels (all-ones tables)", () => {
  for (const [w, h] of [[13, 7], [17, 33], [24, 16]]) {
    for (const img of [gradient(w, h), noise(w, h, w + h)]) {
      for (const progressive of [false, true]) {
        const label = `${w}×${h}${progressive ? " progressive" : ""}`;
        const { decoded } = roundTrip(img, { quality: "ones", progressive }, label);
        assert.ok(maxDiff(decoded.rgb, img.rgb) <= 3, `${label}: ${maxDiff(decoded.rgb, img.rgb)} levels off`);
      }
    }
  }
});

test("decodeJpeg() upsamples every sampling mode by replication, baseline and progressive", () => {
  for (const [mode, sampling] of Object.entries(SAMPLING)) {
    for (const [w, h] of [[13, 7], [17, 33], [35, 18]]) {
      for (const progressive of [false, true]) roundTrip(noise(w, h, w * 7 + h), { quality: "ones", sampling, progressive }, `${mode} ${w}×${h}${progressive ? " progressive" : ""}`);
    }
  }
});

test("decodeJpeg() reads a 4:2:0 baseline image within 3 levels of its pixels", () => {
  for (const [w, h] of [[37, 29], [17, 33]]) {
    const img = smooth(w, h);
    const { decoded } = roundTrip(img, { quality: "ones", sampling: SAMPLING["4:2:0"] }, `4:2:0 ${w}×${h}`);
    assert.ok(maxDiff(decoded.rgb, img.rgb) <= 3, `${w}×${h}: ${maxDiff(decoded.rgb, img.rgb)} levels off`);
  }
});

test("decodeJpeg() reads quality-75 images closely and progressive files exactly as baseline ones", () => {
  for (const [mode, sampling] of Object.entries(SAMPLING)) {
    for (const [w, h] of [[17, 33], [40, 24]]) {
      const img = photo(w, h, w * h);
      const label = `q75 ${mode} ${w}×${h}`;
      const baseline = roundTrip(img, { quality: 75, sampling }, label).decoded;
      const progressive = roundTrip(img, { quality: 75, sampling, progressive: true }, `${label} progressive`).decoded;
      assert.deepEqual(progressive.rgb, baseline.rgb, label);
      assert.ok(meanDiff(baseline.rgb, img.rgb) < 6, `${label}: mean error ${meanDiff(baseline.rgb, img.rgb)}`);
    }
  }
  // Greyscale too, and another progressive script: DC scans a component apiece, AC in three bands, two refinements of the low band.
  const img = grey(photo(23, 19, 5));
  const script = [
    ...[0].map((c) => ({ components: [c], ss: 0, se: 0, ah: 0, al: 2 })),
    { components: [0], ss: 1, se: 2, ah: 0, al: 3 },
    { components: [0], ss: 3, se: 20, ah: 0, al: 0 },
    { components: [0], ss: 21, se: 63, ah: 0, al: 1 },
    { components: [0], ss: 0, se: 0, ah: 2, al: 1 },
    { components: [0], ss: 1, se: 2, ah: 3, al: 2 },
    { components: [0], ss: 1, se: 2, ah: 2, al: 1 },
    { components: [0], ss: 0, se: 0, ah: 1, al: 0 },
    { components: [0], ss: 21, se: 63, ah: 1, al: 0 },
    { components: [0], ss: 1, se: 2, ah: 1, al: 0 },
  ];
  const baseline = roundTrip(img, { greyscale: true, quality: 90 }, "grey q90").decoded;
  assert.deepEqual(roundTrip(img, { greyscale: true, quality: 90, progressive: true, script }, "grey q90 progressive").decoded.rgb, baseline.rgb);
  const colourScript = [0, 1, 2].flatMap((c) => [{ components: [c], ss: 0, se: 0, ah: 0, al: 0 }, { components: [c], ss: 1, se: 63, ah: 0, al: 0 }]);
  const colour = photo(29, 21, 9);
  assert.deepEqual(
    roundTrip(colour, { sampling: SAMPLING["4:2:0"], progressive: true, script: colourScript }, "non-interleaved DC").decoded.rgb,
    roundTrip(colour, { sampling: SAMPLING["4:2:0"] }, "baseline").decoded.rgb,
  );
});

test("decodeJpeg() honours restart intervals that do not divide the MCU count", () => {
  const cases: [string, DecodedImage, EncodeJpegOptions][] = [
    ["4:4:4 37×29, 20 MCUs every 3", photo(37, 29, 1), { restartInterval: 3 }],
    ["4:2:0 50×40, 12 MCUs every 5", photo(50, 40, 2), { restartInterval: 5, sampling: SAMPLING["4:2:0"] }],
    ["grey 17×33 every MCU", grey(photo(17, 33, 3)), { restartInterval: 1, greyscale: true }],
    ["progressive 4:2:0 37×29 every 3", photo(37, 29, 4), { restartInterval: 3, sampling: SAMPLING["4:2:0"], progressive: true }],
    ["progressive grey 41×23 every 4", grey(photo(41, 23, 5)), { restartInterval: 4, greyscale: true, progressive: true }],
    ["non-interleaved 4:2:2 every 2", photo(21, 19, 6), { restartInterval: 2, sampling: SAMPLING["4:2:2"], nonInterleaved: true }],
  ];
  for (const [label, img, options] of cases) {
    const { decoded, bytes } = roundTrip(img, options, label);
    assert.ok(countRestarts(bytes) > 0, `${label}: no RSTn written`);
    assert.deepEqual(decoded.rgb, roundTrip(img, { ...options, restartInterval: 0 }, `${label}, no restarts`).decoded.rgb, label);
  }
});

test("decodeJpeg() walks a non-interleaved scan over its component's own block grid", () => {
  // 17 × 33 at 4:2:0: luma is 3 × 5 blocks, but 4 × 6 in whole MCUs; chroma 2 × 3 blocks.
  const img = photo(17, 33, 8);
  for (const sampling of [SAMPLING["4:2:0"], SAMPLING["mixed 2×2, 1×2, 2×1"]]) {
    const separate = roundTrip(img, { sampling, nonInterleaved: true, quality: 90 }, "non-interleaved").decoded;
    assert.deepEqual(separate.rgb, roundTrip(img, { sampling, quality: 90 }, "interleaved").decoded.rgb);
  }
  // A lone component with sampling factors 2 × 2 is still coded block by block over ceil(width / 8) columns.
  const greyImg = grey(noise(19, 11, 3));
  const { decoded } = roundTrip(greyImg, { greyscale: true, quality: "ones", sampling: [[2, 2]] }, "grey 2×2");
  assert.ok(maxDiff(decoded.rgb, greyImg.rgb) <= 2);
});

test("decodeJpeg() converts flat colours by the JFIF formulas, rounding ties to even", () => {
  // Worked by hand: an 8 × 8 block of one colour, all-ones tables, so each component is its DC level F(0,0) / 8 + 128
  // with F(0,0) = round(8 · (Y - 128)); e.g. pure green has Y 149.685, Cb 43.528, Cr 21.235, levels 150, 43.5 → 44
  // (a tie), 21, and B = 150 + 1.772 · (44 - 128) = 1.152 → 1.
  const cases: [number[], number[]][] = [
    [[0, 0, 255], [0, 0, 254]],
    [[255, 0, 0], [254, 0, 0]],
    [[0, 255, 0], [0, 255, 1]],
    [[200, 120, 40], [199, 121, 39]],
    [[30, 90, 220], [30, 90, 220]],
    [[128, 128, 128], [128, 128, 128]],
  ];
  for (const [colour, want] of cases) {
    const decoded = decodeJpeg(encodeJpeg(image(8, 8, () => colour as [number, number, number]), { quality: "ones" }).bytes);
    for (let i = 0; i < 64; i++) assert.deepEqual(Array.from(decoded.rgb.subarray(i * 3, i * 3 + 3)), want, `colour ${colour}`);
  }
});

test("decodeJpeg() reads 16-bit quantization tables", () => {
  const img = photo(21, 18, 4);
  const { bytes } = roundTrip(img, { quality: 10, quant16: true }, "16-bit q10");
  const dqt = segmentAt(bytes, 0xdb);
  assert.equal(bytes[dqt + 4] >> 4, 1, "the DQT is written with 16-bit precision");
  const entries = Array.from({ length: 64 }, (_, k) => (bytes[dqt + 5 + 2 * k] << 8) | bytes[dqt + 6 + 2 * k]);
  assert.ok(Math.max(...entries) > 255, "some entry needs the high byte");
  // Quality 2 makes the DC steps 400 (luma) and 425 (chroma); blocks of 8 × 8 far from mid-grey keep non-zero DC coefficients.
  const blocks = image(32, 16, (x, y) => ((x >> 3) + (y >> 3)) % 2 ? [250, 240, 20] : [10, 30, 230]);
  const coarse = roundTrip(blocks, { quality: 2, quant16: true }, "16-bit q2").decoded;
  assert.ok(meanDiff(coarse.rgb, blocks.rgb) < 40, `mean error ${meanDiff(coarse.rgb, blocks.rgb)}`);
  const ones8 = roundTrip(img, { quality: "ones" }, "8-bit ones").decoded;
  assert.deepEqual(roundTrip(img, { quality: "ones", quant16: true }, "16-bit ones").decoded.rgb, ones8.rgb);
});

test("decodeJpeg() reads Adobe transform 0 as RGB and YCbCr otherwise", () => {
  const img = noise(19, 13, 11);
  const { decoded } = roundTrip(img, { quality: "ones", rgb: true, adobeTransform: 0 }, "Adobe RGB");
  assert.ok(maxDiff(decoded.rgb, img.rgb) <= 2, `${maxDiff(decoded.rgb, img.rgb)} levels off`);
  for (const adobeTransform of [undefined, 1]) {
    const asYcc = decodeJpeg(encodeJpeg(img, { quality: "ones", rgb: true, adobeTransform }).bytes);
    assert.ok(meanDiff(asYcc.rgb, img.rgb) > 20, `transform ${adobeTransform} is read as YCbCr`);
  }
});

test("decodeJpeg() skips APPn and COM segments, fill bytes and data after EOI, and keeps a file cut before EOI", () => {
  const { bytes } = encodeJpeg(photo(16, 16, 2), { sampling: SAMPLING["4:2:0"] });
  const reference = decodeJpeg(bytes).rgb;
  const sof = segmentAt(bytes, 0xc0);
  // An APP1 whose payload looks like markers, and fill bytes before the SOF marker.
  const app1 = [0xff, 0xe1, 0, 10, 0x45, 0x78, 0xff, 0xd9, 0xff, 0xda, 0xff, 0x00];
  const variants = [
    Uint8Array.from([...bytes.subarray(0, sof), ...app1, 0xff, 0xff, 0xff, ...bytes.subarray(sof)]),
    Uint8Array.from([...bytes, 1, 2, 3, 0xff, 0xd8]),
    bytes.subarray(0, bytes.length - 2),
  ];
  for (const variant of variants) assert.deepEqual(decodeJpeg(variant).rgb, reference);
  // A progressive file cut between scans still gives the image its first scans make.
  const progressive = encodeJpeg(photo(16, 16, 2), { progressive: true }).bytes;
  const cut = decodeJpeg(progressive.subarray(0, scans(progressive)[4].at));
  assert.equal(cut.width, 16);
  assert.notDeepEqual(cut.rgb, decodeJpeg(progressive).rgb);
});

// ---- refusals -------------------------------------------------------------------------------

test("decodeJpeg() refuses data without SOI and files cut inside a header or a scan", () => {
  rejects(new Uint8Array([0x89, 0x50, 0x4e, 0x47]), /^The data does not start with a JPEG SOI marker \(it starts "89 50 4e 47"\)$/);
  rejects(new Uint8Array(0), /does not start with a JPEG SOI marker/);
  const { bytes } = encodeJpeg(photo(24, 16, 1), { restartInterval: 2 });
  rejects(bytes.subarray(0, 2), /^The JPEG data ends before its frame header \(SOF\)$/);
  rejects(bytes.subarray(0, segmentAt(bytes, 0xc4) + 10), /^The JPEG data ends inside its DHT segment$/);
  rejects(bytes.subarray(0, segmentAt(bytes, 0xc0) + 7), /^The JPEG data ends inside its SOF0 segment$/);
  rejects(bytes.subarray(0, segmentAt(bytes, 0xda)), /^The JPEG data ends before its first scan$/);
  const sos = segmentAt(bytes, 0xda), data = sos + 2 + ((bytes[sos + 2] << 8) | bytes[sos + 3]);
  for (const end of [data, data + 1, Math.floor((data + bytes.length) / 2), bytes.length - 3]) {
    rejects(bytes.subarray(0, end), /^The JPEG data ends inside its scan$/);
  }
  rejects(Uint8Array.from([...bytes.subarray(0, data + 20), 0xff, 0xd9]), /^The JPEG scan stops at marker 0xFFD9 before its last block$/);
  // Cut a later progressive scan in the middle of its data.
  const progressive = encodeJpeg(noise(32, 24, 1), { progressive: true }).bytes;
  const longest = scans(progressive).slice(1).reduce((a, b) => (b.end - b.data > a.end - a.data ? b : a));
  assert.ok(longest.end - longest.data > 20, "some later scan has data to cut");
  rejects(progressive.subarray(0, (longest.data + longest.end) >> 1), /^The JPEG data ends inside its scan$/);
});

test("decodeJpeg() refuses arithmetic, lossless, hierarchical, 12-bit and CMYK JPEGs by name", () => {
  const { bytes } = encodeJpeg(photo(13, 7, 1));
  const sof = segmentAt(bytes, 0xc0);
  rejects(patched(bytes, sof + 1, 0xc9), /^Arithmetic-coded JPEGs \(marker SOF9\) are not supported$/);
  rejects(patched(bytes, sof + 1, 0xca), /^Arithmetic-coded JPEGs \(marker SOF10\) are not supported$/);
  rejects(patched(bytes, sof + 1, 0xc3), /^Lossless JPEGs \(marker SOF3\) are not supported$/);
  rejects(patched(bytes, sof + 1, 0xc5), /^Hierarchical JPEGs \(marker SOF5\) are not supported$/);
  rejects(patched(bytes, sof + 4, 12), /^The JPEG has 12-bit samples; only 8-bit JPEGs are supported$/);
  rejects(patched(bytes, sof + 9, 4), /^CMYK and YCCK JPEGs \(4 components\) are not supported$/);
  rejects(patched(bytes, sof + 9, 2), /^The JPEG has 2 components; only 1 \(greyscale\) and 3 \(colour\) are supported$/);
  rejects(patched(bytes, sof + 11, 0x51), /^JPEG component 1 has sampling factors 5 × 1; each must be 1 to 4$/);
});

test("decodeJpeg() refuses a zero size, and more than maxPixels from the frame header alone", () => {
  const { bytes } = encodeJpeg(photo(13, 7, 1));
  const sof = segmentAt(bytes, 0xc0);
  rejects(patched(bytes, sof + 7, 0, 0), /^The JPEG is 0 × 7 pixels$/);
  rejects(patched(bytes, sof + 5, 0, 0), /^The JPEG is 13 × 0 pixels$/);
  // SOI and a frame header claiming 60000 × 60000, and nothing else: refused there, before any table, scan or coefficient storage.
  const header = [0xff, 0xd8, 0xff, 0xc0, 0, 17, 8, 0xea, 0x60, 0xea, 0x60, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1];
  rejects(Uint8Array.from(header), /^The JPEG is 60000 × 60000 pixels, more than the limit of 67108864$/);
  rejects(bytes, /^The JPEG is 13 × 7 pixels, more than the limit of 90$/, { maxPixels: 90 });
  assert.equal(decodeJpeg(bytes, { maxPixels: 91 }).width, 13);
});

test("decodeJpeg() refuses undefined tables and broken scans", () => {
  const { bytes } = encodeJpeg(photo(24, 16, 1), { restartInterval: 2 });
  const sos = segmentAt(bytes, 0xda), sof = segmentAt(bytes, 0xc0);
  const data = sos + 2 + ((bytes[sos + 2] << 8) | bytes[sos + 3]);
  rejects(patched(bytes, sos + 8, 0x33), /^DC Huffman table 3 is used by component 2 but never defined$/);
  rejects(patched(bytes, sos + 8, 0x13), /^AC Huffman table 3 is used by component 2 but never defined$/);
  rejects(patched(bytes, sof + 12, 2), /^Quantization table 2 is used by component 1 but never defined$/);
  rejects(patched(bytes, sos + 5, 9), /^The JPEG scan names component 9, which its frame header does not define$/);
  // Sixteen 1 bits are no code of the Annex K luminance DC table.
  rejects(Uint8Array.from([...bytes.subarray(0, data), 0xff, 0, 0xff, 0, ...bytes.subarray(data)]), /^The JPEG scan holds a bit pattern that is not a code of its Huffman table$/);
  // Without its first RST0 the scan runs on where the marker should be.
  const rst = bytes.findIndex((b, i) => i > data && b === 0xff && bytes[i + 1] === 0xd0);
  rejects(Uint8Array.from([...bytes.subarray(0, rst), ...bytes.subarray(rst + 2)]), /restart marker RST0 should come before MCU 2$/);
  rejects(Uint8Array.from([0xff, 0xd8, 0xff, 0xda, 0, 8, 1, 1, 0, 0, 63, 0]), /^The JPEG has a scan \(SOS\) before its frame header \(SOF\)$/);
  rejects(Uint8Array.from([0xff, 0xd8, 0x00, 0xff]), /^The JPEG has byte 0x00 at offset 2, where a marker should start$/);
  rejects(patched(bytes, segmentAt(bytes, 0xdb) + 4, 0x20), /^JPEG quantization table 0 has precision 2, neither 0 \(8-bit\) nor 1 \(16-bit\)$/);
  rejects(patched(bytes, segmentAt(bytes, 0xc4) + 5, 1, 1, 4), /^JPEG DC Huffman table 0 has more codes of 3 bits than fit$/);
  const progressive = encodeJpeg(photo(24, 16, 1), { progressive: true }).bytes, first = scans(progressive)[0].at;
  rejects(patched(progressive, first + 12, 5), /^The progressive JPEG scan has invalid parameters \(Ss 0, Se 5, Ah 0, Al 1, 3 components\)$/);
  rejects(patched(progressive, first + 13, 0x31), /^The progressive JPEG scan has invalid parameters \(Ss 0, Se 0, Ah 3, Al 1, 3 components\)$/);
});

test("decodeJpeg() either decodes or throws ImageDecodeError on 300 mutated files, quickly", () => {
  const next = random(2024);
  const sources = [
    encodeJpeg(photo(24, 16, 3), { sampling: SAMPLING["4:2:0"], restartInterval: 2 }).bytes,
    encodeJpeg(noise(20, 12, 4), { progressive: true, quality: 60 }).bytes,
    encodeJpeg(grey(photo(19, 9, 5)), { greyscale: true, progressive: true, restartInterval: 3 }).bytes,
  ];
  const started = performance.now();
  let decoded = 0, refused = 0;
  for (let i = 0; i < 300; i++) {
    const source = sources[i % sources.length], pick = (n: number) => Math.floor(next() * n);
    let bytes = source.slice();
    const kind = pick(5);
    if (kind === 0) bytes = bytes.subarray(0, pick(bytes.length)); // truncation
    else if (kind === 1) for (let n = 1 + pick(3); n > 0; n--) bytes[pick(bytes.length)] ^= 1 << pick(8); // bit flips
    else if (kind === 2) for (let n = 1 + pick(3); n > 0; n--) bytes[pick(bytes.length)] = pick(256); // random bytes
    else if (kind === 3) bytes[pick(bytes.length)] = 0xff; // a false marker start
    else { // a run of bytes removed
      const at = pick(bytes.length);
      bytes = Uint8Array.from([...bytes.subarray(0, at), ...bytes.subarray(at + 1 + pick(8))]);
    }
    try {
      const img = decodeJpeg(bytes);
      assert.equal(img.rgb.length, img.width * img.height * 3);
      // A flip inside the frame header may change the size; then the size decoded is the size written.
      const sof = [...bytes.keys()].find((j) => bytes[j] === 0xff && (bytes[j + 1] === 0xc0 || bytes[j + 1] === 0xc2)) ?? -1;
      const written = sof < 0 ? [] : [(bytes[sof + 7] << 8) | bytes[sof + 8], (bytes[sof + 5] << 8) | bytes[sof + 6]];
      const original = source === sources[0] ? [24, 16] : source === sources[1] ? [20, 12] : [19, 9];
      assert.ok([original.join(), written.join()].includes(`${img.width},${img.height}`), `mutation ${i} decoded to ${img.width} × ${img.height}`);
      decoded++;
    } catch (e) {
      if (!(e instanceof ImageDecodeError)) throw new Error(`Mutation ${i} (kind ${kind}) threw ${(e as Error).name}: ${(e as Error).message}`);
      refused++;
    }
  }
  assert.equal(decoded + refused, 300);
  assert.ok(refused > 50 && decoded > 10, `${decoded} decoded, ${refused} refused`);
  assert.ok(performance.now() - started < 8000, `took ${performance.now() - started} ms`);
});

/**
 * A small JPEG encoder (ITU-T T.81) for the tests of src/model/vision/jpeg.ts, written apart from the
 * decoder: float forward DCT, quantization by the Annex K tables scaled to an IJG quality (or all ones),
 * zig-zag, Huffman coding with the Annex K tables (baseline) or with tables made for each scan as Annex
 * K.2 says (progressive), any sampling factors with box-filter downsampling, restart intervals, and
 * progressive scan scripts with spectral selection and successive approximation (Annex G). Beside the
 * file it returns what an exact decoder must output for the quantized coefficients it wrote.
 */
import type { DecodedImage } from "../../src/model/vision/png.ts";

/** One scan of a progressive script: component indices, spectral band Ss..Se, successive approximation bits Ah/Al. */
export interface JpegScan {
  components: number[];
  ss: number;
  se: number;
  ah: number;
  al: number;
}

/** Options of {@link encodeJpeg}. */
export interface EncodeJpegOptions {
  /** IJG quality (1 to 100) scaling the Annex K tables, or "ones" for all-ones tables (near lossless). Default 75. */
  quality?: number | "ones";
  /** [h, v] sampling factors, one pair a component. Default 1 × 1 each (4:4:4). */
  sampling?: readonly (readonly [number, number])[];
  /** One component: the luma of the image. */
  greyscale?: boolean;
  /** Store R, G and B as the three components, with no colour transform. */
  rgb?: boolean;
  /** Write an Adobe APP14 marker with this transform flag. */
  adobeTransform?: number;
  restartInterval?: number;
  progressive?: boolean;
  /** The progressive scan script; default {@link defaultScript}. */
  script?: readonly JpegScan[];
  /** Baseline: one scan a component rather than one interleaved scan. */
  nonInterleaved?: boolean;
  /** Write the quantization tables with 16-bit entries (Pq = 1), not clamped to 255. */
  quant16?: boolean;
}

/** A JPEG file and the image an exact decoder makes of it. */
export interface EncodedJpeg {
  bytes: Uint8Array;
  /** The quantized coefficients dequantized, inverse-transformed, rounded, upsampled by replication and converted by the JFIF formulas. */
  expected: DecodedImage;
}

const ZIGZAG = [
  0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];
/** Annex K.1 tables, row-major. */
const LUMA_QUANT = [
  16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
  18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92, 49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
];
const CHROMA_QUANT = [
  17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99,
  ...new Array<number>(32).fill(99),
];
interface HuffmanSpec {
  bits: number[];
  values: number[];
}
/** Annex K.3 tables: DC luma, DC chroma, AC luma, AC chroma. */
const STANDARD_TABLES: readonly HuffmanSpec[] = [
  { bits: [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], values: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] },
  { bits: [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], values: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] },
  {
    bits: [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d],
    values: [
      0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08,
      0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
      0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59,
      0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
      0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6,
      0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
      0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    ],
  },
  {
    bits: [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77],
    values: [
      0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71, 0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91,
      0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0, 0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
      0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,
      0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
      0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4,
      0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
      0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa,
    ],
  },
];

/** basis(x, u) = C(u) / 2 · cos((2x + 1)uπ / 16): the forward and inverse DCT of A.3.3 are sums of its products. */
const basis = (x: number, u: number) => ((u === 0 ? Math.SQRT1_2 : 1) / 2) * Math.cos(((2 * x + 1) * u * Math.PI) / 16);
const BASIS = Array.from({ length: 64 }, (_, i) => basis(i >> 3, i & 7));

/** Table slots of a scan's Huffman-coded symbols: DC table 0 and 1, AC table 0 and 1; RAW marks bits written as they are, RESTART a restart marker. */
const RAW = -1, RESTART = -2;
type Item = readonly [slot: number, symbol: number, extra: number, extraLength: number];

interface Component {
  id: number;
  h: number;
  v: number;
  /** Table id (quantization and Huffman): 0 for luma or grey, 1 for chroma. */
  table: number;
  width: number;
  height: number;
  blocksWide: number;
  blocksHigh: number;
  stride: number;
  /** Quantized coefficients, row-major, 64 a block, over the MCU-padded grid. */
  coefficients: Int32Array;
}

/** The scan script the tests use by default: DC first at Al 1, AC 1–5 at Al 2 and 6–63 at Al 1, then every refinement down to Al 0. */
export function defaultScript(count: number): JpegScan[] {
  const all = Array.from({ length: count }, (_, i) => i);
  const each = (ss: number, se: number, ah: number, al: number) => all.map((c) => ({ components: [c], ss, se, ah, al }));
  return [
    { components: all, ss: 0, se: 0, ah: 0, al: 1 },
    ...each(1, 5, 0, 2),
    ...each(6, 63, 0, 1),
    ...each(1, 5, 2, 1),
    { components: all, ss: 0, se: 0, ah: 1, al: 0 },
    ...each(1, 5, 1, 0),
    ...each(6, 63, 1, 0),
  ];
}

/** Encodes an RGB image as a JPEG file. */
export function encodeJpeg(image: DecodedImage, options: EncodeJpegOptions = {}): EncodedJpeg {
  const { width, height, rgb } = image;
  const count = options.greyscale ? 1 : 3, quality = options.quality ?? 75;
  const sampling = options.sampling ?? Array.from({ length: count }, () => [1, 1] as const);
  const scale = quality === "ones" ? 0 : quality < 50 ? 5000 / quality : 200 - 2 * quality;
  const quant = [LUMA_QUANT, CHROMA_QUANT].map((base) =>
    base.map((q) => (quality === "ones" ? 1 : Math.min(options.quant16 ? 32767 : 255, Math.max(1, Math.floor((q * scale + 50) / 100)))))
  );
  const channel = (i: number, c: number) => {
    const [r, g, b] = [rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2]];
    if (options.rgb) return [r, g, b][c];
    if (c === 0) return 0.299 * r + 0.587 * g + 0.114 * b;
    return c === 1 ? -0.168736 * r - 0.331264 * g + 0.5 * b + 128 : 0.5 * r - 0.418688 * g - 0.081312 * b + 128;
  };
  const hMax = Math.max(...sampling.map((s) => s[0])), vMax = Math.max(...sampling.map((s) => s[1]));
  const mcusWide = Math.ceil(width / (8 * hMax)), mcusHigh = Math.ceil(height / (8 * vMax));
  const components = sampling.map(([h, v], ci): Component => {
    const cw = Math.ceil((width * h) / hMax), ch = Math.ceil((height * v) / vMax);
    // Box-filter downsampling: each sample averages the pixels that fall in it (those a decoder replicates it to).
    const sum = new Float64Array(cw * ch), n = new Float64Array(cw * ch);
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const at = Math.floor((y * v) / vMax) * cw + Math.floor((x * h) / hMax);
        sum[at] += channel(y * width + x, ci);
        n[at]++;
      }
    }
    const sample = (x: number, y: number) => {
      const at = Math.min(y, ch - 1) * cw + Math.min(x, cw - 1); // past the edge, repeat the last sample
      return n[at] ? sum[at] / n[at] : 128;
    };
    const stride = mcusWide * h, rows = mcusHigh * v, coefficients = new Int32Array(stride * rows * 64);
    const block = new Float64Array(64), tmp = new Float64Array(64);
    for (let by = 0; by < rows; by++) {
      for (let bx = 0; bx < stride; bx++) {
        for (let i = 0; i < 64; i++) block[i] = sample(bx * 8 + (i & 7), by * 8 + (i >> 3)) - 128;
        for (let y = 0; y < 8; y++) for (let u = 0; u < 8; u++) tmp[y * 8 + u] = [0, 1, 2, 3, 4, 5, 6, 7].reduce((s, x) => s + BASIS[x * 8 + u] * block[y * 8 + x], 0);
        for (let v2 = 0; v2 < 8; v2++) {
          for (let u = 0; u < 8; u++) {
            const f = [0, 1, 2, 3, 4, 5, 6, 7].reduce((s, y) => s + BASIS[y * 8 + v2] * tmp[y * 8 + u], 0);
            coefficients[(by * stride + bx) * 64 + v2 * 8 + u] = Math.round(f / quant[ci === 0 ? 0 : 1][v2 * 8 + u]);
          }
        }
      }
    }
    return { id: ci + 1, h, v, table: ci === 0 ? 0 : 1, width: cw, height: ch, blocksWide: Math.ceil(cw / 8), blocksHigh: Math.ceil(ch / 8), stride, coefficients };
  });

  const out: number[] = [0xff, 0xd8];
  const segment = (marker: number, body: number[]) => out.push(0xff, marker, (body.length + 2) >> 8, (body.length + 2) & 255, ...body);
  const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));
  if (!options.rgb) segment(0xe0, [...ascii("JFIF"), 0, 1, 1, 0, 0, 1, 0, 1, 0, 0]);
  if (options.adobeTransform !== undefined) segment(0xee, [...ascii("Adobe"), 0, 100, 0, 0, 0, 0, options.adobeTransform]);
  segment(0xfe, ascii("written by tests/model/jpeg-encoder.ts"));
  for (let t = 0; t < Math.min(count, 2); t++) {
    const entries = ZIGZAG.map((z) => quant[t][z]);
    segment(0xdb, options.quant16 ? [0x10 | t, ...entries.flatMap((q) => [q >> 8, q & 255])] : [t, ...entries]);
  }
  segment(options.progressive ? 0xc2 : 0xc0, [8, height >> 8, height & 255, width >> 8, width & 255, count, ...components.flatMap((c) => [c.id, (c.h << 4) | c.v, c.table])]);
  if (options.restartInterval) segment(0xdd, [options.restartInterval >> 8, options.restartInterval & 255]);
  const all = components.map((_, i) => i);
  const scans: readonly JpegScan[] = options.progressive
    ? options.script ?? defaultScript(count)
    : options.nonInterleaved
    ? all.map((c) => ({ components: [c], ss: 0, se: 63, ah: 0, al: 0 }))
    : [{ components: all, ss: 0, se: 63, ah: 0, al: 0 }];
  if (!options.progressive) {
    for (let t = 0; t < Math.min(count, 2); t++) for (const cls of [0, 1]) segment(0xc4, [(cls << 4) | t, ...STANDARD_TABLES[cls * 2 + t].bits, ...STANDARD_TABLES[cls * 2 + t].values]);
  }
  for (const scan of scans) {
    const parts = scan.components.map((i) => components[i]);
    const items = scanItems(parts, scan, !options.progressive, mcusWide, mcusHigh, options.restartInterval ?? 0);
    const tables: (HuffmanSpec | undefined)[] = options.progressive ? [0, 1, 2, 3].map((slot) => optimalTable(items, slot)) : [...STANDARD_TABLES];
    if (options.progressive) tables.forEach((t, slot) => t && segment(0xc4, [((slot >> 1) << 4) | (slot & 1), ...t.bits, ...t.values]));
    segment(0xda, [parts.length, ...parts.flatMap((c) => [c.id, (c.table << 4) | c.table]), scan.ss, scan.se, (scan.ah << 4) | scan.al]);
    writeItems(items, tables, out);
  }
  out.push(0xff, 0xd9);
  return { bytes: Uint8Array.from(out), expected: reconstruct(components, quant, width, height, hMax, vMax, count === 1 ? "grey" : options.rgb ? "rgb" : "ycc") };
}

/** The number of bits of |v| (the size category of T.81 F.1.2.1), and the bits a value of that size is written as. */
const sizeOf = (v: number) => (v === 0 ? 0 : 32 - Math.clz32(Math.abs(v)));
const bitsOf = (v: number, size: number) => (v >= 0 ? v : v + (1 << size) - 1);

/** Codes one scan as items, MCU by MCU (or block by block for one component), with restart markers every `interval` MCUs. */
function scanItems(parts: Component[], scan: JpegScan, sequential: boolean, mcusWide: number, mcusHigh: number, interval: number): Item[] {
  const items: Item[] = [], preds = parts.map(() => 0);
  const { ss, se, ah, al } = scan;
  // The EOB run so far, the AC table it is coded with, and the correction bits its blocks owe (refinement).
  let eobrun = 0, acTable = 0, pending: number[] = [];
  const flushEob = () => {
    if (eobrun === 0) return;
    const n = 31 - Math.clz32(eobrun);
    items.push([2 + acTable, n << 4, eobrun - (1 << n), n]);
    for (const bit of pending) items.push([RAW, 0, bit, 1]);
    eobrun = 0;
    pending = [];
  };
  const code = (slot: number, run: number, value: number) => items.push([slot, (run << 4) | sizeOf(value), bitsOf(value, sizeOf(value)), sizeOf(value)]);
  const block = (pi: number, co: Int32Array, o: number) => {
    const dcSlot = parts[pi].table, acSlot = 2 + parts[pi].table;
    acTable = parts[pi].table;
    if (sequential || (ss === 0 && ah === 0)) {
      const dc = sequential ? co[o] : co[o] >> al; // the DC point transform is an arithmetic shift (G.1.2.1)
      code(dcSlot, 0, dc - preds[pi]);
      preds[pi] = dc;
      if (!sequential) return;
    }
    if (ss === 0 && !sequential) return void items.push([RAW, 0, (co[o] >> al) & 1, 1]);
    const from = sequential ? 1 : ss, to = sequential ? 63 : se;
    // The AC point transform divides magnitudes (G.1.2.2).
    const at = (k: number) => (co[o + ZIGZAG[k]] < 0 ? -(-co[o + ZIGZAG[k]] >> al) : co[o + ZIGZAG[k]] >> al);
    if (sequential || ah === 0) {
      let run = 0;
      for (let k = from; k <= to; k++) {
        const value = sequential ? co[o + ZIGZAG[k]] : at(k);
        if (value === 0) {
          run++;
          continue;
        }
        flushEob();
        for (; run > 15; run -= 16) items.push([acSlot, 0xf0, 0, 0]);
        code(acSlot, run, value);
        run = 0;
      }
      if (run > 0 && sequential) items.push([acSlot, 0, 0, 0]);
      else if (run > 0 && ++eobrun === 0x7fff) flushEob();
      return;
    }
    // AC refinement (G.1.2.3): newly non-zero coefficients (magnitude 1 at bit Al) are coded with a sign bit; the
    // correction bits of those already non-zero follow the next code, or the EOB run's code when none comes.
    let lastNew = -1;
    for (let k = ss; k <= se; k++) if (Math.abs(at(k)) === 1) lastNew = k;
    let run = 0, corrections: number[] = [];
    for (let k = ss; k <= se; k++) {
      const magnitude = Math.abs(at(k));
      if (magnitude === 0) {
        run++;
        continue;
      }
      for (; run > 15 && k <= lastNew; run -= 16) {
        flushEob();
        items.push([acSlot, 0xf0, 0, 0]);
        for (const bit of corrections) items.push([RAW, 0, bit, 1]);
        corrections = [];
      }
      if (magnitude > 1) {
        corrections.push(magnitude & 1);
        continue;
      }
      flushEob();
      items.push([acSlot, (run << 4) | 1, co[o + ZIGZAG[k]] < 0 ? 0 : 1, 1]);
      for (const bit of corrections) items.push([RAW, 0, bit, 1]);
      corrections = [];
      run = 0;
    }
    if (run > 0 || corrections.length > 0) {
      eobrun++;
      pending.push(...corrections);
      if (eobrun === 0x7fff) flushEob();
    }
  };
  const single = parts.length === 1 ? parts[0] : undefined;
  const total = single ? single.blocksWide * single.blocksHigh : mcusWide * mcusHigh;
  for (let mcu = 0; mcu < total; mcu++) {
    if (interval > 0 && mcu > 0 && mcu % interval === 0) {
      flushEob();
      items.push([RESTART, 0, 0, 0]);
      preds.fill(0);
    }
    if (single) {
      const by = Math.floor(mcu / single.blocksWide), bx = mcu % single.blocksWide;
      block(0, single.coefficients, (by * single.stride + bx) * 64);
      continue;
    }
    const my = Math.floor(mcu / mcusWide), mx = mcu % mcusWide;
    parts.forEach((c, pi) => {
      for (let v = 0; v < c.v; v++) for (let h = 0; h < c.h; h++) block(pi, c.coefficients, ((my * c.v + v) * c.stride + mx * c.h + h) * 64);
    });
  }
  flushEob();
  return items;
}

/** Writes the items as entropy-coded bytes: 0xFF stuffed with 0x00, the last byte padded with 1 bits, RSTn markers counting 0 to 7. */
function writeItems(items: Item[], tables: readonly (HuffmanSpec | undefined)[], out: number[]): void {
  const codes = tables.map((t) => (t ? canonicalCodes(t) : new Map<number, [number, number]>()));
  let acc = 0, n = 0, rst = 0;
  const put = (value: number, length: number) => {
    for (let i = length - 1; i >= 0; i--) {
      acc = (acc << 1) | ((value >> i) & 1);
      if (++n === 8) {
        out.push(acc);
        if (acc === 0xff) out.push(0);
        acc = n = 0;
      }
    }
  };
  const align = () => {
    while (n !== 0) put(1, 1);
  };
  for (const [slot, symbol, extra, extraLength] of items) {
    if (slot === RESTART) {
      align();
      out.push(0xff, 0xd0 + rst);
      rst = (rst + 1) & 7;
      continue;
    }
    if (slot !== RAW) {
      const code = codes[slot].get(symbol);
      if (!code) throw new Error(`Symbol 0x${symbol.toString(16)} has no code in table slot ${slot}`);
      put(...code);
    }
    put(extra, extraLength);
  }
  align();
}

/** Symbol → [code, length] by the canonical assignment of Annex C. */
function canonicalCodes({ bits, values }: HuffmanSpec): Map<number, [number, number]> {
  const codes = new Map<number, [number, number]>();
  let code = 0, k = 0;
  for (let length = 1; length <= 16; length++, code <<= 1) for (let i = 0; i < bits[length - 1]; i++) codes.set(values[k++], [code++, length]);
  return codes;
}

/** The Huffman table Annex K.2 builds for the symbols a scan codes in one slot (a reserved symbol keeps any code from being all ones); none if it codes none. */
function optimalTable(items: Item[], slot: number): HuffmanSpec | undefined {
  const freq = new Array<number>(257).fill(0);
  for (const item of items) if (item[0] === slot) freq[item[1]]++;
  if (!freq.some((f) => f > 0)) return undefined;
  freq[256] = 1;
  const size = new Array<number>(257).fill(0), others = new Array<number>(257).fill(-1);
  for (;;) {
    let c1 = -1, c2 = -1;
    for (let i = 0; i < 257; i++) if (freq[i] > 0 && (c1 < 0 || freq[i] <= freq[c1])) c1 = i;
    for (let i = 0; i < 257; i++) if (freq[i] > 0 && i !== c1 && (c2 < 0 || freq[i] <= freq[c2])) c2 = i;
    if (c2 < 0) break;
    freq[c1] += freq[c2];
    freq[c2] = 0;
    for (size[c1]++; others[c1] >= 0; size[c1]++) c1 = others[c1];
    others[c1] = c2;
    for (size[c2]++; others[c2] >= 0; size[c2]++) c2 = others[c2];
  }
  const bits = new Array<number>(33).fill(0);
  for (const s of size) if (s) bits[s]++;
  for (let i = 32; i > 16; i--) { // fold codes longer than 16 bits (K.2, figure K.3)
    while (bits[i] > 0) {
      let j = i - 2;
      while (bits[j] === 0) j--;
      bits[i] -= 2;
      bits[i - 1]++;
      bits[j + 1] += 2;
      bits[j]--;
    }
  }
  let longest = 16;
  while (bits[longest] === 0) longest--;
  bits[longest]--; // drop the reserved symbol's code
  const values: number[] = [];
  for (let length = 1; length <= 32; length++) for (let s = 0; s < 256; s++) if (size[s] === length) values.push(s);
  return { bits: bits.slice(1, 17), values };
}

/** What an exact decoder outputs: A.3.3's IDCT summed directly, level shift, rounding, replication, the JFIF conversion. */
function reconstruct(components: Component[], quant: number[][], width: number, height: number, hMax: number, vMax: number, colour: "grey" | "rgb" | "ycc"): DecodedImage {
  const planes = components.map((c) => {
    const stride = c.blocksWide * 8, plane = new Float64Array(stride * c.blocksHigh * 8), q = quant[c.table];
    for (let by = 0; by < c.blocksHigh; by++) {
      for (let bx = 0; bx < c.blocksWide; bx++) {
        const o = (by * c.stride + bx) * 64;
        for (let y = 0; y < 8; y++) {
          for (let x = 0; x < 8; x++) {
            let s = 0;
            for (let v = 0; v < 8; v++) for (let u = 0; u < 8; u++) s += BASIS[y * 8 + v] * BASIS[x * 8 + u] * c.coefficients[o + v * 8 + u] * q[v * 8 + u];
            plane[(by * 8 + y) * stride + bx * 8 + x] = clamp(s + 128);
          }
        }
      }
    }
    return (x: number, y: number) => plane[Math.floor((y * c.v) / vMax) * stride + Math.floor((x * c.h) / hMax)];
  });
  const rgb = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const [a, b, c] = planes.map((p) => p(x, y));
      const px = colour === "grey" ? [a, a, a] : colour === "rgb" ? [a, b, c] : [a + 1.402 * (c - 128), a - 0.344136 * (b - 128) - 0.714136 * (c - 128), a + 1.772 * (b - 128)];
      rgb.set(px.map(clamp), (y * width + x) * 3);
    }
  }
  return { width, height, rgb };
}

/** Rounds as the decoder documents (ties to even, like a Uint8ClampedArray store) and clamps to 0..255. */
function clamp(v: number): number {
  const floor = Math.floor(v), rounded = v - floor === 0.5 ? floor + (floor & 1) : Math.round(v);
  return Math.min(255, Math.max(0, rounded));
}

/**
 * A JPEG decoder for image inputs to vision models, written from ITU-T T.81: {@link decodeJpeg} turns a
 * Huffman-coded baseline (SOF0), extended sequential 8-bit (SOF1) or progressive (SOF2) JPEG with one
 * (greyscale) or three (YCbCr, or RGB under an Adobe marker) components into 8-bit RGB. Every way the
 * data can be malformed throws {@link ImageDecodeError}, the error the PNG decoder throws.
 */
import { type DecodedImage, ImageDecodeError } from "./png.ts";

/** Options of {@link decodeJpeg}. */
export interface DecodeJpegOptions {
  /** The most pixels (width × height) an image may have; larger ones are refused from the frame header, before any scan is read. Default 64 Mi. */
  maxPixels?: number;
}

/** Zig-zag order (T.81 figure A.6): `ZIGZAG[k]` is the row-major index of the k-th coefficient of a coded block. */
const ZIGZAG = Uint8Array.from([
  0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
]);

/** `IDCT_BASIS[x * 8 + u]` = C(u) / 2 · cos((2x + 1)uπ / 16), C(0) = 1/√2 and C(u) = 1 otherwise: the 1-D factor of the IDCT of T.81 A.3.3. */
const IDCT_BASIS = Float64Array.from({ length: 64 }, (_, i) => ((i & 7) === 0 ? Math.SQRT1_2 : 1) / 2 * Math.cos(((2 * (i >> 3) + 1) * (i & 7) * Math.PI) / 16));

/** A progressive scan may walk every block of the image for a few bytes of data, so a small file of many scans could take minutes: past this many scans the file is refused. */
const MAX_SCANS = 1000;

/** Stands in for a Huffman table a scan does not use (a DC refinement, or AC tables in a DC scan); every lookup in it misses. */
const NO_TABLE = new Uint16Array(0);

const hex = (marker: number) => `0xFF${marker.toString(16).toUpperCase().padStart(2, "0")}`;
const u16 = (b: Uint8Array, at: number) => (b[at] << 8) | b[at + 1];

/** The name T.81 gives a marker, for messages. */
function markerName(marker: number): string {
  if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) return `SOF${marker - 0xc0}`;
  if (marker >= 0xe0 && marker <= 0xef) return `APP${marker - 0xe0}`;
  const names: Readonly<Record<number, string>> = { 0xc4: "DHT", 0xcc: "DAC", 0xda: "SOS", 0xdb: "DQT", 0xdc: "DNL", 0xdd: "DRI", 0xfe: "COM" };
  return names[marker] ?? hex(marker);
}

/** One image component and the quantized coefficients of all its blocks. */
interface Component {
  id: number;
  /** Horizontal and vertical sampling factors, 1 to 4. */
  h: number;
  v: number;
  /** Quantization table selector of the frame header. */
  tq: number;
  /** The table itself, latched when a scan first codes the component (a later DQT redefining the slot does not change it). */
  quant?: Uint16Array;
  /** The component's own block grid, ceil(componentWidth / 8) × ceil(componentHeight / 8): what a non-interleaved scan walks, and what is output. */
  blocksWide: number;
  blocksHigh: number;
  /** Blocks a stored row holds: the grid is padded to whole MCUs, which interleaved scans walk. */
  stride: number;
  /** 64 coefficients a block in row-major (not zig-zag) order, still quantized. */
  coefficients: Int16Array;
  /** The DC predictor of the scan under way. */
  pred: number;
}

interface Frame {
  progressive: boolean;
  width: number;
  height: number;
  hMax: number;
  vMax: number;
  mcusWide: number;
  mcusHigh: number;
  components: Component[];
}

/** A component as a scan codes it, with the Huffman tables (65536-entry lookups, see {@link buildHuffman}) it names. */
interface ScanPart {
  c: Component;
  dc: Uint16Array;
  ac: Uint16Array;
}

interface Scan {
  parts: ScanPart[];
  /** Spectral selection start and end, successive approximation high and low bit (T.81 B.2.3). */
  ss: number;
  se: number;
  ah: number;
  al: number;
}

/** The tables defined so far; a later DQT or DHT replaces the one in its slot. */
interface Tables {
  quant: (Uint16Array | undefined)[];
  dc: (Uint16Array | undefined)[];
  ac: (Uint16Array | undefined)[];
}

/**
 * Decodes a JPEG file (ITU-T T.81) to 8-bit RGB. Read: Huffman-coded baseline (SOF0), extended sequential
 * with 8-bit samples (SOF1) and progressive (SOF2: spectral selection and successive approximation)
 * frames; 1 component (grey, output as R = G = B) or 3 (YCbCr converted with the JFIF BT.601 full-range
 * formulas, or RGB as is when an Adobe APP14 marker says transform 0 or, without one, the components are
 * named "R", "G", "B"); sampling factors 1 to 4, with chroma upsampled by replication (each pixel takes the
 * component sample it falls in, no interpolation); restart intervals; 8- and 16-bit quantization tables.
 * The IDCT is the separable float form of T.81 A.3.3; levels and colours are rounded (ties to even) and
 * clamped to 0..255. APPn, COM and unknown segments are skipped, as are bytes after EOI. A file that ends
 * without EOI after a whole scan decodes from the scans it has (a cut progressive file gives a coarser
 * image), but a scan that runs out of data throws: no missing bits are made up.
 * @throws {ImageDecodeError} on data that does not start with SOI; a truncated or malformed segment;
 *   arithmetic coding (SOF9..SOF15), lossless (SOF3) or hierarchical (SOF5..SOF7) frames, precision other
 *   than 8 bits, or other than 1 or 3 components (CMYK/YCCK are refused); a size of 0 or of more than
 *   `maxPixels` pixels (checked from the frame header, before any coefficient storage is allocated); a table
 *   used but never defined; a scan whose data ends, holds a code not in its table, codes past the end of a
 *   block or lacks an expected restart marker; a component no scan codes; more than 1000 scans.
 */
export function decodeJpeg(bytes: Uint8Array, options: DecodeJpegOptions = {}): DecodedImage {
  const maxPixels = options.maxPixels ?? 64 * 1024 * 1024;
  if (bytes.length < 2 || bytes[0] !== 0xff || bytes[1] !== 0xd8) {
    const head = Array.from(bytes.subarray(0, 4), (v) => v.toString(16).padStart(2, "0")).join(" ");
    throw new ImageDecodeError(`The data does not start with a JPEG SOI marker (it starts "${head}")`);
  }
  const tables: Tables = { quant: [], dc: [], ac: [] };
  let frame: Frame | undefined, restartInterval = 0, adobeTransform: number | undefined, scans = 0, at = 2;
  for (;;) {
    while (bytes[at] === 0xff && bytes[at + 1] === 0xff) at++; // any marker may be preceded by fill bytes 0xFF (T.81 B.1.1.2)
    if (at + 2 > bytes.length) {
      if (frame && scans > 0) break;
      throw new ImageDecodeError(`The JPEG data ends before ${frame ? "its first scan" : "its frame header (SOF)"}`);
    }
    if (bytes[at] !== 0xff) throw new ImageDecodeError(`The JPEG has byte 0x${bytes[at].toString(16).padStart(2, "0")} at offset ${at}, where a marker should start`);
    const marker = bytes[at + 1];
    at += 2;
    if (marker === 0xd9) break; // EOI
    if ((marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) continue; // RSTn and TEM stand alone, without a length
    if (marker === 0xd8 || marker === 0x00) throw new ImageDecodeError(`The JPEG has ${marker ? "a second SOI marker" : "a stuffed 0xFF00"} at offset ${at - 2}, where a segment should start`);
    if (at + 2 > bytes.length) throw new ImageDecodeError(`The JPEG data ends inside its ${markerName(marker)} segment`);
    const length = u16(bytes, at);
    if (length < 2) throw new ImageDecodeError(`The JPEG ${markerName(marker)} segment has length ${length}, less than 2`);
    if (at + length > bytes.length) throw new ImageDecodeError(`The JPEG data ends inside its ${markerName(marker)} segment`);
    const segment = bytes.subarray(at + 2, at + length);
    at += length;
    if (marker === 0xdb) readQuantTables(segment, tables.quant);
    else if (marker === 0xc4) readHuffmanTables(segment, tables);
    else if (marker === 0xdd) {
      if (segment.length !== 2) throw new ImageDecodeError(`The JPEG DRI segment holds ${segment.length} bytes, not 2`);
      restartInterval = u16(segment, 0);
    } else if (marker === 0xee && segment.length >= 12 && String.fromCharCode(...segment.subarray(0, 5)) === "Adobe") {
      adobeTransform = segment[11];
    } else if (marker === 0xda) {
      if (!frame) throw new ImageDecodeError("The JPEG has a scan (SOS) before its frame header (SOF)");
      if (++scans > MAX_SCANS) throw new ImageDecodeError(`The JPEG has more than ${MAX_SCANS} scans`);
      at = decodeScan(bytes, at, frame, readScanHeader(segment, frame, tables), restartInterval);
    } else if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (frame) throw new ImageDecodeError(`The JPEG has a second frame header (${markerName(marker)})`);
      frame = readFrameHeader(segment, marker, maxPixels);
    }
    // APPn, COM, DNL, DAC and reserved markers carry nothing this decoder needs
  }
  if (!frame) throw new ImageDecodeError("The JPEG ends (EOI) before its frame header (SOF)");
  if (scans === 0) throw new ImageDecodeError("The JPEG ends (EOI) before its first scan");
  return toRgb(frame, adobeTransform);
}

function readQuantTables(segment: Uint8Array, quant: (Uint16Array | undefined)[]): void {
  for (let p = 0; p < segment.length;) {
    const precision = segment[p] >> 4, id = segment[p] & 15;
    if (precision > 1) throw new ImageDecodeError(`JPEG quantization table ${id} has precision ${precision}, neither 0 (8-bit) nor 1 (16-bit)`);
    if (id > 3) throw new ImageDecodeError(`The JPEG defines quantization table ${id}; ids run from 0 to 3`);
    if (p + 1 + (64 << precision) > segment.length) throw new ImageDecodeError(`The JPEG DQT segment ends inside quantization table ${id}`);
    const table = new Uint16Array(64);
    for (let k = 0; k < 64; k++) table[ZIGZAG[k]] = precision ? u16(segment, p + 1 + 2 * k) : segment[p + 1 + k];
    quant[id] = table;
    p += 1 + (64 << precision);
  }
}

function readHuffmanTables(segment: Uint8Array, tables: Tables): void {
  for (let p = 0; p < segment.length;) {
    const tc = segment[p] >> 4, th = segment[p] & 15, name = `${tc ? "AC" : "DC"} Huffman table ${th}`;
    if (tc > 1 || th > 3) throw new ImageDecodeError(`The JPEG defines Huffman table class ${tc}, id ${th}; classes are 0 (DC) and 1 (AC), ids 0 to 3`);
    if (p + 17 > segment.length) throw new ImageDecodeError(`The JPEG DHT segment ends inside the code counts of ${name}`);
    const counts = segment.subarray(p + 1, p + 17), n = counts.reduce((sum, c) => sum + c, 0);
    if (p + 17 + n > segment.length) throw new ImageDecodeError(`The JPEG DHT segment ends inside the values of ${name}`);
    (tc ? tables.ac : tables.dc)[th] = buildHuffman(counts, segment.subarray(p + 17, p + 17 + n), name);
    p += 17 + n;
  }
}

/**
 * Builds the canonical codes of T.81 annex C as a lookup on the next 16 bits of data: each entry is
 * (code length << 8) | value, and 0 where no code is a prefix of those bits. One probe decodes any code.
 */
function buildHuffman(counts: Uint8Array, values: Uint8Array, name: string): Uint16Array {
  const lookup = new Uint16Array(65536);
  let code = 0, k = 0;
  for (let length = 1; length <= 16; length++, code <<= 1) {
    for (let i = 0; i < counts[length - 1]; i++, code++) {
      if (code >= 1 << length) throw new ImageDecodeError(`JPEG ${name} has more codes of ${length} bits than fit`);
      lookup.fill((length << 8) | values[k++], code << (16 - length), (code + 1) << (16 - length));
    }
  }
  return lookup;
}

function readFrameHeader(segment: Uint8Array, marker: number, maxPixels: number): Frame {
  if (marker === 0xc3) throw new ImageDecodeError("Lossless JPEGs (marker SOF3) are not supported");
  if (marker >= 0xc5 && marker <= 0xc7) throw new ImageDecodeError(`Hierarchical JPEGs (marker ${markerName(marker)}) are not supported`);
  if (marker >= 0xc9) throw new ImageDecodeError(`Arithmetic-coded JPEGs (marker ${markerName(marker)}) are not supported`);
  if (segment.length < 6) throw new ImageDecodeError(`The JPEG frame header holds ${segment.length} bytes, fewer than 6`);
  const precision = segment[0], height = u16(segment, 1), width = u16(segment, 3), count = segment[5];
  if (precision !== 8) throw new ImageDecodeError(`The JPEG has ${precision}-bit samples; only 8-bit JPEGs are supported`);
  if (count === 4) throw new ImageDecodeError("CMYK and YCCK JPEGs (4 components) are not supported");
  if (count !== 1 && count !== 3) throw new ImageDecodeError(`The JPEG has ${count} components; only 1 (greyscale) and 3 (colour) are supported`);
  if (segment.length !== 6 + 3 * count) throw new ImageDecodeError(`The JPEG frame header holds ${segment.length} bytes; ${count} components need ${6 + 3 * count}`);
  // A height of 0 would be set later by a DNL marker, which this decoder does not read.
  if (width === 0 || height === 0) throw new ImageDecodeError(`The JPEG is ${width} × ${height} pixels`);
  if (width * height > maxPixels) throw new ImageDecodeError(`The JPEG is ${width} × ${height} pixels, more than the limit of ${maxPixels}`);
  const specs = Array.from({ length: count }, (_, i) => {
    const id = segment[6 + 3 * i], h = segment[7 + 3 * i] >> 4, v = segment[7 + 3 * i] & 15, tq = segment[8 + 3 * i];
    if (h < 1 || h > 4 || v < 1 || v > 4) throw new ImageDecodeError(`JPEG component ${id} has sampling factors ${h} × ${v}; each must be 1 to 4`);
    if (tq > 3) throw new ImageDecodeError(`JPEG component ${id} uses quantization table ${tq}; ids run from 0 to 3`);
    return { id, h, v, tq };
  });
  const ids = new Set(specs.map((s) => s.id));
  if (ids.size !== count) throw new ImageDecodeError(`The JPEG frame header names a component twice (ids ${specs.map((s) => s.id).join(", ")})`);
  const hMax = Math.max(...specs.map((s) => s.h)), vMax = Math.max(...specs.map((s) => s.v));
  const mcusWide = Math.ceil(width / (8 * hMax)), mcusHigh = Math.ceil(height / (8 * vMax));
  const components = specs.map(({ id, h, v, tq }): Component => {
    const stride = mcusWide * h, size = stride * mcusHigh * v * 64;
    let coefficients: Int16Array;
    try {
      coefficients = new Int16Array(size);
    } catch {
      throw new ImageDecodeError(`A ${width} × ${height} JPEG needs more memory than is available`);
    }
    const blocksWide = Math.ceil(Math.ceil((width * h) / hMax) / 8), blocksHigh = Math.ceil(Math.ceil((height * v) / vMax) / 8);
    return { id, h, v, tq, blocksWide, blocksHigh, stride, coefficients, pred: 0 };
  });
  return { progressive: marker === 0xc2, width, height, hMax, vMax, mcusWide, mcusHigh, components };
}

function readScanHeader(segment: Uint8Array, frame: Frame, tables: Tables): Scan {
  const count = segment[0] ?? 0;
  if (count < 1 || count > 4 || segment.length !== 4 + 2 * count) throw new ImageDecodeError(`The JPEG scan header holds ${segment.length} bytes for ${count} components`);
  const ss = segment[1 + 2 * count], se = segment[2 + 2 * count], ah = segment[3 + 2 * count] >> 4, al = segment[3 + 2 * count] & 15;
  const { progressive } = frame;
  // T.81 G.1.1.1: DC and AC never share a scan, AC scans code one component, each refinement adds one bit.
  if (progressive && (se > 63 || ss > se || (ss === 0 && se !== 0) || (ss > 0 && count !== 1) || al > 13 || (ah !== 0 && ah !== al + 1))) {
    throw new ImageDecodeError(`The progressive JPEG scan has invalid parameters (Ss ${ss}, Se ${se}, Ah ${ah}, Al ${al}, ${count} components)`);
  }
  // A sequential scan codes whole blocks whatever Ss, Se, Ah and Al say.
  const needDc = !progressive || (ss === 0 && ah === 0), needAc = !progressive || ss > 0;
  const table = (list: (Uint16Array | undefined)[], id: number, kind: string, component: number) => {
    const found = list[id];
    if (!found) throw new ImageDecodeError(`${kind} Huffman table ${id} is used by component ${component} but never defined`);
    return found;
  };
  const parts: ScanPart[] = [];
  for (let i = 0; i < count; i++) {
    const id = segment[1 + 2 * i], td = segment[2 + 2 * i] >> 4, ta = segment[2 + 2 * i] & 15;
    const c = frame.components.find((x) => x.id === id);
    if (!c) throw new ImageDecodeError(`The JPEG scan names component ${id}, which its frame header does not define`);
    if (parts.some((p) => p.c === c)) throw new ImageDecodeError(`The JPEG scan names component ${id} twice`);
    if (!c.quant) {
      c.quant = tables.quant[c.tq];
      if (!c.quant) throw new ImageDecodeError(`Quantization table ${c.tq} is used by component ${id} but never defined`);
    }
    parts.push({ c, dc: needDc ? table(tables.dc, td, "DC", id) : NO_TABLE, ac: needAc ? table(tables.ac, ta, "AC", id) : NO_TABLE });
  }
  const blocks = parts.reduce((n, p) => n + p.c.h * p.c.v, 0);
  if (count > 1 && blocks > 10) throw new ImageDecodeError(`The JPEG scan has ${blocks} blocks an MCU, more than the 10 T.81 allows`);
  return { parts, ss, se, ah, al };
}

/**
 * Reads the entropy-coded bits of one scan (T.81 F.2.2.5), dropping the 0x00 stuffed after each 0xFF data
 * byte. At the next marker or the end of the data it feeds zero bits so that a 16-bit look-ahead always
 * works, but consuming any of those bits throws: the data ran out before the scan did.
 */
class ScanReader {
  /** Blocks left in the current end-of-band run of a progressive AC scan. */
  eobrun = 0;
  private acc = 0;
  private count = 0;
  /** How many of the low `count` bits of `acc` are made-up zeros. */
  private padding = 0;

  constructor(private readonly bytes: Uint8Array, public pos: number) {}

  private fill(n: number): void {
    const b = this.bytes;
    while (this.count < n) {
      let byte = 0;
      if (this.padding === 0 && this.pos < b.length && (b[this.pos] !== 0xff || b[this.pos + 1] === 0)) {
        byte = b[this.pos];
        this.pos += byte === 0xff ? 2 : 1;
      } else this.padding += 8;
      this.acc = ((this.acc << 8) | byte) & 0xffffff;
      this.count += 8;
    }
  }

  private take(n: number): void {
    this.count -= n;
    if (this.count < this.padding) throw this.overrun();
  }

  private overrun(): ImageDecodeError {
    const b = this.bytes;
    let p = this.pos;
    while (b[p] === 0xff && b[p + 1] === 0xff) p++;
    if (p + 1 >= b.length) return new ImageDecodeError("The JPEG data ends inside its scan");
    return new ImageDecodeError(`The JPEG scan stops at marker ${hex(b[p + 1])} before its last block`);
  }

  /** The next `n` (0 to 16) bits as an unsigned number. */
  bits(n: number): number {
    if (n === 0) return 0;
    this.fill(n);
    const value = (this.acc >>> (this.count - n)) & ((1 << n) - 1);
    this.take(n);
    return value;
  }

  /** The next `n` bits as the signed value they code (T.81 F.2.2.1, EXTEND). */
  signed(n: number): number {
    if (n === 0) return 0;
    const value = this.bits(n);
    return value < 1 << (n - 1) ? value - (1 << n) + 1 : value;
  }

  /** The next Huffman-coded value. */
  decode(table: Uint16Array): number {
    this.fill(16);
    const entry = table[(this.acc >>> (this.count - 16)) & 0xffff];
    if (!entry) throw this.padding > 0 ? this.overrun() : new ImageDecodeError("The JPEG scan holds a bit pattern that is not a code of its Huffman table");
    this.take(entry >> 8);
    return entry & 0xff;
  }

  /** A DC difference: its size category, Huffman-coded, then that many bits. */
  dcDifference(table: Uint16Array): number {
    const size = this.decode(table);
    if (size > 11) throw new ImageDecodeError(`The JPEG scan codes a DC difference of ${size} bits, more than the 11 of 8-bit samples`);
    return this.signed(size);
  }

  pastBlockEnd(): ImageDecodeError {
    return new ImageDecodeError("The JPEG scan codes a coefficient past the end of its block");
  }

  /** Skips the RSTn marker that must follow a restart interval (the bits left over only pad the last byte). */
  restart(expected: number, mcu: number): void {
    this.acc = this.count = this.padding = this.eobrun = 0;
    const b = this.bytes;
    let p = this.pos;
    while (b[p] === 0xff && b[p + 1] === 0xff) p++;
    if (p + 1 >= b.length) throw new ImageDecodeError("The JPEG data ends inside its scan");
    if (b[p] !== 0xff || b[p + 1] !== 0xd0 + expected) {
      const found = b[p] === 0xff ? `marker ${hex(b[p + 1])}` : `data byte 0x${b[p].toString(16).padStart(2, "0")}`;
      throw new ImageDecodeError(`The JPEG scan has ${found} where restart marker RST${expected} should come before MCU ${mcu}`);
    }
    this.pos = p + 2;
  }

  /** Where the segment after the scan starts: the next marker other than RSTn (bytes an encoder left before it are skipped). */
  nextMarker(): number {
    const b = this.bytes;
    let p = this.pos;
    for (; p + 1 < b.length; p++) {
      const m = b[p + 1];
      if (b[p] === 0xff && m !== 0 && m !== 0xff && (m < 0xd0 || m > 0xd7)) return p;
    }
    return b.length;
  }
}

/** Decodes one scan's coefficients into the components it codes; returns the offset of the marker after it. */
function decodeScan(bytes: Uint8Array, at: number, frame: Frame, scan: Scan, restartInterval: number): number {
  const reader = new ScanReader(bytes, at);
  const decodeBlock = blockDecoder(reader, frame.progressive, scan);
  const { parts } = scan, single = parts.length === 1 ? parts[0] : undefined;
  for (const p of parts) p.c.pred = 0;
  // A scan of one component codes its own block grid one block an MCU; an interleaved scan codes h × v blocks of each component an MCU (T.81 A.2).
  const total = single ? single.c.blocksWide * single.c.blocksHigh : frame.mcusWide * frame.mcusHigh;
  for (let mcu = 0, rst = 0; mcu < total; mcu++) {
    if (restartInterval > 0 && mcu > 0 && mcu % restartInterval === 0) {
      reader.restart(rst, mcu);
      rst = (rst + 1) & 7;
      for (const p of parts) p.c.pred = 0;
    }
    if (single) {
      const { c } = single, row = Math.floor(mcu / c.blocksWide);
      decodeBlock(single, (row * c.stride + mcu - row * c.blocksWide) * 64);
      continue;
    }
    const row = Math.floor(mcu / frame.mcusWide), col = mcu - row * frame.mcusWide;
    for (const p of parts) {
      const { c } = p;
      for (let v = 0; v < c.v; v++) for (let h = 0; h < c.h; h++) decodeBlock(p, ((row * c.v + v) * c.stride + col * c.h + h) * 64);
    }
  }
  return reader.nextMarker();
}

/** The procedure that decodes one block of a scan (at offset `o` of its component's coefficients), by the kind of scan (T.81 F.2.2, G.1.2). */
function blockDecoder(r: ScanReader, progressive: boolean, { ss, se, ah, al }: Scan): (p: ScanPart, o: number) => void {
  if (!progressive) {
    return (p, o) => {
      const co = p.c.coefficients;
      co[o] = p.c.pred += r.dcDifference(p.dc);
      for (let k = 1; k < 64;) {
        const rs = r.decode(p.ac), run = rs >> 4, size = rs & 15;
        if (size === 0) {
          if (run < 15) break; // EOB
          k += 16; // ZRL: sixteen zeros
          continue;
        }
        k += run;
        if (k > 63) throw r.pastBlockEnd();
        co[o + ZIGZAG[k++]] = r.signed(size);
      }
    };
  }
  if (ss === 0 && ah === 0) return (p, o) => void (p.c.coefficients[o] = (p.c.pred += r.dcDifference(p.dc)) * (1 << al));
  if (ss === 0) return (p, o) => void (r.bits(1) && (p.c.coefficients[o] |= 1 << al));
  if (ah === 0) {
    return (p, o) => {
      if (r.eobrun > 0) return void r.eobrun--;
      const co = p.c.coefficients;
      for (let k = ss; k <= se;) {
        const rs = r.decode(p.ac), run = rs >> 4, size = rs & 15;
        if (size === 0) {
          if (run < 15) { // EOBn: this block and 2^n - 1 + (n more bits) after it end here
            r.eobrun = (1 << run) - 1 + r.bits(run);
            break;
          }
          k += 16;
          continue;
        }
        k += run;
        if (k > se) throw r.pastBlockEnd();
        co[o + ZIGZAG[k++]] = r.signed(size) * (1 << al);
      }
    };
  }
  return (p, o) => refineAc(r, p.c.coefficients, o, ss, se, al, p.ac);
}

/**
 * One block of an AC successive-approximation refinement scan (T.81 G.1.2.3): newly non-zero coefficients
 * come as run/size codes of size 1 with a sign bit, and every coefficient already non-zero that the run
 * passes gets one correction bit; an EOB run leaves only correction bits for the rest of its blocks.
 */
function refineAc(r: ScanReader, co: Int16Array, o: number, ss: number, se: number, al: number, table: Uint16Array): void {
  const plus = 1 << al, minus = -1 << al;
  let k = ss;
  if (r.eobrun === 0) {
    for (; k <= se; k++) {
      const rs = r.decode(table), size = rs & 15;
      let zeros = rs >> 4, value = 0;
      if (size !== 0) {
        if (size !== 1) throw new ImageDecodeError(`The JPEG refinement scan codes a coefficient of ${size} bits, not 1`);
        value = r.bits(1) ? plus : minus;
      } else if (zeros < 15) {
        r.eobrun = (1 << zeros) + r.bits(zeros);
        break;
      }
      // Pass `zeros` still-zero coefficients, correcting the non-zero ones on the way; the next zero one is the new coefficient (or, for ZRL, the 16th zero).
      for (; k <= se; k++) {
        const z = o + ZIGZAG[k];
        if (co[z] !== 0) correct(r, co, z, plus);
        else if (zeros-- === 0) break;
      }
      if (value !== 0) {
        if (k > se) throw r.pastBlockEnd();
        co[o + ZIGZAG[k]] = value;
      }
    }
  }
  if (r.eobrun > 0) {
    for (; k <= se; k++) if (co[o + ZIGZAG[k]] !== 0) correct(r, co, o + ZIGZAG[k], plus);
    r.eobrun--;
  }
}

/** Reads a correction bit of a non-zero coefficient and, when set, moves the coefficient 2^Al away from zero (once: a repeated bit is ignored). */
function correct(r: ScanReader, co: Int16Array, z: number, plus: number): void {
  if (r.bits(1) && (co[z] & plus) === 0) co[z] += co[z] >= 0 ? plus : -plus;
}

/** Inverse-transforms every component and converts to RGB, upsampling by replication. */
function toRgb(frame: Frame, adobeTransform: number | undefined): DecodedImage {
  const { width, height, hMax, vMax, components } = frame;
  const planes = components.map(samplePlane);
  const rgb = new Uint8Array(width * height * 3), out = new Uint8ClampedArray(rgb.buffer);
  // Pixel x of the image falls in sample floor(x · h / hMax) of a component (T.81 A.1.1).
  const columns = components.map((c) => Int32Array.from({ length: width }, (_, x) => Math.floor((x * c.h) / hMax)));
  // The Adobe marker's transform flag decides when present (0: RGB); else components named R, G, B are RGB, as libjpeg reads them, and others JFIF YCbCr.
  const ids = components.map((c) => c.id);
  const isRgb = adobeTransform !== undefined ? adobeTransform === 0 : ids[0] === 0x52 && ids[1] === 0x47 && ids[2] === 0x42;
  for (let y = 0; y < height; y++) {
    const rows = components.map((c) => Math.floor((y * c.v) / vMax) * c.blocksWide * 8);
    for (let x = 0, d = y * width * 3; x < width; x++, d += 3) {
      const a = planes[0][rows[0] + columns[0][x]];
      if (components.length === 1) {
        out[d] = out[d + 1] = out[d + 2] = a;
        continue;
      }
      const b = planes[1][rows[1] + columns[1][x]], c = planes[2][rows[2] + columns[2][x]];
      if (isRgb) {
        out[d] = a;
        out[d + 1] = b;
        out[d + 2] = c;
      } else {
        out[d] = a + 1.402 * (c - 128);
        out[d + 1] = a - 0.344136 * (b - 128) - 0.714136 * (c - 128);
        out[d + 2] = a + 1.772 * (b - 128);
      }
    }
  }
  return { width, height, rgb };
}

/** A component's samples over its own block grid (blocksWide · 8 a row), each block dequantized, inverse-transformed and level-shifted. */
function samplePlane(c: Component): Uint8ClampedArray {
  const stride = c.blocksWide * 8, plane = new Uint8ClampedArray(stride * c.blocksHigh * 8), work = new Float64Array(64);
  const quant = c.quant;
  if (!quant) throw new ImageDecodeError(`JPEG component ${c.id} is in none of its scans`);
  for (let by = 0; by < c.blocksHigh; by++) {
    for (let bx = 0; bx < c.blocksWide; bx++) idct(c.coefficients, (by * c.stride + bx) * 64, quant, work, plane, by * 8 * stride + bx * 8, stride);
  }
  return plane;
}

/** Dequantizes one block and applies the IDCT of T.81 A.3.3 separably (columns, then rows), writing samples + 128 into `plane`. */
function idct(co: Int16Array, o: number, quant: Uint16Array, work: Float64Array, plane: Uint8ClampedArray, at: number, stride: number): void {
  let flat = true;
  for (let i = 1; i < 64 && flat; i++) flat = co[o + i] === 0;
  if (flat) { // only DC, as most blocks of smooth images are: one level, F(0,0) / 8
    const level = (co[o] * quant[0]) / 8 + 128;
    for (let y = 0; y < 8; y++) plane.fill(level, at + y * stride, at + y * stride + 8);
    return;
  }
  for (let u = 0; u < 8; u++) {
    for (let y = 0; y < 8; y++) {
      let sum = 0;
      for (let v = 0; v < 8; v++) sum += IDCT_BASIS[y * 8 + v] * co[o + v * 8 + u] * quant[v * 8 + u];
      work[y * 8 + u] = sum;
    }
  }
  for (let y = 0; y < 8; y++) {
    for (let x = 0; x < 8; x++) {
      let sum = 128;
      for (let u = 0; u < 8; u++) sum += IDCT_BASIS[x * 8 + u] * work[y * 8 + u];
      plane[at + y * stride + x] = sum;
    }
  }
}

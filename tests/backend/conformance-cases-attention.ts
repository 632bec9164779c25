/**
 * Conformance cases for kvWrite, pagedAttention and sample.
 *
 * Tolerances:
 * - kvWrite: exact (a scatter; untouched slots keep their random contents on both sides); into f16
 *   caches too (round to nearest even as ggml: from ±65520 on ±inf), and into f8_e4m3 ones (each
 *   32 values encoded under a power-of-two scale, codes rounded to nearest even, as the reference).
 * - pagedAttention: atol 2e-5, rtol 1e-4 (f32 dot products over headDim ≤ 576 of values in [-1, 1]
 *   and an online softmax over ≤ 48 keys, or ≤ 1900 in spans merged afterwards, against an f64
 *   two-pass softmax).
 * - sample: the same token ids (the order of tokens is decided on the exact f32 logits, so only a
 *   cumulative sum that lands within rounding of uniform·mass could differ; inputs are random).
 */
import type { AttentionBatch, Backend, KvDType, RopeLayout, SamplingRow, Tensor } from "../../src/backend/types.ts";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { type Case, EXACT, type Output } from "./conformance-support.ts";

interface Geometry {
  heads: number;
  kvHeads: number;
  headDim: number;
  blockSize: number;
  /** Sliding window (AttentionOptions.window). */
  window?: number;
  /** Attention sinks, one random logit per query head (AttentionOptions.sinks). */
  sinks?: boolean;
  /** Soft-capped scores (AttentionOptions.softcap). */
  softcap?: number;
  /** The caches' dtype (default f32). */
  kv?: KvDType;
  /** One cache passed as keys and values (multi-head latent attention's shared cache). */
  shared?: boolean;
}

/** A cache of random values in `dtype` (f16, f8_e4m3: the same bytes on every backend, written raw). */
function randomCache(b: Backend, values: Float32Array, shape: number[], dtype: KvDType = "f32"): Tensor {
  if (dtype === "f32") return b.upload(values, shape);
  // Uploaded as rows of slots (an f8_e4m3 weight's rows must be whole blocks; a row of narrow heads is).
  const rows = b.uploadWeight(encodeFromF32(values, dtype), [shape[0] * shape[1], shape[2] * shape[3]], dtype);
  return b.reshape(rows, shape);
}

/**
 * KV rows for an f8_e4m3 cache, a 32-value block at a time in four kinds: values of every magnitude
 * (subnormal codes among them); exact ties between codes under scale 2^-3 (448 · 2^-3 sets it; then
 * halfway points of the subnormal and the normal codes); a block below 2^-100 (scale 0); zeros and −0.
 */
function fp8Values(rng: { f32(n: number): Float32Array }, count: number): Float32Array {
  const x = rng.f32(count);
  for (let b = 0; b < count / 32; b++) {
    for (let j = 0; j < 32; j++) {
      const i = b * 32 + j;
      const kind = b % 4;
      if (kind === 0) x[i] *= 2 ** (j % 23 - 12);
      else if (kind === 1) x[i] = (j === 0 ? 448 : j < 16 ? (j - 0.5) * 2 ** -9 : (1 + (2 * (j - 16) + 1) / 16) * 2 ** ((j % 9) - 4)) * (j % 2 ? -1 : 1) * 2 ** -3;
      else if (kind === 2) x[i] *= 1e-32;
      else x[i] = j % 2 ? -0 : 0;
    }
  }
  return x;
}

const GEOMETRIES: Geometry[] = [
  { heads: 3, kvHeads: 1, headDim: 8, blockSize: 4 },
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 16 },
  { heads: 2, kvHeads: 2, headDim: 40, blockSize: 5 },
  // Multi-head latent attention's shape: every query head reads one 576-wide latent + RoPE head.
  { heads: 8, kvHeads: 1, headDim: 576, blockSize: 16 },
  // GPT-OSS's sliding layers: a window shorter than the prefill and the decode contexts, with sinks;
  // and sinks alone (its full layers).
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 4, window: 6, sinks: true },
  { heads: 3, kvHeads: 1, headDim: 8, blockSize: 16, window: 33 },
  { heads: 4, kvHeads: 1, headDim: 40, blockSize: 5, sinks: true },
  // f16 caches (--kv-cache-dtype f16): GQA, MLA's one shared cache, a window with sinks.
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f16" },
  { heads: 8, kvHeads: 1, headDim: 576, blockSize: 16, kv: "f16", shared: true },
  { heads: 4, kvHeads: 2, headDim: 40, blockSize: 4, window: 6, sinks: true, kv: "f16" },
  { heads: 3, kvHeads: 1, headDim: 8, blockSize: 4, shared: true },
  // Groups larger than one WebGPU workgroup serves (attentionHeadsPerGroup): 16 per KV head in
  // workgroups of 8, 12 in workgroups of 6 (a divisor), 10 of width 256 in workgroups of 5.
  { heads: 32, kvHeads: 2, headDim: 16, blockSize: 4, sinks: true },
  { heads: 24, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f16", window: 9 },
  { heads: 10, kvHeads: 1, headDim: 256, blockSize: 5 },
  // f8_e4m3 caches (--kv-cache-dtype fp8): GQA at head dims 64 and 128 (vector value sums), 96 and
  // MLA's shared 576 (scalar ones), a window with sinks, a wide group.
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f8_e4m3" },
  { heads: 8, kvHeads: 2, headDim: 128, blockSize: 16, kv: "f8_e4m3" },
  { heads: 2, kvHeads: 1, headDim: 96, blockSize: 8, kv: "f8_e4m3" },
  { heads: 8, kvHeads: 1, headDim: 576, blockSize: 16, kv: "f8_e4m3", shared: true },
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 4, window: 6, sinks: true, kv: "f8_e4m3" },
  { heads: 24, kvHeads: 2, headDim: 32, blockSize: 16, kv: "f8_e4m3", window: 9 },
  // Narrow heads sharing a block's scale: stories260K's 4 × 8 (vector sums), 8 × 12 (scalar ones).
  { heads: 8, kvHeads: 4, headDim: 8, blockSize: 4, kv: "f8_e4m3" },
  { heads: 8, kvHeads: 8, headDim: 12, blockSize: 4, kv: "f8_e4m3", sinks: true },
  // Gemma 2's soft-capped scores (a cap small enough to bend these scores), windowed and not, f16.
  { heads: 8, kvHeads: 4, headDim: 32, blockSize: 16, window: 9, softcap: 0.75 },
  { heads: 4, kvHeads: 2, headDim: 16, blockSize: 4, softcap: 0.5, kv: "f16" },
];

/** Sequences of one batch: (first new position, new tokens). */
const SEQS: [number, number][] = [
  [0, 37], // prefill from scratch
  [5, 7], // prefill chunk over a cached prefix of 5
  [20, 1], // decode
  [0, 1], // decode of the first token
];

/**
 * Few rows over long contexts: WebGPU cuts each row's keys into spans merged afterwards (split-KV,
 * ops-attention.ts `attentionSplits`): two rows decoding at 1900 and 700 positions, one at its
 * first (its later spans empty) and a 3-row prefill chunk over a cached prefix of 1000.
 */
const LONG_SEQS: [number, number][] = [
  [1899, 1],
  [699, 1],
  [0, 1],
  [1000, 3],
];

/** Geometries run over {@link LONG_SEQS}: vector and scalar value sums, every cache dtype, windows, sinks, wide groups. */
const LONG_GEOMETRIES: Geometry[] = [
  { heads: 3, kvHeads: 1, headDim: 8, blockSize: 16 },
  { heads: 4, kvHeads: 1, headDim: 40, blockSize: 16, sinks: true },
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f16", window: 600, sinks: true },
  { heads: 8, kvHeads: 2, headDim: 128, blockSize: 16, kv: "f8_e4m3" },
  { heads: 8, kvHeads: 1, headDim: 576, blockSize: 16, kv: "f16", shared: true },
  { heads: 10, kvHeads: 1, headDim: 256, blockSize: 16, window: 300 },
  { heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, softcap: 0.75 },
];

async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...outputs, ...temps]) b.free(t);
  return res;
}

function attentionCase(g: Geometry, seqs: [number, number][] = SEQS): Case {
  const maxCtx = Math.max(...seqs.map(([s, n]) => s + n));
  const maxBlocks = Math.ceil(maxCtx / g.blockSize);
  const numBlocks = maxBlocks * seqs.length + 3;
  return {
    op: "pagedAttention",
    name: `heads=${g.heads} kvHeads=${g.kvHeads} headDim=${g.headDim} blockSize=${g.blockSize}` +
      `${g.window ? ` window=${g.window}` : ""}${g.sinks ? " sinks" : ""}${g.softcap ? ` softcap=${g.softcap}` : ""}${g.kv ? ` ${g.kv} cache` : ""}${g.shared ? " shared" : ""}` +
      `${seqs === SEQS ? "" : ` contexts ${seqs.map(([s, n]) => s + n).join("/")}`}`,
    headDim: g.headDim,
    kvDtype: g.kv,
    tolerance: { atol: 2e-5, rtol: 1e-4 },
    run: (b, rng) => {
      const cacheShape = [numBlocks, g.blockSize, g.kvHeads, g.headDim];
      const cacheLen = numBlocks * g.blockSize * g.kvHeads * g.headDim;
      // Caches hold random KV for every slot; blocks are handed to sequences in shuffled order.
      const kc = randomCache(b, rng.f32(cacheLen), cacheShape, g.kv);
      const vc = g.shared ? kc : randomCache(b, rng.f32(cacheLen), cacheShape, g.kv);
      const order = rng.perm(numBlocks);
      const tables = new Int32Array(seqs.length * maxBlocks).fill(-7);
      seqs.forEach(([start, n], s) => {
        // Blocks before every row's window stay invalid (-7): a windowed kernel must not read them.
        const seen = g.window ? Math.floor(Math.max(0, start - g.window + 1) / g.blockSize) : 0;
        for (let j = seen; j < Math.ceil((start + n) / g.blockSize); j++) tables[s * maxBlocks + j] = order[s * maxBlocks + j];
      });
      const seq: number[] = [];
      const pos: number[] = [];
      seqs.forEach(([start, n], s) => {
        for (let i = 0; i < n; i++) {
          seq.push(s);
          pos.push(start + i);
        }
      });
      const n = seq.length;
      const batch: AttentionBatch = {
        tokenSeq: b.upload(Int32Array.from(seq), [n]),
        tokenPos: b.upload(Int32Array.from(pos), [n]),
        blockTables: b.upload(tables, [seqs.length, maxBlocks]),
        maxContext: maxCtx,
      };
      const q = b.upload(rng.f32(n * g.heads * g.headDim, -2, 2), [n, g.heads, g.headDim]);
      // Sinks from -3 to 3: some heads put most of their weight on the sink, some little.
      const sinks = g.sinks ? b.upload(rng.f32(g.heads, -3, 3), [g.heads]) : undefined;
      const out = b.pagedAttention(q, kc, vc, batch, 1 / Math.sqrt(g.headDim), { window: g.window, sinks, softcap: g.softcap });
      return finish(b, [out], [...new Set([kc, vc]), q, batch.tokenSeq, batch.tokenPos, batch.blockTables, ...(sinks ? [sinks] : [])]);
    },
  };
}

function kvWriteCase(g: Geometry, n: number): Case {
  const numBlocks = Math.ceil((n * 2) / g.blockSize) + 1;
  return {
    op: "kvWrite",
    name: `n=${n} kvHeads=${g.kvHeads} headDim=${g.headDim} blockSize=${g.blockSize}${g.kv ? ` ${g.kv} cache` : ""}${g.shared ? " shared" : ""}`,
    tolerance: EXACT,
    kvDtype: g.kv,
    run: (b, rng) => {
      const shape = [numBlocks, g.blockSize, g.kvHeads, g.headDim];
      const len = numBlocks * g.blockSize * g.kvHeads * g.headDim;
      const kc = randomCache(b, rng.f32(len), shape, g.kv);
      const vc = g.shared ? kc : randomCache(b, rng.f32(len), shape, g.kv);
      const slots = b.upload(Int32Array.from(rng.perm(numBlocks * g.blockSize).slice(0, n)), [n]);
      // Into f16: values of every magnitude, halfway cases among them, and some past f16's range.
      const count = n * g.kvHeads * g.headDim;
      const values = () =>
        g.kv === "f16"
          ? Float32Array.from(rng.f32(count), (x, i) => i % 7 === 3 ? x * 1.5e5 : x * 2 ** (i % 23 - 12))
          : g.kv === "f8_e4m3"
          ? fp8Values(rng, count)
          : rng.f32(count);
      const k = b.upload(values(), [n, g.kvHeads, g.headDim]);
      const v = g.shared ? k : b.upload(values(), [n, g.kvHeads, g.headDim]);
      b.kvWrite(k, v, kc, vc, slots);
      return finish(b, g.shared ? [kc] : [kc, vc], [slots, ...new Set([k, v])]);
    },
  };
}

/** A fused rope and KV write's shape: query heads over the cache's, the rotation, and positions below `maxPos`. */
interface RotateWrite {
  heads: number;
  kvHeads: number;
  headDim: number;
  layout: RopeLayout;
  rotaryDim?: number;
  factors?: boolean;
  kv?: KvDType;
  maxPos: number;
}

/**
 * Backend.rotateAndWriteKv against the reference's rope, rope and kvWrite: q after (rotated in place)
 * and both caches. An f8_e4m3 cache's codes may round the other way where the two sides' f32
 * rotations differ in their last bits: its positions stay small (accurate angles) and its tolerance
 * is one code step; kvWrite's own cases check its encoding exactly.
 */
function rotateWriteCase(g: RotateWrite, n: number): Case {
  const blockSize = 4;
  const numBlocks = Math.ceil((n * 2) / blockSize) + 1;
  return {
    op: "rotateAndWriteKv",
    optionalOp: "rotateAndWriteKv",
    name: `n=${n} heads=${g.heads}/${g.kvHeads} headDim=${g.headDim} ${g.layout}${g.rotaryDim ? ` rotaryDim=${g.rotaryDim}` : ""}` +
      `${g.factors ? " freqFactors" : ""} ${g.kv ?? "f32"} cache`,
    kvDtype: g.kv,
    tolerance: g.kv === "f8_e4m3" ? { atol: 0.01, rtol: 0.13 } : g.kv === "f16" ? { atol: 1e-4, rtol: 1e-3 } : { atol: 1e-4, rtol: 0 },
    run: (b, rng) => {
      const shape = [numBlocks, blockSize, g.kvHeads, g.headDim];
      const len = numBlocks * blockSize * g.kvHeads * g.headDim;
      const kc = randomCache(b, rng.f32(len), shape, g.kv);
      const vc = randomCache(b, rng.f32(len), shape, g.kv);
      const slots = b.upload(Int32Array.from(rng.perm(numBlocks * blockSize).slice(0, n)), [n]);
      const q = b.upload(rng.f32(n * g.heads * g.headDim), [n, g.heads, g.headDim]);
      const k = b.upload(rng.f32(n * g.kvHeads * g.headDim), [n, g.kvHeads, g.headDim]);
      const v = b.upload(rng.f32(n * g.kvHeads * g.headDim), [n, g.kvHeads, g.headDim]);
      const positions = b.upload(rng.i32(n, g.maxPos), [n]);
      const rd = g.rotaryDim ?? g.headDim;
      const freqFactors = g.factors ? b.upload(rng.f32(rd / 2, 1, 8), [rd / 2]) : undefined;
      const theta = rng.next() < 0.5 ? 10000 : 500000;
      b.rotateAndWriteKv!(q, k, v, positions, { theta, layout: g.layout, rotaryDim: g.rotaryDim, freqFactors }, kc, vc, slots);
      return finish(b, [q, kc, vc, k], [v, slots, positions, ...(freqFactors ? [freqFactors] : [])]);
    },
  };
}

const ROTATE_WRITES: [RotateWrite, number][] = [
  [{ heads: 4, kvHeads: 2, headDim: 64, layout: "normal", maxPos: 300 }, 9],
  [{ heads: 3, kvHeads: 1, headDim: 8, layout: "neox", maxPos: 300 }, 37],
  [{ heads: 4, kvHeads: 2, headDim: 40, layout: "neox", rotaryDim: 16, factors: true, maxPos: 300 }, 5],
  [{ heads: 8, kvHeads: 2, headDim: 64, layout: "normal", factors: true, kv: "f16", maxPos: 300 }, 7],
  [{ heads: 6, kvHeads: 2, headDim: 12, layout: "neox", rotaryDim: 8, kv: "f16", maxPos: 300 }, 11],
  [{ heads: 4, kvHeads: 2, headDim: 64, layout: "neox", kv: "f8_e4m3", maxPos: 8 }, 6],
  [{ heads: 8, kvHeads: 4, headDim: 8, layout: "normal", kv: "f8_e4m3", maxPos: 8 }, 5],
];

const SAMPLING: Omit<SamplingRow, "uniform">[] = [
  { temperature: 0, topK: 0, topP: 1 },
  { temperature: 1, topK: 0, topP: 1 },
  { temperature: 0.7, topK: 0, topP: 1 },
  { temperature: 1, topK: 5, topP: 1 },
  { temperature: 1.3, topK: 0, topP: 0.9 },
  { temperature: 0.8, topK: 40, topP: 0.5 },
  { temperature: 2, topK: 1, topP: 1 },
  { temperature: 1, topK: 3, topP: 0.05 },
  // min-p alone, and before top-k and top-p.
  { temperature: 1, topK: 0, topP: 1, minP: 0.1 },
  { temperature: 0.7, topK: 0, topP: 1, minP: 0.5 },
  { temperature: 1.5, topK: 20, topP: 0.9, minP: 0.05 },
  { temperature: 1, topK: 0, topP: 1, minP: 1 },
  // Below MIN_SAMPLING_TEMPERATURE: greedy on every backend (1/T and logits/T would overflow f32 on the device).
  { temperature: 1e-38, topK: 0, topP: 1 },
];

function sampleCase(vocab: number, repeats: number, ties: boolean): Case {
  return {
    op: "sample",
    name: `vocab=${vocab} rows=${SAMPLING.length * repeats}${ties ? " with tied logits" : ""}`,
    tolerance: EXACT,
    run: (b, rng) => {
      const rows: SamplingRow[] = [];
      for (let r = 0; r < repeats; r++) for (const s of SAMPLING) rows.push({ ...s, uniform: rng.next() });
      // Logits spread like a real model's (a few strong candidates); ties are drawn from a small set.
      const logits = Float32Array.from({ length: rows.length * vocab }, () =>
        ties ? rng.int(6) * 0.5 : rng.uniform(-4, 4) ** 3 / 8,
      );
      const x = b.upload(logits, [rows.length, vocab]);
      return finish(b, [b.sample(x, rows)], [x]);
    },
  };
}

/** Every attention, KV and sampling case. */
export function attentionCases(): Case[] {
  return [
    ...GEOMETRIES.map((g) => attentionCase(g)),
    ...LONG_GEOMETRIES.map((g) => attentionCase(g, LONG_SEQS)),
    kvWriteCase(GEOMETRIES[0], 37),
    kvWriteCase(GEOMETRIES[1], 1),
    kvWriteCase(GEOMETRIES[2], 9),
    kvWriteCase({ heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f16" }, 9),
    kvWriteCase({ heads: 8, kvHeads: 1, headDim: 576, blockSize: 16, kv: "f16", shared: true }, 5),
    kvWriteCase({ heads: 3, kvHeads: 1, headDim: 8, blockSize: 4, shared: true }, 6),
    kvWriteCase({ heads: 4, kvHeads: 2, headDim: 64, blockSize: 16, kv: "f8_e4m3" }, 9),
    kvWriteCase({ heads: 8, kvHeads: 1, headDim: 576, blockSize: 16, kv: "f8_e4m3", shared: true }, 5),
    kvWriteCase({ heads: 8, kvHeads: 8, headDim: 12, blockSize: 4, kv: "f8_e4m3" }, 7),
    ...ROTATE_WRITES.map(([g, n]) => rotateWriteCase(g, n)),
    sampleCase(517, 3, false),
    sampleCase(37, 2, true),
    sampleCase(1, 1, false),
    sampleCase(2000, 1, false),
  ];
}

/**
 * Conformance cases at the edges every backend must settle alike:
 * - argmax and sample over rows holding NaN, -inf or +inf: NaN is never the max and has no
 *   probability; a row without a finite largest logit gives its argmax (0 when all are -inf or NaN).
 * - kvWrite into an f16 cache past f16's range: ggml's rounding, ±inf from ±65520 on, NaN kept.
 * - refusals, compared as "name: message" (as i32 char codes) plus the untouched caches: kvWrite
 *   slots and pagedAttention rows or block ids out of range, rope's theta and freqFactors.
 * All exact.
 */
import type { AttentionBatch, Backend, SamplingRow, Tensor } from "../../src/backend/types.ts";
import { type Case, EXACT, type Output, type Rng } from "./conformance-support.ts";

async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...outputs, ...temps]) b.free(t);
  return res;
}

/** The error `fn` throws as "name: message" char codes, or [-1] when it throws nothing. */
function refusal(fn: () => unknown): Int32Array {
  try {
    fn();
  } catch (e) {
    const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    return Int32Array.from(text, (ch) => ch.charCodeAt(0));
  }
  return Int32Array.of(-1);
}

/** Rows of `cols` random logits, each row with one of the edge patterns (cycling). */
function edgeRows(rng: Rng, rows: number, cols: number): Float32Array {
  const x = rng.f32(rows * cols, -4, 4);
  for (let r = 0; r < rows; r++) {
    const row = x.subarray(r * cols, (r + 1) * cols);
    const at = () => rng.int(cols);
    switch (r % 9) {
      case 0: row[0] = NaN; break; // NaN first: once the max on the reference
      case 1: row[at()] = NaN; row[cols - 1] = NaN; break;
      case 2: for (let c = 0; c < cols; c += 3) row[c] = NaN; break; // NaN in every thread's stride
      case 3: row.fill(NaN); break;
      case 4: row.fill(-Infinity); break; // every token barred
      case 5: row.fill(-Infinity); row[0] = NaN; row[cols - 1] = NaN; break;
      case 6: row[at()] = Infinity; row[at()] = NaN; break;
      case 7: row[at()] = Infinity; row[at()] = Infinity; break;
      case 8: for (let c = 0; c < cols; c += 2) row[c] = -Infinity; row[1] = NaN; break;
    }
  }
  return x;
}

function argmaxEdgeCase(rows: number, cols: number): Case {
  return {
    op: "argmax",
    name: `[${rows}, ${cols}] with NaN, -inf and +inf rows`,
    tolerance: EXACT,
    run: (b, rng) => {
      const x = b.upload(edgeRows(rng, rows, cols), [rows, cols]);
      return finish(b, [b.argmax(x)], [x]);
    },
  };
}

const EDGE_SAMPLING: Omit<SamplingRow, "uniform">[] = [
  { temperature: 0, topK: 0, topP: 1 },
  { temperature: 1, topK: 0, topP: 1 },
  { temperature: 0.7, topK: 5, topP: 0.9 },
  { temperature: 1.3, topK: 0, topP: 1, minP: 0.1 },
];

function sampleEdgeCase(cols: number): Case {
  const rows = 9 * EDGE_SAMPLING.length;
  return {
    op: "sample",
    name: `vocab=${cols} rows=${rows} with NaN, -inf and +inf rows`,
    tolerance: EXACT,
    run: (b, rng) => {
      // Row r has pattern r % 9 and sampling row floor(r / 9): every pattern under every setting.
      const params = Array.from({ length: rows }, (_, r) => ({ ...EDGE_SAMPLING[Math.floor(r / 9)], uniform: rng.next() }));
      const x = b.upload(edgeRows(rng, rows, cols), [rows, cols]);
      return finish(b, [b.sample(x, params)], [x]);
    },
  };
}

/** Values around and past f16's largest finite 65504, and the non-finite ones. */
const F16_EDGES = [65504, 65519, 65519.996, 65520, 65536, 1e5, 3.4e38, Infinity, NaN, 65504.5, 6e4];

function kvWriteF16EdgeCase(): Case {
  const [numBlocks, blockSize, kvHeads, headDim] = [3, 2, 2, 6];
  return {
    op: "kvWrite",
    name: "f16 cache, values past ±65504, ±inf and NaN",
    tolerance: EXACT,
    kvDtype: "f16",
    run: (b, rng) => {
      const shape = [numBlocks, blockSize, kvHeads, headDim];
      const kc = b.zeros(shape, "f16");
      const vc = b.zeros(shape, "f16");
      const n = 4;
      const values = () => Float32Array.from({ length: n * kvHeads * headDim }, (_, i) => F16_EDGES[i % F16_EDGES.length] * (rng.next() < 0.5 ? -1 : 1));
      const k = b.upload(values(), [n, kvHeads, headDim]);
      const v = b.upload(values(), [n, kvHeads, headDim]);
      const slots = b.upload(Int32Array.of(5, 0, 3, 2), [n]);
      b.kvWrite(k, v, kc, vc, slots);
      return finish(b, [kc, vc], [k, v, slots]);
    },
  };
}

function kvWriteRefusalCase(bad: number): Case {
  const [numBlocks, blockSize, kvHeads, headDim] = [2, 4, 1, 4];
  return {
    op: "kvWrite",
    name: `refuses slot ${bad} of a cache of ${numBlocks * blockSize}, writing nothing`,
    tolerance: EXACT,
    run: (b, rng) => {
      const shape = [numBlocks, blockSize, kvHeads, headDim];
      const len = numBlocks * blockSize * kvHeads * headDim;
      const kc = b.upload(rng.f32(len), shape);
      const vc = b.upload(rng.f32(len), shape);
      const k = b.upload(rng.f32(3 * kvHeads * headDim), [3, kvHeads, headDim]);
      const v = b.upload(rng.f32(3 * kvHeads * headDim), [3, kvHeads, headDim]);
      const slots = b.upload(Int32Array.of(1, bad, 6), [3]);
      const why = refusal(() => b.kvWrite(k, v, kc, vc, slots));
      return finish(b, [kc, vc], [k, v, slots]).then((caches) => [why, ...caches]);
    },
  };
}

/** One sequence of 6 positions over blocks of 2 ([2, 0, 1]) and a second at position 0; `edit` spoils it. */
function attentionRefusalCase(what: string, edit: (a: { seq: Int32Array; pos: Int32Array; tables: Int32Array }) => void, window?: number): Case {
  const [numBlocks, blockSize, heads, headDim] = [4, 2, 2, 4];
  return {
    op: "pagedAttention",
    name: `${what}${window ? ` (window ${window})` : ""}`,
    tolerance: { atol: 2e-5, rtol: 1e-4 },
    run: (b, rng) => {
      const shape = [numBlocks, blockSize, 1, headDim];
      const len = numBlocks * blockSize * headDim;
      const kc = b.upload(rng.f32(len), shape);
      const vc = b.upload(rng.f32(len), shape);
      const a = { seq: Int32Array.of(0, 0, 0, 1), pos: Int32Array.of(3, 4, 5, 0), tables: Int32Array.of(2, 0, 1, 3, -1, -1) };
      edit(a);
      const n = a.seq.length;
      const batch: AttentionBatch = {
        tokenSeq: b.upload(a.seq, [n]),
        tokenPos: b.upload(a.pos, [n]),
        blockTables: b.upload(a.tables, [2, 3]),
        maxContext: 6,
      };
      const q = b.upload(rng.f32(n * heads * headDim), [n, heads, headDim]);
      const temps = [kc, vc, q, batch.tokenSeq, batch.tokenPos, batch.blockTables];
      let out: Tensor | undefined;
      const why = refusal(() => (out = b.pagedAttention(q, kc, vc, batch, 0.5, { window })));
      return finish(b, out ? [out] : [], temps).then((outs) => [why, ...outs]);
    },
  };
}

function ropeRefusalCase(theta: number, factors = 2, magnitude = 1): Case {
  return {
    op: "rope",
    name: `refuses theta ${theta}${factors !== 2 ? ` and ${factors} freqFactors for rotaryDim 4` : ""}${magnitude !== 1 ? ` magnitude ${magnitude}` : ""}`,
    tolerance: EXACT,
    run: (b, rng) => {
      const x = b.upload(rng.f32(2 * 1 * 4), [2, 1, 4]);
      const pos = b.upload(Int32Array.of(0, 7), [2]);
      const f = b.upload(rng.f32(factors, 1, 8), [factors]);
      let out: Tensor | undefined;
      const why = refusal(() => (out = b.rope(x, pos, theta, "neox", 4, f, magnitude)));
      return finish(b, out ? [out] : [], [x, pos, f]).then((outs) => [why, ...outs]);
    },
  };
}

/**
 * rotateAndWriteKv refused, with q and both caches untouched: a slot past the cache, one cache for
 * keys and values, queries whose heads are wider than the keys'.
 */
function rotateWriteRefusalCase(what: "slot" | "shared" | "width"): Case {
  const [numBlocks, blockSize, kvHeads, headDim] = [3, 2, 1, 4];
  return {
    op: "rotateAndWriteKv",
    optionalOp: "rotateAndWriteKv",
    name: what === "slot" ? "refuses slot 6 of a 6-slot cache" : what === "shared" ? "refuses one cache for keys and values" : "refuses queries wider than the keys",
    tolerance: EXACT,
    run: (b, rng) => {
      const shape = [numBlocks, blockSize, kvHeads, headDim];
      const len = numBlocks * blockSize * kvHeads * headDim;
      const kc = b.upload(rng.f32(len), shape);
      const vc = what === "shared" ? kc : b.upload(rng.f32(len), shape);
      const qDim = what === "width" ? 2 * headDim : headDim;
      const q = b.upload(rng.f32(2 * 2 * qDim), [2, 2, qDim]);
      const k = b.upload(rng.f32(2 * kvHeads * headDim), [2, kvHeads, headDim]);
      const v = b.upload(rng.f32(2 * kvHeads * headDim), [2, kvHeads, headDim]);
      const pos = b.upload(Int32Array.of(3, 4), [2]);
      const slots = b.upload(Int32Array.of(1, what === "slot" ? 6 : 2), [2]);
      const why = refusal(() => b.rotateAndWriteKv!(q, k, v, pos, { theta: 10000, layout: "neox" }, kc, vc, slots));
      return finish(b, what === "shared" ? [q, kc] : [q, kc, vc], [k, v, pos, slots]).then((outs) => [why, ...outs]);
    },
  };
}

/** Every edge case. */
export function edgeCases(): Case[] {
  return [
    argmaxEdgeCase(9, 5),
    argmaxEdgeCase(18, 130),
    argmaxEdgeCase(9, 517),
    sampleEdgeCase(7),
    sampleEdgeCase(300),
    kvWriteF16EdgeCase(),
    kvWriteRefusalCase(8),
    kvWriteRefusalCase(-1),
    attentionRefusalCase("refuses block id 4 of a 4-block cache", (a) => void (a.tables[1] = 4)),
    attentionRefusalCase("refuses block id -1 a row reads", (a) => void (a.pos[3] = 2), undefined),
    attentionRefusalCase("refuses tokenSeq 2 of 2 sequences", (a) => void (a.seq[2] = 2)),
    attentionRefusalCase("refuses tokenPos 6 at maxContext 6", (a) => void (a.pos[2] = 6)),
    attentionRefusalCase("reads no block before the window, stale or not", (a) => void (a.tables[0] = -5), 2),
    ropeRefusalCase(0),
    ropeRefusalCase(-10000),
    ropeRefusalCase(NaN),
    ropeRefusalCase(Infinity),
    ropeRefusalCase(10000, 3),
    ropeRefusalCase(10000, 2, 0),
    ropeRefusalCase(10000, 2, NaN),
    rotateWriteRefusalCase("slot"),
    rotateWriteRefusalCase("shared"),
    rotateWriteRefusalCase("width"),
  ];
}

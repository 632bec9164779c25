/**
 * CUDA paged attention against the reference on an NVIDIA GPU (skipped without one): the
 * split-KV decode kernel (one and many partitions), the flash prefill kernel over a cached
 * prefix, a mixed batch, GQA groups that do not fill a head chunk, and odd head dims.
 */
import { test } from "../harness.ts";
import type { AttentionBatch, Backend, Tensor } from "../../src/backend/types.ts";
import { assertClose, cuda, poison, rand, ref } from "./cuda-helpers.ts";

interface Case {
  name: string;
  heads: number;
  kvHeads: number;
  headDim: number;
  blockSize: number;
  /** Per sequence: how many positions are cached, and which of them are query rows. */
  seqs: { context: number; queries: number[] }[];
  /** Take tokenSeq from an op (no host copy): every row then goes through the split-KV kernel. */
  deviceSeq?: boolean;
}

const CASES: Case[] = [
  { name: "decode, one partition", heads: 4, kvHeads: 4, headDim: 64, blockSize: 16, seqs: [{ context: 9, queries: [8] }] },
  { name: "decode, many partitions, GQA 8:1", heads: 8, kvHeads: 1, headDim: 128, blockSize: 16,
    seqs: [{ context: 3000, queries: [2999] }, { context: 40, queries: [39] }] },
  { name: "prefill chunk over a cached prefix, GQA 3:1, head dim 48", heads: 6, kvHeads: 2, headDim: 48, blockSize: 4,
    seqs: [{ context: 57, queries: Array.from({ length: 37 }, (_, i) => 20 + i) }] },
  { name: "mixed batch: decode rows around a prefill chunk, head dim 256", heads: 4, kvHeads: 2, headDim: 256,
    blockSize: 8, seqs: [{ context: 70, queries: [69] }, { context: 45, queries: [40, 41, 42, 43, 44] },
      { context: 1, queries: [0] }] },
  { name: "prefill rows without a host copy of tokenSeq (split-KV for every row)", heads: 2, kvHeads: 1,
    headDim: 24, blockSize: 4, seqs: [{ context: 30, queries: [25, 26, 27, 28, 29] }], deviceSeq: true },
];

/** Builds caches, a shuffled block table and the batch on one backend from the same seeds. */
function setup(be: Backend, c: Case) {
  const blocksPer = c.seqs.map((s) => Math.ceil(s.context / c.blockSize));
  const maxBlocks = Math.max(...blocksPer);
  const numBlocks = blocksPer.reduce((a, b) => a + b, 0) + 3;
  // Block ids handed out in a scrambled order so the table matters.
  const ids = Array.from({ length: numBlocks }, (_, i) => (i * 7 + 3) % numBlocks);
  const tables = new Int32Array(c.seqs.length * maxBlocks).fill(-1);
  let next = 0;
  c.seqs.forEach((_, s) => { for (let b = 0; b < blocksPer[s]; b++) tables[s * maxBlocks + b] = ids[next++]; });
  const row = c.kvHeads * c.headDim;
  const kc = be.zeros([numBlocks, c.blockSize, c.kvHeads, c.headDim], "f32");
  const vc = be.zeros([numBlocks, c.blockSize, c.kvHeads, c.headDim], "f32");
  const slots: number[] = [];
  c.seqs.forEach((s, si) => {
    for (let p = 0; p < s.context; p++) slots.push(tables[si * maxBlocks + Math.floor(p / c.blockSize)] * c.blockSize + p % c.blockSize);
  });
  const n = slots.length;
  be.kvWrite(be.upload(rand(n * row, 1, 2), [n, c.kvHeads, c.headDim]),
    be.upload(rand(n * row, 2, 2), [n, c.kvHeads, c.headDim]), kc, vc, be.upload(Int32Array.from(slots), [n]));
  const seq: number[] = [], pos: number[] = [];
  c.seqs.forEach((s, si) => s.queries.forEach((p) => { seq.push(si); pos.push(p); }));
  let tokenSeq: Tensor = be.upload(Int32Array.from(seq), [seq.length]);
  if (c.deviceSeq) {
    const oneHot = new Float32Array(seq.length * c.seqs.length);
    seq.forEach((s, i) => { oneHot[i * c.seqs.length + s] = 1; });
    tokenSeq = be.argmax(be.upload(oneHot, [seq.length, c.seqs.length]));
  }
  const batch: AttentionBatch = {
    tokenSeq,
    tokenPos: be.upload(Int32Array.from(pos), [pos.length]),
    blockTables: be.upload(tables, [c.seqs.length, maxBlocks]),
    maxContext: Math.max(...c.seqs.map((s) => s.context)),
  };
  const q = be.upload(rand(seq.length * c.heads * c.headDim, 3), [seq.length, c.heads, c.headDim]);
  return { kc, vc, batch, q, rows: seq.length };
}

for (const c of CASES) {
  test(`pagedAttention() matches the reference: ${c.name}`, async () => {
    const g = setup(cuda!, c);
    const r = setup(ref, c);
    const scale = 1 / Math.sqrt(c.headDim);
    poison(g.rows * c.heads * c.headDim);
    await assertClose(cuda!.pagedAttention(g.q, g.kc, g.vc, g.batch, scale),
      ref.pagedAttention(r.q, r.kc, r.vc, r.batch, scale), c.name, 1e-5, 1e-4);
  }, { ignore: !cuda });
}

/**
 * Conformance cases of the recurrent-state ops (Gated DeltaNet layers: Qwen3.5, Qwen3-Next; LFM2's
 * short convolutions; Mamba-2 layers: the convolution's bias and ssmScan): sigmoidMul, causalConv1d, shortConv, gatedDeltaNet and ssmScan over ragged steps — sequences of several rows and of
 * one (decode), fresh ones (whose slot holds stale values that must be ignored) and carried ones,
 * slots out of order, both value-head orders. Each checks the output and the updated state.
 */
import type { Backend, DeltaNetSpec, SsmSpec, Tensor } from "../../src/backend/types.ts";
import type { Case, Output, Rng, Tolerance } from "./conformance-support.ts";

const CLOSE: Tolerance = { atol: 2e-5, rtol: 2e-4 };

/** A sequence of a step: its rows, its slot, whether it starts fresh. */
interface Seq {
  rows: number;
  slot: number;
  fresh: boolean;
}

function seqTable(b: Backend, seqs: readonly Seq[]): { t: Tensor; n: number } {
  const v = new Int32Array(seqs.length * 4);
  let row = 0;
  seqs.forEach((s, i) => {
    v.set([row, s.rows, s.slot, s.fresh ? 1 : 0], i * 4);
    row += s.rows;
  });
  return { t: b.upload(v, [seqs.length, 4]), n: row };
}

async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...new Set([...outputs, ...temps])]) b.free(t);
  return res;
}

function sigmoidMulCase(rows: number, cols: number): Case {
  return {
    op: "sigmoidMul",
    name: `[${rows}, ${cols}]`,
    tolerance: CLOSE,
    optionalOp: "sigmoidMul",
    run: (b, rng) => {
      const g = b.upload(rng.f32(rows * cols, -6, 6), [rows, cols]);
      const x = b.upload(rng.f32(rows * cols, -3, 3), [rows, cols]);
      return finish(b, [b.sigmoidMul!(g, x)], [g, x]);
    },
  };
}

function conv1dCase(channels: number, kernel: number, slots: number, seqs: readonly Seq[], withBias = false): Case {
  return {
    op: "causalConv1d",
    name: `channels=${channels} K=${kernel}${withBias ? " bias" : ""} seqs=${seqs.map((s) => `${s.rows}@${s.slot}${s.fresh ? "*" : ""}`).join(",")}`,
    tolerance: CLOSE,
    optionalOp: "causalConv1d",
    run: (b, rng) => {
      const { t: table, n } = seqTable(b, seqs);
      const x = b.upload(rng.f32(n * channels, -2, 2), [n, channels]);
      const w = b.upload(rng.f32(channels * kernel, -1, 1), [channels, kernel]);
      const state = b.upload(rng.f32(slots * (kernel - 1) * channels, -2, 2), [slots, kernel - 1, channels]);
      const bias = withBias ? b.upload(rng.f32(channels, -2, 2), [channels]) : undefined;
      const y = b.causalConv1d!(x, w, state, { seqs: table, numSeqs: seqs.length }, bias);
      return finish(b, [y, state], [table, x, w, ...(bias ? [bias] : [])]);
    },
  };
}

function ssmCase(spec: SsmSpec, slots: number, seqs: readonly Seq[]): Case {
  const { heads, headDim, stateDim, groups } = spec;
  return {
    op: "ssmScan",
    name: `heads=${heads} headDim=${headDim} stateDim=${stateDim} groups=${groups} seqs=${seqs.map((s) => `${s.rows}@${s.slot}${s.fresh ? "*" : ""}`).join(",")}`,
    tolerance: CLOSE,
    optionalOp: "ssmScan",
    run: (b, rng: Rng) => {
      const { t: table, n } = seqTable(b, seqs);
      const width = heads * headDim + 2 * groups * stateDim;
      const xbc = b.upload(rng.f32(n * width, -1, 1), [n, width]);
      const dt = b.upload(rng.f32(n * heads, -4, 3), [n, heads]);
      // dt up to 25 with the bias: softplus's identity branch past 20 is taken too.
      const dtBias = b.upload(rng.f32(heads, -1, 22), [heads]);
      const a = b.upload(rng.f32(heads, -2, -0.05), [heads]);
      const d = b.upload(rng.f32(heads, -1, 1), [heads]);
      const state = b.upload(rng.f32(slots * heads * headDim * stateDim, -0.5, 0.5), [slots, heads, headDim, stateDim]);
      const o = b.ssmScan!(xbc, dt, a, d, dtBias, state, { seqs: table, numSeqs: seqs.length }, spec);
      return finish(b, [o, state], [table, xbc, dt, a, d, dtBias]);
    },
  };
}

function shortConvCase(channels: number, kernel: number, slots: number, seqs: readonly Seq[]): Case {
  return {
    op: "shortConv",
    name: `channels=${channels} K=${kernel} seqs=${seqs.map((s) => `${s.rows}@${s.slot}${s.fresh ? "*" : ""}`).join(",")}`,
    tolerance: CLOSE,
    optionalOp: "shortConv",
    run: (b, rng) => {
      const { t: table, n } = seqTable(b, seqs);
      const bcx = b.upload(rng.f32(n * 3 * channels, -2, 2), [n, 3 * channels]);
      const w = b.upload(rng.f32(channels * kernel, -1, 1), [channels, kernel]);
      const state = b.upload(rng.f32(slots * (kernel - 1) * channels, -2, 2), [slots, kernel - 1, channels]);
      const y = b.shortConv!(bcx, w, state, { seqs: table, numSeqs: seqs.length });
      return finish(b, [y, state], [table, bcx, w]);
    },
  };
}

function deltaNetCase(spec: DeltaNetSpec, slots: number, seqs: readonly Seq[]): Case {
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
  return {
    op: "gatedDeltaNet",
    name: `kHeads=${nk} vHeads=${nv} dk=${dk} dv=${dv} ${spec.vHeadOrder} seqs=${seqs.map((s) => `${s.rows}@${s.slot}${s.fresh ? "*" : ""}`).join(",")}`,
    tolerance: CLOSE,
    optionalOp: "gatedDeltaNet",
    run: (b, rng: Rng) => {
      const { t: table, n } = seqTable(b, seqs);
      const width = 2 * nk * dk + nv * dv;
      const x = b.upload(rng.f32(n * width, -1, 1), [n, width]);
      const alpha = b.upload(rng.f32(n * nv, -3, 3), [n, nv]);
      const beta = b.upload(rng.f32(n * nv, -3, 3), [n, nv]);
      const decay = b.upload(rng.f32(nv, -2, -0.05), [nv]);
      const dtBias = b.upload(rng.f32(nv, -1, 1), [nv]);
      const state = b.upload(rng.f32(slots * nv * dk * dv, -0.5, 0.5), [slots, nv, dk, dv]);
      const o = b.gatedDeltaNet!(x, alpha, beta, decay, dtBias, state, { seqs: table, numSeqs: seqs.length }, spec);
      return finish(b, [o, state], [table, x, alpha, beta, decay, dtBias]);
    },
  };
}

/** The recurrent ops' cases. */
export function recurrentCases(): Case[] {
  const prefill: Seq[] = [{ rows: 5, slot: 2, fresh: true }, { rows: 1, slot: 0, fresh: false }, { rows: 2, slot: 3, fresh: false }];
  const decode: Seq[] = [{ rows: 1, slot: 1, fresh: false }, { rows: 1, slot: 3, fresh: false }, { rows: 1, slot: 0, fresh: true }];
  const spec = (nk: number, nv: number, dk: number, dv: number, vHeadOrder: "tiled" | "grouped"): DeltaNetSpec => ({ numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv, vHeadOrder, eps: 1e-6 });
  return [
    sigmoidMulCase(37, 53),
    sigmoidMulCase(1, 7),
    conv1dCase(40, 4, 4, prefill),
    conv1dCase(40, 4, 4, decode),
    conv1dCase(33, 2, 3, [{ rows: 3, slot: 1, fresh: false }]),
    conv1dCase(8, 4, 2, [{ rows: 9, slot: 0, fresh: false }, { rows: 2, slot: 1, fresh: true }]),
    conv1dCase(40, 4, 4, prefill, true),
    conv1dCase(40, 4, 4, decode, true),
    ssmCase({ heads: 4, headDim: 16, stateDim: 16, groups: 1 }, 4, prefill),
    ssmCase({ heads: 4, headDim: 8, stateDim: 32, groups: 2 }, 4, decode),
    ssmCase({ heads: 2, headDim: 80, stateDim: 128, groups: 1 }, 2, [{ rows: 3, slot: 1, fresh: false }, { rows: 1, slot: 0, fresh: true }]),
    shortConvCase(40, 3, 4, prefill),
    shortConvCase(40, 3, 4, decode),
    shortConvCase(24, 4, 2, [{ rows: 1, slot: 1, fresh: false }, { rows: 7, slot: 0, fresh: true }]),
    deltaNetCase(spec(2, 4, 16, 16, "tiled"), 4, prefill),
    deltaNetCase(spec(2, 4, 16, 16, "grouped"), 4, prefill),
    deltaNetCase(spec(1, 2, 32, 16, "grouped"), 4, decode),
    deltaNetCase(spec(2, 2, 128, 128, "tiled"), 2, [{ rows: 3, slot: 1, fresh: false }, { rows: 1, slot: 0, fresh: true }]),
  ];
}

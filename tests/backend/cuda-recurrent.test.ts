/**
 * CUDA recurrent-state kernels (kernels-cuda/recurrent.cu) against the reference on an NVIDIA GPU
 * (skipped without one), beyond the shared conformance cases: every convolution width the kernel
 * takes, key head dimensions for 1, 2, 4 and 8 threads per state column (and padded ones), column
 * tiles that end inside a block, long sequences, a decode chain, a sequence table without a host copy,
 * and the limits.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { CudaTensor } from "../../src/backend/cuda/index.ts";
import { BackendShapeError, type DeltaNetSpec, type Tensor } from "../../src/backend/types.ts";
import { assertClose, both, cuda, poison, rand, ref } from "./cuda-helpers.ts";

const skip = { ignore: !cuda };

/** A step's sequence table [rows, slot, fresh] → i32 [numSeqs, 4] on both backends, and its row count. */
function table(seqs: readonly [number, number, boolean][]): { c: Tensor; r: Tensor; n: number; numSeqs: number } {
  const v = new Int32Array(seqs.length * 4);
  let row = 0;
  seqs.forEach(([rows, slot, fresh], i) => {
    v.set([row, rows, slot, fresh ? 1 : 0], i * 4);
    row += rows;
  });
  const [c, r] = both(v, [seqs.length, 4]);
  return { c, r, n: row, numSeqs: seqs.length };
}

test("causalConv1d() matches the reference for every kernel width 2..8, short and long sequences", async () => {
  const channels = 130; // two channel tiles, the second mostly idle
  for (let k = 2; k <= 8; k++) {
    const t = table([[1, 2, false], [k - 2 > 0 ? k - 2 : 1, 0, true], [37, 3, false], [2, 1, true]]);
    const [xc, xr] = both(rand(t.n * channels, k, 2), [t.n, channels]);
    const [wc, wr] = both(rand(channels * k, k + 1), [channels, k]);
    const [sc, sr] = both(rand(4 * (k - 1) * channels, k + 2, 2), [4, k - 1, channels]);
    poison(t.n * channels);
    const yc = cuda!.causalConv1d(xc, wc, sc, { seqs: t.c, numSeqs: t.numSeqs });
    const yr = ref.causalConv1d!(xr, wr, sr, { seqs: t.r, numSeqs: t.numSeqs });
    await assertClose(yc, yr, `causalConv1d K=${k} output`, 2e-5, 2e-4);
    await assertClose(sc, sr, `causalConv1d K=${k} state`, 0, 0);
  }
}, skip);

const spec = (nk: number, nv: number, dk: number, dv: number, vHeadOrder: "tiled" | "grouped"): DeltaNetSpec => ({
  numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv, vHeadOrder, eps: 1e-6,
});

/** One step on both backends, checking output and state; `states` carries both backends' state tensors across steps. */
async function deltaNetCase(
  s: DeltaNetSpec, slots: number, seqs: readonly [number, number, boolean][], seed: number, states?: [Tensor, Tensor],
): Promise<void> {
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = s;
  const t = table(seqs);
  const width = 2 * nk * dk + nv * dv;
  const [xc, xr] = both(rand(t.n * width, seed), [t.n, width]);
  const [ac, ar] = both(rand(t.n * nv, seed + 1, 3), [t.n, nv]);
  const [bc, br] = both(rand(t.n * nv, seed + 2, 3), [t.n, nv]);
  const [dc, dr] = both(rand(nv, seed + 3).map((v) => -0.05 - Math.abs(v)), [nv]);
  const [tc, tr] = both(rand(nv, seed + 4), [nv]);
  const [sc, sr] = states ?? both(rand(slots * nv * dk * dv, seed + 5, 0.5), [slots, nv, dk, dv]);
  poison(t.n * nv * dv);
  const oc = cuda!.gatedDeltaNet(xc, ac, bc, dc, tc, sc, { seqs: t.c, numSeqs: t.numSeqs }, s);
  const or = ref.gatedDeltaNet!(xr, ar, br, dr, tr, sr, { seqs: t.r, numSeqs: t.numSeqs }, s);
  const what = `gatedDeltaNet nk=${nk} nv=${nv} dk=${dk} dv=${dv} ${s.vHeadOrder}`;
  await assertClose(oc, or, `${what} output`, 5e-5, 5e-4);
  await assertClose(sc, sr, `${what} state`, 5e-5, 5e-4);
}

test("gatedDeltaNet() matches the reference for 1, 2, 4 and 8 threads per state column and odd head dims", async () => {
  const seqs: [number, number, boolean][] = [[3, 1, false], [1, 0, true], [2, 2, false]];
  // dk 24 (one thread, padded), 64 (two), 96 (four, padded), 128 (four), 200 and 256 (eight); dv that
  // end a column tile inside a block (24, 40, 100) or span several blocks (128, 200).
  for (const [dk, dv, order] of [[24, 24, "tiled"], [64, 40, "grouped"], [96, 100, "tiled"], [128, 128, "grouped"], [200, 24, "grouped"], [256, 200, "tiled"]] as const) {
    await deltaNetCase(spec(2, 4, dk, dv, order), 3, seqs, dk + dv);
  }
}, skip);

test("gatedDeltaNet() over a long prefill and a decode chain matches the reference", async () => {
  await deltaNetCase(spec(2, 6, 128, 128, "grouped"), 2, [[150, 1, true], [60, 0, false]], 5);
  const chain = spec(1, 2, 64, 64, "tiled");
  const states = both(rand(4 * 2 * 64 * 64, 39, 0.5), [4, 2, 64, 64]);
  for (let step = 0; step < 4; step++) await deltaNetCase(chain, 4, [[1, 3, step === 0], [1, 0, false]], 40 + step, states);
}, skip);

test("gatedDeltaNet() and causalConv1d() with a device-only sequence table skip a bad sequence and zero rows no sequence covers", async () => {
  const s = spec(1, 1, 32, 32, "tiled");
  const width = 2 * 32 + 32;
  const n = 4;
  // Sequence 0: rows 1..2 in slot 1; sequence 1: slot 7 of 2 (skipped on the device).
  const seqs = cuda!.upload(Int32Array.of(1, 2, 1, 0, 3, 1, 7, 1), [2, 4]) as CudaTensor;
  const deviceOnly = new CudaTensor(seqs.ptr, seqs.shape, "i32");
  const state = rand(2 * 32 * 32, 9, 0.5);
  const sc = cuda!.upload(state, [2, 1, 32, 32]);
  const one = (v: number) => cuda!.upload(new Float32Array(n).fill(v), [n, 1]);
  poison(n * 32);
  const out = await cuda!.download(cuda!.gatedDeltaNet(
    cuda!.upload(rand(n * width, 10), [n, width]), one(0.5), one(0.5), cuda!.upload(Float32Array.of(-0.5), [1]), cuda!.upload(Float32Array.of(0), [1]), sc,
    { seqs: deviceOnly, numSeqs: 2 }, s,
  ));
  for (const row of [0, 3]) assert.ok(out.subarray(row * 32, row * 32 + 32).every((v) => v === 0), `row ${row} not zero`);
  assert.ok(out.subarray(32, 96).some((v) => v !== 0), "rows 1..2 not written");
  const after = await cuda!.download(sc);
  assert.deepEqual(Array.from(after.subarray(0, 32 * 32)), Array.from(state.subarray(0, 32 * 32)), "slot 0 touched");
  poison(n * 8);
  const conv = await cuda!.download(cuda!.causalConv1d(
    cuda!.upload(rand(n * 8, 11), [n, 8]), cuda!.upload(rand(8 * 4, 12), [8, 4]), cuda!.zeros([2, 3, 8], "f32"), { seqs: deviceOnly, numSeqs: 2 },
  ));
  for (const row of [0, 3]) assert.ok(conv.subarray(row * 8, row * 8 + 8).every((v) => v === 0), `conv row ${row} not zero`);
}, skip);

test("sigmoidMul() matches the reference, saturated gates included", async () => {
  const gates = rand(5 * 333, 1, 8);
  gates.set([-100, 100, -Infinity, Infinity, 0, -88, 88]);
  const [gc, gr] = both(gates, [5, 333]);
  const [xc, xr] = both(rand(5 * 333, 2, 3), [5, 333]);
  poison(5 * 333);
  await assertClose(cuda!.sigmoidMul(gc, xc), ref.sigmoidMul!(gr, xr), "sigmoidMul", 1e-6, 1e-5);
}, skip);

test("causalConv1d() and gatedDeltaNet() refuse what the CUDA kernels cannot hold, and bad sequence tables, before writing", async () => {
  const seqs = cuda!.upload(Int32Array.of(0, 1, 0, 1), [1, 4]);
  const x = cuda!.zeros([1, 4], "f32");
  assert.throws(() => cuda!.causalConv1d(x, cuda!.zeros([4, 9], "f32"), cuda!.zeros([1, 8, 4], "f32"), { seqs, numSeqs: 1 }),
    (e: unknown) => e instanceof BackendShapeError && /at most 8 taps, got weight \[4, 9\]/.test(e.message));
  const s = spec(1, 1, 257, 4, "tiled");
  const width = 2 * 257 + 4;
  const one = cuda!.zeros([1, 1], "f32"), per = cuda!.zeros([1], "f32");
  assert.throws(() => cuda!.gatedDeltaNet(cuda!.zeros([1, width], "f32"), one, one, per, per, cuda!.zeros([1, 1, 257, 4], "f32"), { seqs, numSeqs: 1 }, s),
    (e: unknown) => e instanceof BackendShapeError && /headKDim 257/.test(e.message));
  const stale = rand(3 * 4, 3);
  const state = cuda!.upload(stale, [1, 3, 4]);
  const badSlot = cuda!.upload(Int32Array.of(0, 1, 1, 0), [1, 4]);
  assert.throws(() => cuda!.causalConv1d(x, cuda!.zeros([4, 4], "f32"), state, { seqs: badSlot, numSeqs: 1 }), /Recurrent state slot 1 of sequence 0 is outside 0\.\.0/);
  assert.deepEqual(await cuda!.download(state), stale);
}, skip);

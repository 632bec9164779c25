/**
 * The reference backend's recurrent-state ops carry their state: a sequence run in one step and the
 * same rows split over two steps give the same outputs and the same final state, a fresh sequence
 * ignores what its slot held, and a bad sequence table is refused before anything is written.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend, DeltaNetSpec, Tensor } from "../../src/backend/types.ts";
import { Rng } from "./conformance-support.ts";

const b: Backend = createReferenceBackend();
const SPEC: DeltaNetSpec = { numKHeads: 2, numVHeads: 4, headKDim: 8, headVDim: 8, vHeadOrder: "grouped", eps: 1e-6 };
const WIDTH = 2 * 2 * 8 + 4 * 8;

const table = (first: number, rows: number, slot: number, fresh: boolean): Tensor => b.upload(Int32Array.of(first, rows, slot, fresh ? 1 : 0), [1, 4]);
const rowsOf = (x: Float32Array, width: number, from: number, to: number) => b.upload(x.slice(from * width, to * width), [to - from, width]);

async function runConv(x: Float32Array, w: Tensor, state: Tensor, cuts: number[], channels: number): Promise<Float32Array> {
  const out: number[] = [];
  let from = 0;
  for (const to of cuts) {
    const y = b.causalConv1d!(rowsOf(x, channels, from, to), w, state, { seqs: table(0, to - from, 1, from === 0), numSeqs: 1 });
    out.push(...(await b.download(y)));
    from = to;
  }
  return Float32Array.from(out);
}

test("causalConv1d() on reference carries its inputs across steps", async () => {
  const rng = new Rng(7);
  const [channels, k, n] = [6, 4, 7];
  const x = rng.f32(n * channels);
  const w = b.upload(rng.f32(channels * k), [channels, k]);
  const stale = rng.f32(2 * (k - 1) * channels, 5, 9);
  const one = b.upload(stale, [2, k - 1, channels]);
  const split = b.upload(stale, [2, k - 1, channels]);
  const whole = await runConv(x, w, one, [n], channels);
  const parts = await runConv(x, w, split, [2, 3, n], channels);
  assert.deepEqual(parts, whole);
  assert.deepEqual(await b.download(split), await b.download(one));
  // Row 0 of a fresh sequence sees only its own input: silu(w[c, K-1] · x[0, c]).
  const w0 = (await b.download(w)) as Float32Array;
  for (let c = 0; c < channels; c++) {
    const a = w0[c * k + k - 1] * x[c];
    assert.ok(Math.abs(whole[c] - a / (1 + Math.exp(-a))) < 1e-6, `channel ${c}`);
  }
  // Slot 0 was not the sequence's: untouched.
  assert.deepEqual(Array.from(((await b.download(one)) as Float32Array).subarray(0, (k - 1) * channels)), Array.from(stale.subarray(0, (k - 1) * channels)));
});

test("gatedDeltaNet() on reference carries its state across steps", async () => {
  const rng = new Rng(11);
  const n = 6;
  const x = rng.f32(n * WIDTH);
  const alpha = rng.f32(n * 4, -2, 2);
  const beta = rng.f32(n * 4, -2, 2);
  const decay = b.upload(rng.f32(4, -1, -0.1), [4]);
  const dtBias = b.upload(rng.f32(4), [4]);
  const stale = rng.f32(4 * 64, 3, 5);
  const run = async (cuts: number[]) => {
    const state = b.upload(stale, [1, 4, 8, 8]);
    const out: number[] = [];
    let from = 0;
    for (const to of cuts) {
      const o = b.gatedDeltaNet!(
        rowsOf(x, WIDTH, from, to), rowsOf(alpha, 4, from, to), rowsOf(beta, 4, from, to), decay, dtBias, state,
        { seqs: table(0, to - from, 0, from === 0), numSeqs: 1 }, SPEC,
      );
      out.push(...(await b.download(o)));
      from = to;
    }
    return { out: Float32Array.from(out), state: await b.download(state) };
  };
  const whole = await run([n]);
  const parts = await run([1, 4, n]);
  for (let i = 0; i < whole.out.length; i++) assert.ok(Math.abs(whole.out[i] - parts.out[i]) < 1e-6, `output ${i}`);
  for (let i = 0; i < whole.state.length; i++) assert.ok(Math.abs(whole.state[i] - parts.state[i]) < 1e-6, `state ${i}`);
  // A fresh first row: S = k·(v·sigmoid(beta))ᵀ, so out = (k·q) · v · sigmoid(beta) per value head.
  assert.ok(whole.out.some((v) => v !== 0));
  assert.ok(whole.out.every((v) => Math.abs(v) < 3), "the stale state (3..5) was not read");
});

test("gatedDeltaNet() on reference refuses a slot outside the state, writing nothing", async () => {
  const state = b.upload(new Float32Array(2 * 4 * 64).fill(1), [2, 4, 8, 8]);
  const zeros = (r: number, c: number) => b.upload(new Float32Array(r * c), [r, c]);
  assert.throws(
    () => b.gatedDeltaNet!(zeros(1, WIDTH), zeros(1, 4), zeros(1, 4), b.upload(new Float32Array(4), [4]), b.upload(new Float32Array(4), [4]), state, { seqs: table(0, 1, 2, true), numSeqs: 1 }, SPEC),
    /Recurrent state slot 2 of sequence 0 is outside 0\.\.1/,
  );
  assert.ok(((await b.download(state)) as Float32Array).every((v) => v === 1));
  assert.throws(
    () => b.causalConv1d!(zeros(2, 3), zeros(3, 4), b.upload(new Float32Array(9), [1, 3, 3]), { seqs: table(1, 2, 0, false), numSeqs: 1 }),
    /Recurrent sequence 0 covers rows 1\.\.2, outside 0\.\.1/,
  );
});

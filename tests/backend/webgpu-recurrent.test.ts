/**
 * The WebGPU recurrent-state ops beyond the conformance cases: a sequence's state carried through
 * several steps recorded back to back (each step's in-place update read by the next before any
 * flush), geometries that leave a workgroup's columns partly idle (headVDim 80) or fill the largest
 * key bucket (headKDim 256), bad sequence tables refused before anything is written, and the
 * kernels' limits refused by name.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { envVar } from "../../src/runtime/env.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { type Backend, BackendShapeError, type DeltaNetSpec, type Tensor } from "../../src/backend/types.ts";
import { createWebGpuBackend, type WebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { MAX_CONV_KERNEL, MAX_DELTA_NET_KEY_DIM } from "../../src/backend/webgpu/ops-recurrent.ts";
import { compareOutputs, type Output, Rng, type Tolerance } from "./conformance-support.ts";

const skip = envVar("EVOLVING_ALLOW_NO_WEBGPU") === "1";
const ref = createReferenceBackend();
const CLOSE: Tolerance = { atol: 2e-5, rtol: 2e-4 };
let shared: WebGpuBackend | undefined;

async function gpu(): Promise<WebGpuBackend> {
  shared ??= await createWebGpuBackend({ poison: true });
  return shared;
}

/** One sequence's table: rows first..first+rows-1 of the step, in `slot`. */
const table = (b: Backend, first: number, rows: number, slot: number, fresh: boolean): Tensor => b.upload(Int32Array.of(first, rows, slot, fresh ? 1 : 0), [1, 4]);
const rowsOf = (b: Backend, x: Float32Array, width: number, from: number, to: number) => b.upload(x.slice(from * width, to * width), [to - from, width]);

/** A sequence of `n` rows run over steps ending at `cuts`, on slot 1 of 2: every step's output, then the state. */
async function deltaNetSteps(b: Backend, spec: DeltaNetSpec, n: number, cuts: number[], seed: number): Promise<Output[]> {
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
  const width = 2 * nk * dk + nv * dv;
  const rng = new Rng(seed);
  const [x, alpha, beta] = [rng.f32(n * width, -1, 1), rng.f32(n * nv, -3, 3), rng.f32(n * nv, -3, 3)];
  const decay = b.upload(rng.f32(nv, -2, -0.05), [nv]);
  const dtBias = b.upload(rng.f32(nv, -1, 1), [nv]);
  const state = b.upload(rng.f32(2 * nv * dk * dv, -0.5, 0.5), [2, nv, dk, dv]);
  const outs: Tensor[] = [];
  let from = 0;
  for (const to of cuts) {
    const seqs = { seqs: table(b, 0, to - from, 1, false), numSeqs: 1 };
    outs.push(b.gatedDeltaNet!(rowsOf(b, x, width, from, to), rowsOf(b, alpha, nv, from, to), rowsOf(b, beta, nv, from, to), decay, dtBias, state, seqs, spec));
    from = to;
  }
  const res: Output[] = [];
  for (const t of [...outs, state]) res.push(await b.download(t));
  return res;
}

async function convSteps(b: Backend, channels: number, k: number, n: number, cuts: number[], seed: number): Promise<Output[]> {
  const rng = new Rng(seed);
  const x = rng.f32(n * channels, -2, 2);
  const w = b.upload(rng.f32(channels * k, -1, 1), [channels, k]);
  const state = b.upload(rng.f32(2 * (k - 1) * channels, -2, 2), [2, k - 1, channels]);
  const outs: Tensor[] = [];
  let from = 0;
  for (const to of cuts) {
    outs.push(b.causalConv1d!(rowsOf(b, x, channels, from, to), w, state, { seqs: table(b, 0, to - from, 1, from === 0), numSeqs: 1 }));
    from = to;
  }
  const res: Output[] = [];
  for (const t of [...outs, state]) res.push(await b.download(t));
  return res;
}

test("causalConv1d() on webgpu carries its window through steps recorded back to back", async () => {
  const b = await gpu();
  for (const [channels, k] of [[70, 3], [5, MAX_CONV_KERNEL]]) {
    const cuts = [1, 2, 6, 7, 12];
    const diff = compareOutputs(await convSteps(b, channels, k, 12, cuts, 3), await convSteps(ref, channels, k, 12, cuts, 3), CLOSE);
    assert.equal(diff, undefined, `channels ${channels} K ${k}: ${diff}`);
  }
}, { ignore: skip });

test("gatedDeltaNet() on webgpu carries its state through steps, with partly idle and widest workgroups", async () => {
  const b = await gpu();
  const specs: DeltaNetSpec[] = [
    { numKHeads: 1, numVHeads: 4, headKDim: 48, headVDim: 80, vHeadOrder: "grouped", eps: 1e-6 },
    { numKHeads: 2, numVHeads: 8, headKDim: 8, headVDim: 8, vHeadOrder: "tiled", eps: 1e-6 },
    { numKHeads: 1, numVHeads: 1, headKDim: MAX_DELTA_NET_KEY_DIM, headVDim: 4, vHeadOrder: "tiled", eps: 1e-6 },
  ];
  for (const spec of specs) {
    const cuts = [3, 4, 5, 9];
    const diff = compareOutputs(await deltaNetSteps(b, spec, 9, cuts, 5), await deltaNetSteps(ref, spec, 9, cuts, 5), CLOSE);
    assert.equal(diff, undefined, `${JSON.stringify(spec)}: ${diff}`);
  }
}, { ignore: skip });

test("recurrent ops on webgpu refuse a bad sequence table before writing, and kernels past their limits", async () => {
  const b = await gpu();
  const spec: DeltaNetSpec = { numKHeads: 1, numVHeads: 2, headKDim: 4, headVDim: 4, vHeadOrder: "grouped", eps: 1e-6 };
  const width = 2 * 4 + 2 * 4;
  const zeros = (...shape: number[]) => b.upload(new Float32Array(shape.reduce((a, d) => a * d, 1)), shape);
  const state = b.upload(new Float32Array(2 * 2 * 16).fill(1), [2, 2, 4, 4]);
  assert.throws(
    () => b.gatedDeltaNet!(zeros(1, width), zeros(1, 2), zeros(1, 2), zeros(2), zeros(2), state, { seqs: table(b, 0, 1, 2, true), numSeqs: 1 }, spec),
    /Recurrent state slot 2 of sequence 0 is outside 0\.\.1/,
  );
  assert.ok(((await b.download(state)) as Float32Array).every((v) => v === 1));
  const convState = b.upload(new Float32Array(9).fill(1), [1, 3, 3]);
  assert.throws(
    () => b.causalConv1d!(zeros(2, 3), zeros(3, 4), convState, { seqs: table(b, 1, 2, 0, false), numSeqs: 1 }),
    /Recurrent sequence 0 covers rows 1\.\.2, outside 0\.\.1/,
  );
  assert.ok(((await b.download(convState)) as Float32Array).every((v) => v === 1));
  const k = MAX_CONV_KERNEL + 1;
  assert.throws(
    () => b.causalConv1d!(zeros(1, 2), zeros(2, k), zeros(1, k - 1, 2), { seqs: table(b, 0, 1, 0, true), numSeqs: 1 }),
    (e: unknown) => e instanceof BackendShapeError && e.message.includes(`kernel width ${k}`),
  );
  const dk = MAX_DELTA_NET_KEY_DIM + 1;
  const wide: DeltaNetSpec = { ...spec, numVHeads: 1, headKDim: dk, headVDim: 1 };
  assert.throws(
    () => b.gatedDeltaNet!(zeros(1, 2 * dk + 1), zeros(1, 1), zeros(1, 1), zeros(1), zeros(1), zeros(1, 1, dk, 1), { seqs: table(b, 0, 1, 0, true), numSeqs: 1 }, wide),
    (e: unknown) => e instanceof BackendShapeError && e.message.includes(`key head dimension ${dk}`),
  );
}, { ignore: skip });

test("webgpu recurrent test backend is released", () => {
  shared?.destroy();
});

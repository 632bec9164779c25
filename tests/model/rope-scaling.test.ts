/**
 * Llama 3.1+ RoPE frequency scaling: the llama3 divisors against transformers' own formulation,
 * HF rope_scaling parsing and refusals, GGUF rope_freqs loading, and HF ≡ GGUF logits.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import { type LoadedModel, ModelLoadError } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { forward, ForwardInputError } from "../../src/model/forward.ts";
import { GGUF_ROPE_FREQS } from "../../src/model/gguf-loader.ts";
import { gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { hfRopeFreqFactors, type Llama3RopeScaling, llama3FreqFactors } from "../../src/model/rope-scaling.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, ropeFreqsOf, writeHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/rope-scaling-test-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const LLAMA31: Llama3RopeScaling = { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 8192 };

/** transformers' `_compute_llama3_parameters`, step by step on inverse frequencies (its formulation). */
function transformersInvFreq(theta: number, dim: number, s: Llama3RopeScaling): number[] {
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  return Array.from({ length: dim / 2 }, (_, i) => {
    const invFreq = 1 / Math.pow(theta, (2 * i) / dim);
    const wavelen = (2 * Math.PI) / invFreq;
    const llama = wavelen > lowWavelen ? invFreq / s.factor : invFreq;
    const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    const smoothed = ((1 - smooth) * llama) / s.factor + smooth * llama;
    const medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
    return medium ? smoothed : llama;
  });
}

test("llama3FreqFactors() divides the base frequencies to transformers' llama3 inverse frequencies", () => {
  const factors = llama3FreqFactors(500000, 128, LLAMA31);
  const inv = transformersInvFreq(500000, 128, LLAMA31);
  assert.equal(factors.length, 64);
  factors.forEach((f, i) => {
    const scaled = Math.pow(500000, (-2 * i) / 128) / f;
    assert.ok(Math.abs(scaled - inv[i]) <= 1e-12 * inv[i], `pair ${i}: ${scaled} vs ${inv[i]}`);
  });
  // Llama 3.1 8B: wavelengths below 2048 (pairs 0..28) keep their frequency, above 8192 (35..63) slow 8×.
  assert.deepEqual(factors.slice(0, 29), new Array(29).fill(1));
  assert.deepEqual(factors.slice(35), new Array(29).fill(8));
  for (let i = 29; i < 35; i++) assert.ok(factors[i] > factors[i - 1] && factors[i] < 8, `pair ${i}: ${factors[i]}`);
  // Pair 32: wavelength 2π·√500000 ≈ 4442.9, smooth = (8192/4442.9 − 1)/3 ≈ 0.28127 → 1/(0.71873/8 + 0.28127).
  assert.ok(Math.abs(factors[32] - 2.6946) < 1e-3, `pair 32: ${factors[32]}`);
});

test("hfRopeFreqFactors() reads llama3 rope_scaling, ignores none/default and refuses other types by name", () => {
  assert.equal(hfRopeFreqFactors({}, 10000, 8, "cfg"), undefined);
  assert.equal(hfRopeFreqFactors({ rope_scaling: null }, 10000, 8, "cfg"), undefined);
  assert.equal(hfRopeFreqFactors({ rope_parameters: { rope_type: "default", rope_theta: 10000 } }, 10000, 8, "cfg"), undefined);
  const scaling = { factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 };
  const want = llama3FreqFactors(500000, 128, LLAMA31);
  assert.deepEqual(hfRopeFreqFactors({ rope_scaling: { ...scaling, rope_type: "llama3" } }, 500000, 128, "cfg"), want);
  assert.deepEqual(hfRopeFreqFactors({ rope_scaling: { ...scaling, type: "llama3" } }, 500000, 128, "cfg"), want);
  for (const type of ["yarn", "linear", "dynamic", "longrope"]) {
    assert.throws(() => hfRopeFreqFactors({ rope_scaling: { rope_type: type, factor: 4 } }, 10000, 8, "cfg"),
      (e: unknown) => e instanceof ModelLoadError && e.message.includes(`"${type}"`), type);
  }
  assert.throws(() => hfRopeFreqFactors({ rope_scaling: { rope_type: "llama3", factor: 8 } }, 10000, 8, "cfg"),
    (e: unknown) => e instanceof ModelLoadError && /low_freq_factor/.test(e.message));
});

// Base 100 and an original context of 128 put every pair of a 16-wide head in or past the
// interpolation band: divisors from ~1.5 to 8, so a dropped factor moves even position 1.
const SCALED: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 48, vocab: 300,
  tied: false, dtype: "f32", seed: 31, ropeTheta: 100,
  ropeScaling: { factor: 8, lowFreqFactor: 1, highFreqFactor: 32, originalMaxPositionEmbeddings: 128 },
};
const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 300);

function allLogits(model: LoadedModel): Promise<Float32Array> {
  return stepLogits(be, model, [{ tokens: PROMPT, startPos: 0, blockTable: [2, 0, 1] }], true);
}

const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

test("loadModel() gives a GGUF's rope_freqs and an HF dir's llama3 rope_scaling the same factors and logits", async () => {
  const w = randomHfWeights(SCALED);
  await writeFile(`${dir}/scaled.gguf`, ggufBytes(SCALED, w));
  await writeHfDirectory(`${dir}/scaled`, SCALED, w);
  const g = await loadModel(`${dir}/scaled.gguf`);
  const h = await loadModel(`${dir}/scaled`);
  const want = ropeFreqsOf(SCALED)!;
  assert.ok(Math.min(...want) > 1.4 && Math.max(...want) === 8, `test factors ${want}`);
  assert.equal(g.config.ropeFreqFactors?.length, 8);
  g.config.ropeFreqFactors!.forEach((f, i) => assert.ok(Math.abs(f - want[i]) <= 1e-6 * want[i], `gguf ${i}: ${f}`));
  assert.deepEqual(h.config.ropeFreqFactors, want);
  const [lg, lh] = [await allLogits(g), await allLogits(h)];
  assert.ok(maxDiff(lg, lh) < 1e-4, `GGUF vs HF logits differ by ${maxDiff(lg, lh)}`);
  // Not vacuous: the same GGUF without its factors gives other logits.
  const unscaled = await allLogits({ ...g, config: { ...g.config, ropeFreqFactors: undefined } });
  assert.ok(maxDiff(lg, unscaled) > 1e-2, `factors changed logits by only ${maxDiff(lg, unscaled)}`);
});

test("forward() refuses a device model that lacks the config's RoPE frequency factors", async () => {
  const g = await loadModel(`${dir}/scaled.gguf`);
  const uploaded = uploadModel(be, g);
  const kv = allocatePagedKv(be, g.config, 1, 16);
  try {
    const dm = { ...uploaded, ropeFreqFactors: undefined };
    assert.throws(() => forward(be, dm, kv, { entries: [{ tokens: [1], startPos: 0, blockTable: [0] }] }),
      (e: unknown) => e instanceof ForwardInputError && /RoPE frequency factors/.test(e.message));
  } finally {
    freePagedKv(be, kv);
    freeDeviceModel(be, uploaded);
  }
});

test("loadModel() rejects a GGUF whose rope_freqs has the wrong length or a non-positive factor, or yarn scaling", async () => {
  const spec: ModelFileSpec = { ...SCALED, ropeScaling: undefined, seed: 32 };
  const w = randomHfWeights(spec);
  const cases: [string, Parameters<typeof ggufBytes>[3], RegExp][] = [
    ["short", { tensors: [hostTensorFromF32(GGUF_ROPE_FREQS, [4], Float32Array.of(1, 2, 3, 4), "f32")] }, /4 RoPE frequency factors; head dim 16 needs 8/],
    ["zero", { tensors: [hostTensorFromF32(GGUF_ROPE_FREQS, [8], Float32Array.of(1, 2, 0, 4, 5, 6, 7, 8), "f32")] }, /factor 0 at index 2/],
    ["yarn", { metadata: [["llama.rope.scaling.type", gguf.str("yarn")], ["llama.rope.scaling.factor", gguf.f32(4)]] }, /scaling type "yarn"/],
  ];
  for (const [name, extras, re] of cases) {
    await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, w, undefined, extras));
    await assert.rejects(loadModel(`${dir}/${name}.gguf`), (e: unknown) => e instanceof ModelLoadError && re.test(e.message), name);
  }
});

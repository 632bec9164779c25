/**
 * Loading GPT-OSS (gpt-oss) GGUFs: the sliding-window layers, attention sinks, the biases, the
 * experts' routing and activation, YaRN's magnitude folded into the score scale, the harmony stop
 * tokens, and clear refusals. The forward is checked against llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { GPT_OSS_ACTIVATION, layerWindow, ModelLoadError, slidingLayers } from "../../src/model/config.ts";
import { withHarmonyStops } from "../../src/model/gguf-gpt-oss.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { type GgufExtras, ggufBytes, type ModelFileSpec, randomHfWeights, vocabFor } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/gpt-oss-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "gpt-oss",
  ropeTheta: 10000, seed: 71, slidingWindow: 5, tokenizer: "gpt-4o", experts: { count: 4, used: 2 },
  yarn: { factor: 32, originalContext: 16, betaFast: 32, betaSlow: 1 },
};

async function write(name: string, spec: ModelFileSpec, extras?: GgufExtras): Promise<string> {
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, randomHfWeights(spec), undefined, extras));
  return `${dir}/${name}.gguf`;
}

test("loadModel() reads a gpt-oss GGUF: sliding layers, sinks, biases, biased router and clamped SwiGLU experts", async () => {
  const m = await loadModel(await write("base", SPEC));
  const c = m.config;
  assert.equal(c.architecture, "gpt-oss");
  assert.deepEqual(c.slidingWindow, { size: 5, layers: [true, false, true] });
  assert.deepEqual([0, 1, 2].map((i) => layerWindow(c, i)), [5, undefined, 5]);
  assert.deepEqual([c.attentionSinks, c.outputBias, c.qkvBias, c.ropeLayout], [true, true, true, "neox"]);
  assert.equal(c.moe?.routerLogitBias, true);
  assert.equal(c.moe?.expertBiases, true);
  assert.deepEqual(c.moe?.activation, GPT_OSS_ACTIVATION);
  assert.deepEqual([c.moe?.gating, c.moe?.normalizeTopK, c.moe?.routedScale], ["softmax", true, 1]);
  // YaRN's RoPE magnitude 0.1·ln(32) + 1, squared, in the scores' scale.
  const mscale = 0.1 * Math.log(32) + 1;
  assert.ok(Math.abs(c.attentionScale! - (mscale * mscale) / Math.sqrt(8)) < 1e-12, `${c.attentionScale}`);
  assert.equal(c.ropeFreqFactors?.length, 4);
  const l = m.weights.layers[0];
  assert.deepEqual(l.sinks?.shape, [4]);
  assert.deepEqual(l.bo?.shape, [32]);
  assert.deepEqual(l.routerLogitBias?.shape, [4]);
  assert.deepEqual([l.bGate?.shape, l.bUp?.shape, l.bDown?.shape], [[4, 64], [4, 64], [4, 32]]);
  assert.ok([l.sinks, l.bo, l.bGate].every((t) => t?.dtype === "f32"));
});

test("loadModel() reads gpt-oss's sliding_window_pattern as a period or as per-layer flags", async () => {
  const period3 = await loadModel(await write("p3", SPEC, { metadata: [["gpt-oss.attention.sliding_window_pattern", g.u32(3)]] }));
  assert.deepEqual(period3.config.slidingWindow?.layers, [true, true, false]);
  const flags = await loadModel(await write("flags", SPEC, {
    metadata: [["gpt-oss.attention.sliding_window_pattern", g.arr(GgufType.BOOL, [false, true, true])]],
  }));
  assert.deepEqual(flags.config.slidingWindow?.layers, [false, true, true]);
  assert.deepEqual(slidingLayers(4, 0), [true, true, true, true]);
});

test("loadModel() refuses gpt-oss files it would run wrongly, naming the problem", async () => {
  const swaTheta = await write("swa-theta", SPEC, { metadata: [["gpt-oss.rope.freq_base_swa", g.f32(500)]] });
  await assert.rejects(loadModel(swaTheta), (e: Error) => e instanceof ModelLoadError && /own RoPE base 500/.test(e.message));
  const badWindow = await write("bad-window", SPEC, { metadata: [["gpt-oss.attention.sliding_window", g.f32(2.5)]] });
  await assert.rejects(loadModel(badWindow), /sliding window of 2.5 positions/);
  const llama = await write("llama-swa", { ...SPEC, architecture: "llama", tokenizer: "spm", experts: undefined, yarn: undefined, slidingWindow: undefined });
  const withWindow = await write("llama-swa2", { ...SPEC, architecture: "llama", tokenizer: "spm", experts: undefined, yarn: undefined, slidingWindow: 4 });
  await loadModel(llama);
  await assert.rejects(loadModel(withWindow), /declares a sliding window, which the "llama" architecture does not support/);
});

test("withHarmonyStops() ends generation at <|return|> and <|call|> but not <|end|>, for harmony vocabularies only", async () => {
  assert.deepEqual(withHarmonyStops([2, 5], ["a", "<|end|>", "b", "<|return|>", "<|call|>", "c"]), [2, 5, 3, 4]);
  assert.deepEqual(withHarmonyStops([1], ["a", "<|end|>", "b", "<|return|>", "<|call|>"]), [3, 4]);
  assert.deepEqual(withHarmonyStops([1], ["a", "<|end|>", "<|return|>"]), [1]);
  assert.deepEqual(withHarmonyStops([1], undefined), [1]);
  // In a file: the vocabulary's harmony tokens join the file's EOS.
  const vocab = vocabFor(SPEC);
  const tokens = [...vocab.tokens];
  tokens[290] = "<|return|>";
  tokens[291] = "<|end|>";
  tokens[292] = "<|call|>";
  const m = await loadModel(await write("harmony", SPEC, { metadata: [["tokenizer.ggml.tokens", g.arr(GgufType.STRING, tokens)]] }));
  assert.deepEqual(m.config.eosTokenIds, [vocab.eosId, 290, 292]);
});

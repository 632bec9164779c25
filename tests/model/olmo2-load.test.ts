/**
 * Loading OLMo 2 and 3 (olmo2) and EXAONE 4 (exaone4): no pre-norms, the blocks' outputs normed, q/k norms over the whole
 * projection, OLMo 3's three sliding layers of four, from GGUFs and from Olmo2/Olmo3ForCausalLM
 * checkpoints, and what is refused. The forward is checked against llama.cpp in
 * tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { test } from "../harness.ts";
import { expectLoadError, type GgufExtras, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/olmo2-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = { architecture: "olmo2", hidden: 32, layers: 8, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 95 };
const THREE_OF_FOUR = [true, true, true, false, true, true, true, false];

const write = (name: string, spec: ModelFileSpec, extras?: GgufExtras) => writeTestGguf(dir, name, spec, extras);

const hfDir = (name: string, spec: ModelFileSpec, edit?: (cfg: Record<string, unknown>) => Record<string, unknown>) => writeTestHfDirectory(dir, name, spec, edit);

test("loadModel() reads an olmo2 GGUF: no pre-norms, output norms, q/k norms over the whole projection", async () => {
  const m = await loadModel(await write("m", SPEC));
  const c = m.config;
  assert.deepEqual([c.architecture, c.noPreNorms, c.postNorms, c.qkNorm, c.qkNormPerRow, c.slidingWindow], ["olmo2", true, true, true, true, undefined]);
  const l = m.weights.layers[0];
  assert.deepEqual([l.attnNorm, l.ffnNorm, l.qNorm?.shape, l.kNorm?.shape, l.attnPostNorm?.shape, l.ffnPostNorm?.shape], [undefined, undefined, [32], [16], [32], [32]]);
});

test("loadModel() reads OLMo 3's sliding layers (three of four) from its GGUF and from Olmo3ForCausalLM's layer_types", async () => {
  const spec = { ...SPEC, slidingWindow: 5 };
  assert.deepEqual((await loadModel(await write("sw", spec))).config.slidingWindow, { size: 5, layers: THREE_OF_FOUR });
  const patterned = await loadModel(await write("sw2", spec, { metadata: [["olmo2.attention.sliding_window_pattern", g.u32(2)]] }));
  assert.deepEqual(patterned.config.slidingWindow?.layers, [true, false, true, false, true, false, true, false]);
  const hf = await loadModel(await hfDir("hf3", spec));
  assert.deepEqual([hf.config.noPreNorms, hf.config.qkNormPerRow, hf.config.slidingWindow], [true, true, { size: 5, layers: THREE_OF_FOUR }]);
  assert.equal((await loadModel(await hfDir("hf2", SPEC))).config.slidingWindow, undefined, "OLMo 2's config.json has no window");
});

test("loadModel() refuses OLMo configs it would run wrongly, naming the problem", async () => {
  await expectLoadError(loadModel(await write("yarn", SPEC, { metadata: [["olmo2.rope.scaling.type", g.str("yarn")], ["olmo2.rope.scaling.factor", g.f32(8)]] })), /uses RoPE scaling type "yarn"/);
  await expectLoadError(loadModel(await hfDir("hf-yarn", SPEC, (c) => ({ ...c, rope_scaling: { rope_type: "yarn", factor: 8 } }))), /uses rope_scaling type "yarn"/);
  await expectLoadError(loadModel(await hfDir("hf-types", { ...SPEC, slidingWindow: 5 }, (c) => ({ ...c, layer_types: ["sliding_attention"] }))), /"layer_types" in ".*" should list/);
});

const EXAONE: ModelFileSpec = { ...SPEC, architecture: "exaone4", layers: 64 };

test("loadModel() reads EXAONE 4: OLMo 2's norms with per-head q/k norms; only the 64-layer 32B slides, its global layers without RoPE", async () => {
  const big = (await loadModel(await write("exaone-32b", { ...EXAONE, slidingWindow: 5 }))).config;
  const slides = Array.from({ length: 64 }, (_, i) => i % 4 < 3);
  assert.deepEqual([big.noPreNorms, big.postNorms, big.qkNorm, big.qkNormPerRow], [true, true, true, undefined]);
  assert.deepEqual([big.slidingWindow, big.nopeLayers], [{ size: 5, layers: slides }, slides.map((s) => !s)]);
  // llama.cpp slides the 32B at 4096 where its file names no window, and never the 1.2B (30 layers).
  assert.equal((await loadModel(await write("exaone-32b-default", EXAONE))).config.slidingWindow?.size, 4096);
  const small = (await loadModel(await write("exaone-small", { ...EXAONE, layers: 30, slidingWindow: 5 }))).config;
  assert.deepEqual([small.slidingWindow, small.nopeLayers], [undefined, undefined]);
  const hf = (await loadModel(await hfDir("exaone-hf", { ...EXAONE, slidingWindow: 5 }))).config;
  assert.deepEqual([hf.slidingWindow, hf.nopeLayers], [{ size: 5, layers: slides }, slides.map((s) => !s)]);
  const hfSmall = (await loadModel(await hfDir("exaone-hf-small", { ...EXAONE, layers: 30 }))).config;
  assert.deepEqual([hfSmall.slidingWindow, hfSmall.nopeLayers], [undefined, undefined], "sliding_window null: every layer global, with RoPE");
});

/**
 * Loading SmolLM3 (smollm3): Llama's layout with every fourth layer turning neither q nor k (NoPE),
 * from a GGUF (llama.cpp's fixed period) and from SmolLM3ForCausalLM checkpoints (`no_rope_layers`,
 * `no_rope_layer_interval`), with refusals. The forward is checked against llama.cpp in
 * tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { expectLoadError, ggufBytes, type ModelFileSpec, randomHfWeights, writeTestHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/smollm3-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = { architecture: "smollm3", hidden: 32, layers: 8, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 93 };
const NOPE_3_7 = [false, false, false, true, false, false, false, true];

const hfDir = (name: string, edit?: (cfg: Record<string, unknown>) => Record<string, unknown>) => writeTestHfDirectory(dir, name, SPEC, edit);

test("loadModel() reads a smollm3 GGUF as Llama's layout with layers 3 and 7 of 8 turning nothing", async () => {
  await writeFile(`${dir}/m.gguf`, ggufBytes(SPEC, randomHfWeights(SPEC)));
  const c = (await loadModel(`${dir}/m.gguf`)).config;
  assert.deepEqual([c.architecture, c.ropeLayout, c.tiedEmbeddings], ["smollm3", "normal", true]);
  assert.deepEqual(c.nopeLayers, NOPE_3_7);
});

test("loadModel() reads SmolLM3ForCausalLM's NoPE layers from no_rope_layers (1 turns) or no_rope_layer_interval", async () => {
  assert.deepEqual((await loadModel(await hfDir("default"))).config.nopeLayers, NOPE_3_7, "transformers' default interval, 4");
  const listed = await loadModel(await hfDir("listed", (c) => ({ ...c, no_rope_layers: [1, 0, 1, 1, 1, 1, 0, 1] })));
  assert.deepEqual(listed.config.nopeLayers, [false, true, false, false, false, false, true, false]);
  const every2 = await loadModel(await hfDir("every2", (c) => ({ ...c, no_rope_layer_interval: 2 })));
  assert.deepEqual(every2.config.nopeLayers, [false, true, false, true, false, true, false, true]);
  // The NoPE layers matter: the same weights with every layer turning give other logits.
  const backend = createReferenceBackend();
  const entries = [{ tokens: [1, 17, 120, 255, 3, 42, 299, 64], startPos: 0, blockTable: [0] }];
  const a = await stepLogits(backend, every2, entries);
  const b = await stepLogits(backend, { ...every2, config: { ...every2.config, nopeLayers: undefined } }, entries);
  assert.ok(a.some((x, i) => Math.abs(x - b[i]) > 1e-3), "NoPE layers change the logits");
});

test("loadModel() refuses SmolLM3 configs it would run wrongly, naming the key", async () => {
  await expectLoadError(loadModel(await hfDir("sliding", (c) => ({ ...c, use_sliding_window: true, sliding_window: 16 }))), /sets use_sliding_window/);
  await expectLoadError(loadModel(await hfDir("short-list", (c) => ({ ...c, no_rope_layers: [1, 0] }))), /"no_rope_layers" in ".*" should list 0 or 1 for each of the 8 layers, got \[1,0\]/);
  await expectLoadError(loadModel(await hfDir("zero-interval", (c) => ({ ...c, no_rope_layer_interval: 0 }))), /"no_rope_layer_interval" in ".*" should be a whole number from 1, got 0/);
});

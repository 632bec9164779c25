/**
 * Loading Granite 3.x (granite): its four multipliers from a GGUF and from GraniteForCausalLM's
 * config.json (transformers' defaults where absent), and refusals. The forward is checked against
 * llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { test } from "../harness.ts";
import { expectLoadError, type GgufExtras, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/granite-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "granite", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 94,
  granite: { embedding: 12, attention: 0.015625, residual: 0.22, logit: 8 },
};

const write = (name: string, spec: ModelFileSpec, extras?: GgufExtras) => writeTestGguf(dir, name, spec, extras);

const hfDir = (name: string, edit?: (cfg: Record<string, unknown>) => Record<string, unknown>) => writeTestHfDirectory(dir, name, SPEC, edit);

test("loadModel() reads a granite GGUF's multipliers (Granite-3.0-2B's values) and Llama's layout", async () => {
  const c = (await loadModel(await write("m", SPEC))).config;
  assert.deepEqual(
    [c.architecture, c.ropeLayout, c.embeddingScale, c.attentionScale, c.residualScale, c.logitScale],
    ["granite", "normal", 12, 0.015625, 0.22, 8],
  );
  // An attention scale of 0 is llama.cpp's "1/√headDim".
  const zero = (await loadModel(await write("zero-att", SPEC, { metadata: [["granite.attention.scale", g.f32(0)]] }))).config;
  assert.equal(zero.attentionScale, undefined);
});

test("loadModel() reads GraniteForCausalLM's multipliers, transformers' defaults where absent", async () => {
  const c = (await loadModel(await hfDir("hf"))).config;
  assert.deepEqual([c.ropeLayout, c.embeddingScale, c.attentionScale, c.residualScale, c.logitScale], ["neox", 12, 0.015625, 0.22, 8]);
  const bare = (await loadModel(await hfDir("hf-bare", ({ embedding_multiplier: _e, attention_multiplier: _a, residual_multiplier: _r, logits_scaling: _l, ...cfg }) => cfg))).config;
  // transformers' attention_multiplier default is the score scale 1 itself, not 1/√headDim.
  assert.deepEqual([bare.embeddingScale, bare.attentionScale, bare.residualScale, bare.logitScale], [undefined, 1, undefined, undefined]);
});

test("loadModel() refuses granite files it would run wrongly, naming the key", async () => {
  const noLogit = await write("no-logit", { ...SPEC, granite: undefined });
  await expectLoadError(loadModel(noLogit), /lacks "granite.logit_scale"/);
  const unroped = await write("unroped", SPEC, { metadata: [["granite.rope.scaling.finetuned", g.bool(false)]] });
  await expectLoadError(loadModel(unroped), /sets "granite.rope.scaling.finetuned" false/);
  const negative = await write("negative", SPEC, { metadata: [["granite.residual_scale", g.f32(-1)]] });
  await expectLoadError(loadModel(negative), /"granite.residual_scale" in ".*" should be a positive number, got -1/);
  await expectLoadError(loadModel(await hfDir("hf-zero", (c) => ({ ...c, logits_scaling: 0 }))), /"logits_scaling" in ".*" should be a positive number, got 0/);
});

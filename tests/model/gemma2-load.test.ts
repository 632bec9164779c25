/**
 * Loading Gemma 2 (gemma2): Gemma 3's embeddings, sandwich norms and GeGLU without q/k norms, even
 * layers sliding, soft-capped scores and logits with llama.cpp's and transformers' defaults, the
 * 27B's score scale, the output always the embedding, `<end_of_turn>`, Gemma2ForCausalLM read as its
 * GGUF. The forward is checked against llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { test } from "../harness.ts";
import { expectLoadError, type GgufExtras, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/gemma2-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "gemma2", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 96,
  ropeTheta: 10000, slidingWindow: 5, softcaps: { attn: 50, final: 30 },
};

const write = (name: string, spec: ModelFileSpec, extras?: GgufExtras) => writeTestGguf(dir, name, spec, extras);

const hfDir = (name: string, spec: ModelFileSpec, edit?: (cfg: Record<string, unknown>) => Record<string, unknown>) => writeTestHfDirectory(dir, name, spec, edit);

test("loadModel() reads a gemma2 GGUF: soft-capping, even layers sliding, no q/k norms, the embedding as output", async () => {
  const m = await loadModel(await write("m", SPEC));
  const c = m.config;
  assert.deepEqual(
    [c.architecture, c.attnSoftcap, c.finalSoftcap, c.slidingWindow, c.qkNorm, c.postNorms, c.ffnActivation, c.embeddingScale, c.attentionScale, c.tiedEmbeddings],
    ["gemma2", 50, 30, { size: 5, layers: [true, false, true, false] }, false, true, "gelu", Math.sqrt(32), 1 / Math.sqrt(8), true],
  );
  assert.equal(m.weights.output, undefined);
});

test("loadModel() takes llama.cpp's gemma2 defaults where the file names none: caps 50 and 30, a window of 4096", async () => {
  const c = (await loadModel(await write("bare", { ...SPEC, slidingWindow: undefined, softcaps: undefined }))).config;
  assert.deepEqual([c.attnSoftcap, c.finalSoftcap, c.slidingWindow], [50, 30, { size: 4096, layers: [true, false, true, false] }]);
  const zero = (await loadModel(await write("zero-caps", { ...SPEC, softcaps: { attn: 0, final: 0 } }))).config;
  assert.deepEqual([zero.attnSoftcap, zero.finalSoftcap], [undefined, undefined], "a cap of 0 is none");
  // 46 layers is how llama.cpp tells the 27B: its scores scale by hidden / heads.
  const big = (await loadModel(await write("27b", { ...SPEC, layers: 46, headDim: 16 }))).config;
  assert.equal(big.attentionScale, 1 / Math.sqrt(32 / 4));
});

test("loadModel() reads Gemma2ForCausalLM as its GGUF, transformers' defaults where config.json is silent", async () => {
  const hf = (await loadModel(await hfDir("hf", SPEC))).config;
  assert.deepEqual([hf.attnSoftcap, hf.finalSoftcap, hf.slidingWindow, hf.qkNorm, hf.tiedEmbeddings], [50, 30, { size: 5, layers: [true, false, true, false] }, false, true]);
  assert.equal(hf.attentionScale, 1 / Math.sqrt(8), "query_pre_attn_scalar as written");
  const bare = (await loadModel(await hfDir("hf-bare", SPEC, ({ attn_logit_softcapping: _a, final_logit_softcapping: _f, query_pre_attn_scalar: _q, sliding_window: _s, ...c }) => c))).config;
  assert.deepEqual([bare.attnSoftcap, bare.finalSoftcap, bare.slidingWindow?.size, bare.attentionScale], [50, 30, 4096, 1 / 16]);
  const off = (await loadModel(await hfDir("hf-off", SPEC, (c) => ({ ...c, final_logit_softcapping: null })))).config;
  assert.equal(off.finalSoftcap, undefined);
  await expectLoadError(loadModel(await hfDir("hf-neg", SPEC, (c) => ({ ...c, attn_logit_softcapping: -1 }))), /"attn_logit_softcapping" in ".*" should be a positive number or null, got -1/);
  await expectLoadError(loadModel(await write("neg", SPEC, { metadata: [["gemma2.final_logit_softcapping", g.f32(-2)]] })), /"gemma2.final_logit_softcapping" in ".*" should be a number from 0, got -2/);
});

/**
 * Loading DeepSeek V3 / Kimi K2 (deepseek2) models: multi-head latent attention's sizes and weights
 * from GGUF (attn_k_b / attn_v_b, or an older combined attn_kv_b) and Hugging Face directories,
 * YaRN, the one-head latent KV cache, `--quantize`, and clear refusals. The forward is checked
 * against llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import { type LoadedModel, ModelLoadError } from "../../src/model/config.ts";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { readTextFile, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { type GgufExtras, ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/mla-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const KIMI: ModelFileSpec = {
  hidden: 32, layers: 3, heads: 4, kvHeads: 4, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "deepseek2",
  ropeTheta: 10000, seed: 61, mla: { qLora: 24, kvLora: 40, nope: 16, rope: 8, v: 12 },
  experts: { count: 8, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
};
const YARN = { factor: 4, originalContext: 16, betaFast: 32, betaSlow: 1, mscaleAllDim: 0.8 };

async function write(name: string, spec: ModelFileSpec, extras?: GgufExtras): Promise<{ gguf: string; hf: string }> {
  const w = randomHfWeights(spec);
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, w, undefined, extras));
  await writeHfDirectory(`${dir}/${name}`, spec, w);
  return { gguf: `${dir}/${name}.gguf`, hf: `${dir}/${name}` };
}

async function sameLogits(a: LoadedModel, b: LoadedModel): Promise<void> {
  const entry = { tokens: [1, 17, 120, 255, 3, 42, 299, 64, 7, 8], startPos: 0, blockTable: [1, 0] };
  const [la, lb] = [await stepLogits(be, a, [entry], true), await stepLogits(be, b, [entry], true)];
  const worst = la.reduce((w, v, i) => Math.max(w, Math.abs(v - lb[i])), 0);
  assert.ok(worst < 1e-4, `logits differ by ${worst}`);
}

test("loadModel() reads a Kimi K2-layout GGUF and directory alike: latent sizes, one KV head, per-head W_kb / W_vb", async () => {
  const files = await write("kimi", KIMI);
  const [a, b] = [await loadModel(files.gguf), await loadModel(files.hf)];
  for (const m of [a, b]) {
    const c = m.config;
    assert.equal(c.architecture, "deepseek2");
    assert.deepEqual(c.mla, { qLoraRank: 24, kvLoraRank: 40, nopeDim: 16, ropeDim: 8, vHeadDim: 12 });
    assert.deepEqual([c.numHeads, c.numKvHeads, c.headDim, c.rotaryDim, c.ropeLayout], [4, 1, 48, 8, "normal"]);
    assert.equal(c.attentionScale ?? 1 / Math.sqrt(24), 1 / Math.sqrt(24));
    assert.deepEqual(c.moe, {
      numExperts: 8, numExpertsUsed: 2, normalizeTopK: true, gating: "sigmoid", selectionBias: true, routedScale: 2.5,
      denseLayers: 1, denseIntermediateSize: 192, sharedIntermediateSize: 64, sharedGate: false,
    });
    const l = m.weights.layers[1];
    assert.deepEqual(
      [l.wqA?.shape, l.qANorm?.shape, l.wq!.shape, l.wkvA?.shape, l.kvANorm?.shape, l.wkB?.shape, l.wvB?.shape, l.wo!.shape],
      [[24, 32], [24], [96, 24], [48, 32], [40], [4, 40, 16], [4, 12, 40], [32, 48]],
    );
    assert.equal(l.wk, undefined);
    assert.equal(l.kvANorm?.dtype, "f32");
  }
  assert.deepEqual(a.weights.layers[2].wkB?.data, b.weights.layers[2].wkB?.data);
  assert.deepEqual(a.weights.layers[2].wvB?.data, b.weights.layers[2].wvB?.data);
  await sameLogits(a, b);
  // The cache holds one 48-wide head per token: 2 · 48 floats a layer, not 2 · 4 heads · 24.
  const kv = allocatePagedKv(be, a.config, 2, 16);
  assert.deepEqual(kv.k[0].shape, [2, 16, 1, 48]);
  freePagedKv(be, kv);
});

test("loadModel() cuts an older GGUF's combined attn_kv_b into the same W_kb and W_vb as a split file", async () => {
  const split = await loadModel((await write("split", { ...KIMI, seed: 62 })).gguf);
  const combined = await loadModel((await write("combined", { ...KIMI, seed: 62, mla: { ...KIMI.mla!, combinedKvB: true } })).gguf);
  assert.deepEqual(combined.config.mla, split.config.mla);
  assert.deepEqual([combined.config.numKvHeads, combined.config.headDim], [1, 48]);
  for (let i = 0; i < 3; i++) {
    assert.deepEqual(combined.weights.layers[i].wkB?.data, split.weights.layers[i].wkB?.data);
    assert.deepEqual(combined.weights.layers[i].wvB?.data, split.weights.layers[i].wvB?.data);
  }
  await sameLogits(split, combined);
});

test("loadModel() reads YaRN from GGUF and config.json alike: blended frequencies and mscale² on the scores", async () => {
  const spec: ModelFileSpec = { ...KIMI, seed: 63, yarn: YARN, mla: { ...KIMI.mla!, qLora: 0, rope: 16 } };
  const files = await write("yarn", spec);
  const [a, b] = [await loadModel(files.gguf), await loadModel(files.hf)];
  const mscale = 0.1 * 0.8 * Math.log(4) + 1;
  for (const m of [a, b]) {
    assert.equal(m.config.mla?.qLoraRank, 0);
    assert.equal(m.weights.layers[0].wqA, undefined);
    assert.ok(Math.abs(m.config.attentionScale! - mscale * mscale / Math.sqrt(32)) < 1e-6, String(m.config.attentionScale));
    const f = m.config.ropeFreqFactors!;
    assert.equal(f.length, 8);
    // The fastest pair keeps its frequency; the slowest is slowed by the whole factor.
    assert.ok(Math.abs(f[0] - 1) < 1e-6 && Math.abs(f[7] - 4) < 1e-4, String(f));
  }
  assert.ok(a.config.ropeFreqFactors!.every((v, i) => Math.abs(v - b.config.ropeFreqFactors![i]) < 1e-5));
  await sameLogits(a, b);
});

test("loadModel() reads DeepSeek V3's grouped routing from GGUF and config.json alike", async () => {
  const files = await write("ds-groups", { ...KIMI, seed: 70, experts: { ...KIMI.experts!, count: 16, used: 4, groups: { count: 4, used: 2 } } });
  for (const m of [await loadModel(files.gguf), await loadModel(files.hf)]) assert.deepEqual(m.config.moe?.groups, { count: 4, used: 2 });
  // One group (Kimi K2) is plain top-k.
  assert.equal((await loadModel((await write("kimi-groups", { ...KIMI, seed: 71 })).hf)).config.moe?.groups, undefined);
});

test("loadModel() --quantize quantizes latent attention's projections and keeps its norms f32", async () => {
  const m = await loadModel((await write("kimi-q", { ...KIMI, seed: 64 })).gguf, { quantize: "q8_0" });
  const l = m.weights.layers[1];
  // Rows of 32 values are whole q8_0 blocks; wq's rows of 24 (the q rank) stay as stored.
  assert.deepEqual([l.wqA?.dtype, l.wkvA?.dtype, l.wGate!.dtype, l.wq!.dtype], ["q8_0", "q8_0", "q8_0", "f32"]);
  assert.deepEqual([l.qANorm?.dtype, l.kvANorm?.dtype, l.router?.dtype], ["f32", "f32", "f32"]);
});

test("allocatePagedKv() refuses a model whose KV heads are wider than the backend's attention takes", async () => {
  const m = await loadModel((await write("kimi-narrow", { ...KIMI, seed: 69 })).gguf);
  const narrow = { ...be, info: { ...be.info, name: "narrow", maxHeadDim: 32 } };
  assert.throws(() => allocatePagedKv(narrow, m.config, 2, 16), /narrow backend's attention takes heads of up to 32 dims; this model's KV heads have 48/);
});

test("loadModel() refuses DeepSeek files it cannot run, naming the problem", async () => {
  const refused = async (path: string, re: RegExp) =>
    await assert.rejects(loadModel(path), (e: Error) => e instanceof ModelLoadError && re.test(e.message), re.source);
  const grouped = await write("ds-grouped", { ...KIMI, seed: 65 }, { metadata: [["deepseek2.expert_group_count", g.u32(8)]] });
  await refused(grouped.gguf, /routes 2 of 8 experts within 1 of 8 expert groups/);
  const cfg = JSON.parse(await readTextFile(`${grouped.hf}/config.json`));
  await writeFile(`${grouped.hf}/config.json`, JSON.stringify({ ...cfg, n_group: 8, topk_group: 4 }));
  await refused(grouped.hf, /routes 2 of 8 experts within 4 of 8 expert groups/);
  await writeFile(`${grouped.hf}/config.json`, JSON.stringify({ ...cfg, scoring_func: "softplus" }));
  await refused(grouped.hf, /"scoring_func" .* should be "sigmoid" or "softmax", got "softplus"/);
  const yarn = await write("ds-yarn", { ...KIMI, seed: 66, yarn: YARN });
  const yarnCfg = JSON.parse(await readTextFile(`${yarn.hf}/config.json`));
  await writeFile(`${yarn.hf}/config.json`, JSON.stringify({ ...yarnCfg, rope_scaling: { ...yarnCfg.rope_scaling, mscale: 1 } }));
  await refused(yarn.hf, /YaRN that scales RoPE's magnitude \(mscale 1, mscale_all_dim 0.8\)/);
  const noLogMul = await write("ds-yarn-gguf", { ...KIMI, seed: 67, yarn: YARN }, { metadata: [["deepseek2.rope.scaling.attn_factor", g.f32(0.5)]] });
  await refused(noLogMul.gguf, /YaRN that scales RoPE's magnitude/);
  const quantKvB = await write("ds-q8-kvb", { ...KIMI, seed: 68, mla: { ...KIMI.mla!, kvLora: 32, combinedKvB: true }, ggufDtype: (n) => n.includes("attn_kv_b") ? "q8_0" : "f32" });
  await refused(quantKvB.gguf, /"blk.0.attn_kv_b.weight" .* is q8_0; a combined kv_b must be f32, f16 or bf16/);
});

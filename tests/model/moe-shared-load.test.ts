/**
 * Loading the MoE layouts beyond Mixtral's and Qwen3-MoE's: GLM-4.5 (sigmoid routing with a
 * selection bias and a scale, a shared expert, leading dense layers, partial RoPE, NextN blocks
 * after the last layer) and Qwen2-MoE (a sigmoid-gated shared expert), from GGUF and Hugging Face
 * directories; `--quantize`; clear refusals. The forward is checked against llama.cpp in
 * tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { type LoadedModel, ModelLoadError } from "../../src/model/config.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { gguf as g } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { readTextFile, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { type GgufExtras, ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/moe-shared-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const BASE = { hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, vocab: 300, tied: false, dtype: "f32" } as const;
const GLM: ModelFileSpec = {
  ...BASE, architecture: "glm4moe", rotaryDim: 8, nextn: 1, seed: 51,
  experts: { count: 8, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
};
const QWEN2_MOE: ModelFileSpec = { ...BASE, architecture: "qwen2moe", headDim: 8, experts: { count: 8, used: 2, sharedFfn: 96 }, seed: 52 };

async function write(name: string, spec: ModelFileSpec, extras?: GgufExtras): Promise<{ gguf: string; hf: string }> {
  const w = randomHfWeights(spec);
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, w, undefined, extras));
  await writeHfDirectory(`${dir}/${name}`, spec, w);
  return { gguf: `${dir}/${name}.gguf`, hf: `${dir}/${name}` };
}

/** Logits at every position of `tokens` on the reference backend. */
function logits(model: LoadedModel, tokens: number[]): Promise<Float32Array> {
  return stepLogits(be, model, [{ tokens, startPos: 0, blockTable: [1, 0] }], true);
}

async function sameLogits(a: LoadedModel, b: LoadedModel): Promise<void> {
  const tokens = [1, 17, 120, 255, 3];
  const [la, lb] = [await logits(a, tokens), await logits(b, tokens)];
  const worst = la.reduce((w, v, i) => Math.max(w, Math.abs(v - lb[i])), 0);
  assert.ok(worst < 1e-4, `logits differ by ${worst}`);
}

test("loadModel() reads a GLM-4.5 GGUF and directory alike: routing, shared expert, dense layer 0, partial RoPE, NextN skipped", async () => {
  const files = await write("glm", GLM);
  const [a, b] = [await loadModel(files.gguf), await loadModel(files.hf)];
  for (const m of [a, b]) {
    assert.equal(m.config.architecture, "glm4moe");
    assert.deepEqual(m.config.moe, {
      numExperts: 8, numExpertsUsed: 2, normalizeTopK: true, gating: "sigmoid", selectionBias: true, routedScale: 2.5,
      denseLayers: 1, denseIntermediateSize: 192, sharedIntermediateSize: 64, sharedGate: false,
    });
    // The GGUF's block_count counts the NextN block; the forward runs the other three.
    assert.equal(m.config.numLayers, 3);
    assert.equal(m.weights.layers.length, 3);
    assert.equal(m.config.rotaryDim, 8);
    assert.equal(m.config.qkvBias, true);
    assert.equal(m.config.ropeLayout, "neox");
    const [dense, sparse] = m.weights.layers;
    assert.deepEqual(dense.wGate!.shape, [192, 32]);
    assert.equal(dense.router, undefined);
    assert.deepEqual(sparse.wGate!.shape, [8, 64, 32]);
    assert.deepEqual(sparse.routerBias?.shape, [8]);
    assert.equal(sparse.routerBias?.dtype, "f32");
    assert.deepEqual(sparse.wDownShared?.shape, [32, 64]);
  }
  await sameLogits(a, b);
});

test("loadModel() reads a Qwen2-MoE GGUF's vector shared-expert gate as the directory's [1, hidden] matrix", async () => {
  const files = await write("qwen2moe", QWEN2_MOE);
  const [a, b] = [await loadModel(files.gguf), await loadModel(files.hf)];
  for (const m of [a, b]) {
    assert.equal(m.config.architecture, "qwen2moe");
    assert.equal(m.config.moe?.normalizeTopK, false);
    assert.equal(m.config.moe?.sharedGate, true);
    assert.equal(m.config.moe?.sharedIntermediateSize, 96);
    assert.deepEqual(m.weights.layers[0].sharedGate?.shape, [1, 32]);
    assert.deepEqual(m.weights.layers[0].wUpShared?.shape, [96, 32]);
  }
  assert.deepEqual(a.weights.layers[1].sharedGate?.data, b.weights.layers[1].sharedGate?.data);
  await sameLogits(a, b);
});

test("loadModel() --quantize quantizes GLM-4.5's experts and shared expert but keeps routers, biases and gates as stored", async () => {
  const glm = await write("glm-q", { ...GLM, seed: 53 });
  const m = await loadModel(glm.gguf, { quantize: "q8_0" });
  const [dense, sparse] = m.weights.layers;
  assert.equal(dense.wGate!.dtype, "q8_0");
  assert.equal(sparse.wGate!.dtype, "q8_0");
  assert.equal(sparse.wUpShared?.dtype, "q8_0");
  assert.equal(sparse.router?.dtype, "f32");
  assert.equal(sparse.routerBias?.dtype, "f32");
  const qwen = await write("qwen2moe-q", { ...QWEN2_MOE, seed: 54 });
  const q = await loadModel(qwen.hf, { quantize: "q8_0" });
  assert.equal(q.weights.layers[0].sharedGate?.dtype, "f32");
  assert.equal(q.weights.layers[0].wDownShared?.dtype, "q8_0");
});

test("loadModel() refuses GLM-style files it cannot run, naming the problem", async () => {
  const refused = async (path: string, re: RegExp) =>
    await assert.rejects(loadModel(path), (e: Error) => e instanceof ModelLoadError && re.test(e.message), re.source);
  const grouped = await write("grouped", { ...GLM, seed: 55 }, { metadata: [["glm4moe.expert_group_count", g.u32(2)]] });
  await refused(grouped.gguf, /routes 2 of 8 experts within an unstated number of 2 expert groups/);
  const cfg = JSON.parse(await readTextFile(`${grouped.hf}/config.json`));
  await writeFile(`${grouped.hf}/config.json`, JSON.stringify({ ...cfg, n_group: 8, topk_group: 4 }));
  await refused(grouped.hf, /routes 2 of 8 experts within 4 of 8 expert groups; supported: up to 32 groups of 2 or more experts/);
  const gating = await write("gating", { ...GLM, seed: 56 }, { metadata: [["glm4moe.expert_gating_func", g.u32(4)]] });
  await refused(gating.gguf, /expert gating function 4; supported: 1 \(softmax\), 2 \(sigmoid\)/);
  const sections = await write("sections", { ...GLM, seed: 57 }, { metadata: [["glm4moe.rope.dimension_sections", g.arr(GgufType.INT32, [2, 2, 0, 0])]] });
  await refused(sections.gguf, /multimodal RoPE sections/);
  await writeFile(`${sections.hf}/config.json`, JSON.stringify({ ...cfg, partial_rotary_factor: 0.1 }));
  await refused(sections.hf, /"partial_rotary_factor" .* should give an even number of a head's 16 dims, got 0.1/);
  const nextn = await write("nextn", { ...GLM, seed: 58 }, { metadata: [["glm4moe.nextn_predict_layers", g.u32(4)]] });
  await refused(nextn.gguf, /has 4 next-token-prediction layers of its 4 blocks/);
});

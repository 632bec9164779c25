/**
 * Loading mixture-of-experts models (Qwen3-MoE, Mixtral) from GGUF and Hugging Face directories:
 * configs, stacked experts, the older split-expert GGUF layout, `--quantize`, clear refusals, and
 * rows of a ragged batch routed apart. The forward itself is checked against llama.cpp in
 * tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { type LoadedModel, ModelLoadError, plainMoe } from "../../src/model/config.ts";
import type { ForwardEntry } from "../../src/model/forward.ts";
import { loadModel } from "../../src/model/load.ts";
import { readTextFile, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { type GgufExtras, ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/moe-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const BASE = { hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32" } as const;
const QWEN3_MOE: ModelFileSpec = { ...BASE, architecture: "qwen3moe", experts: { count: 8, used: 2 }, seed: 31 };
const MIXTRAL: ModelFileSpec = { ...BASE, architecture: "llama", experts: { count: 4, used: 2 }, seed: 32 };

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

test("loadModel() reads a Qwen3-MoE GGUF: expert counts, the experts' width, stacked experts and an f32 router", async () => {
  const { gguf } = await write("qwen3moe", QWEN3_MOE);
  const m = await loadModel(gguf);
  assert.deepEqual(m.config.moe, plainMoe(8, 2, true));
  // The file's dense feed_forward_length is 3× the experts'; the experts' own key must win.
  assert.equal(m.config.intermediateSize, 64);
  assert.equal(m.config.architecture, "qwen3moe");
  assert.equal(m.config.qkNorm, true);
  assert.equal(m.config.ropeLayout, "neox");
  const l = m.weights.layers[1];
  assert.deepEqual(l.wGate!.shape, [8, 64, 32]);
  assert.deepEqual(l.wUp!.shape, [8, 64, 32]);
  assert.deepEqual(l.wDown!.shape, [8, 32, 64]);
  assert.deepEqual(l.router?.shape, [8, 32]);
});

for (const [name, spec] of [["Qwen3-MoE", QWEN3_MOE], ["Mixtral", MIXTRAL]] as const) {
  test(`loadModel() stacks a ${name} Hugging Face directory's per-expert tensors into the GGUF's layout`, async () => {
    const files = await write(`hf-${spec.seed}`, spec);
    const [a, b] = [await loadModel(files.gguf), await loadModel(files.hf)];
    assert.deepEqual(b.config.moe, a.config.moe);
    assert.equal(b.config.intermediateSize, a.config.intermediateSize);
    for (const role of ["wGate", "wUp", "wDown", "router"] as const) {
      const [x, y] = [a.weights.layers[0][role]!, b.weights.layers[0][role]!];
      assert.deepEqual(y.shape, x.shape, role);
      // Mixtral's GGUF permutes only q/k, so expert bytes agree exactly.
      assert.deepEqual(y.data, x.data, role);
    }
    const tokens = [1, 17, 120, 255, 3];
    const [la, lb] = [await logits(a, tokens), await logits(b, tokens)];
    const worst = la.reduce((w, v, i) => Math.max(w, Math.abs(v - lb[i])), 0);
    assert.ok(worst < 1e-4, `logits differ by ${worst}`);
  });
}

test("loadModel() reads Mixtral GGUFs whose experts are split into one tensor each", async () => {
  const spec = { ...MIXTRAL, seed: 33 };
  const stacked = await write("stacked", spec);
  const split = await write("split", spec, { splitExperts: true });
  const [a, b] = [await loadModel(stacked.gguf), await loadModel(split.gguf)];
  assert.deepEqual(b.weights.layers[1].wDown!.data, a.weights.layers[1].wDown!.data);
  assert.deepEqual(await logits(b, [5, 9, 2]), await logits(a, [5, 9, 2]));
});

test("loadModel() quantizes stacked experts with --quantize and leaves the router as stored", async () => {
  const { gguf } = await write("quantize", { ...QWEN3_MOE, seed: 34 });
  const m = await loadModel(gguf, { quantize: "q8_0" });
  const l = m.weights.layers[0];
  assert.equal(l.wGate!.dtype, "q8_0");
  assert.deepEqual(l.wGate!.shape, [8, 64, 32]);
  assert.equal(l.wDown!.dtype, "q8_0");
  assert.equal(l.router?.dtype, "f32");
  const [q, f] = [await logits(m, [3, 4, 5]), await logits(await loadModel(gguf), [3, 4, 5])];
  assert.notDeepEqual(q, f);
  assert.ok(q.every((v, i) => Math.abs(v - f[i]) < 0.1), "q8_0 experts stay close to f32");
});

test("loadModel() knows Qwen3-MoE and Mixtral directories by model_type when config.json has no architectures", async () => {
  for (const spec of [{ ...QWEN3_MOE, seed: 39 }, { ...MIXTRAL, seed: 40 }]) {
    const { hf } = await write(`model-type-${spec.seed}`, spec);
    const { architectures: _, ...cfg } = JSON.parse(await readTextFile(`${hf}/config.json`));
    await writeFile(`${hf}/config.json`, JSON.stringify(cfg));
    const m = await loadModel(hf);
    assert.equal(m.config.architecture, spec.architecture, cfg.model_type);
    assert.deepEqual(m.config.moe, plainMoe(spec.experts!.count, 2, true));
  }
});

test("loadModel() refuses MoE files it cannot run, naming the problem", async () => {
  const tooMany = await write("too-many", { ...MIXTRAL, experts: { count: 4, used: 5 }, seed: 35 });
  await assert.rejects(loadModel(tooMany.gguf), (e: Error) => e instanceof ModelLoadError && /uses 5 of its 4 experts/.test(e.message));
  await assert.rejects(loadModel(tooMany.hf), (e: Error) => e instanceof ModelLoadError && /num_experts_per_tok.*1 to 4, got 5/.test(e.message));
  const noExperts = await write("no-experts", { ...BASE, architecture: "qwen3moe", seed: 36 });
  await assert.rejects(loadModel(noExperts.gguf), (e: Error) => e instanceof ModelLoadError && /qwen3moe but has no "qwen3moe.expert_count"/.test(e.message));
  const mixed = await write("mixed", { ...QWEN3_MOE, seed: 37 });
  const cfg = JSON.parse(await readTextFile(`${mixed.hf}/config.json`));
  await writeFile(`${mixed.hf}/config.json`, JSON.stringify({ ...cfg, mlp_only_layers: [1] }));
  await assert.rejects(loadModel(mixed.hf), (e: Error) => e instanceof ModelLoadError && /mixes dense and MoE layers/.test(e.message));
});

const webgpu = await poisonedWebGpu("the MoE batch test on WebGPU");
/**
 * Qwen3-MoE's softmax routing; GLM-4.5's sigmoid routing with a bias, shared expert and dense first
 * layer; Kimi K2's latent attention (per-head matmuls over every row of the batch) with the same routing.
 */
const BATCH_SPECS: [string, ModelFileSpec][] = [
  ["Qwen3-MoE", { ...QWEN3_MOE, experts: { count: 8, used: 3 }, seed: 38 }],
  ["GLM-4.5", {
    ...BASE, architecture: "glm4moe", layers: 3, headDim: 16, rotaryDim: 8, seed: 41,
    experts: { count: 8, used: 3, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
  }],
  ["Kimi K2 (latent attention)", {
    ...BASE, architecture: "deepseek2", layers: 3, ropeTheta: 10000, seed: 42, mla: { qLora: 24, kvLora: 40, nope: 16, rope: 8, v: 12 },
    experts: { count: 8, used: 3, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
  }],
];
for (const [name, backend, skip] of [["reference", be, false], ["webgpu", webgpu.gpu, webgpu.skip]] as const) {
  for (const [family, spec] of BATCH_SPECS) {
    test(`forward() on ${name} routes every row of a ragged ${family} batch as it would alone`, async () => {
      assert.ok(backend, webgpu.why);
      const host = await loadModel((await write(`batch-${name}-${spec.seed}`, spec)).gguf);
      // Three prompts in one step (11, 1 and 6 tokens) against each alone: the rows route to
      // different experts, and a grouped or per-row expert kernel must keep them apart.
      const prompts = [[5, 9, 2, 77, 120, 3, 8, 200, 41, 6, 19], [250], [13, 14, 15, 16, 17, 18]];
      const entries = prompts.map((tokens, i): ForwardEntry => ({ tokens, startPos: 0, blockTable: [2 * i, 2 * i + 1] }));
      const batched = await stepLogits(backend, host, entries);
      const vocab = host.config.vocabSize;
      for (let i = 0; i < prompts.length; i++) {
        const alone = await stepLogits(backend, host, [entries[i]]);
        const row = batched.subarray(i * vocab, (i + 1) * vocab);
        const worst = row.reduce((w, v, j) => Math.max(w, Math.abs(v - alone[j])), 0);
        assert.ok(worst < 1e-4, `prompt ${i}: batched and alone differ by ${worst}`);
      }
    }, { ignore: skip });
  }
}
test("the MoE batch test releases the WebGPU device", () => webgpu.gpu?.destroy(), { ignore: webgpu.skip });

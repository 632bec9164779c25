/**
 * LFM2 (src/model/lfm2.ts) loads alike from an `lfm2` GGUF and an Lfm2ForCausalLM checkpoint (its
 * feed-forward width derived as transformers derives it, `tie_embedding`), and what does not fit is
 * refused by name; LFM2-MoE's experts alike (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "lfm2", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 351,
  shortConv: { kernel: 3, attention: [1] },
};
const dir = mkdtempSync(`${tmpdir()}/lfm2-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads LFM2's layers, tying and feed-forward width from a GGUF and an Lfm2ForCausalLM checkpoint alike", async () => {
  const g = await loadModel(await writeTestGguf(dir, "l", SPEC));
  assert.deepEqual(g.config.shortConv, { layers: [true, false, true], kernel: 3 });
  assert.equal(g.config.numKvHeads, 2);
  assert.equal(g.config.tiedEmbeddings, true);
  // Lfm2MLP's width: two thirds of block_ff_dim 96, rounded up to a multiple of 32.
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC, (c) => ({ ...c, block_ff_dim: 96, block_auto_adjust_ff_dim: true, block_multiple_of: 32, block_ffn_dim_multiplier: null })));
  assert.deepEqual([h.config.shortConv, h.config.intermediateSize, h.config.tiedEmbeddings, h.config.rmsNormEps], [g.config.shortConv, 64, true, 1e-5]);
});

test("loadModel() refuses an LFM2 whose layers cannot be told apart or whose convolution has a bias, naming why", async () => {
  const short = await writeTestGguf(dir, "short", SPEC, { metadata: [["lfm2.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2])]] });
  await expectLoadError(loadModel(short), /lists "lfm2\.attention\.head_count_kv" for 2 layers of its 3/);
  const mixed = await writeTestGguf(dir, "mixed", SPEC, { metadata: [["lfm2.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2, 4])]] });
  await expectLoadError(loadModel(mixed), /expected 0 for each convolution layer and one KV head count for the attention layers/);
  const bias = await writeTestHfDirectory(dir, "bias", SPEC, (c) => ({ ...c, conv_bias: true }));
  await expectLoadError(loadModel(bias), /sets conv_bias, which LFM2 support here does not run/);
});

const MOE: ModelFileSpec = { ...SPEC, architecture: "lfm2moe", layers: 4, ffn: 32, seed: 353, shortConv: { kernel: 3, attention: [2] }, experts: { count: 4, used: 2, denseLayers: 1 } };

test("loadModel() reads LFM2-MoE's experts from an lfm2moe GGUF and an Lfm2MoeForCausalLM checkpoint alike, and refuses a router it would not run as llama.cpp does", async () => {
  const g = await loadModel(await writeTestGguf(dir, "moe", MOE));
  assert.deepEqual(g.config.moe, {
    numExperts: 4, numExpertsUsed: 2, normalizeTopK: true, gating: "sigmoid", selectionBias: true, routedScale: 1,
    denseLayers: 1, denseIntermediateSize: 96, sharedIntermediateSize: 0, sharedGate: false,
  });
  assert.deepEqual([g.config.shortConv, g.config.intermediateSize], [{ layers: [true, true, false, true], kernel: 3 }, 32]);
  assert.deepEqual([g.weights.layers[0].wGate?.shape, g.weights.layers[1].wGate?.shape, g.weights.layers[1].routerBias?.shape], [[96, 32], [4, 32, 32], [4]]);
  const h = await loadModel(await writeTestHfDirectory(dir, "hfmoe", MOE));
  assert.deepEqual([h.config.architecture, h.config.moe, h.config.shortConv, h.config.intermediateSize], ["lfm2moe", g.config.moe, g.config.shortConv, 32]);
  await expectLoadError(loadModel(await writeTestGguf(dir, "softmax", MOE, { metadata: [["lfm2moe.expert_gating_func", gguf.u32(1)]] })), /uses expert gating function 1; LFM2-MoE's is 2 \(sigmoid\)/);
  for (const [name, edit, pattern] of [
    ["scale", (c: Record<string, unknown>) => ({ ...c, routed_scaling_factor: 2 }), /sets routed_scaling_factor 2; LFM2-MoE's experts run unscaled/],
    ["nobias", (c: Record<string, unknown>) => ({ ...c, use_expert_bias: false }), /sets use_expert_bias false; only LFM2-MoE's router/],
    ["used", (c: Record<string, unknown>) => ({ ...c, num_experts_per_tok: 9 }), /"num_experts_per_tok" in ".*" should be 1 to 4, got 9/],
  ] as const) await expectLoadError(loadModel(await writeTestHfDirectory(dir, `rm-${name}`, MOE, edit)), pattern);
});

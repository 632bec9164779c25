/**
 * Granite 4.0-H (src/model/granite-hybrid.ts) loads from a `granitehybrid` GGUF — its Mamba-2 layers
 * told apart by a KV head count of 0, the scan's geometry, NoPE attention unless the file keeps RoPE,
 * Granite's multipliers — and from a GraniteMoeHybridForCausalLM checkpoint alike; what llama.cpp
 * would not run, or the checkpoint's config says we do not, is refused by name (llama.cpp's check of
 * the same weights: tests/oracle/llama-cpp.test.ts).
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
  architecture: "granitehybrid", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 352,
  mamba2: { attention: [1], heads: 4, stateSize: 16, conv: 4 }, granite: { embedding: 2, attention: 0.2, residual: 0.5, logit: 3 },
};
const dir = mkdtempSync(`${tmpdir()}/granite-hybrid-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads Granite 4.0-H's Mamba-2 layers, NoPE attention and multipliers from a granitehybrid GGUF", async () => {
  const m = await loadModel(await writeTestGguf(dir, "g", SPEC));
  assert.deepEqual(m.config.mamba2, { layers: [true, false, true], innerSize: 64, stateSize: 16, heads: 4, groups: 1, convKernel: 4 });
  assert.deepEqual([m.config.numKvHeads, m.config.nopeLayers, m.config.embeddingScale, m.config.attentionScale, m.config.residualScale, m.config.logitScale], [2, [true, true, true], 2, 0.2, 0.5, 3]);
  assert.deepEqual(m.weights.layers[0].ssmIn?.shape, [2 * 64 + 2 * 16 + 4, 32]);
  assert.deepEqual(m.weights.layers[0].ssmDecay?.shape, [4, 1]);
  assert.ok(m.weights.layers[0].wq === undefined && m.weights.layers[1].wq !== undefined, "Mamba-2 layers have no attention projections");
  const roped = await loadModel(await writeTestGguf(dir, "r", { ...SPEC, mamba2: { ...SPEC.mamba2!, rope: true } }));
  assert.equal(roped.config.nopeLayers, undefined, "a file that keeps RoPE rotates as Granite 3.x");
});

test("loadModel() refuses a granitehybrid file llama.cpp would not run, naming why", async () => {
  const cases: [string, [string, ReturnType<typeof gguf.u32>][], RegExp][] = [
    ["kvshort", [["granitehybrid.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2])]], /"granitehybrid\.attention\.head_count_kv" is not a per-layer array of its 3 layers/],
    ["kvmixed", [["granitehybrid.attention.head_count_kv", gguf.arr(GgufType.UINT32, [0, 2, 4])]], /expected 0 for each Mamba-2 layer and one KV head count/],
    ["groups", [["granitehybrid.ssm.group_count", gguf.u32(3)]], /has 3 SSM groups, which do not divide its 4 heads/],
    ["inner", [["granitehybrid.ssm.inner_size", gguf.u32(96)]], /has an SSM inner size 96, not twice its hidden size 32/],
    ["heads", [["granitehybrid.ssm.time_step_rank", gguf.u32(5)]], /SSM inner size 64 that its 5 heads do not divide/],
    ["conv", [["granitehybrid.ssm.conv_kernel", gguf.u32(1)]], /"granitehybrid\.ssm\.conv_kernel" in ".*" should be a whole number of at least 2, got 1/],
  ];
  for (const [name, metadata, pattern] of cases) await expectLoadError(loadModel(await writeTestGguf(dir, name, SPEC, { metadata })), pattern);
});

test("loadModel() reads a GraniteMoeHybridForCausalLM checkpoint as its GGUF, dense and with experts, and refuses what it does not run", async () => {
  const g = await loadModel(await writeTestGguf(dir, "g2", SPEC));
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC));
  assert.deepEqual([h.config.mamba2, h.config.nopeLayers, h.config.intermediateSize, h.config.moe], [g.config.mamba2, g.config.nopeLayers, 64, undefined]);
  assert.deepEqual([h.config.embeddingScale, h.config.attentionScale, h.config.residualScale, h.config.logitScale], [2, 0.2, 0.5, 3]);
  assert.deepEqual(Array.from(new Float32Array(h.weights.layers[0].ssmDecay!.data.slice().buffer)), Array.from(new Float32Array(g.weights.layers[0].ssmDecay!.data.slice().buffer)), "A_log read as −exp(A_log)");
  const moe = await loadModel(await writeTestHfDirectory(dir, "hfmoe", { ...SPEC, experts: { count: 4, used: 2, sharedFfn: 48 } }));
  assert.deepEqual([moe.config.moe?.numExperts, moe.config.moe?.numExpertsUsed, moe.config.moe?.normalizeTopK, moe.config.moe?.sharedIntermediateSize, moe.config.moe?.sharedGate], [4, 2, true, 48, false]);
  assert.deepEqual(moe.weights.layers[0].wGate?.shape, [4, 64, 32], "the fused input_linear's gate half, per expert");
  const refused: [string, (c: Record<string, unknown>) => Record<string, unknown>, RegExp][] = [
    ["groups", (c) => ({ ...c, mamba_n_groups: 3 }), /"mamba_n_groups" 3 in ".*" does not divide its 4 Mamba-2 heads/],
    ["nobias", (c) => ({ ...c, mamba_conv_bias: false }), /sets mamba_conv_bias false/],
    ["projbias", (c) => ({ ...c, mamba_proj_bias: true }), /sets mamba_proj_bias/],
    ["types", (c) => ({ ...c, layer_types: ["mamba", "conv", "mamba"] }), /"layer_types" in ".*" should name mamba or attention for each of the 3 layers/],
    ["dhead", (c) => ({ ...c, mamba_d_head: 8 }), /"mamba_d_head" 8 in ".*" times 4 heads is not the Mamba-2 width 64/],
  ];
  for (const [name, edit, pattern] of refused) await expectLoadError(loadModel(await writeTestHfDirectory(dir, name, SPEC, edit)), pattern);
});

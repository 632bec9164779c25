/**
 * Nemotron-H (src/model/nemotron-h.ts) loads from a `nemotron_h` GGUF — each layer a Mamba-2,
 * attention or feed-forward block, told apart by its per-layer KV heads and feed-forward width — and
 * from a NemotronHForCausalLM checkpoint alike; what it does not run is refused by name, and LoRA
 * targets a layer does not have are refused (llama.cpp's check of the same weights:
 * tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { attentionLayers } from "../../src/model/config.ts";
import { targetDims } from "../../src/model/lora.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "nemotron_h", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, vocab: 300, tied: false, dtype: "f32", seed: 361,
  nemotronH: { pattern: "M-*M-", heads: 6, headDim: 8, stateSize: 16, groups: 3, conv: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/nemotron-h-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads a nemotron_h GGUF's one block a layer: Mamba-2 in groups, NoPE attention, ReLU² feed-forward", async () => {
  const m = await loadModel(await writeTestGguf(dir, "n", SPEC));
  const c = m.config;
  assert.deepEqual(c.mamba2, { layers: [true, false, false, true, false], innerSize: 48, stateSize: 16, heads: 6, groups: 3, convKernel: 4 });
  assert.deepEqual([c.layerBlocks, c.ffnActivation, c.intermediateSize, c.numKvHeads, c.nopeLayers], [["mixer", "ffn", "mixer", "mixer", "ffn"], "relu2", 48, 2, [true, true, true, true, true]]);
  assert.deepEqual([c.qkvBias, c.outputBias, c.ffnBias], [false, undefined, undefined]);
  assert.deepEqual(attentionLayers(c), [2], "one KV cache: the attention layer's");
  const l = m.weights.layers;
  assert.deepEqual(l[0].ssmNorm?.shape, [3, 16], "the gated norm's weight by group");
  assert.ok(l[0].wUp === undefined && l[0].wq === undefined, "a Mamba-2 layer has no feed-forward and no attention");
  assert.ok(l[1].wGate === undefined && l[1].wUp !== undefined && l[1].attnNorm !== undefined && l[1].ffnNorm === undefined, "a feed-forward layer: ungated, normed by its one norm");
  assert.ok(l[2].wq !== undefined && l[2].wUp === undefined, "an attention layer has no feed-forward");
  const biased = await loadModel(await writeTestGguf(dir, "b", { ...SPEC, nemotronH: { ...SPEC.nemotronH!, attnBias: true, mlpBias: true } }));
  assert.deepEqual([biased.config.qkvBias, biased.config.outputBias, biased.config.ffnBias], [true, true, true]);
  assert.deepEqual([biased.weights.layers[2].bo?.shape, biased.weights.layers[1].bUp?.shape], [[32], [48]]);
});

test("loadModel() refuses a nemotron_h file whose layers it cannot tell apart or run, naming why", async () => {
  const perLayer = (v: number[]) => gguf.arr(GgufType.UINT32, v);
  const cases: [string, [string, ReturnType<typeof gguf.u32>][], RegExp][] = [
    ["both", [["nemotron_h.attention.head_count_kv", perLayer([0, 2, 2, 0, 0])]], /gives layer 1 both KV heads and a feed-forward width; a nemotron_h layer has one block/],
    ["short", [["nemotron_h.feed_forward_length", perLayer([0, 48])]], /has "nemotron_h\.feed_forward_length" that is not a whole number from 0 for each of its 5 layers/],
    ["widths", [["nemotron_h.feed_forward_length", perLayer([0, 48, 0, 0, 64])]], /has feed-forward layers of differing "nemotron_h\.feed_forward_length" \(48, 64\); only uniform layers are supported/],
    ["groups", [["nemotron_h.ssm.group_count", gguf.u32(4)]], /has 4 SSM groups, which do not divide its 6 heads/],
    ["heads", [["nemotron_h.ssm.time_step_rank", gguf.u32(5)]], /SSM inner size 48 that its 5 heads do not divide/],
  ];
  for (const [name, metadata, pattern] of cases) await expectLoadError(loadModel(await writeTestGguf(dir, name, SPEC, { metadata })), pattern);
});

test("loadModel() reads a NemotronHForCausalLM checkpoint as its GGUF, from hybrid_override_pattern or layers_block_type, and refuses what it does not run", async () => {
  const g = await loadModel(await writeTestGguf(dir, "g2", SPEC));
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC));
  for (const key of ["mamba2", "layerBlocks", "ffnActivation", "intermediateSize", "numKvHeads", "headDim", "nopeLayers", "qkvBias", "rmsNormEps"] as const) assert.deepEqual(h.config[key], g.config[key], key);
  assert.deepEqual(h.weights.layers[3].ssmNorm?.shape, [3, 16]);
  assert.deepEqual(Array.from(new Float32Array(h.weights.layers[0].ssmDecay!.data.slice().buffer)), Array.from(new Float32Array(g.weights.layers[0].ssmDecay!.data.slice().buffer)), "A_log read as −exp(A_log)");
  const listed = await loadModel(await writeTestHfDirectory(dir, "list", SPEC, (c) => {
    const { hybrid_override_pattern: _, head_dim, ...rest } = c;
    return { ...rest, attention_head_dim: head_dim, layers_block_type: ["mamba", "mlp", "attention", "mamba", "mlp"] };
  }));
  assert.deepEqual([listed.config.layerBlocks, listed.config.headDim], [g.config.layerBlocks, 8]);
  const biased = await loadModel(await writeTestHfDirectory(dir, "hfbias", { ...SPEC, nemotronH: { ...SPEC.nemotronH!, attnBias: true, mlpBias: true } }));
  assert.deepEqual([biased.config.qkvBias, biased.config.outputBias, biased.config.ffnBias, biased.weights.layers[4].bDown?.shape], [true, true, true, [32]]);
  const refused: [string, (c: Record<string, unknown>) => Record<string, unknown>, RegExp][] = [
    ["mixed", (c) => ({ ...c, hybrid_override_pattern: "ME*M-" }), /has both dense \(-\) and expert \(E\) feed-forward layers/],
    ["pattern", (c) => ({ ...c, hybrid_override_pattern: "M-*M" }), /"hybrid_override_pattern" in ".*" should name each of the 5 layers/],
    ["letter", (c) => ({ ...c, hybrid_override_pattern: "M-*MX" }), /should name each of the 5 layers \(M, \* or -/],
    ["act", (c) => ({ ...c, mlp_hidden_act: "gelu" }), /"mlp_hidden_act" in ".*" is "gelu"; only relu2/],
    ["nobias", (c) => ({ ...c, mamba_conv_bias: false }), /sets mamba_conv_bias false/],
    ["projbias", (c) => ({ ...c, mamba_proj_bias: true }), /sets mamba_proj_bias/],
    ["groups", (c) => ({ ...c, mamba_n_groups: 4 }), /"mamba_n_groups" 4 in ".*" does not divide its 6 Mamba-2 heads/],
  ];
  for (const [name, edit, pattern] of refused) await expectLoadError(loadModel(await writeTestHfDirectory(dir, `r-${name}`, SPEC, edit)), pattern);
});

test("targetDims() refuses LoRA targets a Nemotron-H layer does not have", async () => {
  const c = (await loadModel(await writeTestGguf(dir, "lora", SPEC))).config;
  assert.match(String(targetDims(c, 1, "wq", true)), /it is a feed-forward layer, which has no attention projections/);
  assert.match(String(targetDims(c, 2, "wUp", true)), /it is an attention or Mamba-2 layer alone, which has no feed-forward/);
  assert.match(String(targetDims(c, 0, "wDown", true)), /which has no feed-forward/);
  assert.match(String(targetDims(c, 1, "wGate", true)), /the model's feed-forward is ungated/);
  assert.deepEqual([targetDims(c, 1, "wUp", true), targetDims(c, 2, "wq", true), targetDims(c, 0, "ssmIn", true)], [[32, 48], [32, 32], [32, 2 * 48 + 2 * 3 * 16 + 6]]);
});

const MOE: ModelFileSpec = {
  ...SPEC, architecture: "nemotron_h_moe", ffn: 32, seed: 362, experts: { count: 4, used: 2, sharedFfn: 48, scale: 2.5 },
  nemotronH: { ...SPEC.nemotronH!, pattern: "ME*ME" },
};

test("loadModel() reads Nemotron 3's experts (nemotron_h_moe) from a GGUF and a checkpoint alike, and refuses latent or grouped experts", async () => {
  const g = await loadModel(await writeTestGguf(dir, "moe", MOE));
  assert.deepEqual(g.config.moe, {
    numExperts: 4, numExpertsUsed: 2, normalizeTopK: true, gating: "sigmoid", selectionBias: true, routedScale: 2.5,
    denseLayers: 0, denseIntermediateSize: 0, sharedIntermediateSize: 48, sharedGate: false,
  });
  assert.deepEqual([g.config.layerBlocks, g.config.intermediateSize], [["mixer", "ffn", "mixer", "mixer", "ffn"], 32]);
  const l = g.weights.layers[1];
  assert.deepEqual([l.wUp?.shape, l.wDown?.shape, l.router?.shape, l.routerBias?.shape, l.wUpShared?.shape, l.wGate, l.wGateShared], [[4, 32, 32], [4, 32, 32], [4, 32], [4], [48, 32], undefined, undefined]);
  const h = await loadModel(await writeTestHfDirectory(dir, "hfmoe", MOE));
  assert.deepEqual([h.config.architecture, h.config.moe, h.config.layerBlocks], ["nemotron_h_moe", g.config.moe, g.config.layerBlocks]);
  assert.deepEqual(h.weights.layers[4].wUp?.shape, [4, 32, 32], "each expert's up_proj stacked");
  await expectLoadError(loadModel(await writeTestGguf(dir, "latent", MOE, { metadata: [["nemotron_h_moe.moe_latent_size", gguf.u32(16)]] })), /runs its experts in a latent space \("nemotron_h_moe\.moe_latent_size", Nemotron 3 Super's\)/);
  for (const [name, edit, pattern] of [
    ["latent", (c: Record<string, unknown>) => ({ ...c, moe_latent_size: 16 }), /runs its experts in a latent space \("moe_latent_size"/],
    ["group", (c: Record<string, unknown>) => ({ ...c, n_group: 2 }), /routes within expert groups \("n_group" 2\)/],
    ["used", (c: Record<string, unknown>) => ({ ...c, num_experts_per_tok: 5 }), /"num_experts_per_tok" in ".*" should be 1 to 4, got 5/],
  ] as const) await expectLoadError(loadModel(await writeTestHfDirectory(dir, `rm-${name}`, MOE, edit)), pattern);
});

test("loadLoraAdapter() maps a PEFT adapter's Nemotron-H mixer modules (under backbone. or model.) to each layer's block, and refuses one the layer lacks", async () => {
  const c = (await loadModel(await writeTestGguf(dir, "peftbase", SPEC))).config;
  const rank = 2;
  const peft = async (name: string, modules: [string, number, number][]) => {
    const path = `${dir}/${name}`;
    mkdirSync(path, { recursive: true });
    await writeFile(`${path}/adapter_config.json`, JSON.stringify({ peft_type: "LORA", r: rank, lora_alpha: 4, target_modules: ["in_proj"], bias: "none" }));
    const tensors = modules.flatMap(([m, inDim, outDim]) => [
      hostTensorFromF32(`base_model.model.${m}.lora_A.weight`, [rank, inDim], new Float32Array(rank * inDim).fill(0.1), "f32"),
      hostTensorFromF32(`base_model.model.${m}.lora_B.weight`, [outDim, rank], new Float32Array(outDim * rank).fill(0.1), "f32"),
    ]);
    await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors(tensors));
    return path;
  };
  const ssmIn = 2 * 48 + 2 * 3 * 16 + 6;
  const a = await loadLoraAdapter(await peft("peft-ok", [
    ["backbone.layers.0.mixer.in_proj", 32, ssmIn], ["backbone.layers.3.mixer.out_proj", 48, 32], ["model.layers.2.mixer.q_proj", 32, 32],
    ["backbone.layers.2.mixer.o_proj", 32, 32], ["backbone.layers.1.mixer.up_proj", 32, 48], ["backbone.layers.4.mixer.down_proj", 48, 32],
  ]), c);
  assert.deepEqual(a.weights.map((w) => `${w.layer}.${w.target}`).sort(), ["0.ssmIn", "1.wUp", "2.wo", "2.wq", "3.ssmOut", "4.wDown"]);
  await assert.rejects(loadLoraAdapter(await peft("peft-bad", [["backbone.layers.0.mixer.up_proj", 32, 48]]), c), /it is an attention or Mamba-2 layer alone, which has no feed-forward/);
});

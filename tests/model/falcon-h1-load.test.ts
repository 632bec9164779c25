/**
 * Falcon-H1 (src/model/falcon-h1.ts) loads from a `falcon-h1` GGUF and from a FalconH1ForCausalLM
 * checkpoint alike: every layer's attention beside its Mamba-2 scan, the scan's norm where the model
 * has one, the checkpoint's multipliers folded into its weights as llama.cpp's converter folds them;
 * what it does not run is refused by name (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { attentionLayers, type HostTensor } from "../../src/model/config.ts";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { numel } from "../../src/backend/types.ts";
import { targetDims } from "../../src/model/lora.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "falcon-h1", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, vocab: 300, tied: false, dtype: "f32", seed: 371,
  falconH1: {
    heads: 4, headDim: 12, stateSize: 8, groups: 2, conv: 4, normed: true,
    multipliers: { embedding: 1.5, lmHead: 0.5, attentionIn: 1.25, attentionOut: 0.75, key: 0.5, ssmIn: 2, ssmOut: 0.25, ssm: [1, 2, 3, 4, 5], mlp: [0.5, 4] },
  },
};
const dir = mkdtempSync(`${tmpdir()}/falcon-h1-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const values = (t: HostTensor | undefined) => Array.from(decodeToF32(t!.data, t!.dtype, numel(t!.shape)));

test("loadModel() reads a falcon-h1 GGUF: attention beside every layer's grouped Mamba-2 scan, its norm only where the file has it", async () => {
  const m = await loadModel(await writeTestGguf(dir, "g", SPEC));
  const c = m.config;
  assert.deepEqual(c.mamba2, { layers: [true, true], innerSize: 48, stateSize: 8, heads: 4, groups: 2, convKernel: 4, parallelAttention: true });
  assert.deepEqual(attentionLayers(c), [0, 1], "a KV cache for every layer");
  const l = m.weights.layers[1];
  assert.ok(l.wq && l.wk && l.wv && l.wo && l.ssmIn && l.ssmOut && l.wGate && l.wDown, "attention, scan and feed-forward in one layer");
  assert.deepEqual([l.ssmNorm?.shape, l.ffnNorm?.shape], [[2, 24], [32]], "the norm by group; llama.cpp's suffix-less ffn_norm read");
  const bare = await loadModel(await writeTestGguf(dir, "bare", { ...SPEC, falconH1: { ...SPEC.falconH1!, normed: false } }));
  assert.equal(bare.config.mamba2?.unnormed, true);
  assert.equal(bare.weights.layers[0].ssmNorm, undefined);
});

test("loadModel() reads a FalconH1ForCausalLM checkpoint as its GGUF, the multipliers folded into its weights and the embedding's and logits' kept as scales", async () => {
  const g = await loadModel(await writeTestGguf(dir, "g2", SPEC));
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC));
  for (const key of ["mamba2", "numKvHeads", "headDim", "intermediateSize", "qkvBias", "rmsNormEps", "ropeLayout"] as const) assert.deepEqual(h.config[key], g.config[key], key);
  assert.deepEqual([h.config.embeddingScale, h.config.logitScale], [1.5, 2]);
  // Folded as the converter folds them (the GGUF's weights): k by 1.25·0.5, the scan's input by 2 and its five parts', the down projection by 4.
  for (const role of ["wq", "wk", "wv", "wo", "ssmIn", "ssmOut", "wGate", "wUp", "wDown", "ssmNorm", "ssmDecay"] as const) {
    assert.deepEqual(values(h.weights.layers[1][role]), values(g.weights.layers[1][role]), role);
  }
  assert.deepEqual(values(h.weights.outputNorm), values(g.weights.outputNorm), "model.final_layernorm");
  // Before the gate: transformers' default where the checkpoint norms its scan.
  const before = await loadModel(await writeTestHfDirectory(dir, "before", SPEC, (c) => ({ ...c, mamba_norm_before_gate: true })));
  assert.equal(before.config.mamba2?.normBeforeGate, true);
  const unnormed = await loadModel(await writeTestHfDirectory(dir, "unnormed", { ...SPEC, falconH1: { ...SPEC.falconH1!, normed: false } }));
  assert.deepEqual([unnormed.config.mamba2?.unnormed, unnormed.weights.layers[0].ssmNorm], [true, undefined]);
  const refused: [string, (c: Record<string, unknown>) => Record<string, unknown>, RegExp][] = [
    ["projbias", (c) => ({ ...c, projectors_bias: true }), /sets projectors_bias; Falcon-H1's projections with biases are not supported/],
    ["convbias", (c) => ({ ...c, mamba_conv_bias: false }), /sets mamba_conv_bias false/],
    ["ssmlist", (c) => ({ ...c, ssm_multipliers: [1, 2] }), /"ssm_multipliers" in ".*" should be a list of 5 numbers, got \[1,2\]/],
    ["zero", (c) => ({ ...c, key_multiplier: 0 }), /"key_multiplier" in ".*" should be a nonzero number, got 0/],
    ["act", (c) => ({ ...c, hidden_act: "gelu" }), /has hidden_act "gelu"; Falcon-H1's feed-forward is SiLU-gated/],
    ["dhead", (c) => ({ ...c, mamba_d_head: 16 }), /"mamba_d_head" 16 in ".*" times 4 heads is not the Mamba-2 width 48/],
  ];
  for (const [name, edit, pattern] of refused) await expectLoadError(loadModel(await writeTestHfDirectory(dir, `r-${name}`, SPEC, edit)), pattern);
});

test("targetDims() lets LoRA adapt a Falcon-H1 layer's attention and scan both", async () => {
  const c = (await loadModel(await writeTestGguf(dir, "lora", SPEC))).config;
  assert.deepEqual([targetDims(c, 0, "wq", true), targetDims(c, 1, "wo", true), targetDims(c, 1, "ssmIn", true), targetDims(c, 0, "wDown", true)], [
    [32, 32], [32, 32], [32, 2 * 48 + 2 * 2 * 8 + 4], [48, 32],
  ]);
});

test("loadLoraAdapter() maps a PEFT adapter's Falcon-H1 modules where no multiplier is folded into the base, and refuses it where one is", async () => {
  const rank = 2;
  const peft = async (name: string, modules: [string, number, number][]) => {
    const path = `${dir}/${name}`;
    mkdirSync(path, { recursive: true });
    await writeFile(`${path}/adapter_config.json`, JSON.stringify({ peft_type: "LORA", r: rank, lora_alpha: 4, target_modules: ["q_proj"], bias: "none" }));
    const tensors = modules.flatMap(([m, inDim, outDim]) => [
      hostTensorFromF32(`base_model.model.${m}.lora_A.weight`, [rank, inDim], new Float32Array(rank * inDim).fill(0.1), "f32"),
      hostTensorFromF32(`base_model.model.${m}.lora_B.weight`, [outDim, rank], new Float32Array(outDim * rank).fill(0.1), "f32"),
    ]);
    await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors(tensors));
    return path;
  };
  const adapter = await peft("peft", [
    ["model.layers.0.self_attn.q_proj", 32, 32], ["model.layers.1.mamba.in_proj", 32, 2 * 48 + 2 * 2 * 8 + 4], ["model.layers.1.mamba.out_proj", 48, 32],
    ["model.layers.0.feed_forward.gate_proj", 32, 48], ["model.layers.1.feed_forward.down_proj", 48, 32],
  ]);
  const plain = await loadModel(await writeTestHfDirectory(dir, "plain", { ...SPEC, falconH1: { ...SPEC.falconH1!, multipliers: undefined } }));
  assert.equal(plain.config.foldedMultipliers, undefined);
  const a = await loadLoraAdapter(adapter, plain.config);
  assert.deepEqual(a.weights.map((w) => `${w.layer}.${w.target}`).sort(), ["0.wGate", "0.wq", "1.ssmIn", "1.ssmOut", "1.wDown"]);
  // The checkpoint's multipliers, and a GGUF's (folded by its converter, unrecorded), scale the base's projections the adapter was not trained against.
  for (const base of [await loadModel(await writeTestHfDirectory(dir, "scaled", SPEC)), await loadModel(await writeTestGguf(dir, "peftgguf", SPEC))]) {
    assert.equal(base.config.foldedMultipliers, true);
    await assert.rejects(loadLoraAdapter(adapter, base.config), /PEFT adapter ".*" cannot run on this falcon-h1 base: its multipliers are folded into the base's weights/);
  }
});

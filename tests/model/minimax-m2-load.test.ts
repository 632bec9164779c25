/**
 * MiniMax-M2 (src/model/minimax-m2.ts) loads from a `minimax-m2` GGUF and a MiniMaxM2ForCausalLM
 * checkpoint alike: sigmoid-scored experts with a selection bias, q/k norms over the whole projection,
 * RoPE on `rotary_dim`; what is not run is refused by name (llama.cpp's check of the same weights:
 * tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "minimax-m2", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 8, ffn: 24, vocab: 300, tied: false, dtype: "f32", seed: 381,
  experts: { count: 6, used: 2 },
};
const dir = mkdtempSync(`${tmpdir()}/minimax-m2-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads a minimax-m2 GGUF and a MiniMaxM2ForCausalLM checkpoint alike: biased sigmoid routing, whole-projection q/k norms, partial RoPE", async () => {
  const g = await loadModel(await writeTestGguf(dir, "g", SPEC));
  const h = await loadModel(await writeTestHfDirectory(dir, "hf", SPEC));
  for (const m of [g, h]) {
    const c = m.config;
    assert.deepEqual([c.moe?.numExperts, c.moe?.numExpertsUsed, c.moe?.gating, c.moe?.selectionBias, c.moe?.normalizeTopK, c.moe?.routedScale], [6, 2, "sigmoid", true, true, 1]);
    assert.deepEqual([c.qkNorm, c.qkNormPerRow, c.rotaryDim, c.ropeLayout, c.intermediateSize], [true, true, 8, "neox", 24]);
    assert.deepEqual([m.weights.layers[1].qNorm?.shape, m.weights.layers[1].kNorm?.shape, m.weights.layers[0].routerBias?.shape, m.weights.layers[0].wGate?.shape], [[64], [32], [6], [6, 24, 32]]);
  }
  // Without the routing bias or the q/k norms where the checkpoint turns them off (their tensors then unread).
  const plain = await loadModel(await writeTestHfDirectory(dir, "plain", SPEC, (c) => ({ ...c, use_routing_bias: false, use_qk_norm: false })));
  assert.deepEqual([plain.config.moe?.selectionBias, plain.config.qkNorm, plain.weights.layers[0].routerBias, plain.weights.layers[0].qNorm], [false, false, undefined, undefined]);
});

test("loadModel() refuses a MiniMax-M2 file or checkpoint it cannot run, naming why", async () => {
  await expectLoadError(loadModel(await writeTestGguf(dir, "nogate", SPEC, { metadata: [["minimax-m2.expert_gating_func", gguf.u32(3)]] })), /has "minimax-m2\.expert_gating_func" 3; MiniMax-M2's experts are scored by 1 \(softmax\) or 2 \(sigmoid\)/);
  const refused: [string, (c: Record<string, unknown>) => Record<string, unknown>, RegExp][] = [
    ["scoring", (c) => ({ ...c, scoring_func: "softplus" }), /"scoring_func" in ".*" is "softplus"; MiniMax-M2's experts are scored by sigmoid or softmax/],
    ["shared", (c) => ({ ...c, shared_intermediate_size: 64 }), /sets shared_intermediate_size 64; MiniMax-M2 with a shared expert is not supported/],
    ["rotary", (c) => ({ ...c, rotary_dim: 7 }), /"rotary_dim" in ".*" should be an even number up to the head's 16 dims, got 7/],
    ["used", (c) => ({ ...c, num_experts_per_tok: 9 }), /"num_experts_per_tok" in ".*" should be 1 to 6, got 9/],
    ["normtype", (c) => ({ ...c, qk_norm_type: "per_group" }), /"qk_norm_type" in ".*" is "per_group"; expected "per_layer" or "per_head"/],
  ];
  for (const [name, edit, pattern] of refused) await expectLoadError(loadModel(await writeTestHfDirectory(dir, `r-${name}`, SPEC, edit)), pattern);
});

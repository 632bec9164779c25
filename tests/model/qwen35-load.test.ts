/**
 * Qwen3.5 loads from a GGUF, from its released vision-language checkpoint (text model under
 * `model.language_model.`, sizes under `text_config`) and from a text-only one alike, and what it
 * cannot run is refused by name (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { loadModel } from "../../src/model/load.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 311,
  deltaNet: { kHeads: 1, vHeads: 3, dim: 8, conv: 3, interval: 2 },
};
const dir = mkdtempSync(`${tmpdir()}/qwen35-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();
const PROMPT = [3, 77, 12, 250, 9, 41];

async function logits(path: string, backend: Backend = be): Promise<Float32Array> {
  const m = await loadModel(path);
  const out = forward(backend, uploadModel(backend, m), allocatePagedKv(backend, m.config, 1, 16), { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0], stateSlot: 0 }] });
  return (await backend.download(out)) as Float32Array;
}

test("loadModel() reads Qwen3.5 alike from a GGUF, a Qwen3_5ForConditionalGeneration checkpoint and a Qwen3_5ForCausalLM one", async () => {
  const fromGguf = await logits(await writeTestGguf(dir, "q", SPEC));
  const wrapped = await writeTestHfDirectory(dir, "wrapped", SPEC);
  const cfg = JSON.parse(readFileSync(`${wrapped}/config.json`, "utf8"));
  assert.equal(cfg.architectures[0], "Qwen3_5ForConditionalGeneration");
  const m = await loadModel(wrapped);
  assert.deepEqual(m.config.deltaNet, { layers: [true, false, true, false], numKHeads: 1, numVHeads: 3, headKDim: 8, headVDim: 8, convKernel: 3, vHeadOrder: "grouped" });
  assert.equal(m.config.rotaryDim, 4, "partial_rotary_factor read from rope_parameters");
  assert.equal(m.config.attnOutputGate, true);
  const unwrapped = await writeTestHfDirectory(dir, "unwrapped", { ...SPEC, deltaNet: { ...SPEC.deltaNet!, unwrapped: true } });
  for (const got of [await logits(wrapped), await logits(unwrapped)]) {
    for (let i = 0; i < fromGguf.length; i++) assert.ok(Math.abs(got[i] - fromGguf[i]) < 1e-4, `logit ${i}: ${got[i]} vs GGUF ${fromGguf[i]}`);
  }
});

test("loadModel() refuses Qwen3.5 RoPE sections that leave a rotated pair to the non-text position", async () => {
  const path = await writeTestGguf(dir, "sections", SPEC, { metadata: [["qwen35.rope.dimension_sections", gguf.arr(GgufType.INT32, [1, 0, 0, 0])]] });
  await expectLoadError(loadModel(path), /RoPE sections \[1, 0, 0, 0\] that leave rotated pair 1 of 2 to the fourth \(non-text\) position/);
});

test("loadModel() refuses a Qwen3.5 config.json whose layer_types name something else", async () => {
  const path = await writeTestHfDirectory(dir, "types", { ...SPEC, deltaNet: { ...SPEC.deltaNet!, unwrapped: true } }, (c) => ({ ...c, layer_types: ["linear_attention", "sliding_attention", "linear_attention", "full_attention"] }));
  await expectLoadError(loadModel(path), /"layer_types" in ".*types" should name linear_attention or full_attention for each of the 4 layers/);
});

test("forward() names the Gated DeltaNet ops a backend lacks, and a step entry without a state slot", async () => {
  const m = await loadModel(await writeTestGguf(dir, "ops", SPEC));
  const lacking: Backend = { ...be, gatedDeltaNet: undefined, info: { ...be.info, name: "partial" } };
  const kv = allocatePagedKv(be, m.config, 1, 16);
  assert.throws(() => forward(lacking, uploadModel(be, m), kv, { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0], stateSlot: 0 }] }), /The partial backend lacks the Gated DeltaNet ops \(causalConv1d, gatedDeltaNet\)/);
  assert.throws(() => forward(be, uploadModel(be, m), kv, { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0] }] }), /Entry 0 needs a recurrent state slot in 0\.\.0 \(this model has Gated DeltaNet layers\), got undefined/);
});

test("loadModel() reads Qwen3.5-MoE's experts fused per layer (gate_up_proj, down_proj) as the per-expert ones", async () => {
  const moe: ModelFileSpec = { ...SPEC, architecture: "qwen35moe", tied: false, seed: 312, experts: { count: 4, used: 2, sharedFfn: 24 } };
  const fromGguf = await logits(await writeTestGguf(dir, "moe", moe));
  const fused = await writeTestHfDirectory(dir, "fused", { ...moe, deltaNet: { ...moe.deltaNet!, fusedExperts: true } });
  assert.ok(readFileSync(`${fused}/model.safetensors`).includes(Buffer.from("mlp.experts.gate_up_proj")), "the checkpoint holds fused experts");
  const m = await loadModel(fused);
  assert.deepEqual([m.config.moe?.numExperts, m.config.moe?.normalizeTopK, m.config.moe?.sharedGate, m.config.moe?.sharedIntermediateSize], [4, true, true, 24]);
  const got = await logits(fused);
  for (let i = 0; i < fromGguf.length; i++) assert.ok(Math.abs(got[i] - fromGguf[i]) < 1e-4, `logit ${i}: ${got[i]} vs GGUF ${fromGguf[i]}`);
});

test("loadModel() reads Qwen3-Next alike from its GGUFs (attn_qkv/attn_gate or the first conversions' ssm_in, ssm_ba) and a Qwen3NextForCausalLM checkpoint", async () => {
  const next: ModelFileSpec = { ...SPEC, architecture: "qwen3next", tied: false, seed: 313, experts: { count: 4, used: 2, sharedFfn: 24 } };
  const fromGguf = await logits(await writeTestGguf(dir, "next", next));
  const m = await loadModel(`${dir}/next.gguf`);
  assert.equal(m.config.deltaNet?.vHeadOrder, "grouped", "Qwen3-Next's converter keeps the heads grouped");
  assert.ok(m.weights.layers[0].ssmBeta && m.weights.layers[0].ssmAlpha, "beta and alpha cut from ssm_ba");
  const hf = await writeTestHfDirectory(dir, "next-hf", next);
  const cfg = JSON.parse(readFileSync(`${hf}/config.json`, "utf8"));
  assert.equal(cfg.architectures[0], "Qwen3NextForCausalLM");
  assert.ok(readFileSync(`${hf}/model.safetensors`).includes(Buffer.from("linear_attn.in_proj_qkvz")), "the checkpoint holds the fused projections");
  const legacy = await writeTestGguf(dir, "next-legacy", { ...next, deltaNet: { ...next.deltaNet!, legacySsmIn: true } });
  // The same weights, cut three ways: the logits agree, and a wrong cut would not (q, k, v and z differ).
  for (const got of [await logits(hf), await logits(legacy)]) {
    for (let i = 0; i < fromGguf.length; i++) assert.ok(Math.abs(got[i] - fromGguf[i]) < 1e-4, `logit ${i}: ${got[i]} vs GGUF ${fromGguf[i]}`);
  }
});

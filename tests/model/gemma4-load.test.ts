/**
 * Gemma 4 (src/model/gguf-gemma4.ts) loads from a `gemma4` GGUF: sliding layers with heads and KV heads
 * of their own, full layers taking their keys as values where they have no value projection, the
 * per-layer output scales read with the weights, Gemma 4's SentencePiece-style BPE vocab, the E2B/E4B
 * and 26B-A4B layouts (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { attentionLayers, layerAttention } from "../../src/model/config.ts";
import { kvBytesPerBlock } from "../../src/engine/kv-cache.ts";
import { targetDims } from "../../src/model/lora.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "gemma4", hidden: 32, layers: 3, heads: 4, kvHeads: 1, headDim: 16, ffn: 48, vocab: 400, tied: true, dtype: "f32", seed: 391, tokenizer: "gemma4",
  gemma4: { pattern: [true, false, true], window: 6, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 10000, partialFull: 0.25, keyAsValue: true, softcap: 25 },
};
const dir = mkdtempSync(`${tmpdir()}/gemma4-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("loadModel() reads a gemma4 GGUF: each layer's own attention geometry, keys as values, output scales, proportional RoPE", async () => {
  const m = await loadModel(await writeTestGguf(dir, "g", SPEC));
  const c = m.config;
  assert.deepEqual([c.headDim, c.numKvHeads, c.rotaryDim, c.attentionScale, c.valueNorm, c.finalSoftcap, c.embeddingScale], [16, 1, undefined, 1, true, 25, Math.sqrt(32)]);
  assert.deepEqual(c.slidingWindow, { size: 6, layers: [true, false, true], ropeTheta: 10000, headDim: 8, numKvHeads: 2 });
  assert.deepEqual([0, 1, 2].map((i) => layerAttention(c, i)), [{ numKvHeads: 2, headDim: 8, rotaryDim: undefined }, { numKvHeads: 1, headDim: 16, rotaryDim: undefined }, { numKvHeads: 2, headDim: 8, rotaryDim: undefined }]);
  assert.deepEqual(c.keyAsValue, [false, true, false]);
  assert.equal(c.layerOutputScales?.length, 3);
  assert.ok(c.layerOutputScales!.every((x) => x > 0.5 && x < 1.3), "the scalars the file holds");
  // The full layer's rope_freqs: 2 of 8 pairs turn, the rest are divided by 1e30.
  assert.deepEqual(c.ropeFreqFactors?.map((f) => f > 1e29), [false, false, true, true, true, true, true, true]);
  assert.deepEqual([m.weights.layers[1].wv, m.weights.layers[0].wq?.shape, m.weights.layers[1].wq?.shape, m.weights.layers[1].qNorm?.shape], [undefined, [32, 32], [64, 32], [16]]);
  // KV per block: K and V of 2 × 8 on two sliding layers and of 1 × 16 on the full one.
  assert.deepEqual(attentionLayers(c), [0, 1, 2]);
  assert.equal(kvBytesPerBlock(c, 16, "f32"), 2 * 16 * (2 * 16 + 16) * 4);
  assert.deepEqual([targetDims(c, 1, "wk", true), targetDims(c, 0, "wk", true), targetDims(c, 1, "wv", true)], [[32, 16], [32, 16], "it has no value projection (its values are its keys')"]);
  // Gemma 4's vocab: spaces as ▁, bytes as <0xXX>, BOS always added, <turn|> ends a turn.
  const text = "hello world  it's\n\nthe 🙂 agent";
  const ids = m.tokenizer.encode(text, { addBos: true });
  assert.equal(ids[0], 2);
  assert.equal(m.tokenizer.decode(ids.slice(1)), text);
  assert.equal(c.addBos, true);
  assert.ok(c.eosTokenIds.includes(5), "<turn|>");
});

test("loadModel() reads Gemma 4 E2B/E4B's per-layer inputs, KV-sharing layers and double-wide feed-forwards, and refuses a sharing it cannot place", async () => {
  const spec: ModelFileSpec = { ...SPEC, layers: 5, gemma4: { ...SPEC.gemma4!, pattern: [true, true, false, true, false], ple: 4, sharedKv: 2, doubleWide: true } };
  const m = await loadModel(await writeTestGguf(dir, "e2b", spec));
  const c = m.config;
  assert.deepEqual([c.perLayerInput, c.kvShareFrom, c.layerIntermediateSizes, c.intermediateSize], [{ width: 4 }, [undefined, undefined, undefined, 1, 2], [48, 48, 48, 96, 96], 96]);
  assert.deepEqual(attentionLayers(c), [0, 1, 2], "the sharing layers have no cache of their own");
  assert.deepEqual([m.weights.perLayerEmbedding?.shape, m.weights.perLayerModelProj?.shape, m.weights.perLayerProjNorm?.shape], [[400, 20], [20, 32], [4]]);
  const l = m.weights.layers[3];
  assert.deepEqual([l.wk, l.wv, l.kNorm, l.wq?.shape, l.wGate?.shape, l.pleGate?.shape, l.pleProj?.shape], [undefined, undefined, undefined, [32, 32], [96, 32], [4, 32], [32, 4]]);
  assert.match(String(targetDims(c, 4, "wk", true)), /it reads layer 2's KV cache and projects no keys or values/);
  assert.deepEqual([targetDims(c, 0, "wUp", true), targetDims(c, 4, "wUp", true)], [[32, 48], [32, 96]], "each layer's own feed-forward width");
  // Sharing needs a sliding and a full-attention layer right before the sharing ones.
  const bad: ModelFileSpec = { ...spec, gemma4: { ...spec.gemma4!, pattern: [true, false, true, true, false] } };
  await expectLoadError(loadModel(await writeTestGguf(dir, "badshare", bad)), /shares the KV caches of its last 2 layers, but the two layers before them are not a sliding and a full-attention one/);
});

test("loadModel() reads Gemma 4's experts (the 26B-A4B's layout): a dense feed-forward beside them, the router's norm weight its scale over √hidden", async () => {
  const spec: ModelFileSpec = { ...SPEC, ffn: 16, experts: { count: 4, used: 2 } };
  const m = await loadModel(await writeTestGguf(dir, "moe", spec));
  const moe = m.config.moe!;
  assert.deepEqual([moe.numExperts, moe.numExpertsUsed, moe.gating, moe.normalizeTopK, moe.gemma4, moe.sharedIntermediateSize, m.config.intermediateSize], [4, 2, "softmax", true, true, 48, 16]);
  const l = m.weights.layers[1];
  assert.deepEqual([l.wGate?.shape, l.wGateShared?.shape, l.routerNorm?.shape, l.expertScale?.shape, l.ffnPostNorm1?.shape], [[4, 16, 32], [48, 32], [32], [4], [32]]);
  // The file's scale over √32: its values are near 1 (drawn in 0.5..1.5), the weight's near 0.18.
  const norm = new Float32Array(l.routerNorm!.data.slice().buffer);
  assert.ok(norm.every((x) => x > 0.5 / Math.sqrt(32) - 1e-6 && x < 1.5 / Math.sqrt(32) + 1e-6), `${norm}`);
});

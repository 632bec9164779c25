/**
 * Ministral 3 (src/model/mistral3.ts) loads alike from a `mistral3` GGUF and from its released
 * Mistral3ForConditionalGeneration checkpoint (text model under `model.language_model.`, YaRN and
 * Llama 4's temperature under `rope_parameters`); Mistral Small 3.x's and Devstral's checkpoints (a
 * "mistral" text model, Llama's layout) load as Llama, and another text model is refused by name
 * (llama.cpp's check of the same weights: tests/oracle/llama-cpp.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { loadModel } from "../../src/model/load.ts";
import { expectLoadError, type ModelFileSpec, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "mistral3", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 341,
  yarn: { factor: 4, originalContext: 4, betaFast: 32, betaSlow: 1 }, attnTemperature: 0.4,
};
const dir = mkdtempSync(`${tmpdir()}/mistral3-load-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();
// Twelve positions: the temperature's ⌊position / 4⌋ steps twice.
const PROMPT = [3, 77, 12, 250, 9, 41, 5, 8, 120, 33, 61, 2];

async function logits(path: string): Promise<Float32Array> {
  const m = await loadModel(path);
  const out = forward(be, uploadModel(be, m), allocatePagedKv(be, m.config, 1, 16), { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0] }], allPositions: true });
  return (await be.download(out)) as Float32Array;
}

test("loadModel() reads Ministral 3 alike from a mistral3 GGUF and a Mistral3ForConditionalGeneration checkpoint, YaRN and the attention temperature included", async () => {
  const gguf = await writeTestGguf(dir, "m", SPEC);
  const m = await loadModel(gguf);
  assert.deepEqual(m.config.attnTemperature, { beta: 0.4, originalContext: 4 });
  assert.equal(m.config.ropeLayout, "normal", "llama.cpp's converter permutes q and k as Llama's");
  assert.ok(m.config.ropeFreqFactors?.some((f) => f > 1), "YaRN slows some pairs");
  const wrapped = await writeTestHfDirectory(dir, "wrapped", { ...SPEC, wrapped: true });
  assert.equal(JSON.parse(readFileSync(`${wrapped}/config.json`, "utf8")).architectures[0], "Mistral3ForConditionalGeneration");
  const hf = await loadModel(wrapped);
  assert.deepEqual(hf.config.attnTemperature, m.config.attnTemperature);
  const [want, got] = [await logits(gguf), await logits(wrapped)];
  for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) < 1e-4, `logit ${i}: ${got[i]} vs GGUF ${want[i]}`);
  // Without the temperature the later positions' logits move: the check above would see it lost.
  const plain = await writeTestGguf(dir, "plain", { ...SPEC, attnTemperature: undefined });
  const without = await logits(plain);
  const vocab = 300;
  const last = (xs: Float32Array) => xs.subarray((PROMPT.length - 1) * vocab);
  assert.ok(Math.max(...last(without).map((v, i) => Math.abs(v - last(want)[i]))) > 1e-3, "the temperature changes the last position's logits");
});

test("loadModel() reads Mistral Small 3.x's and Devstral's checkpoints (Mistral3 with a \"mistral\" text model, MistralForCausalLM) as Llama, and refuses another text model by name", async () => {
  const llama: ModelFileSpec = { ...SPEC, architecture: "llama", yarn: undefined, attnTemperature: undefined, seed: 342 };
  const want = await logits(await writeTestGguf(dir, "llama", llama));
  const small = await writeTestHfDirectory(dir, "small", { ...llama, wrapped: true }, (c) => ({ ...c, text_config: { ...(c.text_config as Record<string, unknown>), model_type: "mistral" } }));
  const plain = await writeTestHfDirectory(dir, "mistral", llama, (c) => ({ ...c, architectures: ["MistralForCausalLM"], model_type: "mistral", sliding_window: null }));
  for (const path of [small, plain]) {
    assert.equal((await loadModel(path)).config.architecture, "llama");
    const got = await logits(path);
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) < 1e-4, `${path} logit ${i}: ${got[i]} vs GGUF ${want[i]}`);
  }
  // Mistral 7B v0.1's window masks every layer.
  const windowed = await writeTestHfDirectory(dir, "windowed", llama, (c) => ({ ...c, architectures: ["MistralForCausalLM"], model_type: "mistral", sliding_window: 4 }));
  assert.deepEqual((await loadModel(windowed)).config.slidingWindow, { size: 4, layers: [true, true] });
  const other = await writeTestHfDirectory(dir, "other", { ...SPEC, wrapped: true }, (c) => ({ ...c, text_config: { ...(c.text_config as Record<string, unknown>), model_type: "pixtral_text" } }));
  await expectLoadError(loadModel(other), /Unknown architecture "pixtral_text \(the text model of Mistral3ForConditionalGeneration\)"/);
});

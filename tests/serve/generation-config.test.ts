/**
 * A Hugging Face directory's generation_config.json through the real server and the `openai` client:
 * with `--generation-config auto` (the default, as vLLM's) a request that leaves out top_k or
 * max_tokens gets the model's values, and one that sets them keeps its own; with "vllm" the model's
 * are ignored.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import type { GenerationConfigChoice } from "../../src/serve/app.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "../model/model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/generation-config-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const SPEC: ModelFileSpec = { architecture: "qwen2", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, vocab: 300, tied: false, dtype: "f32", seed: 23 };
const modelPath = `${dir}/tiny`;
await writeHfDirectory(modelPath, SPEC, randomHfWeights(SPEC));
// top_k 1 makes any temperature greedy; max_new_tokens bounds a request that names no budget.
await writeFile(`${modelPath}/generation_config.json`, JSON.stringify({ top_k: 1, max_new_tokens: 5, repetition_penalty: 1.1 }));
const model = await loadModel(modelPath);

// The same weights as a GGUF whose converter recorded top_k 1 (llama.cpp's general.sampling.* keys).
const ggufPath = `${dir}/tiny.gguf`;
await writeFile(ggufPath, ggufBytes(SPEC, randomHfWeights(SPEC), undefined, { metadata: [["general.sampling.top_k", gguf.u32(1)], ["general.sampling.top_p", gguf.f32(0.95)]] }));

async function withServer(
  generationConfig: GenerationConfigChoice | undefined, fn: (ask: (body: Record<string, unknown>) => Promise<OpenAI.ChatCompletion>) => Promise<void>,
  served: { modelPath: string; model: LoadedModel } = { modelPath, model },
) {
  const s = await startServer({ ...served, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...(generationConfig ? { generationConfig } : {}) });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    await fn((body) => client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Hello there" }], ...body } as OpenAI.ChatCompletionCreateParamsNonStreaming));
  } finally {
    await s.shutdown();
  }
}

test("startServer() applies generation_config.json's top_k and max_new_tokens where a request leaves them out", async () => {
  let greedy = "";
  await withServer(undefined, async (ask) => {
    greedy = (await ask({ temperature: 0, max_tokens: 5 })).choices[0].message.content ?? "";
    const a = await ask({ temperature: 1, seed: 1 });
    const b = await ask({ temperature: 1, seed: 2 });
    assert.equal(a.choices[0].message.content, greedy, "top_k 1 from the model: sampling is greedy whatever the seed");
    assert.equal(b.choices[0].message.content, greedy);
    assert.ok(a.usage!.completion_tokens <= 5, `max_new_tokens 5 bounds the answer: ${a.usage!.completion_tokens}`);
    // A request's own values win: top_k -1 turns the limit off, and the seeds then differ.
    const c = await ask({ temperature: 1, seed: 1, top_k: -1, max_tokens: 12 });
    const d = await ask({ temperature: 1, seed: 2, top_k: -1, max_tokens: 12 });
    assert.notEqual(c.choices[0].message.content, d.choices[0].message.content);
    assert.ok(c.usage!.completion_tokens > 5 || c.choices[0].finish_reason === "stop");
  });
  await withServer("vllm", async (ask) => {
    const a = await ask({ temperature: 1, seed: 1, max_tokens: 12 });
    const b = await ask({ temperature: 1, seed: 2, max_tokens: 12 });
    assert.notEqual(a.choices[0].message.content, b.choices[0].message.content, "no top_k from the model");
    const long = await ask({ temperature: 0 });
    assert.ok(long.usage!.completion_tokens > 5 || long.choices[0].finish_reason === "stop", "no max_new_tokens: up to the context");
  });
});

test("startServer() applies a GGUF's general.sampling.* defaults where a request leaves them out", async () => {
  const fromGguf = { modelPath: ggufPath, model: await loadModel(ggufPath) };
  // The f32 0.95 of the file is said as 0.95.
  assert.deepEqual(fromGguf.model.config.samplingDefaults, { topK: 1, topP: 0.95, source: "GGUF general.sampling" });
  await withServer(undefined, async (ask) => {
    const greedy = (await ask({ temperature: 0, max_tokens: 6 })).choices[0].message.content;
    for (const seed of [1, 2]) assert.equal((await ask({ temperature: 1, seed, max_tokens: 6 })).choices[0].message.content, greedy, `seed ${seed}: top_k 1 from the file`);
    const own = await Promise.all([1, 2, 3].map(async (seed) => (await ask({ temperature: 1, seed, max_tokens: 6, top_k: -1 })).choices[0].message.content));
    assert.ok(own.some((t) => t !== greedy), "a request's own top_k wins");
  }, fromGguf);
});

test("chat completions take vLLM's min_p (at 1 only the most likely token is sampled, whatever the seed) and refuse bad min_p and repetition_penalty", async () => {
  await withServer("vllm", async (ask) => {
    const greedy = (await ask({ temperature: 0, max_tokens: 8 })).choices[0].message.content;
    for (const seed of [1, 2, 3]) {
      assert.equal((await ask({ temperature: 1.5, seed, max_tokens: 8, min_p: 1 })).choices[0].message.content, greedy, `seed ${seed}`);
    }
    const free = await Promise.all([1, 2, 3].map(async (seed) => (await ask({ temperature: 1.5, seed, max_tokens: 8 })).choices[0].message.content));
    assert.ok(free.some((t) => t !== greedy), "without min_p the same seeds sample other tokens");
    for (const [param, bad] of [["min_p", 1.5], ["repetition_penalty", 0]] as const) {
      const err = await ask({ [param]: bad }).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400 && (err.error as { param?: string }).param === param, String(err));
    }
  });
});

/** `serve --kv-offload-blocks`: KV evicted from the device comes back from host memory, seen through the openai client. */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.";

for (const workers of [1, 2]) test(`startServer({ kvOffloadBlocks${workers > 1 ? ", workers: 2" : ""} }) answers a returning prompt from host memory after its device blocks were evicted`, async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 12, kvOffloadBlocks: 64, ...(workers > 1 ? { workers, planner: "none" as const } : {}) });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (prompt: string, max_tokens = 8) => client.completions.create({ model: "stories260K", prompt, max_tokens, temperature: 0 });
    const first = await ask(STORY);
    // The fillers open as the story does for more than a block (16 tokens), so a cluster's router sends
    // them to the story's worker (that block is there), whose device cache they then fill: the story's
    // later blocks go to host memory. (Fillers routed elsewhere left them on the device now and then.)
    const opening = STORY.slice(0, STORY.indexOf(" outside"));
    for (let i = 0; i < 4 * workers; i++) await ask(`${opening} ` + `The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), 4);
    const again = await ask(STORY);
    assert.equal(again.choices[0].text, first.choices[0].text);
    assert.ok(again.usage!.prompt_tokens_details!.cached_tokens! >= 16, `cached ${again.usage!.prompt_tokens_details!.cached_tokens} tokens`);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const restored = Number(/evolving:kv_restored_blocks_total\{[^}]*\} (\d+)/.exec(metrics)?.[1]);
    assert.ok(restored >= 1, `restored ${restored} blocks`);
    assert.match(metrics, new RegExp(`evolving:kv_host_capacity_blocks\\{[^}]*\\} ${64 * workers}\\b`));
    // One engine reports its cache's dtype as vLLM does (auto is f16 on the reference backend).
    if (workers === 1) assert.match(metrics, /vllm:cache_config_info\{model_name="stories260K",cache_dtype="f16",num_gpu_blocks="12"\} 1/);
  } finally {
    await s.shutdown();
  }
});

test("startServer({ kvCacheDtype: \"f8_e4m3\", kvOffloadBlocks }) answers a returning prompt from host memory as it first did", async () => {
  // stories260K's cache rows are 4 heads of 8: one f8_e4m3 block each. Its host copies are the f32
  // values the blocks hold, and written back they encode to the same blocks, so the answer repeats.
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 12, kvOffloadBlocks: 64, kvCacheDtype: "f8_e4m3" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (prompt: string, max_tokens = 8) => client.completions.create({ model: "stories260K", prompt, max_tokens, temperature: 0 });
    const first = await ask(STORY);
    for (let i = 0; i < 4; i++) await ask(`The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), 4);
    const again = await ask(STORY);
    assert.equal(again.choices[0].text, first.choices[0].text);
    assert.ok(again.usage!.prompt_tokens_details!.cached_tokens! >= 16, `cached ${again.usage!.prompt_tokens_details!.cached_tokens} tokens`);
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    assert.ok(Number(/evolving:kv_restored_blocks_total\{[^}]*\} (\d+)/.exec(metrics)?.[1]) >= 1, "restored from host memory");
    assert.match(metrics, /vllm:cache_config_info\{model_name="stories260K",cache_dtype="f8_e4m3",num_gpu_blocks="12"\} 1/);
  } finally {
    await s.shutdown();
  }
});

/**
 * vLLM's `stream_options.continuous_usage_stats` through the real server and the `openai` client:
 * with `include_usage`, every chunk carries the usage so far, growing to the final chunk's.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

test("stream_options continuous_usage_stats puts the usage so far in every chunk (openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    type Opts = OpenAI.ChatCompletionCreateParamsStreaming & { stream_options: { include_usage: boolean; continuous_usage_stats?: boolean } };
    const run = async (continuous: boolean) => {
      const stream = await client.chat.completions.create({
        model: "stories260K", messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 12, temperature: 0, stream: true, ignore_eos: true,
        stream_options: { include_usage: true, continuous_usage_stats: continuous },
      } as Opts);
      const usages: (OpenAI.CompletionUsage | null | undefined)[] = [];
      for await (const c of stream) usages.push(c.usage);
      return usages;
    };
    const plain = await run(false);
    assert.ok(plain.slice(0, -1).every((u) => u === null || u === undefined), "only the last chunk has usage");
    const final = plain[plain.length - 1]!;
    const growing = await run(true);
    assert.ok(growing.every((u) => u && u.prompt_tokens === final.prompt_tokens), "every chunk has it");
    const counts = growing.map((u) => u!.completion_tokens);
    assert.ok(counts.every((n, i) => i === 0 || n >= counts[i - 1]), `never shrinking: ${counts}`);
    assert.equal(counts[counts.length - 1], final.completion_tokens);
    assert.ok(new Set(counts).size > 3, `it grows along the answer: ${counts}`);
  } finally {
    await s.shutdown();
  }
});

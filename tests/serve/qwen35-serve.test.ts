/**
 * A Qwen3.5 (random weights, Gated DeltaNet layers) served over HTTP to the real openai client: a
 * conversation's second turn resumes from the state checkpoint the first left (usage's
 * cached_tokens), streamed and whole alike, on the reference and WebGPU backends; what the model
 * cannot do is refused at start with its reason.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 321,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/qwen35-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = await writeTestGguf(dir, "qwen35", SPEC);
const probe = await poisonedWebGpu("the Qwen3.5 WebGPU serving test");
probe.gpu?.destroy();
const TURN1 = "the agent reads the file, then it calls a tool and waits for the result of that tool call";

for (const backend of ["reference", "webgpu"] as const) {
  test(`serve on ${backend}: a Qwen3.5's second turn resumes from the first turn's state checkpoint (cached_tokens), streamed and whole alike`, async () => {
    const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend, kvBlocks: 64, maxNumSeqs: 4 });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const first = await client.completions.create({ model: "qwen35", prompt: TURN1, max_tokens: 8, temperature: 0 });
      assert.equal(first.usage!.prompt_tokens_details?.cached_tokens ?? 0, 0);
      const turn2 = `${TURN1}${first.choices[0].text} and the tool says: done.`;
      const second = await client.completions.create({ model: "qwen35", prompt: turn2, max_tokens: 8, temperature: 0 });
      const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
      assert.ok(cached >= 16 && cached % 16 === 0 && cached <= first.usage!.prompt_tokens, `cached ${cached} of the first prompt's ${first.usage!.prompt_tokens}`);
      // The same prompt streamed, resuming from its own checkpoint now, gives the same greedy text.
      const stream = await client.completions.create({ model: "qwen35", prompt: turn2, max_tokens: 8, temperature: 0, stream: true });
      let text = "";
      for await (const c of stream) text += c.choices[0]?.text ?? "";
      assert.equal(text, second.choices[0].text);
    } finally {
      await s.shutdown();
    }
  }, { ignore: backend === "webgpu" && probe.skip });
}

test("startServer() refuses a cluster and speculative decoding for a Qwen3.5, naming why", async () => {
  await assert.rejects(startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2 }), /A cluster \(--workers, --nats\) is not supported for models with Gated DeltaNet layers \(qwen35\)/);
  await assert.rejects(
    startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, speculative: { method: "ngram", numTokens: 2, maxN: 3, minN: 1 } }),
    /Speculative decoding is not supported for models with Gated DeltaNet layers/,
  );
});

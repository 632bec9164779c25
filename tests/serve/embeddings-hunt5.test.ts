/**
 * The non-generating endpoints' edges (hunt 5): `/score` and `/rerank` embed every text as its own
 * engine request, so more texts in all than `--max-waiting` queues is a 400 naming the limit (it was
 * a 429 the client would retry forever); and `/v1/embeddings` through the openai client: base64
 * decodes to the float answer, a batch with repeats gives each text its own vector in order, and the
 * bad token ids are 400s naming the input.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

type Json = Record<string, unknown>;

test("/score and /rerank refuse with a 400 more texts in all than --max-waiting queues (a 429 would send the client back for good)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxWaiting: 4 });
  const post = async (path: string, body: Json) => {
    const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, json: await r.json() as { error?: { param: string | null; message: string } } };
  };
  try {
    // Each side within the queue, both together over it (the engine may take one at once: 6 is past 4 + 1).
    for (const [path, body, param, message] of [
      ["/score", { text_1: ["a", "b", "c"], text_2: ["d", "e", "f"] }, "text_2", /text_1 and text_2 hold 6 texts in all; this server queues at most 4 requests \(--max-waiting\)/],
      ["/v1/score", { queries: "a", documents: ["b", "c", "d", "e", "f"] }, "documents", /queries and documents hold 6 texts in all; this server queues at most 4/],
      ["/rerank", { query: "a", documents: ["b", "c", "d", "e", "f"] }, "documents", /The query and documents hold 6 texts in all; this server queues at most 4 requests \(--max-waiting\)/],
    ] as const) {
      const r = await post(path, body);
      assert.equal(r.status, 400, `${path}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error?.param, param);
      assert.match(r.json.error?.message ?? "", message);
    }
    // At the limit both answer.
    const score = await post("/score", { text_1: ["a", "b"], text_2: ["c", "d"] });
    assert.equal(score.status, 200, JSON.stringify(score.json));
    const rerank = await post("/rerank", { query: "a", documents: ["b", "c", "d"] });
    assert.equal(rerank.status, 200, JSON.stringify(rerank.json));
  } finally {
    await s.shutdown();
  }
});

test("/v1/embeddings through the openai client: base64 is the float answer, a batch with repeats keeps each text's vector in order, bad token ids are 400s", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const texts = ["Lily went to the park", "a", "Lily went to the park", "Tom had a big red ball"];
    // The client asks for base64 and decodes it as little-endian float32.
    const batch = await client.embeddings.create({ model: "stories260K", input: texts });
    assert.equal(batch.model, "stories260K");
    assert.deepEqual(batch.data.map((d) => d.index), [0, 1, 2, 3]);
    for (const [i, text] of texts.entries()) {
      const alone = await client.embeddings.create({ model: "stories260K", input: text, encoding_format: "float" });
      assert.equal(alone.data[0].embedding.length, model.config.hiddenSize);
      alone.data[0].embedding.forEach((x, j) => assert.ok(Math.abs(x - batch.data[i].embedding[j]) < 1e-6, `input ${i}, dimension ${j}`));
    }
    assert.ok(batch.data[0].embedding.some((x, j) => Math.abs(x - batch.data[1].embedding[j]) > 1e-3), "different texts, different vectors");
    const refused = (input: unknown) => client.embeddings.create({ model: "stories260K", input } as OpenAI.EmbeddingCreateParams).then(() => null, (e: unknown) => e);
    for (const [input, param] of [[[-1], "input[0]"], [[[3, -2]], "input[0][1]"], [[model.config.vocabSize], "input[0]"], [[[3], [4, model.config.vocabSize]], "input[1][1]"], [[1.5], "input"], [[[]], "input[0]"], [["a", ""], "input[1]"]] as const) {
      const err = await refused(input);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === param, `${JSON.stringify(input)}: ${err}`);
    }
  } finally {
    await s.shutdown();
  }
});

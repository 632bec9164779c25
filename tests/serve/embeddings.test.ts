/**
 * `POST /v1/embeddings` through the real server and the `openai` client: last-token hidden states
 * after the output norm, checked against the model's own next-token distribution (the output
 * projection of the embedding, computed here on the CPU from the weights, must give the logits the
 * engine sampled from), batch-invariant, as text or token ids, base64 or floats, and the 400s.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { loadModel } from "../../src/model/load.ts";
import { MAX_EMBEDDING_INPUTS } from "../../src/serve/embeddings.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const PROMPTS = ["Once upon a time", "Tom had a red ball", "The sun was hot and"];

/** log_softmax(W · e) for the model's output projection W (the token embedding when tied). */
function logSoftmaxOfProjection(e: readonly number[]): Float64Array {
  const w = model.weights.output ?? model.weights.tokenEmbedding;
  const [vocab, hidden] = w.shape;
  const f = decodeToF32(w.data, w.dtype, vocab * hidden);
  const logits = new Float64Array(vocab);
  for (let t = 0; t < vocab; t++) {
    let s = 0;
    for (let j = 0; j < hidden; j++) s += f[t * hidden + j] * e[j];
    logits[t] = s;
  }
  const max = Math.max(...logits);
  const lse = max + Math.log(logits.reduce((a, x) => a + Math.exp(x - max), 0));
  return logits.map((x) => x - lse);
}

test("/v1/embeddings returns each input's last hidden state: its projection is the distribution the model samples from (openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    // The client asks for base64 unless told, and decodes it.
    const batch = await client.embeddings.create({ model: "stories260K", input: PROMPTS });
    assert.equal(batch.data.length, 3);
    const counts = PROMPTS.map((p) => model.tokenizer.encode(p, { addBos: model.config.addBos }).length);
    assert.equal(batch.usage.prompt_tokens, counts.reduce((a, b) => a + b));
    for (const [i, d] of batch.data.entries()) {
      assert.equal(d.index, i);
      assert.equal(d.embedding.length, model.config.hiddenSize);
      assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-5, "unit length");
    }
    const raw = await client.embeddings.create({ model: "stories260K", input: PROMPTS[0], encoding_format: "float", normalize: false } as OpenAI.EmbeddingCreateParams);
    const e = raw.data[0].embedding;
    assert.ok(Math.abs(Math.hypot(...e) - 1) > 1e-3, "normalize: false leaves the raw state");
    const lp = logSoftmaxOfProjection(e);
    const best = lp.indexOf(Math.max(...lp));
    const next = await client.completions.create({ model: "stories260K", prompt: PROMPTS[0], max_tokens: 1, temperature: 0, logprobs: 1 });
    assert.equal(next.choices[0].text, model.tokenizer.decode([best]), "the greedy next token is the projection's argmax");
    assert.ok(Math.abs(next.choices[0].logprobs!.token_logprobs![0] - lp[best]) < 1e-3, `${next.choices[0].logprobs!.token_logprobs![0]} vs ${lp[best]}`);
    // Alone or in a batch, as text or as its token ids: the same vector.
    const ids = model.tokenizer.encode(PROMPTS[0], { addBos: model.config.addBos });
    const byIds = await client.embeddings.create({ model: "stories260K", input: ids, encoding_format: "float" });
    const norm = Math.hypot(...e);
    for (const other of [batch.data[0].embedding, byIds.data[0].embedding]) other.forEach((x, j) => assert.ok(Math.abs(x - e[j] / norm) < 1e-5, `dimension ${j}`));
    // The server names what it cannot embed.
    const refused = (body: Record<string, unknown>) => client.embeddings.create({ model: "stories260K", input: "Hi", ...body } as OpenAI.EmbeddingCreateParams).then(() => null, (err: unknown) => err);
    for (const [body, param, status] of [
      [{ dimensions: 8 }, "dimensions", 400], [{ input: "" }, "input", 400], [{ input: [1, 99999] }, "input[1]", 400],
      [{ input: ["a", "x".repeat(20000)] }, "input[1]", 400], [{ model: "other" }, "model", 404],
    ] as const) {
      const err = await refused(body);
      assert.ok(err instanceof OpenAI.APIError && err.status === status && err.param === param, `${JSON.stringify(body).slice(0, 40)}: ${err}`);
    }
    assert.equal((await client.embeddings.create({ model: "stories260K", input: "still up" })).data.length, 1);
  } finally {
    await s.shutdown();
  }
  // A model whose file says it pools by mean gets a 400, not last-token vectors.
  const mean = await startServer({ modelPath, model: { ...model, config: { ...model.config, poolingType: "mean" } }, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 16 });
  try {
    const client = new OpenAI({ baseURL: `${mean.url}/v1`, apiKey: "none", maxRetries: 0 });
    const err = await client.embeddings.create({ model: "stories260K", input: "Hi" }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && /pools its embeddings by mean/.test(err.message), String(err));
  } finally {
    await mean.shutdown();
  }
});

test("/v1/embeddings through a cluster of a prefill and a decode worker gives the one engine's vectors", async () => {
  const vectors: number[][] = [];
  for (const o of [{}, { workers: 2, roles: ["prefill", "decode"] as ("prefill" | "decode")[], planner: "none" as const }]) {
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...o });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      vectors.push((await client.embeddings.create({ model: "stories260K", input: `${PROMPTS[0]} there was a little girl named Lily`, encoding_format: "float" })).data[0].embedding);
    } finally {
      await s.shutdown();
    }
  }
  vectors[1].forEach((x, j) => assert.ok(Math.abs(x - vectors[0][j]) < 1e-5, `dimension ${j}`));
});

test("/v1/embeddings ends text inputs with the token an embedding model's tokenizer appends (appendEosTokenId)", async () => {
  const eos = model.config.eosTokenIds[0];
  const embedder = { ...model, config: { ...model.config, appendEosTokenId: eos } };
  const s = await startServer({ modelPath, model: embedder, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ids = model.tokenizer.encode(PROMPTS[1], { addBos: model.config.addBos });
    const text = await client.embeddings.create({ model: "stories260K", input: PROMPTS[1], encoding_format: "float" });
    const withEnd = await client.embeddings.create({ model: "stories260K", input: [...ids, eos], encoding_format: "float" });
    const without = await client.embeddings.create({ model: "stories260K", input: ids, encoding_format: "float" });
    assert.equal(text.usage.prompt_tokens, ids.length + 1);
    text.data[0].embedding.forEach((x, j) => assert.ok(Math.abs(x - withEnd.data[0].embedding[j]) < 1e-5, `dimension ${j}`));
    assert.ok(text.data[0].embedding.some((x, j) => Math.abs(x - without.data[0].embedding[j]) > 1e-3), "pooled at the appended token, not the text's last");
  } finally {
    await s.shutdown();
  }
});

test("/v1/embeddings names its input limit, an empty list and each over-long token list, and honours add_special_tokens: false (openai client)", async () => {
  const eos = model.config.eosTokenIds[0];
  // An embedding model's tokenizer appends an end token; add_special_tokens: false leaves it out, with BOS.
  const embedder = { ...model, config: { ...model.config, appendEosTokenId: eos } };
  const s = await startServer({ modelPath, model: embedder, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const refused = (body: Record<string, unknown>) => client.embeddings.create({ model: "stories260K", input: "Hi", ...body } as OpenAI.EmbeddingCreateParams).then(() => null, (err: unknown) => err);
    const tooLong = Array(model.config.contextLength + 10).fill(5);
    for (const [input, param, message] of [
      [Array(MAX_EMBEDDING_INPUTS + 1).fill("a"), "input", new RegExp(`holds ${MAX_EMBEDDING_INPUTS + 1} inputs; this server takes at most ${MAX_EMBEDDING_INPUTS}`)],
      [[], "input", /The input list is empty/],
      [["a", 1], "input", /must be a text, a list of texts, a list of token ids or a list of token-id lists/],
      [[tooLong], "input[0]", /maximum context length/],
      [[[5], tooLong], "input[1]", /maximum context length/],
    ] as const) {
      const err = await refused({ input });
      assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === param && message.test(err.message), `${JSON.stringify(input).slice(0, 40)}: ${err}`);
    }
    const bare = model.tokenizer.encode(PROMPTS[0], { addBos: false });
    const plain = await client.embeddings.create({ model: "stories260K", input: PROMPTS[0], encoding_format: "float", add_special_tokens: false } as OpenAI.EmbeddingCreateParams);
    const byIds = await client.embeddings.create({ model: "stories260K", input: bare, encoding_format: "float" });
    assert.equal(plain.usage.prompt_tokens, bare.length, "no BOS, no appended end token");
    plain.data[0].embedding.forEach((x, j) => assert.ok(Math.abs(x - byIds.data[0].embedding[j]) < 1e-5, `dimension ${j}`));
    const special = await client.embeddings.create({ model: "stories260K", input: PROMPTS[0], encoding_format: "float" });
    assert.equal(special.usage.prompt_tokens, bare.length + (model.config.addBos ? 2 : 1), "BOS and the end token by default");
  } finally {
    await s.shutdown();
  }
});

test("/v1/embeddings refuses with a 400 more inputs than --max-waiting queues (a 429 would send the client back for good)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxWaiting: 5 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const err = await client.embeddings.create({ model: "stories260K", input: Array(6).fill("a") }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "input" && /holds 6 inputs; this server queues at most 5 requests \(--max-waiting\)/.test(err.message), String(err));
    const ok = await client.embeddings.create({ model: "stories260K", input: Array(5).fill("a"), encoding_format: "float" });
    assert.equal(ok.data.length, 5);
  } finally {
    await s.shutdown();
  }
});

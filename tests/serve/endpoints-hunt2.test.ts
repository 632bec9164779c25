/**
 * The non-generation endpoints' edges: an embedding that fills a context the KV pool bounds (a
 * vector, as with truncate_prompt_tokens -1; one token more is a 400; never a 500), an embedding cancelled by a stopping
 * server (a 503 to retry), and a server that closes while a client stalls (no hang, on Deno too).
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import OpenAI from "openai";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import type { GenerateResult, RequestHandle } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { embeddingsOf } from "../../src/serve/embeddings.ts";
import { ApiError } from "../../src/serve/errors.ts";
import { listen } from "../../src/serve/listen.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
type Extra = { truncate_prompt_tokens?: number };

test("/v1/embeddings, /score and /rerank at a context the KV pool bounds: the whole context embeds, one token more is a 400 (openai client)", async () => {
  // 65 blocks of 16 less the watermark's one: 1024 tokens, under the model's 2048.
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 65 });
  try {
    const limit = s.engine.maxModelLen;
    assert.ok(limit < model.config.contextLength, `the pool bounds the context (${limit})`);
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ids = (n: number) => Array.from({ length: n }, (_, i) => 100 + (i % 50));
    // An embedding generates nothing, so its prompt may fill every block (it was a 500: the
    // scheduler kept a slot for a generated token).
    const full = await client.embeddings.create({ model: "stories260K", input: [ids(4), ids(limit)], encoding_format: "float" });
    assert.equal(full.usage.prompt_tokens, 4 + limit);
    const err = await client.embeddings.create({ model: "stories260K", input: [ids(4), ids(limit + 1)] }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "input[1]", String(err));
    // -1 keeps as many tokens as the server can embed: the last `limit`.
    const params = { model: "stories260K", input: ids(limit + 40), encoding_format: "float", truncate_prompt_tokens: -1 } as OpenAI.EmbeddingCreateParams & Extra;
    const cut = await client.embeddings.create(params);
    assert.equal(cut.usage.prompt_tokens, limit);
    const tail = await client.embeddings.create({ model: "stories260K", input: ids(limit + 40).slice(-limit), encoding_format: "float" });
    cut.data[0].embedding.forEach((x, j) => assert.ok(Math.abs(x - tail.data[0].embedding[j]) < 1e-5, `dimension ${j}`));
    // Score and rerank embed through the same path.
    const long = "Once upon a time there was a girl. ".repeat(200);
    for (const [path, body] of [["/score", { text_1: "a girl", text_2: long }], ["/rerank", { query: "a girl", documents: [long] }]] as const) {
      const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, truncate_prompt_tokens: -1 }) });
      assert.equal(r.status, 200, `${path}: ${await r.clone().text()}`);
      await r.body?.cancel();
    }
    assert.equal((await client.embeddings.create({ model: "stories260K", input: "still up" })).data.length, 1);
  } finally {
    await s.shutdown();
  }
});

test("embeddingsOf: an input the engine cancelled without a fault (a stopping server) is a 503 to retry, not a 500", async () => {
  const result: GenerateResult = { text: "", tokenIds: [], finishReason: "abort", promptTokens: 3, completionTokens: 0, cachedTokens: 0 };
  const handle = { result: Promise.resolve(result), cancel: () => {} } as unknown as RequestHandle;
  await assert.rejects(embeddingsOf([handle]), (e) => {
    assert.ok(e instanceof ApiError && e.status === 503 && e.code === "cancelled", String(e));
    assert.match(e.message, /Embedding input 0 was cancelled/);
    return true;
  });
  // A fault stays a 500.
  const failed = { result: Promise.resolve({ ...result, error: "device lost" }), cancel: () => {} } as unknown as RequestHandle;
  await assert.rejects(embeddingsOf([failed]), (e) => e instanceof ApiError && e.status === 500 && /device lost/.test(e.message));
});

/** A raw client connection, its errors ignored (the server cuts it). */
async function rawClient(port: number, request: string, read: boolean): Promise<{ socket: Socket; received: () => string }> {
  const socket = connect(port, "127.0.0.1");
  socket.on("error", () => {});
  let got = "";
  await new Promise<void>((r) => socket.once("connect", () => r()));
  if (read) socket.on("data", (d) => (got += String(d)));
  else socket.pause();
  socket.write(request);
  return { socket, received: () => got };
}

test("listen().close() ends within moments though a client stalls mid-upload or stops reading a stream, and lets an answer about to be sent finish", async () => {
  const enc = new TextEncoder();
  let slowStarted = () => {};
  const slowArrived = new Promise<void>((r) => (slowStarted = r));
  const l = await listen(async (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/stream") {
      // Endless: only a closing server ends it.
      return new Response(new ReadableStream({ pull: async (c) => { await new Promise((r) => setTimeout(r, 20)); c.enqueue(enc.encode("data: x\n\n")); } }));
    }
    if (path === "/slow") {
      slowStarted();
      await new Promise((r) => setTimeout(r, 50));
      return new Response("slow answer");
    }
    try {
      return new Response(`got ${(await req.text()).length}`);
    } catch {
      return new Response("body unreadable", { status: 400 });
    }
  }, "127.0.0.1", 0);
  const stalled = await rawClient(l.port, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789", false);
  const reader = await rawClient(l.port, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", false);
  await new Promise((r) => setTimeout(r, 200));
  const slow = await rawClient(l.port, "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true);
  // The close comes once the slow answer is under way (its handler has started), however slow the machine.
  await slowArrived;
  // Without the fix close() waits forever for the stalled clients: the deadline only catches that, so it
  // is generous (the grace is 200 ms; a loaded CI machine can take seconds), not a measure of speed.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([l.close().then(() => "closed"), new Promise((r) => (timer = setTimeout(() => r("hung"), 30_000)))]);
  clearTimeout(timer);
  // (The answer's last bytes may still be on their way to the client socket.)
  await eventually(() => slow.received(), (t) => /slow answer/.test(t));
  for (const c of [stalled, reader, slow]) c.socket.destroy();
  assert.equal(outcome, "closed", "close() returned");
  assert.match(slow.received(), /slow answer/, "the answer under way was sent whole");
});

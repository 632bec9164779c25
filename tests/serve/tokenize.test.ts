/**
 * vLLM's `POST /tokenize` and `POST /detokenize` against the real server: a prompt's ids, a chat's
 * ids as the chat endpoint counts them (template, prefill), text back from ids, and the errors.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { loadModel } from "../../src/model/load.ts";
import { projectRoot, test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";

async function withServer(fn: (post: (path: string, body: unknown, headers?: Record<string, string>) => Promise<{ status: number; json: Record<string, unknown> }>, client: OpenAI) => Promise<void>, apiKey?: string) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...(apiKey ? { apiKey } : {}) });
  try {
    const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
      const res = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
      return { status: res.status, json: await res.json() as Record<string, unknown> };
    };
    await fn(post, new OpenAI({ baseURL: `${s.url}/v1`, apiKey: apiKey ?? "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

test("POST /tokenize gives a prompt's ids, and a chat's as the chat endpoint counts them; /detokenize gives the text back", async () => {
  await withServer(async (post, client) => {
    const plain = await post("/tokenize", { prompt: "Go~ a b", return_token_strs: true });
    assert.equal(plain.status, 200);
    assert.deepEqual(plain.json.tokens, model.tokenizer.encode("Go~ a b", { addBos: model.config.addBos }));
    assert.equal(plain.json.count, (plain.json.tokens as number[]).length);
    const card = (await client.models.list()).data[0] as OpenAI.Model & { max_model_len: number };
    assert.equal(plain.json.max_model_len, card.max_model_len);
    assert.equal((plain.json.token_strs as string[]).join(""), "Go~ a b");
    const back = await post("/detokenize", { tokens: plain.json.tokens });
    assert.deepEqual(back.json, { prompt: "Go~ a b" });

    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Go~" }, { role: "assistant", content: " a b" }];
    const chat = await client.chat.completions.create({ model: "looper", messages, max_tokens: 2 });
    const counted = await post("/tokenize", { model: "looper", messages });
    assert.equal(counted.json.count, chat.usage!.prompt_tokens, "the chat endpoint's prompt");
    assert.equal(counted.json.token_strs, null);
    const open = await post("/tokenize", { messages, continue_final_message: true });
    assert.equal((await post("/detokenize", { tokens: open.json.tokens })).json.prompt, "user: Go~\nassistant:  a b", "the prefill left open");
  });
});

test("POST /tokenize and /detokenize refuse another model, ids outside the vocabulary and bad bodies, and need the API key", async () => {
  await withServer(async (post) => {
    const auth = { authorization: "Bearer k" };
    assert.equal((await post("/tokenize", { prompt: "x" })).status, 401);
    const other = await post("/tokenize", { model: "other", prompt: "x" }, auth);
    assert.equal(other.status, 404);
    assert.match(JSON.stringify(other.json), /The model 'other' does not exist/);
    const outside = await post("/detokenize", { tokens: [1, 99999] }, auth);
    assert.equal(outside.status, 400);
    assert.match(JSON.stringify(outside.json), /Token id 99999 is outside the vocabulary/);
    for (const body of [{}, { prompt: 5 }, { tokens: [-1] }, { messages: [] }]) {
      const path = "tokens" in body ? "/detokenize" : "/tokenize";
      assert.equal((await post(path, body, auth)).status, 400, JSON.stringify(body));
    }
  }, "k");
});

test("TokenizeRequestSchema: a bad /tokenize body gets a 400 naming the field of its own shape (prompt or messages)", async () => {
  await withServer(async (post) => {
    const cases: [unknown, string, RegExp][] = [
      [{}, "prompt", /needs a prompt \(text\) or messages/],
      [{ prompt: 5 }, "prompt", /expected string/],
      [{ prompt: "x", add_special_tokens: "no" }, "add_special_tokens", /expected boolean/],
      [{ messages: "hi" }, "messages", /expected array/],
      [{ messages: [{ role: "bogus", content: "x" }] }, "messages[0].role", /expected one of/],
      [{ messages: [{ role: "user", content: "x" }], return_token_strs: 1 }, "return_token_strs", /expected boolean/],
    ];
    for (const [body, param, message] of cases) {
      const r = await post("/tokenize", body);
      assert.equal(r.status, 400, JSON.stringify(body));
      const error = r.json.error as { param: string | null; message: string };
      assert.equal(error.param, param, JSON.stringify(body));
      assert.match(error.message, message, JSON.stringify(body));
    }
    const ok = await post("/tokenize", { messages: [{ role: "user", content: "Go~" }] });
    assert.equal(ok.status, 200, "a chat body still tokenizes");
  });
});

test("POST /tokenize return_token_strs writes byte-fallback tokens as <0xHH>, not U+FFFD, and /detokenize joins them back (stories260K)", async () => {
  const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const s = await startServer({ modelPath: `${projectRoot}/models/stories260K.gguf`, model: stories, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 16 });
  try {
    const post = async (path: string, body: unknown) => (await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json() as Promise<Record<string, unknown>>;
    const text = "héllo 😀 ok";
    const r = await post("/tokenize", { prompt: text, add_special_tokens: false, return_token_strs: true });
    const strs = r.token_strs as string[];
    assert.ok(!strs.some((x) => x.includes("\uFFFD")), JSON.stringify(strs));
    // The emoji is four byte tokens in this 512-token vocabulary: each named by its byte.
    const emoji = [...new TextEncoder().encode("😀")].map((b) => `<0x${b.toString(16).toUpperCase()}>`);
    const at = strs.indexOf(emoji[0]);
    assert.deepEqual(strs.slice(at, at + 4), emoji, JSON.stringify(strs));
    assert.ok(strs.includes("é"), "a whole character stays text");
    // Without BOS too, the encoder's space prefix is not part of the text (as sentencepiece decodes).
    assert.equal((await post("/detokenize", { tokens: r.tokens })).prompt, text);
    const withBos = await post("/tokenize", { prompt: text });
    assert.equal((await post("/detokenize", { tokens: withBos.tokens })).prompt, text);
  } finally {
    await s.shutdown();
  }
});

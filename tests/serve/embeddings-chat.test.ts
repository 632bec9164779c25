/**
 * vLLM's chat embeddings on `POST /v1/embeddings`: `messages` instead of `input`, rendered by the
 * model's chat template as `/tokenize` renders them (no generation prompt unless asked) and embedded
 * as one input, through the real server and the `openai` client (extra body fields, as vLLM's docs
 * send them); and the 400s of a body that mixes the two shapes.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";

test("/v1/embeddings with messages embeds the chat as the template renders it (vLLM's chat embeddings, openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const tokenize = async (body: Record<string, unknown>) =>
      ((await (await fetch(`${s.url}/tokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json()) as { tokens: number[] }).tokens;
    const embed = (body: Record<string, unknown>) => client.embeddings.create({ model: "looper", encoding_format: "float", ...body } as unknown as OpenAI.EmbeddingCreateParams);
    const messages = [{ role: "user", content: "Go~" }, { role: "assistant", content: " a b" }, { role: "user", content: "Done." }];
    const close = (a: number[], b: number[]) => a.every((x, j) => Math.abs(x - b[j]) < 1e-5);

    const bare = await tokenize({ messages, add_generation_prompt: false });
    const withPrompt = await tokenize({ messages });
    assert.notDeepEqual(bare, withPrompt, "this template writes a generation prompt");
    const chat = await embed({ messages });
    assert.equal(chat.usage.prompt_tokens, bare.length, "no generation prompt by default (vLLM's EmbeddingChatRequest)");
    assert.ok(close(chat.data[0].embedding, (await embed({ input: bare })).data[0].embedding), "the rendered chat's vector");
    const asked = await embed({ messages, add_generation_prompt: true });
    assert.equal(asked.usage.prompt_tokens, withPrompt.length);
    assert.ok(close(asked.data[0].embedding, (await embed({ input: withPrompt })).data[0].embedding));

    const refused = (body: Record<string, unknown>) => embed(body).then(() => null, (e: unknown) => e);
    for (const [body, param, message] of [
      [{ messages, input: "x" }, "input", /cannot be sent with messages/],
      [{ messages: [{ role: "bogus", content: "x" }] }, "messages[0].role", /expected one of/],
      [{ messages: [{ role: "user", content: "x ".repeat(10000) }] }, "messages", /maximum context length/],
    ] as const) {
      const err = await refused(body);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === param && message.test(err.message), `${JSON.stringify(body).slice(0, 50)}: ${err}`);
    }
  } finally {
    await s.shutdown();
  }
});

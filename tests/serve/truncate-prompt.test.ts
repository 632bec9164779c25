/**
 * vLLM's `truncate_prompt_tokens` through the real server and the `openai` client: completions, chat
 * and embeddings keep only their prompt's last tokens, as if the prompt were those tokens alone, and
 * a prompt longer than the context is served instead of refused.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog.";

type Extra = { truncate_prompt_tokens?: number; echo?: boolean };

test("truncate_prompt_tokens keeps a prompt's last tokens on completions, chat and embeddings (openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ids = model.tokenizer.encode(STORY, { addBos: model.config.addBos });
    const tail = ids.slice(-8);
    const cut = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 12, temperature: 0, echo: true, truncate_prompt_tokens: 8 } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
    const asTail = await client.completions.create({ model: "stories260K", prompt: tail, max_tokens: 12, temperature: 0, echo: true });
    assert.equal(cut.usage!.prompt_tokens, 8);
    assert.equal(cut.choices[0].text, asTail.choices[0].text, "the same as sending the last 8 tokens, echo included");
    assert.ok(cut.choices[0].text.startsWith(model.tokenizer.decode(tail)));
    // Longer than the context: refused whole, served truncated.
    const long = Array.from({ length: 40 }, () => STORY).join(" ");
    const refused = await client.completions.create({ model: "stories260K", prompt: long, max_tokens: 4 }).then(() => null, (e: unknown) => e);
    assert.ok(refused instanceof OpenAI.APIError && refused.status === 400, String(refused));
    const served = await client.completions.create({ model: "stories260K", prompt: long, max_tokens: 4, temperature: 0, truncate_prompt_tokens: 100 } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
    assert.equal(served.usage!.prompt_tokens, 100);
    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: long }], max_tokens: 4, truncate_prompt_tokens: 50 } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.equal(chat.usage!.prompt_tokens, 50);
    const e1 = await client.embeddings.create({ model: "stories260K", input: STORY, encoding_format: "float", truncate_prompt_tokens: 8 } as OpenAI.EmbeddingCreateParams & Extra);
    const e2 = await client.embeddings.create({ model: "stories260K", input: tail, encoding_format: "float" });
    assert.equal(e1.usage.prompt_tokens, 8);
    e1.data[0].embedding.forEach((x, j) => assert.ok(Math.abs(x - e2.data[0].embedding[j]) < 1e-5, `dimension ${j}`));
    for (const [k, re] of [[0, /must be -1 or a positive number of tokens to keep, got 0$/], [100000, /more than this model's maximum context length/]] as const) {
      const err = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 1, truncate_prompt_tokens: k } as OpenAI.CompletionCreateParamsNonStreaming & Extra).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "truncate_prompt_tokens" && re.test(err.message), String(err));
    }
  } finally {
    await s.shutdown();
  }
});

test("truncatedPrompt: truncate_prompt_tokens -1 serves a prompt longer than the context, leaving room for the output", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const limit = s.engine.maxModelLen;
    const long = Array.from({ length: 100 }, () => STORY).join(" ");
    assert.ok(model.tokenizer.encode(long, { addBos: model.config.addBos }).length > limit, "the prompt is longer than the context");
    const asked = await client.completions.create({ model: "stories260K", prompt: long, max_tokens: 3, temperature: 0, truncate_prompt_tokens: -1 } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
    assert.equal(asked.usage!.prompt_tokens, limit - 3, "as many prompt tokens as the context holds beside max_tokens");
    assert.equal(asked.usage!.completion_tokens, 3);
    const ids = Array.from({ length: limit + 10 }, (_, i) => 100 + (i % 50));
    const rest = await client.completions.create({ model: "stories260K", prompt: ids, temperature: 0, truncate_prompt_tokens: -1 } as OpenAI.CompletionCreateParamsNonStreaming & Extra);
    assert.equal(rest.usage!.prompt_tokens, limit - 1, "without max_tokens: room for one token");
    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: long }], max_completion_tokens: 2, truncate_prompt_tokens: -1 } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.equal(chat.usage!.prompt_tokens, limit - 2);
    // An output larger than the context is still a 400, naming the lengths.
    const err = await client.completions.create({ model: "stories260K", prompt: long, max_tokens: limit, truncate_prompt_tokens: -1 } as OpenAI.CompletionCreateParamsNonStreaming & Extra).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && /maximum context length/.test(err.message), String(err));
  } finally {
    await s.shutdown();
  }
});

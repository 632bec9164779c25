/**
 * Prefilled answers through the real server: vLLM's `continue_final_message` (and
 * `add_generation_prompt`) on chat completions with the `openai` client, and a final assistant
 * message on `/v1/messages` with `@anthropic-ai/sdk`, which Anthropic's API continues. The looper
 * model (tests/serve/looper-model.ts) continues " a b" with " a b …", and answers a prompt that ends
 * in its generation prompt "assistantb" with nothing.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { chatRenderer, messageText } from "../../src/serve/chat-template.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";

const TEMPLATE = "<s>{% for m in messages %}[{{ m.role }}]{{ m.content }}[end]{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

test("messageText() joins a message's text parts with newlines, as vLLM does", () => {
  assert.equal(messageText([{ type: "text", text: "a" }, { type: "text", text: "b" }]), "a\nb");
  assert.equal(messageText("as is"), "as is");
  assert.equal(messageText(null), "");
});

test("chatRenderer() ends the prompt inside the final message with continueFinal, and without the generation prompt when asked", () => {
  const r = chatRenderer(TEMPLATE, {});
  const messages = [{ role: "user" as const, content: "Hi" }, { role: "assistant" as const, content: "Hel" }];
  assert.equal(r.render(messages).text, "<s>[user]Hi[end][assistant]Hel[end][assistant]");
  assert.equal(r.render(messages, undefined, undefined, { addGenerationPrompt: false }).text, "<s>[user]Hi[end][assistant]Hel[end]");
  assert.equal(r.render(messages, undefined, undefined, { continueFinal: true }).text, "<s>[user]Hi[end][assistant]Hel");
  // A template that rewrites the content cannot be continued.
  const upper = chatRenderer("{% for m in messages %}{{ m.content | upper }}{% endfor %}", {});
  assert.throws(() => upper.render(messages, undefined, undefined, { continueFinal: true }), /does not write the final message's text as given/);
});

async function withServer(fn: (url: string) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256 });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}

type Extra = OpenAI.ChatCompletionCreateParamsNonStreaming & { continue_final_message?: boolean; add_generation_prompt?: boolean };

test("chat completions with continue_final_message continue the assistant's final message; conflicts are 400s", async () => {
  await withServer(async (url) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Go~" }, { role: "assistant", content: " a b" }];
    const fresh = await client.chat.completions.create({ model: "looper", messages, max_tokens: 4, temperature: 0 });
    assert.equal(fresh.choices[0].message.content, "", "a new turn after \"assistantb\": nothing");
    const cont = await client.chat.completions.create({ model: "looper", messages, max_tokens: 4, temperature: 0, continue_final_message: true, add_generation_prompt: false } as Extra);
    assert.equal(cont.choices[0].message.content, " a b a b", "the continuation only, not the prefill");
    // vLLM's clients send both flags; continue_final_message alone is taken too.
    const alone = await client.chat.completions.create({ model: "looper", messages, max_tokens: 4, temperature: 0, continue_final_message: true } as Extra);
    assert.equal(alone.choices[0].message.content, " a b a b");
    assert.equal(alone.usage!.prompt_tokens, cont.usage!.prompt_tokens);
    const bad = async (body: Partial<Extra>, re: RegExp) => {
      const err = await client.chat.completions.create({ model: "looper", messages, max_tokens: 4, ...body } as Extra).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400, String(err));
      assert.match(err.message, re);
      assert.equal((err.error as { param?: string }).param, "continue_final_message");
    };
    await bad({ continue_final_message: true, add_generation_prompt: true }, /cannot both be true/);
    await bad({ continue_final_message: true, messages: [{ role: "user", content: "Go~" }] }, /final message to be the assistant's, got role 'user'/);
  });
});

test("messages.create() continues a final assistant message (a prefilled answer), whole and streamed", async () => {
  await withServer(async (url) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Go~" }, { role: "assistant", content: " a b" }];
    const r = await client.messages.create({ model: "looper", max_tokens: 4, messages });
    assert.deepEqual(r.content, [{ type: "text", text: " a b a b" }]);
    assert.equal(r.stop_reason, "max_tokens");
    let streamed = "";
    for await (const e of await client.messages.create({ model: "looper", max_tokens: 4, messages, stream: true })) {
      if (e.type === "content_block_delta" && e.delta.type === "text_delta") streamed += e.delta.text;
    }
    assert.equal(streamed, " a b a b");
    // An empty final assistant message prefills nothing: a new turn, as without it.
    const empty = await client.messages.create({ model: "looper", max_tokens: 4, messages: [{ role: "user", content: "Go~" }, { role: "assistant", content: "" }] });
    assert.deepEqual(empty.content, [{ type: "text", text: " a b a b" }], "the generation prompt ends in \"~\": the loop");
  });
});

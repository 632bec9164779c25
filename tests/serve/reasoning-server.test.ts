/**
 * `--reasoning-parser think` and `parallel_tool_calls: false` end to end: the real `openai` client
 * against the real server, serving a scripted model that reasons in `<think>…</think>` and then
 * calls two tools (tests/serve/reasoning-model.ts).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { ReasoningParserName } from "../../src/serve/reasoning.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { AFTER, CALL, DRAFT, model, modelPath, SECOND_CALL, THOUGHTS, TOOLS } from "./reasoning-model.ts";

async function withServer(reasoningParser: ReasoningParserName | undefined, fn: (client: OpenAI) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

/** The fields OpenAI's types leave out. */
type WithReasoning = { reasoning_content?: string | null };
const ask = (last: string): OpenAI.ChatCompletionMessageParam[] => [{ role: "user", content: `What is the weather${last}` }];
const REASONING = THOUGHTS.join("");

/** A streamed answer, gathered: reasoning, content and calls in the order their chunks came. */
async function gather(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
  let reasoning = "";
  let content = "";
  const order: string[] = [];
  const calls: { name?: string; arguments: string }[] = [];
  let finish: string | null = null;
  for await (const c of stream) {
    const d = c.choices[0]?.delta as (OpenAI.ChatCompletionChunk.Choice.Delta & WithReasoning) | undefined;
    if (d?.reasoning_content) (reasoning += d.reasoning_content, order.push("reasoning"));
    if (d?.content) (content += d.content, order.push("content"));
    for (const tc of d?.tool_calls ?? []) {
      order.push("call");
      calls[tc.index] ??= { arguments: "" };
      if (tc.function?.name) calls[tc.index].name = tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? "";
    }
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  return { reasoning, content, calls: calls.map((c) => c.name), finish, order: order.filter((k, i) => k !== order[i - 1]) };
}

test("ChatOutputStream via --reasoning-parser think: message.reasoning_content holds the <think> text, tool calls come from the content only", async () => {
  await withServer("think", async (client) => {
    for (const last of ["?", "^"]) {
      // "^": the template ends the prompt with an open <think> (DeepSeek-R1), so the answer has only </think>.
      const r = await client.chat.completions.create({ model: "reasoner", messages: ask(last), tools: TOOLS, temperature: 0, max_tokens: 64 });
      const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
      assert.equal(m.reasoning_content, REASONING, `prompt ending in ${last}`);
      assert.ok(m.reasoning_content.includes(DRAFT), "the call drafted while reasoning stays in the reasoning");
      assert.equal(m.content, "Checking.", "whitespace after </think> is dropped");
      assert.deepEqual(m.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name), ["get_weather", "get_time"]);
      assert.equal(r.choices[0].finish_reason, "tool_calls");
      const reasoningTokens = THOUGHTS.length + (last === "?" ? 2 : 1);
      assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, reasoningTokens, "counted by the engine from the tag tokens");
    }
    // No tools: the answer's text after the reasoning is the content, calls unparsed.
    const plain = await client.chat.completions.create({ model: "reasoner", messages: ask("?"), temperature: 0, max_tokens: 64 });
    const pm = plain.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.equal(pm.reasoning_content, REASONING);
    assert.equal(pm.content, `Checking.<tool_call>${CALL}</tool_call>${SECOND_CALL}`);
    // An answer without reasoning says so.
    const sunny = await client.chat.completions.create({ model: "reasoner", messages: ask("."), temperature: 0, max_tokens: 8 });
    assert.deepEqual(sunny.choices[0].message, { role: "assistant", content: "Sunny.", reasoning_content: null });
  });
});

test("ChatOutputStream via --reasoning-parser think streams delta.reasoning_content first, then content and calls", async () => {
  await withServer("think", async (client) => {
    for (const last of ["?", "^"]) {
      const stream = await client.chat.completions.create({ model: "reasoner", messages: ask(last), tools: TOOLS, temperature: 0, max_tokens: 64, stream: true });
      const g = await gather(stream);
      assert.equal(g.reasoning, REASONING, `prompt ending in ${last}`);
      assert.equal(g.content, "Checking.", "no tag text leaks into the streamed content");
      assert.deepEqual(g.calls, ["get_weather", "get_time"]);
      assert.equal(g.finish, "tool_calls");
      assert.deepEqual(g.order, ["reasoning", "content", "call"]);
    }
  });
});

test("ChatOutputStream via --reasoning-parser none (the default) returns the <think> text as content, drafted call included", async () => {
  await withServer(undefined, async (client) => {
    const r = await client.chat.completions.create({ model: "reasoner", messages: ask("?"), tools: TOOLS, temperature: 0, max_tokens: 64 });
    const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.equal("reasoning_content" in m, false);
    assert.equal(m.content, `<think>${THOUGHTS.join("").replace(DRAFT, "")}</think>${AFTER}`);
    assert.deepEqual(m.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name), ["draft", "get_weather", "get_time"]);
    assert.equal(r.usage?.completion_tokens_details, undefined);
    const g = await gather(await client.chat.completions.create({ model: "reasoner", messages: ask("?"), temperature: 0, max_tokens: 64, stream: true }));
    assert.equal(g.reasoning, "");
    assert.equal(g.content, `<think>${REASONING}</think>${AFTER}<tool_call>${CALL}</tool_call>${SECOND_CALL}`);
  });
});

test("ChatOutputStream with parallel_tool_calls false returns only the first call, streamed and not", async () => {
  await withServer(undefined, async (client) => {
    const base = { model: "reasoner", messages: ask("!"), tools: TOOLS, temperature: 0, max_tokens: 16 } as const;
    const names = (r: OpenAI.ChatCompletion) => r.choices[0].message.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name);
    assert.deepEqual(names(await client.chat.completions.create(base)), ["get_weather", "get_time"], "both calls by default");
    assert.deepEqual(names(await client.chat.completions.create({ ...base, parallel_tool_calls: true })), ["get_weather", "get_time"]);
    const one = await client.chat.completions.create({ ...base, parallel_tool_calls: false });
    assert.deepEqual(names(one), ["get_weather"]);
    assert.equal(one.choices[0].message.content, null);
    assert.equal(one.choices[0].finish_reason, "tool_calls");
    const g = await gather(await client.chat.completions.create({ ...base, parallel_tool_calls: false, stream: true }));
    assert.deepEqual(g.calls, ["get_weather"]);
    assert.equal(g.content, "");
    assert.equal(g.finish, "tool_calls");
  });
});

test("submitChat() passes chat_template_kwargs to the template: enable_thinking false gets the plain answer; server variables are refused", async () => {
  await withServer("think", async (client) => {
    const body = { model: "reasoner", messages: ask("?"), temperature: 0, max_tokens: 64 };
    const off = await client.chat.completions.create({ ...body, chat_template_kwargs: { enable_thinking: false } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.deepEqual(off.choices[0].message, { role: "assistant", content: "Sunny.", reasoning_content: null });
    const on = await client.chat.completions.create({ ...body, chat_template_kwargs: { enable_thinking: true } } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.equal((on.choices[0].message as WithReasoning).reasoning_content, REASONING);
    for (const [kwargs, re] of [[{ messages: [] }, /chat_template_kwargs.*may not set "messages"/], ["thinking", /chat_template_kwargs/]] as const) {
      await assert.rejects(
        client.chat.completions.create({ ...body, chat_template_kwargs: kwargs } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming),
        (e: unknown) => e instanceof OpenAI.BadRequestError && re.test(e.message),
        String(re),
      );
    }
  });
});

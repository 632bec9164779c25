/**
 * Reasoning budgets through the real server: vLLM's `thinking_token_budget` on chat completions
 * (the real `openai` client, whole and streamed) and Anthropic's `thinking.budget_tokens` on
 * `/v1/messages` (the real `@anthropic-ai/sdk`), serving the scripted model that reasons in
 * `<think>…</think>` before two tool calls (tests/serve/reasoning-model.ts).
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { chatRequestOfMessages } from "../../src/serve/messages.ts";
import type { ReasoningParserName } from "../../src/serve/reasoning.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath, THOUGHTS, TOOLS } from "./reasoning-model.ts";

async function withServer(reasoningParser: ReasoningParserName | undefined, fn: (url: string) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}

const openai = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
/** vLLM's extension and the fields OpenAI's types leave out. */
type Budgeted = OpenAI.ChatCompletionCreateParamsNonStreaming & { thinking_token_budget?: number };
type WithReasoning = { reasoning_content?: string | null };
const ask = (last: string): OpenAI.ChatCompletionMessageParam[] => [{ role: "user", content: `What is the weather${last}` }];
const callNames = (m: OpenAI.ChatCompletionMessage) => m.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name);

test("thinking_token_budget ends the reasoning at the budget; the answer and its tool calls follow", async () => {
  await withServer("think", async (url) => {
    const client = openai(url);
    const body: Budgeted = { model: "reasoner", messages: ask("?"), tools: TOOLS, temperature: 0, max_tokens: 64, thinking_token_budget: 3 };
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.equal(m.reasoning_content, THOUGHTS.slice(0, 3).join(""));
    assert.equal(m.content, "Checking.");
    assert.deepEqual(callNames(m), ["get_weather", "get_time"]);
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.usage?.completion_tokens_details?.reasoning_tokens, 3 + 2, "three thoughts and the two tags");
    // Streamed: the same reasoning.
    const stream = await client.chat.completions.create({ ...body, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming);
    let reasoning = "";
    for await (const c of stream) reasoning += (c.choices[0]?.delta as WithReasoning | undefined)?.reasoning_content ?? "";
    assert.equal(reasoning, THOUGHTS.slice(0, 3).join(""));
    // "^": the prompt opened <think>; a budget of 0 closes it at once.
    const none = await client.chat.completions.create({ ...body, messages: ask("^"), thinking_token_budget: 0 } as Budgeted);
    const n = none.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.ok(!n.reasoning_content, JSON.stringify(n));
    assert.equal(n.content, "Checking.");
    assert.deepEqual(callNames(n), ["get_weather", "get_time"]);
    // A budget larger than the reasoning changes nothing.
    const roomy = await client.chat.completions.create({ ...body, thinking_token_budget: 1000 } as Budgeted);
    assert.equal((roomy.choices[0].message as WithReasoning).reasoning_content, THOUGHTS.join(""));
  });
});

test("thinking_token_budget without a reasoning parser, or below 0, is a 400 naming it", async () => {
  for (const [parser, budget, re] of [[undefined, 3, /needs a reasoning parser.*got thinking_token_budget = 3 with --reasoning-parser none/], ["think", -1, /thinking_token_budget/]] as const) {
    await withServer(parser, async (url) => {
      const err = await openai(url).chat.completions.create({ model: "reasoner", messages: ask("?"), max_tokens: 8, thinking_token_budget: budget } as Budgeted).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400, String(err));
      assert.match(err.message, re);
      assert.equal((err.error as { param?: string }).param, "thinking_token_budget");
    });
  }
});

test("messages.create() keeps thinking.budget_tokens: a thinking block within the budget, then text and tool_use blocks", async () => {
  // Anthropic's least budget is 1024 (below it a 400, tests/serve/api-gaps-hunt6.test.ts), more than this
  // model thinks: the budget is checked to reach the chat request, and the chat test above checks the cut.
  const body = { model: "reasoner", max_tokens: 1025, messages: [{ role: "user" as const, content: "x" }], thinking: { type: "enabled" as const, budget_tokens: 1024 } };
  assert.equal(chatRequestOfMessages(body, true).thinking_token_budget, 1024);
  await withServer("think", async (url) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const tools: Anthropic.Tool[] = TOOLS.map((t) => ({ name: (t as OpenAI.ChatCompletionFunctionTool).function.name, input_schema: { type: "object" as const, properties: {} } }));
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather?" }];
    const r = await client.messages.create({ model: "reasoner", max_tokens: 1025, tools, messages, thinking: { type: "enabled", budget_tokens: 1024 } });
    assert.deepEqual(r.content.map((b) => b.type), ["thinking", "text", "tool_use", "tool_use"]);
    assert.equal((r.content[0] as Anthropic.ThinkingBlock).thinking, THOUGHTS.join(""));
    assert.equal(r.stop_reason, "tool_use");
    // Adaptive thinking has no budget: the whole reasoning.
    const free = await client.messages.create({ model: "reasoner", max_tokens: 64, tools, messages, thinking: { type: "adaptive" } as unknown as Anthropic.ThinkingConfigParam });
    assert.equal((free.content[0] as Anthropic.ThinkingBlock).thinking, THOUGHTS.join(""));
  });
});

test("thinking_token_budget travels with the request to a cluster's workers (prefill on one, decode on another)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser: "think", workers: 2, roles: ["prefill", "decode"], transport: "threads" });
  try {
    for (const last of ["?", "^"]) {
      const r = await openai(s.url).chat.completions.create({ model: "reasoner", messages: ask(last), tools: TOOLS, temperature: 0, max_tokens: 64, thinking_token_budget: 4 } as Budgeted);
      const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
      assert.equal(m.reasoning_content, THOUGHTS.slice(0, 4).join(""), `prompt ending in ${last}`);
      assert.deepEqual(callNames(m), ["get_weather", "get_time"]);
    }
  } finally {
    await s.shutdown();
  }
});

/**
 * Whole multi-turn agent loops driven as real agent clients drive them, through the real
 * `@anthropic-ai/sdk` and `openai` clients against the real server:
 *
 * - Claude Code-like (Messages API): system blocks with cache_control, tools, streamed turns under the
 *   interleaved-thinking and fine-grained-tool-streaming betas, the answer's thinking (with its
 *   signature) and tool_use blocks sent back verbatim with tool_result blocks (string, block array,
 *   is_error), stop reasons, the prefix cache read across turns, count_tokens on the same payload;
 *   `thinking: {"type": "enabled"}` without budget_tokens (a 400, as Anthropic answers).
 * - The SDK's tool runner, which threads its turns by default (`thread`: only new messages sent): the
 *   server refuses the thread with `thread_unsupported_request`, so the runner sends the whole history.
 * - Codex-like (Responses API): instructions, non-strict function tools, parallel calls, a streamed
 *   call, then `previous_response_id` + `function_call_output`, and the stateless form (store false,
 *   reasoning and function_call items sent back).
 * - Agents SDK / LangChain-like (Chat Completions): content null with tool_calls, a tool message per
 *   call id, the SDK's stream helper reassembling calls, `runTools`.
 *
 * The reasoning model (tests/serve/reasoning-model.ts) answers "…?" with thinking, "\n\nChecking."
 * and two calls (get_weather, get_time); "…." with "Sunny.". The scripted model
 * (tests/serve/scripted-server.ts) answers "…!" with one get_weather call.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import * as reasoner from "./reasoning-model.ts";
import * as scripted from "./scripted-server.ts";

type Server = Awaited<ReturnType<typeof startServer>>;

async function withReasoner(fn: (s: Server) => Promise<void>) {
  const { model, modelPath } = reasoner;
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, kvRetention: "agent", reasoningParser: "think" });
  try {
    await fn(s);
  } finally {
    await s.shutdown();
  }
}

const BETAS = "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14";
const A_TOOLS: Anthropic.Tool[] = ["get_weather", "get_time"].map((name) => ({ name, description: name, input_schema: { type: "object", properties: {} } }));

test("Messages: a Claude Code-like loop sends thinking and tool_use back verbatim with tool_results, and reads the prefix cache each turn", async () => {
  await withReasoner(async (s) => {
    const client = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, defaultHeaders: { "anthropic-beta": BETAS } });
    const system: Anthropic.TextBlockParam[] = [
      { type: "text", text: "You are an agent.\n", cache_control: { type: "ephemeral" } },
      { type: "text", text: "Be brief.", cache_control: { type: "ephemeral" } },
    ];
    const base = { model: "reasoner", max_tokens: 600, system, tools: A_TOOLS, metadata: { user_id: "claude-code-session" }, thinking: { type: "enabled" as const, budget_tokens: 1024 } };
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: [{ type: "text", text: "What now?", cache_control: { type: "ephemeral" } }] }];

    const stream = client.messages.stream({ ...base, messages });
    const deltas = new Set<string>();
    stream.on("streamEvent", (e) => e.type === "content_block_delta" && deltas.add(e.delta.type));
    const first = await stream.finalMessage();
    assert.equal(first.stop_reason, "tool_use");
    assert.deepEqual(first.content.map((b) => b.type), ["thinking", "text", "tool_use", "tool_use"]);
    assert.deepEqual([...deltas].sort(), ["input_json_delta", "signature_delta", "text_delta", "thinking_delta"]);
    const thinking = first.content[0] as Anthropic.ThinkingBlock;
    assert.match(thinking.thinking, /Thought 35\.$/);
    assert.equal(typeof thinking.signature, "string");
    const uses = first.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    assert.deepEqual(uses.map((u) => [u.name, u.input]), [["get_weather", { city: "Paris" }], ["get_time", { zone: "CET" }]]);

    // Sent back as received (the thinking block with its signature), with both results: one as text
    // blocks, one an error.
    messages.push({ role: "assistant", content: first.content as Anthropic.ContentBlockParam[] });
    messages.push({ role: "user", content: [
      { type: "tool_result", tool_use_id: uses[0].id, content: [{ type: "text", text: "21 degrees" }, { type: "text", text: "windy" }] },
      { type: "tool_result", tool_use_id: uses[1].id, content: "clock unavailable", is_error: true },
      { type: "text", text: "Go on." },
    ] });
    const counted = await client.messages.countTokens({ model: base.model, system, tools: A_TOOLS, thinking: base.thinking, messages });
    const second = await client.messages.create({ ...base, messages });
    assert.equal(second.stop_reason, "end_turn");
    assert.deepEqual(second.content, [{ type: "text", text: "Sunny." }]);
    assert.equal(second.usage.input_tokens + second.usage.cache_read_input_tokens!, counted.input_tokens);
    assert.ok(second.usage.cache_read_input_tokens! > 0, JSON.stringify(second.usage));

    // A third turn, streamed: the cache reads at least the second turn's prompt, whole blocks of it.
    messages.push({ role: "assistant", content: second.content as Anthropic.ContentBlockParam[] }, { role: "user", content: "Once more?" });
    const third = await client.messages.stream({ ...base, messages }).finalMessage();
    assert.equal(third.stop_reason, "tool_use");
    assert.ok(third.usage.cache_read_input_tokens! >= counted.input_tokens - 16, JSON.stringify([counted, third.usage]));

    // Cut by max_tokens inside the thinking.
    const cut = await client.messages.create({ ...base, max_tokens: 5, messages: [{ role: "user", content: "What now?" }] });
    assert.equal(cut.stop_reason, "max_tokens");
    assert.deepEqual(cut.content.map((b) => b.type), ["thinking"]);
  });
});

test('Messages: thinking {"type": "enabled"} without budget_tokens is a 400 naming thinking.budget_tokens, as Anthropic answers', async () => {
  await withReasoner(async (s) => {
    const client = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });
    const thinking = { type: "enabled" } as Anthropic.ThinkingConfigEnabled;
    const refused = (e: unknown) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.equal(e.type, "invalid_request_error");
      assert.match(e.apiMessage ?? "", /thinking\.budget_tokens.*required/);
      return true;
    };
    await assert.rejects(client.messages.create({ model: "reasoner", max_tokens: 64, thinking, messages: [{ role: "user", content: "Hi." }] }), refused);
    await assert.rejects(client.messages.countTokens({ model: "reasoner", thinking, messages: [{ role: "user", content: "Hi." }] }), refused);
    const ok = await client.messages.create({ model: "reasoner", max_tokens: 64, thinking: { type: "adaptive" }, messages: [{ role: "user", content: "Hi." }] });
    assert.equal(ok.stop_reason, "end_turn");
  });
});

test("Messages: the SDK's tool runner (threaded by default) is told threads are unsupported and runs the loop on the whole history", async () => {
  const { model, modelPath } = scripted;
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent" });
  try {
    const sent: { thread?: unknown; messages: unknown[] }[] = [];
    const spy: typeof fetch = (url, init) => {
      sent.push(JSON.parse(String(init?.body)));
      return fetch(url, init);
    };
    const client = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0, fetch: spy });
    // A thread asked directly: refused with the code the SDK reads.
    await assert.rejects(
      client.beta.messages.create({ model: "scripted", max_tokens: 8, messages: [{ role: "user", content: "Hi." }], thread: { type: "create" } }),
      (e: unknown) => {
        assert.ok(e instanceof Anthropic.BadRequestError, String(e));
        assert.equal(e.errorCode, "thread_unsupported_request");
        assert.match(e.apiMessage ?? "", /thread/);
        return true;
      },
    );
    sent.length = 0;
    const cities: string[] = [];
    const weather = betaTool({
      name: "get_weather", description: "Current weather", inputSchema: { type: "object", properties: { city: { type: "string" } } },
      run: (input) => {
        cities.push((input as { city: string }).city);
        return "It is 21 degrees.";
      },
    });
    const runner = client.beta.messages.toolRunner({ model: "scripted", max_tokens: 64, tools: [weather], metadata: { user_id: "runner" }, messages: [{ role: "user", content: "Weather in Paris!" }] });
    const final = await runner.runUntilDone();
    assert.deepEqual(cities, ["Paris"]);
    assert.deepEqual(final.content, [{ type: "text", text: "Sunny." }]);
    // Each turn the model answered held the whole conversation, so the call's turn was read from the cache.
    const answered = sent.filter((b) => b.thread === undefined);
    assert.deepEqual(answered.map((b) => b.messages.length), [1, 3]);
    assert.ok(final.usage.cache_read_input_tokens! > 0, JSON.stringify(final.usage));
  } finally {
    await s.shutdown();
  }
});

const NAMES = ["get_weather", "get_time"];
const R_TOOLS: OpenAI.Responses.FunctionTool[] = NAMES.map((name) => ({ type: "function", name, parameters: { type: "object", properties: {} }, strict: false }));

test("Responses: a Codex-like loop, chained by previous_response_id and stateless with reasoning and function_call items sent back", async () => {
  await withReasoner(async (s) => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const base = { model: "reasoner", instructions: "Be brief.", tools: R_TOOLS, parallel_tool_calls: true, prompt_cache_key: "codex-session" };
    const stream = client.responses.stream({ ...base, input: "What now?", include: ["reasoning.encrypted_content"] });
    const types = new Set<string>();
    for await (const e of stream) types.add(e.type);
    const first = await stream.finalResponse();
    for (const t of ["response.reasoning_text.delta", "response.output_text.delta", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.completed"]) {
      assert.ok(types.has(t), t);
    }
    assert.deepEqual(first.output.map((o) => o.type), ["reasoning", "message", "function_call", "function_call"]);
    const calls = first.output.flatMap((o) => (o.type === "function_call" ? [o] : []));
    assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", { city: "Paris" }], ["get_time", { zone: "CET" }]]);
    const outputs = calls.map((c) => ({ type: "function_call_output" as const, call_id: c.call_id, output: "Done." }));

    const chained = await client.responses.create({ ...base, previous_response_id: first.id, input: outputs });
    assert.equal(chained.output_text, "Sunny.");
    assert.ok(chained.usage!.input_tokens_details.cached_tokens > 0);

    // Stateless, as Codex runs with store false: the whole item list each turn.
    const input: OpenAI.Responses.ResponseInputItem[] = [{ role: "user", content: "What now?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), ...outputs];
    const stateless = await client.responses.create({ ...base, store: false, include: ["reasoning.encrypted_content"], input });
    assert.equal(stateless.output_text, "Sunny.");
    assert.equal(stateless.usage!.input_tokens, chained.usage!.input_tokens, "the same prompt as the chained turn");
    input.push(...(stateless.output as OpenAI.Responses.ResponseInputItem[]), { role: "user", content: "Again?" });
    const third = await client.responses.create({ ...base, store: false, input });
    assert.deepEqual(third.output.map((o) => o.type), ["reasoning", "message", "function_call", "function_call"]);
    assert.ok(third.usage!.input_tokens_details.cached_tokens >= stateless.usage!.input_tokens - 16, JSON.stringify(third.usage));
  });
});

test("Chat Completions: content null with tool_calls, a tool message per call, the stream helper's reassembled calls, runTools", async () => {
  await withReasoner(async (s) => {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: "Be brief." }, { role: "user", content: "What now?" }];
    const stream = client.chat.completions.stream({ model: "reasoner", messages, tools: reasoner.TOOLS, parallel_tool_calls: true, stream_options: { include_usage: true } });
    const done: string[] = [];
    stream.on("tool_calls.function.arguments.done", (e) => done.push(`${e.name} ${e.arguments}`));
    const first = await stream.finalChatCompletion();
    const calls = first.choices[0].message.tool_calls!.filter((c) => c.type === "function");
    assert.equal(first.choices[0].finish_reason, "tool_calls");
    assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [["get_weather", { city: "Paris" }], ["get_time", { zone: "CET" }]]);
    assert.deepEqual(done, ['get_weather {"city":"Paris"}', 'get_time {"zone":"CET"}']);

    messages.push({ role: "assistant", content: null, tool_calls: calls }, ...calls.map((c) => ({ role: "tool" as const, tool_call_id: c.id, content: "Done." })));
    const second = await client.chat.completions.create({ model: "reasoner", messages, tools: reasoner.TOOLS });
    assert.equal(second.choices[0].message.content, "Sunny.");
    assert.ok(second.usage!.prompt_tokens_details!.cached_tokens! > 0);

    const fns = NAMES.map((name) => ({ type: "function" as const, function: { name, description: name, parameters: { type: "object", properties: {} }, function: () => "Fine." } }));
    const ask = { model: "reasoner", messages: [{ role: "user" as const, content: "What now?" }], tools: fns };
    for (const runner of [client.chat.completions.runTools(ask), client.chat.completions.runTools({ ...ask, stream: true })]) {
      assert.equal(await runner.finalContent(), "Sunny.");
      assert.deepEqual(runner.messages.map((m) => m.role), ["user", "assistant", "tool", "tool", "assistant"]);
    }
  });
});

/**
 * Three API-compatibility gaps, through the real server with the real `openai` and `@anthropic-ai/sdk`
 * clients and a scripted model:
 *
 * - The Responses API's function tools are strict when `strict` is omitted (OpenAI's documented
 *   default there; chat completions keep theirs, non-strict), where the schema can be held; a schema
 *   strict mode cannot follow is then served best effort, not refused (only `strict: true` is a 400).
 * - `parallel_tool_calls: false` under a grammar of calls amid free text (strict tools, allowed_tools
 *   "auto"): once one call is written the grammar bars the opening of another, in every tool-call
 *   syntax, so the model never spends tokens on a call that would be dropped.
 * - Anthropic's `thinking.budget_tokens`: at least 1024 and below `max_tokens`, else a 400
 *   invalid_request_error naming it and the value.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar, type ToolCallSyntax } from "../../src/engine/grammar.ts";
import { loadModel } from "../../src/model/load.ts";
import { chatGrammar } from "../../src/serve/output-grammar.ts";
import { functionTools } from "../../src/serve/responses-input.ts";
import type { ResponsesRequest } from "../../src/serve/responses-schema.ts";
import type { ChatRequest } from "../../src/serve/schemas.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { TEMPLATE } from "./scripted-server.ts";
import { SET_UNIT_CALLS, UNIT } from "../engine/set-unit-calls.ts";

/** A get_weather call in pieces: its opening, a city the schema refuses (42), its close. */
const OPEN = '\n{"name": "get_weather", "arguments": {"city": ';
const CLOSE = "}}\n";
/** A whole get_weather call for Paris, then the tag that ends it and a newline (free text). */
const PARIS = '{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
const WEATHER = { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } };
/** A schema no grammar here can follow (patternProperties). */
const UNFOLLOWABLE = { type: "object", patternProperties: { "^c": { type: "string" } } };

const dir = mkdtempSync(`${tmpdir()}/api-gaps-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/scripted.gguf`;
// "…!" → one get_weather call with {"city": 42}; "…@" → a Paris call, then a second run: the same bad call.
await writeScriptedModel(modelPath, {
  pieces: ["<tool_call>", OPEN, "42", CLOSE, "</tool_call>", "<tool_call>\n", PARIS, "</tool_call>\n", "Sunny."],
  literalPieces: true,
  next: [
    ["!", "<tool_call>"], ["<tool_call>", OPEN], [OPEN, "42"], ["42", CLOSE], [CLOSE, "</tool_call>"], ["</tool_call>", "<eos>"],
    ["@", "<tool_call>\n"], ["<tool_call>\n", PARIS], [PARIS, "</tool_call>\n"], ["</tool_call>\n", "<tool_call>"],
    [".", "Sunny."], ["Sunny.", "<eos>"],
  ],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
});
const model = await loadModel(modelPath);

/** A server for the scripted model, JSON spaced as json.dumps spaces it (so a barred value's ties fall to "Paris"). */
async function withServer(fn: (url: string) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, jsonWhitespace: "compact" });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}
const openai = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
const anthropic = (url: string) => new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
/** A Responses answer's calls, arguments parsed. */
const responseCalls = (r: OpenAI.Responses.Response) => r.output.flatMap((it) => (it.type === "function_call" ? [[it.name, JSON.parse(it.arguments)]] : []));
/** A chat answer's calls, arguments parsed. */
const chatCalls = (m: OpenAI.ChatCompletionMessage) => (m.tool_calls ?? []).map((c) => {
  const f = (c as OpenAI.ChatCompletionMessageFunctionToolCall).function;
  return [f.name, JSON.parse(f.arguments)];
});

test("Responses API: a function tool without strict is strict (its call follows the schema); strict false and chat completions' omitted strict are as written", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (strict: boolean | null | undefined, stream = false) => {
      const tool = { type: "function" as const, name: "get_weather", parameters: WEATHER, ...(strict === undefined ? {} : { strict }) } as OpenAI.Responses.FunctionTool;
      const body = { model: "scripted", input: "Weather in Paris!", tools: [tool], temperature: 0, max_output_tokens: 60 };
      return stream ? client.responses.stream(body).finalResponse() : client.responses.create(body);
    };
    for (const stream of [false, true]) {
      assert.deepEqual(responseCalls(await ask(undefined, stream)), [["get_weather", { city: "Paris" }]], `omitted, stream ${stream}`);
      assert.deepEqual(responseCalls(await ask(null, stream)), [["get_weather", { city: "Paris" }]], `null, stream ${stream}`);
      assert.deepEqual(responseCalls(await ask(false, stream)), [["get_weather", { city: 42 }]], `false, stream ${stream}`);
    }
    // Chat completions keep their default: non-strict unless strict is true.
    const chat = await client.chat.completions.create({
      model: "scripted", messages: [{ role: "user", content: "Weather in Paris!" }], temperature: 0, max_tokens: 60,
      tools: [{ type: "function", function: { name: "get_weather", parameters: WEATHER } }],
    });
    assert.deepEqual(chatCalls(chat.choices[0].message), [["get_weather", { city: 42 }]]);
  });
});

test("Responses API: a schema strict mode cannot follow is served best effort when strict is omitted, a 400 naming it with strict true", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (strict?: boolean) => client.responses.create({
      model: "scripted", input: "Weather in Paris!", temperature: 0, max_output_tokens: 60,
      tools: [{ type: "function", name: "get_weather", parameters: UNFOLLOWABLE, ...(strict === undefined ? {} : { strict }) } as OpenAI.Responses.FunctionTool],
    });
    assert.deepEqual(responseCalls(await ask()), [["get_weather", { city: 42 }]]);
    await assert.rejects(ask(true), (e: unknown) => e instanceof OpenAI.BadRequestError && /"get_weather"/.test(e.message) && /patternProperties/.test(e.message));
  });
});

test("functionTools(): strict omitted or null becomes strict where the parameters can be held in the tool-call syntax; strict false stays off", () => {
  const tools = (strict: unknown, parameters: unknown = WEATHER, format?: ToolCallSyntax) =>
    functionTools([{ type: "function", name: "f", parameters, ...(strict === undefined ? {} : { strict }) }] as ResponsesRequest["tools"], format).tools[0].function.strict;
  assert.equal(tools(undefined), true);
  assert.equal(tools(null), true);
  assert.equal(tools(true), true);
  assert.equal(tools(false), undefined);
  assert.equal(tools(undefined, undefined), true, "no parameters: any object");
  assert.equal(tools(undefined, UNFOLLOWABLE), undefined);
  // GLM writes arguments as key-value pairs: parameters that are no object cannot be held there.
  assert.equal(tools(undefined, { type: "string" }, "glm45"), undefined);
  assert.equal(tools(undefined, { type: "string" }), true);
});

/** One run of one set_unit call in each syntax that can write calls amid text. */
const RUNS = SET_UNIT_CALLS;

test("parallel_tool_calls false amid free text: after one call the grammar bars the opening of another, in every syntax (strict tools and allowed_tools auto alike)", () => {
  const tool = { type: "function", function: { name: "set_unit", parameters: UNIT, strict: true } };
  const bodies = (parallel: boolean) => [
    { model: "m", messages: [{ role: "user", content: "x" }], tools: [tool], parallel_tool_calls: parallel },
    {
      model: "m", messages: [{ role: "user", content: "x" }], tools: [{ ...tool, function: { ...tool.function, strict: false } }], parallel_tool_calls: parallel,
      tool_choice: { type: "allowed_tools", allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "set_unit" } }] } },
    },
  ] as unknown as ChatRequest[];
  for (const [format, run] of Object.entries(RUNS)) {
    for (const parallel of [true, false]) {
      for (const body of bodies(parallel)) {
        const g = chatGrammar(body, "any", format as ToolCallSyntax).grammar as OutputGrammar;
        assert.ok(g.kind === "tool_calls" && g.amidText === true, JSON.stringify(g));
        const whole = (text: string) => grammarComplete(grammarFeed(grammarStart(g), text));
        const label = `${format}, parallel ${parallel}, ${JSON.stringify(body.tool_choice ?? "auto")}`;
        assert.ok(whole(`Switching. ${run}`), `${label}: one call`);
        assert.ok(whole(`Switching. ${run} Done, no call: {name} <tool> [TOOL].`), `${label}: text after the call`);
        assert.equal(whole(`Switching. ${run} And again: ${run}`), parallel, `${label}: a second run of calls`);
        assert.equal(whole(`${run}\n${run}`), parallel, `${label}: a second call right after`);
      }
    }
  }
});

test("parallel_tool_calls false with a strict tool: the model is never let write a second call (chat and Responses, streamed and not)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather twice@" }];
    const tools: OpenAI.ChatCompletionFunctionTool[] = [{ type: "function", function: { name: "get_weather", parameters: WEATHER, strict: true } }];
    const chat = (parallel: boolean) => client.chat.completions.create({ model: "scripted", messages, tools, temperature: 0, max_tokens: 40, parallel_tool_calls: parallel });
    // Parallel calls on: both runs are written (the second's city held to the schema).
    const both = await chat(true);
    assert.deepEqual(chatCalls(both.choices[0].message), [["get_weather", { city: "Paris" }], ["get_weather", { city: "Paris" }]]);
    // Off: the opening of the second run is barred, so its tokens are never generated (before, they
    // were, and the parser dropped the call).
    const one = await chat(false);
    assert.deepEqual(chatCalls(one.choices[0].message), [["get_weather", { city: "Paris" }]]);
    assert.equal(one.choices[0].finish_reason, "tool_calls");
    // The call's 3 tokens, then (the scripted model knowing no second choice) its lowest token, a NUL byte, and the end.
    assert.ok(one.usage!.completion_tokens <= 5, JSON.stringify(one.usage));
    assert.ok(both.usage!.completion_tokens > one.usage!.completion_tokens + 2, JSON.stringify([both.usage, one.usage]));
    assert.ok(!/tool_call|get_weather/.test(one.choices[0].message.content ?? ""), JSON.stringify(one.choices[0].message));
    // The Responses API, its tool strict by default.
    const body = { model: "scripted", input: "Weather twice@", temperature: 0, max_output_tokens: 40, parallel_tool_calls: false, tools: [{ type: "function" as const, name: "get_weather", parameters: WEATHER } as unknown as OpenAI.Responses.FunctionTool] };
    for (const r of [await client.responses.create(body), await client.responses.stream(body).finalResponse()]) {
      assert.deepEqual(responseCalls(r), [["get_weather", { city: "Paris" }]]);
      assert.ok(r.usage!.output_tokens <= 5, JSON.stringify(r.usage));
    }
  });
});

test("Messages API: thinking.budget_tokens below 1024, or not below max_tokens, is a 400 invalid_request_error naming it and the value (anthropic client)", async () => {
  await withServer(async (url) => {
    const client = anthropic(url);
    const body = (budget: number, maxTokens: number): Anthropic.MessageCreateParamsNonStreaming => ({
      model: "scripted", max_tokens: maxTokens, thinking: { type: "enabled", budget_tokens: budget }, messages: [{ role: "user", content: "Hello." }],
    });
    const refused = (re: RegExp) => (e: unknown) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      const err = (e.error as { type: string; error: { type: string; message: string } });
      assert.equal(err.type, "error");
      assert.equal(err.error.type, "invalid_request_error");
      assert.match(err.error.message, /thinking\.budget_tokens/);
      assert.match(err.error.message, re);
      return true;
    };
    for (const send of [(b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.create(b), (b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.stream(b).finalMessage()]) {
      await assert.rejects(send(body(512, 4096)), refused(/at least 1024, got 512/));
      await assert.rejects(send(body(0, 4096)), refused(/at least 1024, got 0/));
      await assert.rejects(send(body(2048, 1024)), refused(/max_tokens.*greater.*got thinking\.budget_tokens 2048 with max_tokens 1024/));
      await assert.rejects(send(body(1024, 1024)), refused(/budget_tokens 1024 with max_tokens 1024/));
      // The least budget with room left for the answer is served.
      assert.equal((await send(body(1024, 1025))).stop_reason, "end_turn");
    }
    // Under the interleaved-thinking beta (as Claude Code sends it) Anthropic lets the budget pass
    // max_tokens; the least budget still holds.
    const beta = { headers: { "anthropic-beta": "fine-grained-tool-streaming-2025-05-14, interleaved-thinking-2025-05-14" } };
    assert.equal((await client.messages.create(body(2048, 1024), beta)).stop_reason, "end_turn");
    await assert.rejects(client.messages.create(body(512, 4096), beta), refused(/at least 1024, got 512/));
    // count_tokens has no max_tokens; the least budget still holds.
    const count = (budget: number) => client.messages.countTokens({ model: "scripted", thinking: { type: "enabled", budget_tokens: budget }, messages: [{ role: "user", content: "Hello." }] });
    await assert.rejects(count(100), refused(/at least 1024, got 100/));
    assert.ok((await count(4096)).input_tokens > 0);
    // Adaptive and disabled thinking take no budget; nothing to check.
    const adaptive = await client.messages.create({ model: "scripted", max_tokens: 16, thinking: { type: "adaptive" } as unknown as Anthropic.ThinkingConfigParam, messages: [{ role: "user", content: "Hello." }] });
    assert.equal(adaptive.stop_reason, "end_turn");
  });
});

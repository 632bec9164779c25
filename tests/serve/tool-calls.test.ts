/**
 * Tool calling: the Hermes-format parser (whole and streamed), and the server end to end with the
 * real `openai` client against a scripted model whose greedy answer is a tool call.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { parseToolCalls, ToolCallStream } from "../../src/serve/tool-calls.ts";
import { chatGrammar } from "../../src/serve/output-grammar.ts";
import { ApiError } from "../../src/serve/errors.ts";
import type { ChatRequest } from "../../src/serve/schemas.ts";
import { projectRoot, test } from "../harness.ts";
import { readChatStream } from "./chat-stream.ts";
import { CALL, model, modelPath, TOOLS } from "./scripted-server.ts";

test("parseToolCalls() splits text and Hermes-format calls; malformed blocks stay text", () => {
  assert.deepEqual(parseToolCalls(`<tool_call>${CALL}</tool_call>`), { content: null, calls: [{ name: "get_weather", arguments: '{"city":"Paris"}' }] });
  const two = parseToolCalls('Let me check. <tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call><tool_call>{"name": "b"}</tool_call>');
  assert.equal(two.content, "Let me check. ");
  assert.deepEqual(two.calls, [{ name: "a", arguments: '{"x": 1}' }, { name: "b", arguments: "{}" }]);
  assert.deepEqual(parseToolCalls("<tool_call>{not json}</tool_call>"), { content: "<tool_call>{not json}</tool_call>", calls: [] });
  assert.deepEqual(parseToolCalls('<tool_call>{"arguments": {}}</tool_call>').calls, [], "a call needs a name");
  assert.deepEqual(parseToolCalls("x < y <tool"), { content: "x < y <tool", calls: [] });
  assert.deepEqual(parseToolCalls('<tool_call>{"name": "c"}'), { content: null, calls: [{ name: "c", arguments: "{}" }] }, "unterminated but complete");
  assert.deepEqual(parseToolCalls('<tool_call>{"name": "c", "argu'), { content: '<tool_call>{"name": "c", "argu', calls: [] }, "truncated");
});

test("ToolCallStream gives the same text and calls whatever the delta boundaries, holding back only a possible tag", () => {
  const text = `Hi <b> there <tool_call>${CALL}</tool_call> and <tool_call>{"name": "z"}</tool_call> bye <tool_`;
  const whole = parseToolCalls(text);
  for (const size of [1, 2, 3, 5, 7, 11, 64]) {
    const s = new ToolCallStream();
    const parts = [];
    for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
    parts.push(...s.end());
    const content = parts.flatMap((p) => (p.kind === "text" ? [p.text] : [])).join("");
    assert.equal(content, whole.content, `delta size ${size}`);
    assert.deepEqual(parts.flatMap((p) => (p.kind === "call" ? [p.call] : [])), whole.calls, `delta size ${size}`);
  }
  const s = new ToolCallStream();
  assert.deepEqual(s.push("Hello <tool"), [{ kind: "text", text: "Hello " }], "only the possible tag start is held");
  assert.deepEqual(s.push("s are fun"), [{ kind: "text", text: "<tools are fun" }]);
});

async function withServer(fn: (client: OpenAI, s: Awaited<ReturnType<typeof startServer>>) => Promise<void>, kvRetention: "agent" | "lru" = "agent", kvBlocks = 128) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks, kvRetention });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s);
  } finally {
    await s.shutdown();
  }
}

test("chat completions: a model's Hermes tool call comes back as tool_calls, streamed and not", async () => {
  await withServer(async (client) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris!" }];
    const r = await client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, temperature: 0, max_tokens: 8 });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(m.content, null);
    assert.equal(m.tool_calls?.length, 1);
    const call = m.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
    assert.match(call.id, /^call_[0-9a-f]{24}$/);

    const stream = await client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, temperature: 0, max_tokens: 8, stream: true });
    const { content, finish, calls } = await readChatStream(stream);
    assert.equal(content, "", "no tag text leaks into the streamed content");
    assert.equal(finish, "tool_calls");
    assert.deepEqual(calls, [["get_weather", { city: "Paris" }]]);

    // The tool's result goes back in; the template sees the call's arguments as an object.
    const next = await client.chat.completions.create({
      model: "scripted", temperature: 0, max_tokens: 8, tools: TOOLS,
      messages: [...messages, m as OpenAI.ChatCompletionMessageParam, { role: "tool", tool_call_id: call.id, content: "18 degrees, clear." }],
    });
    assert.equal(next.choices[0].message.content, "Sunny.");
    assert.equal(next.choices[0].finish_reason, "stop");
    assert.equal(next.choices[0].message.tool_calls, undefined);

    // tool_choice "none": the same output stays text.
    const none = await client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, tool_choice: "none", temperature: 0, max_tokens: 8 });
    assert.equal(none.choices[0].message.content, `<tool_call>${CALL}</tool_call>`);
    assert.equal(none.choices[0].finish_reason, "stop");
  });
});

const SET_UNIT: OpenAI.ChatCompletionTool = {
  type: "function",
  function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false } },
};

test("chat completions: tool_choice naming a function or \"required\" forces a call whose arguments follow its parameters", async () => {
  await withServer(async (client) => {
    // "…." makes the model answer "Sunny." unless a call is forced.
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather." }];
    const tools = [...TOOLS, SET_UNIT];
    const free = await client.chat.completions.create({ model: "scripted", messages, tools, temperature: 0, max_tokens: 50 });
    assert.equal(free.choices[0].message.content, "Sunny.");
    const named = await client.chat.completions.create({ model: "scripted", messages, tools, tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 100 });
    assert.equal(named.choices[0].finish_reason, "tool_calls");
    assert.equal(named.choices[0].message.content, null);
    const call = named.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(call.function.name, "set_unit");
    assert.ok(["c", "f"].includes((JSON.parse(call.function.arguments) as { unit: string }).unit), call.function.arguments);
    // Streamed, the call arrives in a delta.
    const stream = await client.chat.completions.create({ model: "scripted", messages, tools, tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 100, stream: true });
    const names: string[] = [];
    for await (const c of stream) for (const t of c.choices[0]?.delta.tool_calls ?? []) if (t.function?.name) names.push(t.function.name);
    assert.deepEqual(names, ["set_unit"]);
    // "required" with "…!": the model's own call to get_weather fits, and comes back whole.
    const req = await client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "Weather!" }], tools, tool_choice: "required", temperature: 0, max_tokens: 100 });
    const got = req.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([got.function.name, JSON.parse(got.function.arguments)], ["get_weather", { city: "Paris" }]);
  });
});

test("chat completions: forced tool_choice without tools, parameters the decoder cannot follow and bad tool names get a 400 that names them", async () => {
  await withServer(async (client) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Weather!" }];
    await assert.rejects(
      client.chat.completions.create({ model: "scripted", messages, tool_choice: "required" }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /with tool_choice "required" needs at least one function in tools/.test(e.message) && e.param === "tool_choice",
    );
    const patterned = [{ type: "function" as const, function: { name: "f", parameters: { type: "object", properties: { s: { type: "string", pattern: "x(?=y)" } } } } }];
    await assert.rejects(
      client.chat.completions.create({ model: "scripted", messages, tools: patterned, tool_choice: "required" }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /parameters of function "f" cannot be followed: the schema's "pattern" at #\/properties\/s cannot be followed: .*lookahead/.test(e.message) && e.param === "tools",
    );
    const bad = [{ type: "function" as const, function: { name: "get weather!" } }];
    await assert.rejects(
      client.chat.completions.create({ model: "scripted", messages, tools: bad }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /tools/.test(e.message),
    );
    const ok = await client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, max_tokens: 8, temperature: 0 });
    assert.equal(ok.choices[0].finish_reason, "tool_calls", "the server still answers after the bad requests");
  });
  const stories = `${projectRoot}/models/stories260K.gguf`;
  const s = await startServer({ modelPath: stories, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "hi" }], tools: TOOLS }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /no chat template/.test(e.message) && e.param === "tools",
    );
  } finally {
    await s.shutdown();
  }
});

test("chat completions and Responses: tool_choice allowed_tools keeps every tool in the prompt and lets only the listed ones be called", async () => {
  await withServer(async (client) => {
    const tools = [...TOOLS, SET_UNIT];
    const allowed = (mode: "auto" | "required", ...names: string[]) => ({ type: "allowed_tools", allowed_tools: { mode, tools: names.map((name) => ({ type: "function", function: { name } })) } }) as unknown as OpenAI.ChatCompletionToolChoiceOption;
    const ask = (content: string, tool_choice?: OpenAI.ChatCompletionToolChoiceOption) =>
      client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content }], tools, ...(tool_choice ? { tool_choice } : {}), temperature: 0, max_tokens: 100 });
    const callOf = (r: OpenAI.ChatCompletion) => r.choices[0].message.tool_calls?.map((c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function) ?? [];
    // "…!" makes the model call get_weather: allowed, it does; with only set_unit allowed, its call must be set_unit.
    const plain = await ask("Weather!");
    const mine = await ask("Weather!", allowed("auto", "get_weather"));
    assert.deepEqual(callOf(mine).map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", { city: "Paris" }]]);
    const other = await ask("Weather!", allowed("auto", "set_unit"));
    assert.deepEqual(callOf(other).map((c) => c.name), ["set_unit"]);
    assert.ok(["c", "f"].includes((JSON.parse(callOf(other)[0].arguments) as { unit: string }).unit));
    assert.equal(other.usage!.prompt_tokens, plain.usage!.prompt_tokens, "every tool is still in the prompt");
    // In auto mode the model may still answer in text ("…." → "Sunny."); in required mode it may not.
    const text = await ask("Weather.", allowed("auto", "set_unit"));
    assert.equal(text.choices[0].message.content, "Sunny.");
    const forced = await ask("Weather.", allowed("required", "set_unit"));
    assert.deepEqual(callOf(forced).map((c) => c.name), ["set_unit"]);
    await assert.rejects(ask("Weather!", allowed("auto", "get_time")), (e: unknown) => {
      return e instanceof OpenAI.BadRequestError && /The function "get_time" named by tool_choice.allowed_tools is not among the request's tools/.test(e.message);
    });
    await assert.rejects(ask("Weather!", { type: "allowed_tools", allowed_tools: { mode: "sometimes", tools: [] } } as never), OpenAI.BadRequestError);
    // The Responses API's shape: {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}.
    const r = await client.responses.create({
      model: "scripted", input: "Weather.", tools: (tools as OpenAI.ChatCompletionFunctionTool[]).map((t) => ({ type: "function" as const, name: t.function.name, parameters: t.function.parameters ?? null, strict: false })),
      tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "set_unit" }] } as never, max_output_tokens: 100,
    });
    const calls = r.output.filter((o) => o.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall[];
    assert.deepEqual(calls.map((c) => c.name), ["set_unit"]);
  });
});

test("chatGrammar() follows allowed_tools in auto mode amid text in every syntax but harmony, and refuses it beside structured_outputs", () => {
  const body = {
    model: "m", messages: [{ role: "user" as const, content: "x" }], tools: [...TOOLS, SET_UNIT],
    tool_choice: { type: "allowed_tools" as const, allowed_tools: { mode: "auto" as const, tools: [{ type: "function" as const, function: { name: "set_unit" } }] } },
  } as unknown as ChatRequest;
  assert.throws(() => chatGrammar(body, "any", "harmony"), (e: unknown) => e instanceof ApiError && /cannot be followed in the harmony tool-call syntax, whose calls begin in a message header \(use mode "required"\)/.test(e.message));
  for (const format of ["hermes", "llama3_json", "qwen3_coder"] as const) {
    const g = chatGrammar(body, "any", format).grammar;
    assert.ok(g?.kind === "tool_calls" && g.amidText === true, format);
    assert.deepEqual(g.tools.map((t) => t.name), ["set_unit"]);
  }
  assert.equal(chatGrammar({ ...body, tool_choice: { ...body.tool_choice as object, allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "set_unit" } }] } } } as ChatRequest, "any", "llama3_json").grammar?.kind, "tool_calls");
  // Beside a JSON response_format: calls or the JSON (union-grammar-hunt3.test.ts); beside vLLM's structured_outputs, a 400.
  assert.equal(chatGrammar({ ...body, response_format: { type: "json_object" } } as ChatRequest).grammar?.kind, "union");
  assert.throws(() => chatGrammar({ ...body, structured_outputs: { regex: "a" } } as ChatRequest), (e: unknown) => e instanceof ApiError && /cannot also follow structured_outputs\.regex/.test(e.message));
});

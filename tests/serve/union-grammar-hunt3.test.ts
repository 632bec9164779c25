/**
 * Tools the model may call beside a JSON response format, as OpenAI answers them: the answer is tool
 * calls, or content that follows the format — the model choosing (output-grammar.ts `callsOrAnswer`,
 * a grammar.ts `union`), where the whole answer used to be held to the format and no tool could ever
 * be called. Through the real server with the real `openai` and `@anthropic-ai/sdk` clients: chat
 * completions (streamed and not, `parallel_tool_calls: false`, tool_choice "none"), the Responses API's
 * `text.format`, and the Messages API's `output_config.format`, which used to refuse tools beside it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { readChatStream } from "./chat-stream.ts";
import { loadModel } from "../../src/model/load.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { grammarComplete, grammarFeed, grammarStart, type ToolCallSyntax } from "../../src/engine/grammar.ts";
import { ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { chatGrammar } from "../../src/serve/output-grammar.ts";
import type { ChatRequest } from "../../src/serve/schemas.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { CALL, TEMPLATE, TOOLS } from "./scripted-server.ts";

/** The scripted model's JSON answer (to a chat ending in "?"). */
const ANSWER_TEXT = '{"answer": "yes"}';
const SCHEMA = { type: "object", additionalProperties: false, required: ["answer"], properties: { answer: { enum: ["yes", "no"] } } };
const FORMAT = { type: "json_schema" as const, json_schema: { name: "reply", schema: SCHEMA, strict: true } };

const dir = mkdtempSync(`${tmpdir()}/union-grammar-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const scriptedPath = `${dir}/scripted.gguf`;
// "…!" → a Hermes call to get_weather; "…?" → the JSON answer.
await writeScriptedModel(scriptedPath, {
  pieces: ["<tool_call>", CALL, "</tool_call>", ANSWER_TEXT],
  next: [["!", "<tool_call>"], ["<tool_call>", CALL], [CALL, "</tool_call>"], ["</tool_call>", "<eos>"], ["?", ANSWER_TEXT], [ANSWER_TEXT, "<eos>"]],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
});
const scripted = await loadModel(scriptedPath);

type ServerOptions = Parameters<typeof startServer>[0];

async function withServer(fn: (url: string) => Promise<void>, modelPath = scriptedPath, model: LoadedModel = scripted, o: Partial<ServerOptions> = {}) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, ...o });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}
const openai = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });

const CALLS = "What is the weather in Paris!";
const ASKS = "Is it sunny?";
/** A JSON answer that follows SCHEMA. */
function assertAnswer(text: string | null | undefined): void {
  assert.ok(typeof text === "string", String(text));
  const v = JSON.parse(text) as Record<string, unknown>;
  assert.deepEqual(Object.keys(v), ["answer"], text);
  assert.ok(v.answer === "yes" || v.answer === "no", text);
}

test("chatGrammar() with tools the model may call beside a JSON response_format: calls or the JSON; the format alone where no tool may be called", () => {
  const body = { model: "m", messages: [{ role: "user", content: "x" }], tools: TOOLS, response_format: FORMAT } as unknown as ChatRequest;
  for (const [extra, parallel] of [[{}, true], [{ tool_choice: "auto" }, true], [{ parallel_tool_calls: false }, false]] as const) {
    const { grammar, parallelToolCalls } = chatGrammar({ ...body, ...extra } as ChatRequest, "any", "qwen3_coder");
    assert.equal(parallelToolCalls, parallel);
    assert.ok(grammar?.kind === "union", JSON.stringify(extra));
    assert.deepEqual(grammar.options.map((o) => o.kind), ["tool_calls", "json"]);
    const calls = grammar.options[0];
    assert.ok(calls.kind === "tool_calls" && calls.parallel === parallel && calls.format === "qwen3_coder" && calls.amidText === undefined);
  }
  assert.equal(chatGrammar({ ...body, response_format: { type: "json_object" } } as ChatRequest).grammar?.kind, "union");
  // allowed_tools in auto mode: only the allowed tools' calls, or the JSON.
  const allowed = chatGrammar({ ...body, tools: [...TOOLS, { type: "function", function: { name: "other" } }], tool_choice: { type: "allowed_tools", allowed_tools: { mode: "auto", tools: [{ type: "function", function: { name: "get_weather" } }] } } } as ChatRequest).grammar;
  assert.ok(allowed?.kind === "union" && allowed.options[0].kind === "tool_calls");
  assert.deepEqual(allowed.options[0].tools.map((t) => t.name), ["get_weather"]);
  // No tool may be called: the format alone, as before.
  assert.equal(chatGrammar({ ...body, tool_choice: "none" } as ChatRequest).grammar?.kind, "json");
  assert.equal(chatGrammar({ ...body, tools: [] } as unknown as ChatRequest).grammar?.kind, "json");
  // Harmony's calls begin in a message header, its answer's format in the final message's body: the format alone.
  assert.equal(chatGrammar(body, "any", "harmony").grammar?.kind, "json");
  // vLLM's structured_outputs keeps its meaning: the whole answer.
  const so = chatGrammar({ ...body, response_format: undefined, structured_outputs: { json: SCHEMA } } as unknown as ChatRequest).grammar;
  assert.equal(so?.kind, "json");
});

test("In each tool-call syntax the union takes the syntax's call or the JSON answer, and the chat output reads the one as a call, the other as content", () => {
  const body = { model: "m", messages: [{ role: "user", content: "x" }], tools: TOOLS, response_format: FORMAT } as unknown as ChatRequest;
  const calls: [ToolCallSyntax, string][] = [
    ["hermes", `<tool_call>${CALL}</tool_call>`],
    ["llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}'],
    ["mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'],
    ["mistral_pre_v11", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'],
    ["qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"],
    ["glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"],
    ["deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"],
  ];
  const specs = [{ name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }];
  for (const [format, call] of calls) {
    const grammar = chatGrammar(body, "any", format).grammar!;
    // What the server reads the answer with (openai.ts), a reasoning block before it.
    const options = { reasoning: true, startsInReasoning: true, toolCalls: true, toolCallFormat: format, tools: specs, parallelToolCalls: true, callsOrAnswer: true };
    for (const text of [call, ANSWER_TEXT]) assert.ok(grammarComplete(grammarFeed(grammarStart(grammar), text)), `${format}: ${text}`);
    // A JSON answer that holds what looks like a call in its strings is content still (DeepSeek's and
    // Kimi's section tags were dropped from it, Hermes' held it back to the end).
    const tricky = `{"answer": "no", "note": ${JSON.stringify(` ${call}`)}}`;
    for (const size of [1, 3, 1000]) {
      const read = (text: string) => {
        const s = new ChatOutputStream(options);
        const all = `Hmm.</think>\n\n${text}`;
        const parts = [];
        for (let i = 0; i < all.length; i += size) parts.push(...s.push(all.slice(i, i + size)));
        parts.push(...s.end());
        const content = parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join("");
        return { content, calls: parts.flatMap((p) => (p.kind === "call" ? [[p.call.name, JSON.parse(p.call.arguments)]] : [])) };
      };
      const label = `${format}, deltas of ${size}`;
      assert.deepEqual(read(call), { content: "", calls: [["get_weather", { city: "Paris" }]] }, label);
      for (const text of [ANSWER_TEXT, tricky]) assert.deepEqual(read(text), { content: text, calls: [] }, `${label}: ${text}`);
      assert.deepEqual(parseChatOutput(`Hmm.</think>\n\n${tricky}`, options), { reasoning: "Hmm.", content: tricky, calls: [] }, label);
    }
  }
});

test("chat completions with tools and a json_schema response_format: a call comes back as tool_calls, an answer as JSON content (openai client, not streamed)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (content: string, extra: Record<string, unknown> = {}) =>
      client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content }], tools: TOOLS, response_format: FORMAT, temperature: 0, max_tokens: 40, ...extra });
    for (const extra of [{}, { tool_choice: "auto" as const }, { parallel_tool_calls: false }]) {
      const call = await ask(CALLS, extra);
      const label = JSON.stringify(extra);
      assert.equal(call.choices[0].finish_reason, "tool_calls", label);
      assert.equal(call.choices[0].message.content, null, label);
      const calls = call.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
      assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [["get_weather", { city: "Paris" }]], label);

      const answer = await ask(ASKS, extra);
      assert.equal(answer.choices[0].finish_reason, "stop", label);
      assert.equal(answer.choices[0].message.tool_calls, undefined, label);
      assertAnswer(answer.choices[0].message.content);
    }
    // tool_choice "none": no call can come; the answer follows the format.
    const none = await ask(CALLS, { tool_choice: "none" });
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.ok(none.choices[0].message.content?.startsWith("{"), String(none.choices[0].message.content));
  });
});


test("chat completions with tools and a json_schema response_format, streamed: the call in tool_calls deltas, or the JSON in content deltas (openai client)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (content: string) =>
      client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content }], tools: TOOLS, response_format: FORMAT, temperature: 0, max_tokens: 40, stream: true });
    const call = await readChatStream(await ask(CALLS));
    assert.deepEqual(call, { content: "", finish: "tool_calls", calls: [["get_weather", { city: "Paris" }]] });
    const answer = await readChatStream(await ask(ASKS));
    assert.equal(answer.finish, "stop");
    assert.deepEqual(answer.calls, []);
    assertAnswer(answer.content);
  });
});

test("chat completions on stories260K steered by logit_bias: '<' takes the call branch, '{' the JSON branch (openai client, streamed and not)", async () => {
  const path = `${projectRoot}/models/stories260K.gguf`;
  // The story model has no chat template, and a model without one cannot be told about tools: the scripted one's.
  const stories = { ...await loadModel(path), chatTemplate: TEMPLATE };
  const texts = Array.from({ length: stories.config.vocabSize }, (_, id) => tokenTextOf(stories.tokenizer, id));
  const bias = (text: string) => Object.fromEntries(texts.flatMap((t, id) => (t === text ? [[String(id), 100]] : [])));
  const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } } } }];
  await withServer(async (url) => {
    const client = openai(url);
    const body = { model: "stories260K", messages: [{ role: "user" as const, content: "Once upon a time" }], tools, response_format: FORMAT, temperature: 0, max_tokens: 200, parallel_tool_calls: false };
    const call = await client.chat.completions.create({ ...body, logit_bias: bias("<") });
    assert.equal(call.choices[0].finish_reason, "tool_calls", String(call.choices[0].message.content));
    const fn = (call.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function;
    assert.equal(fn.name, "get_weather");
    assert.ok(["Paris", "Tokyo"].includes((JSON.parse(fn.arguments) as { city: string }).city), fn.arguments);
    const streamedCall = await readChatStream(await client.chat.completions.create({ ...body, logit_bias: bias("<"), stream: true }));
    assert.deepEqual(streamedCall, { content: "", finish: "tool_calls", calls: [[fn.name, JSON.parse(fn.arguments)]] });

    const answer = await client.chat.completions.create({ ...body, logit_bias: bias("{") });
    assert.equal(answer.choices[0].finish_reason, "stop");
    assertAnswer(answer.choices[0].message.content);
    const streamedAnswer = await readChatStream(await client.chat.completions.create({ ...body, logit_bias: bias("{"), stream: true }));
    assert.deepEqual(streamedAnswer, { content: answer.choices[0].message.content, finish: "stop", calls: [] });
  }, path, stories);
});

test("Responses API with function tools and a json_schema text.format: a function_call item, or a message whose text follows the schema (openai client)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const tools: OpenAI.Responses.FunctionTool[] = [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];
    const text = { format: { type: "json_schema" as const, name: "reply", schema: SCHEMA, strict: true } };
    const call = await client.responses.create({ model: "scripted", input: CALLS, tools, text, temperature: 0, max_output_tokens: 40 });
    const items = call.output.filter((it) => it.type === "function_call");
    assert.deepEqual(items.map((it) => [it.name, JSON.parse(it.arguments)]), [["get_weather", { city: "Paris" }]]);
    assert.equal(call.output.some((it) => it.type === "message"), false);

    const answer = await client.responses.create({ model: "scripted", input: ASKS, tools, text, temperature: 0, max_output_tokens: 40 });
    assert.equal(answer.output.some((it) => it.type === "function_call"), false);
    assertAnswer(answer.output_text);
    // Streamed: the same items.
    const stream = await client.responses.create({ model: "scripted", input: CALLS, tools, text, temperature: 0, max_output_tokens: 40, stream: true });
    let done: OpenAI.Responses.Response | undefined;
    for await (const e of stream) if (e.type === "response.completed") done = e.response;
    assert.deepEqual(done?.output.flatMap((it) => (it.type === "function_call" ? [it.name] : [it.type])), ["get_weather"]);
  });
});

test("Messages API with tools and output_config.format: a tool_use block, or text that follows the schema, streamed and not (anthropic client)", async () => {
  await withServer(async (url) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const tools: Anthropic.Tool[] = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
    const body = (content: string) => ({ model: "scripted", max_tokens: 40, temperature: 0, tools, output_config: { format: { type: "json_schema" as const, schema: SCHEMA } }, messages: [{ role: "user" as const, content }] });
    for (const send of [(b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.create(b), (b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.stream(b).finalMessage()]) {
      const call = await send(body(CALLS));
      assert.equal(call.stop_reason, "tool_use");
      assert.deepEqual(call.content.flatMap((b) => (b.type === "tool_use" ? [[b.name, b.input]] : [b.type])), [["get_weather", { city: "Paris" }]]);
      const answer = await send(body(ASKS));
      assert.equal(answer.stop_reason, "end_turn");
      assert.deepEqual(answer.content.map((b) => b.type), ["text"]);
      assertAnswer((answer.content[0] as Anthropic.TextBlock).text);
    }
  });
  // In harmony (gpt-oss) calls begin in a message header, where the schema's text cannot: still a 400, not calls that could never come.
  await withServer(async (url) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const b = { model: "scripted", max_tokens: 40, tools: [{ name: "get_weather", input_schema: { type: "object" as const } }], output_config: { format: { type: "json_schema" as const, schema: SCHEMA } }, messages: [{ role: "user" as const, content: CALLS }] };
    await assert.rejects(client.messages.create(b), (e: unknown) => e instanceof Anthropic.BadRequestError && /output_config\.format.*not supported in the harmony format/.test(e.message));
  }, scriptedPath, scripted, { toolCallParser: "harmony" });
});

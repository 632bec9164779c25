/**
 * Strict function tools under tool_choice "auto" through the real server, with the real `openai` and
 * `@anthropic-ai/sdk` clients: a scripted model writes a call whose arguments break the tool's schema
 * (`{"city": 42}` where the schema wants "Paris" or "Tokyo"), as small local models do in agent loops. A strict tool's call comes back with
 * arguments that follow its schema (the output grammar held them, output-grammar.ts); the same tool
 * without `strict` comes back as the model wrote it, as before. Chat completions (streamed and not),
 * the Responses API and the Messages API; plain text, non-strict tools beside strict ones, reasoning,
 * and a 400 for a strict schema the decoder cannot follow.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { readChatStream } from "./chat-stream.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { TEMPLATE } from "./scripted-server.ts";

/** The call the model writes, in pieces: its opening, then a value that breaks WEATHER, then its close. */
const OPEN = '\n{"name": "get_weather", "arguments": {"city": ';
const CLOSE = "}}\n";
/** A call of the non-strict tool, its arguments off its own schema (q should be a string). */
const LOOSE = '{"name": "lookup", "arguments": {"q": 7, "more": [true]}}\n';
const WEATHER = { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } };
const LOOKUP = { type: "object", properties: { q: { type: "string" } } };

const dir = mkdtempSync(`${tmpdir()}/strict-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/scripted.gguf`;
// "…!" → the bad get_weather call; "…?" → the lookup call; "…." → "Sunny."; "…;" → a prompt that
// opens <think>, then a thought and the bad call; "…~" → a prompt that opens [THINK].
await writeScriptedModel(modelPath, {
  pieces: ["<tool_call>", OPEN, "42", CLOSE, "</tool_call>", "Sunny.", "<tool_call>\n", LOOSE, "<think>", "Hmm.", "</think>", "\n\n", "[THINK]"],
  literalPieces: true,
  next: [
    ["!", "<tool_call>"], ["<tool_call>", OPEN], [OPEN, "42"], ["42", CLOSE], [CLOSE, "</tool_call>"], ["</tool_call>", "<eos>"],
    ["?", "<tool_call>\n"], ["<tool_call>\n", LOOSE], [LOOSE, "</tool_call>"],
    [".", "Sunny."], ["Sunny.", "<eos>"],
    ["<think>", "Hmm."], ["Hmm.", "</think>"], ["</think>", "\n\n"], ["\n\n", "<tool_call>"],
    ["[THINK]", "Sunny."],
  ],
  chatTemplate: TEMPLATE + "{% if add_generation_prompt and messages[-1].content[-1:] == ';' %}<think>{% endif %}" +
    "{% if add_generation_prompt and messages[-1].content[-1:] == '~' %}[THINK]{% endif %}",
  contextLength: 2048,
});
const model = await loadModel(modelPath);

/**
 * A server for the scripted model. JSON spaced as json.dumps spaces it (`--json-whitespace compact`):
 * where the grammar bars the model's own token, its other tokens tie, and the spacing leaves the
 * choice to the value alone ("Paris" or "Tokyo").
 */
async function withServer(fn: (url: string) => Promise<void>, o: Partial<Parameters<typeof startServer>[0]> = {}) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, jsonWhitespace: "compact", ...o });
  try {
    await fn(s.url);
  } finally {
    await s.shutdown();
  }
}
const openai = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
const chatTools = (strict: boolean | undefined): OpenAI.ChatCompletionFunctionTool[] => [
  { type: "function", function: { name: "get_weather", parameters: WEATHER, ...(strict === undefined ? {} : { strict }) } },
  { type: "function", function: { name: "lookup", parameters: LOOKUP } },
];
/** The calls of a chat answer, arguments parsed. */
const callsOf = (m: OpenAI.ChatCompletionMessage) => (m.tool_calls ?? []).map((c) => {
  const f = (c as OpenAI.ChatCompletionMessageFunctionToolCall).function;
  return [f.name, JSON.parse(f.arguments)];
});
/** A get_weather call whose arguments follow WEATHER. */
function assertValid(calls: unknown[][], label: string): void {
  assert.equal(calls.length, 1, `${label}: ${JSON.stringify(calls)}`);
  const [name, args] = calls[0] as [string, Record<string, unknown>];
  assert.equal(name, "get_weather", label);
  assert.deepEqual(Object.keys(args), ["city"], `${label}: ${JSON.stringify(args)}`);
  assert.ok(args.city === "Paris" || args.city === "Tokyo", `${label}: ${JSON.stringify(args)}`);
}

test("chat completions, not streamed: a strict tool's call follows its schema; without strict it comes back as written (openai client)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (content: string, strict: boolean | undefined, extra: Record<string, unknown> = {}) =>
      client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content }], tools: chatTools(strict), temperature: 0, max_tokens: 60, ...extra });
    for (const extra of [{}, { tool_choice: "auto" as const }, { parallel_tool_calls: false }]) {
      const label = JSON.stringify(extra);
      const strict = await ask("Weather in Paris!", true, extra);
      assert.equal(strict.choices[0].finish_reason, "tool_calls", `${label}: ${JSON.stringify(strict.choices[0].message)}`);
      assertValid(callsOf(strict.choices[0].message), label);
      // Free text stays free.
      const text = await ask("Hello.", true, extra);
      assert.deepEqual([text.choices[0].message.content, text.choices[0].finish_reason], ["Sunny.", "stop"], label);
      // The non-strict tool beside the strict one: any object, as the model wrote it.
      const loose = await ask("Look it up?", true, extra);
      assert.deepEqual(callsOf(loose.choices[0].message), [["lookup", { q: 7, more: [true] }]], label);
    }
    for (const strict of [false, undefined]) {
      const free = await ask("Weather in Paris!", strict);
      assert.deepEqual(callsOf(free.choices[0].message), [["get_weather", { city: 42 }]], String(strict));
    }
  });
});

test("chat completions, streamed: the strict tool's call arrives in tool_calls deltas with schema-valid arguments (openai client)", async () => {
  await withServer(async (url) => {
    const stream = await openai(url).chat.completions.create({
      model: "scripted", messages: [{ role: "user", content: "Weather in Paris!" }], tools: chatTools(true), temperature: 0, max_tokens: 60, stream: true,
    });
    const { content, finish, calls } = await readChatStream(stream);
    assert.equal(content, "");
    assert.equal(finish, "tool_calls");
    assertValid(calls, "streamed");
  });
});

test("A strict tool whose schema cannot be followed is a 400 naming the tool and the keyword; non-strict, the same request is served (openai and anthropic clients)", async () => {
  const schema = { type: "object" as const, patternProperties: { "^x": { type: "string" } } };
  await withServer(async (url) => {
    const client = openai(url);
    const send = (strict: boolean) => client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "Hello." }], tools: [{ type: "function", function: { name: "search", parameters: schema, strict } }], max_tokens: 10 });
    await assert.rejects(send(true), (e: unknown) => e instanceof OpenAI.BadRequestError && /"search"/.test(e.message) && /patternProperties/.test(e.message));
    assert.equal((await send(false)).choices[0].message.content, "Sunny.");
    const anthropic = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const message = (strict: boolean) => anthropic.messages.create({ model: "scripted", max_tokens: 10, tools: [{ name: "search", input_schema: schema, strict }], messages: [{ role: "user", content: "Hello." }] });
    await assert.rejects(message(true), (e: unknown) => e instanceof Anthropic.BadRequestError && /function \\?"search\\?"/.test(e.message) && /patternProperties/.test(e.message));
    assert.equal((await message(false)).stop_reason, "end_turn");
  });
});

test("Messages API: a strict tool's tool_use input follows its input_schema, streamed and not; without strict as written (anthropic client)", async () => {
  await withServer(async (url) => {
    const client = new Anthropic({ baseURL: url, apiKey: "none", maxRetries: 0 });
    const body = (strict: boolean | undefined) => ({
      model: "scripted", max_tokens: 60, temperature: 0, messages: [{ role: "user", content: "Weather in Paris!" }],
      tools: [{ name: "get_weather", input_schema: WEATHER as Anthropic.Tool.InputSchema, ...(strict === undefined ? {} : { strict }) }],
    }) as Anthropic.MessageCreateParamsNonStreaming;
    const uses = (m: Anthropic.Message) => m.content.flatMap((b) => (b.type === "tool_use" ? [[b.name, b.input]] : []));
    for (const send of [(b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.create(b), (b: Anthropic.MessageCreateParamsNonStreaming) => client.messages.stream(b).finalMessage()]) {
      const strict = await send(body(true));
      assert.equal(strict.stop_reason, "tool_use");
      assertValid(uses(strict), "messages");
      assert.deepEqual(uses(await send(body(undefined))), [["get_weather", { city: 42 }]]);
    }
  });
});

test("Responses API: a strict function tool's function_call arguments follow its parameters; strict false as written (openai client)", async () => {
  await withServer(async (url) => {
    const client = openai(url);
    const ask = (strict: boolean) => client.responses.create({ model: "scripted", input: "Weather in Paris!", tools: [{ type: "function", name: "get_weather", parameters: WEATHER, strict }], temperature: 0, max_output_tokens: 60 });
    const calls = (r: OpenAI.Responses.Response) => r.output.flatMap((it) => (it.type === "function_call" ? [[it.name, JSON.parse(it.arguments)]] : []));
    assertValid(calls(await ask(true)), "responses");
    assert.deepEqual(calls(await ask(false)), [["get_weather", { city: 42 }]]);
  });
});

test("With reasoning: after a prompt that opens <think> the thought is free and the strict call holds; a prompt opening [THINK] is served as before, not refused", async () => {
  await withServer(async (url) => {
    const r = await openai(url).chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "Think;" }], tools: chatTools(true), temperature: 0, max_tokens: 60 });
    const m = r.choices[0].message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
    assert.equal(m.reasoning_content, "Hmm.");
    assertValid(callsOf(m), "after reasoning");
  }, { reasoningParser: "think" });
  // Mistral's [THINK] opened by the prompt: no grammar can wait for its end, so the strict tools go unheld, as before (no 400).
  await withServer(async (url) => {
    const r = await openai(url).chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "Think~" }], tools: chatTools(true), temperature: 0, max_tokens: 20 });
    assert.equal(r.choices[0].finish_reason, "stop");
  }, { reasoningParser: "mistral" });
});

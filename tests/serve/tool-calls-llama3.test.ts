/**
 * Llama 3 JSON tool calls (`serve --tool-call-parser llama3_json`): the splitter on its own, and
 * through a server with the real openai client — a scripted model whose answer is such a call, and
 * a forced tool_choice written in that format.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ChatOutputOptions, parseChatOutput } from "../../src/serve/chat-output.ts";
import { startServer } from "../../src/serve/server.ts";
import { Llama3JsonStream } from "../../src/serve/tool-calls-llama3.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { TEMPLATE, TOOLS } from "./scripted-server.ts";

const LLAMA: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "llama3_json" };
const CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}';

test("parseChatOutput() with llama3_json reads calls at the answer's start and leaves any other answer as text", () => {
  const paris = { name: "get_weather", arguments: '{"city":"Paris"}' };
  assert.deepEqual(parseChatOutput(CALL, LLAMA), { reasoning: null, content: null, calls: [paris] });
  assert.deepEqual(parseChatOutput(`<|python_tag|>${CALL}`, LLAMA).calls, [paris], "after the python tag");
  assert.deepEqual(parseChatOutput(` \n${CALL}; {"name": "now", "arguments": {}}`, LLAMA).calls, [paris, { name: "now", arguments: "{}" }], "two, separated by ;");
  assert.deepEqual(parseChatOutput('{"name": "f", "parameters": {"s": "a } ; { \\" b"}}', LLAMA).calls, [{ name: "f", arguments: '{"s":"a } ; { \\" b"}' }], "braces inside strings");
  for (const text of ["Sunny.", `The call would be ${CALL}`, "{not json}", '{"parameters": {}}', '{"name": "f", "param']) {
    assert.deepEqual(parseChatOutput(text, LLAMA), { reasoning: null, content: text, calls: [] }, text);
  }
  const mixed = parseChatOutput(`${CALL}; and then {oops}`, LLAMA);
  assert.deepEqual([mixed.calls, mixed.content], [[paris], "; and then {oops}"], "what follows a call that is not one stays text");
  assert.deepEqual(parseChatOutput(`<tool_call>\n${CALL}\n</tool_call>`, LLAMA).calls, [], "the Hermes format is text to this parser");
});

test("Llama3JsonStream gives the same text and calls whatever the delta boundaries, releasing each call when it closes", () => {
  for (const text of [`<|python_tag|>${CALL}; ${CALL}`, `  ${CALL};{"name": "x"} trailing`, "<|pyth not a tag", "Hello {there}", `${CALL}${CALL}`]) {
    const whole = parseChatOutput(text, LLAMA);
    for (const size of [1, 2, 3, 7, 64]) {
      const s = new Llama3JsonStream();
      const parts = [];
      for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
      parts.push(...s.end());
      const content = parts.flatMap((p) => (p.kind === "text" ? [p.text] : [])).join("");
      assert.equal(content === "" && whole.calls.length > 0 ? null : content, whole.content, `${text} in deltas of ${size}`);
      assert.deepEqual(parts.flatMap((p) => (p.kind === "call" ? [p.call] : [])), whole.calls, `${text} in deltas of ${size}`);
    }
  }
  const s = new Llama3JsonStream();
  assert.deepEqual(s.push('{"name": "a", "parameters": {}}; {"na'), [{ kind: "call", call: { name: "a", arguments: "{}" } }], "a call is out as soon as it closes");
  const t = new Llama3JsonStream();
  assert.deepEqual(t.push("<|py"), [], "a possible tag is held");
  assert.deepEqual(t.push("x"), [{ kind: "text", text: "<|pyx" }]);
});

test("grammarStart() writes forced tool calls in the llama3_json format: parameters, calls separated by \"; \"", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "llama3_json", parallel: true, tools: [{ name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }, { name: "now" }] };
  const fits = (text: string) => grammarComplete(grammarFeed(grammarStart(g), text));
  assert.ok(fits(CALL));
  assert.ok(fits(`${CALL}; {"name": "now", "parameters": {}}`));
  for (const bad of [`<tool_call>\n${CALL}\n</tool_call>`, '{"name": "get_weather", "arguments": {"city": "Paris"}}', `${CALL}\n${CALL}`, `${CALL};`, '{"name": "get_weather", "parameters": {}}']) {
    assert.ok(!fits(bad), `accepted ${bad}`);
  }
  assert.ok(!grammarComplete(grammarFeed(grammarStart({ ...g, parallel: false }), `${CALL}; ${CALL}`)), "one call when not parallel");
});

const dir = mkdtempSync(`${tmpdir()}/llama3-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("chat completions with --tool-call-parser llama3_json: a model's call comes back as tool_calls, and a forced call is written in its format", async () => {
  // "…!" → a Llama 3 call to get_weather; "…." → "Sunny.".
  const path = `${dir}/llama3.gguf`;
  await writeScriptedModel(path, { pieces: [CALL, "Sunny."], next: [["!", CALL], [CALL, "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: TEMPLATE, contextLength: 2048 });
  const s = await startServer({ modelPath: path, model: await loadModel(path), host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "llama3_json" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris!" }];
    const r = await client.chat.completions.create({ model: "llama3", messages, tools: TOOLS, temperature: 0, max_tokens: 8 });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.choices[0].message.content, null);
    const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ["get_weather", { city: "Paris" }]);

    const stream = await client.chat.completions.create({ model: "llama3", messages, tools: TOOLS, temperature: 0, max_tokens: 8, stream: true });
    let content = "";
    const names: string[] = [];
    for await (const c of stream) {
      content += c.choices[0]?.delta.content ?? "";
      for (const t of c.choices[0]?.delta.tool_calls ?? []) if (t.function?.name) names.push(t.function.name);
    }
    assert.deepEqual([content, names], ["", ["get_weather"]]);

    const plain = await client.chat.completions.create({ model: "llama3", messages: [{ role: "user", content: "Weather." }], tools: TOOLS, temperature: 0, max_tokens: 8 });
    assert.equal(plain.choices[0].message.content, "Sunny.");

    // Forced: the grammar writes {"name": "set_unit", "parameters": ...}, which the same parser reads back.
    const setUnit: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false } } };
    const forced = await client.chat.completions.create({
      model: "llama3", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, setUnit], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 100,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(got.function.name, "set_unit");
    assert.ok(["c", "f"].includes((JSON.parse(got.function.arguments) as { unit: string }).unit), got.function.arguments);
  } finally {
    await s.shutdown();
  }
});

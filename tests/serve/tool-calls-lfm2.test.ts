/**
 * LFM2's tool calls (`--tool-call-parser lfm2`): a list of Python calls between `<|tool_call_start|>`
 * and `<|tool_call_end|>`. The parser on its own (Python's literals and JSON's, whole and streamed, a
 * closing tag inside a string), what stays text, the grammar that writes forced calls, the format told
 * from LFM2's template, and a server with the real openai client forcing a call.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ChatOutputOptions, ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { startServer } from "../../src/serve/server.ts";
import { detectToolCallFormat } from "../../src/serve/tool-call-detect.ts";
import { parsePythonicCalls } from "../../src/serve/tool-calls-pythonic.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const opts: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "lfm2" };
const OPEN = "<|tool_call_start|>";
const CLOSE = "<|tool_call_end|>";
const shape = (text: string) => parseChatOutput(text, opts).calls.map((c) => [c.name, JSON.parse(c.arguments)]);

test("parsePythonicCalls() reads keyword arguments as JSON: Python's literals, and JSON's true/false/null", () => {
  assert.deepEqual(parsePythonicCalls(`[get_weather(city="Paris", days=3)]`), [{ name: "get_weather", arguments: '{"city":"Paris","days":3}' }]);
  const args = (body: string) => JSON.parse(parsePythonicCalls(body)![0].arguments);
  assert.deepEqual(args(`[f(a='it\\'s', b=True, c=None, d=False, e=[1, 2.5, -3e2], f=(1, 'x'), g={'k': {"n": null}}, h=true)]`), {
    a: "it's", b: true, c: null, d: false, e: [1, 2.5, -300], f: [1, "x"], g: { k: { n: null } }, h: true,
  });
  assert.deepEqual(args(`[f(a=1_000, b=.5, c=2., d=+4, e=1E3)]`), { a: 1000, b: 0.5, c: 2, d: 4, e: 1000 });
  assert.deepEqual(args(`[f(s="tab\\tnew\\nline \\u00e9 \\x41 \\U0001F600 \\/ \\d")]`), { s: "tab\tnew\nline é A 😀 / \\d" });
  assert.deepEqual(args(`[f( a = [ ] , b = { } , )]`), { a: [], b: {} }, "spaces and trailing commas");
  // The number keeps its digits: JSON.parse would round it.
  assert.equal(parsePythonicCalls(`[f(n=12345678901234567890)]`)![0].arguments, '{"n":12345678901234567890}');
  assert.deepEqual(parsePythonicCalls(` [now(), web.search(q='x'), now()] `)!.map((c) => c.name), ["now", "web.search", "now"]);
});

test("parsePythonicCalls() refuses what is not a list of keyword calls", () => {
  for (const bad of [
    "", "[]", "f(a=1)", "[f(1)]", "[f(a=1, a=2)]", "[f(a=b)]", "[f(a=1) g()]", "[f(a='x)]", "[f(a=1)", "[f(a=1)] tail", "[f(a=007)]", "[f(a=1+2)]",
    "[f(a={1: 2})]", "[f(a='line\nbreak')]", "[f(a=nan)]", "[(a=1)]", `[f(a=${"[".repeat(40)}${"]".repeat(40)})]`, "[f(a='\\x4')]",
  ]) assert.equal(parsePythonicCalls(bad), null, `read as calls: ${JSON.stringify(bad)}`);
});

test("parseChatOutput() with lfm2 reads each list between its tags, text around it as content, and leaves what is not calls as text", () => {
  assert.deepEqual(shape(`${OPEN}[get_weather(city="Paris")]${CLOSE}`), [["get_weather", { city: "Paris" }]]);
  const two = parseChatOutput(`Checking. ${OPEN}[get_weather(city='Paris'), now()]${CLOSE}`, opts);
  assert.deepEqual([two.content, two.calls.map((c) => c.name)], ["Checking. ", ["get_weather", "now"]]);
  assert.equal(parseChatOutput(`${OPEN}[now()]${CLOSE}`, opts).content, null);
  for (const bad of [`${OPEN}[now(1)]${CLOSE}`, `${OPEN}now()${CLOSE}`, `${OPEN}[now()`, `<tool_call>{"name": "now", "arguments": {}}</tool_call>`]) {
    assert.deepEqual(parseChatOutput(bad, opts), { reasoning: null, content: bad, calls: [] }, `stays text: ${bad}`);
  }
  // A closing tag inside a string argument is the string's text.
  assert.deepEqual(shape(`${OPEN}[write(text="a ${CLOSE} b")]${CLOSE}`), [["write", { text: `a ${CLOSE} b` }]]);
});

test("ChatOutputStream with lfm2 gives the same text and calls as parseChatOutput() whatever the delta boundaries", () => {
  const text = `Let me look: ${OPEN}[get_weather(city="Par${CLOSE}is", days=2), now()]${CLOSE} and ${OPEN}[bad(1)]${CLOSE} tail`;
  const whole = parseChatOutput(text, opts);
  assert.deepEqual(whole.calls.map((c) => c.name), ["get_weather", "now"]);
  assert.equal(whole.content, `Let me look:  and ${OPEN}[bad(1)]${CLOSE} tail`);
  for (const size of [1, 2, 3, 7, 13]) {
    const s = new ChatOutputStream(opts);
    let content = "";
    const calls: string[] = [];
    for (let i = 0; i <= text.length; i += size) {
      const parts = i < text.length ? s.push(text.slice(i, i + size)) : s.end();
      for (const p of parts) {
        if (p.kind === "content") content += p.text;
        if (p.kind === "call") calls.push(`${p.call.name}${p.call.arguments}`);
      }
    }
    assert.deepEqual([content, calls], [whole.content, whole.calls.map((c) => `${c.name}${c.arguments}`)], `deltas of ${size}`);
  }
});

const WEATHER = {
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
};

test("grammarStart() writes forced tool calls in the lfm2 format: a list of Python calls with JSON values, optional keywords left out", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "lfm2", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  assert.ok(fits(`${OPEN}[get_weather(city="Paris")]${CLOSE}`));
  assert.ok(fits(`${OPEN}[get_weather(city="Paris", days=3), now()]${CLOSE}`), "two calls, the optional keyword written");
  assert.ok(fits(`${OPEN}[now(x=1, y="z")]${CLOSE}`), "a tool without declared parameters takes any keywords");
  assert.ok(!fits(`${OPEN}[now(), now()]${CLOSE}`, { ...g, parallel: false }), "one call when not parallel");
  for (const bad of [
    `${OPEN}[]${CLOSE}`, `${OPEN}[get_weather(days=3)]${CLOSE}`, `${OPEN}[get_weather(city="Paris", days=0)]${CLOSE}`, `${OPEN}[get_weather(days=3, city="Paris")]${CLOSE}`,
    `${OPEN}[get_weather(city='Paris')]${CLOSE}`, `[get_weather(city="Paris")]`, `${OPEN}[get_weather(city="Paris",days=3)]${CLOSE}`,
  ]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  // The first declared keyword optional: the call may begin with the second, with no separator before it.
  const optionalFirst: OutputGrammar = { ...g, tools: [{ name: "f", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["b"] } }] };
  assert.ok(fits(`${OPEN}[f(b=2)]${CLOSE}`, optionalFirst));
  assert.ok(fits(`${OPEN}[f(a=1, b=2)]${CLOSE}`, optionalFirst));
  assert.ok(!fits(`${OPEN}[f(, b=2)]${CLOSE}`, optionalFirst) && !fits(`${OPEN}[f(a=1)]${CLOSE}`, optionalFirst));
  assert.ok(grammarForcedText(grammarStart(g), 200).text.startsWith(`${OPEN}[`), "jump-forward writes the tag and the list's bracket");
  const text = `${OPEN}[get_weather(city="Paris", days=3), now(x=1)]${CLOSE}`;
  assert.deepEqual(shape(text), [["get_weather", { city: "Paris", days: 3 }], ["now", { x: 1 }]], "what the grammar accepts, the parser reads");
});

test("detectToolCallFormat() tells lfm2 from LFM2's and LFM2.5's templates", () => {
  assert.equal(detectToolCallFormat("{{- 'List of tools: <|tool_list_start|>' + tools|tojson + '<|tool_list_end|>' -}}", "lfm2"), "lfm2");
  assert.equal(detectToolCallFormat("{{- 'List of tools: [' + tools|join(', ') + ']' -}}", "lfm2"), "lfm2");
  assert.equal(detectToolCallFormat("{% for m in messages %}{{ m.content }}{% endfor %}", "lfm2"), "hermes");
});

const dir = mkdtempSync(`${tmpdir()}/lfm2-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

test("chat completions with --tool-call-parser auto on an LFM2-like template: a forced call comes back as a tool call, not content", async () => {
  const tags = ["<|user|>", "<|assistant|>", "<|end|>", OPEN, CLOSE, "<|tool_list_start|>", "<|tool_list_end|>"];
  const template = "{% if tools %}List of tools: <|tool_list_start|>{{ tools | tojson }}<|tool_list_end|>{% endif %}" +
    `{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}<|assistant|>`;
  const path = `${dir}/lfm2.gguf`;
  await writeScriptedModel(path, { pieces: [...tags, "Sunny."], next: [["<|assistant|>", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: template, literalPieces: true, controlPieces: tags, contextLength: 2048 });
  const model = await loadModel(path);
  const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "auto" });
  try {
    assert.equal(s.toolCallParser, "lfm2");
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const setUnit: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } } };
    const forced = await client.chat.completions.create({
      model: "lfm2", messages: [{ role: "user", content: "Weather." }], tools: [{ type: "function", function: WEATHER }, setUnit],
      tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 300,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const calls = forced.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    assert.deepEqual(calls.map((c) => c.function.name), ["set_unit"]);
    const args = JSON.parse(calls[0].function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, calls[0].function.arguments);
    assert.equal(forced.choices[0].message.content, null, "the call list is not content");
  } finally {
    await s.shutdown();
  }
});

/**
 * MiniMax M2 and DeepSeek V3 tool calls (`serve --tool-call-parser minimax_m2|deepseek_v3`): the
 * parsers whole and streamed, the grammars that write forced calls, and a server with the real openai
 * client reading a model's call and writing forced ones.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar, type ToolCallFormat } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ChatOutputOptions, ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const WEATHER = {
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
};
const opts = (format: ToolCallFormat): ChatOutputOptions => ({ reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: format, tools: [WEATHER] });
const args = (calls: { name: string; arguments: string }[]) => calls.map((c) => [c.name, JSON.parse(c.arguments)]);

const DS_CALL = '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>';
const DS_NOW = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>";
const ds = (...calls: string[]) => `<｜tool▁calls▁begin｜>${calls.join("\n")}<｜tool▁calls▁end｜>`;
const MM_CALL = '<invoke name="get_weather">\n<parameter name="city"> Paris\n</parameter>\n<parameter name="days">3</parameter>\n</invoke>';
const mm = (...calls: string[]) => `<minimax:tool_call>\n${calls.join("\n")}\n</minimax:tool_call>`;

test("parseChatOutput() with deepseek_v3 reads fenced calls in the section and drops the section tags", () => {
  const r = parseChatOutput(`Checking.${ds(DS_CALL, DS_NOW)}`, opts("deepseek_v3"));
  assert.equal(r.content, "Checking.\n", "the newline between calls is the section's, passed as text (as Kimi's)");
  assert.deepEqual(args(r.calls), [["get_weather", { city: "Paris" }], ["now", {}]]);
  assert.equal(r.calls[0].arguments, '{"city": "Paris"}');
  assert.deepEqual(parseChatOutput(ds(DS_CALL), opts("deepseek_v3")).content, null);
  for (const bad of [
    DS_CALL.replace("function", "tool"), DS_CALL.replace("```json\n", ""), DS_CALL.replace('{"city": "Paris"}', "{oops"), DS_CALL.replace("get_weather", "get weather"),
    '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>',
  ]) assert.deepEqual(parseChatOutput(bad, opts("deepseek_v3")), { reasoning: null, content: bad, calls: [] }, `stays text: ${JSON.stringify(bad)}`);
});

test("parseChatOutput() with minimax_m2 reads each invoke as a call, typed by the tool's schema, the section tags dropped", () => {
  const r = parseChatOutput(`Let me look.\n${mm(MM_CALL, "<invoke name='search'>\n<parameter name='q'>cats</parameter>\n<parameter name=\"n\">[1, 2]</parameter>\n</invoke>")}`, opts("minimax_m2"));
  assert.deepEqual(args(r.calls), [["get_weather", { city: " Paris\n", days: 3 }], ["search", { q: "cats", n: [1, 2] }]], "a string raw and whole, other values JSON; a tool not declared: JSON where it parses");
  assert.equal(r.content!.trim(), "Let me look.");
  assert.deepEqual(args(parseChatOutput(mm('<invoke name="now">\n</invoke>'), opts("minimax_m2")).calls), [["now", {}]]);
  const city = parseChatOutput(mm('<invoke name="get_weather">\n<parameter name="city">123</parameter>\n</invoke>'), opts("minimax_m2")).calls;
  assert.deepEqual(args(city), [["get_weather", { city: "123" }]], "a string that looks like a number stays a string");
  for (const bad of ['<invoke name="get weather">\n</invoke>', '<invoke name="f">\n<parameter name="a">1</parameter> stray\n</invoke>', "<invoke name=f>\n</invoke>"]) {
    assert.deepEqual(parseChatOutput(bad, opts("minimax_m2")), { reasoning: null, content: bad, calls: [] }, `stays text: ${JSON.stringify(bad)}`);
  }
});

test("ChatOutputStream gives the same text and calls as parseChatOutput() for deepseek_v3 and minimax_m2 whatever the delta boundaries", () => {
  const cases: [ToolCallFormat, string][] = [
    ["deepseek_v3", `So: ${ds(DS_CALL, DS_NOW)} done`],
    ["deepseek_v3", ds(DS_CALL).slice(0, -20)],
    ["minimax_m2", `a < b ${mm(MM_CALL, MM_CALL)}`],
    ["minimax_m2", "<invoke na no <minimax:tool_call>\n<invoke name=\"f\">unterminated"],
  ];
  for (const [format, text] of cases) {
    const whole = parseChatOutput(text, opts(format));
    for (const size of [1, 2, 5, 13, 1000]) {
      const s = new ChatOutputStream(opts(format));
      const parts = [];
      for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
      parts.push(...s.end());
      const content = parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join("");
      assert.equal(content.trim() === "" && whole.calls.length > 0 ? null : content, whole.content, `${format} ${JSON.stringify(text)} in deltas of ${size}`);
      assert.deepEqual(parts.flatMap((p) => (p.kind === "call" ? [p.call] : [])), whole.calls, `${format} ${JSON.stringify(text)} in deltas of ${size}`);
    }
  }
});

test("grammarStart() writes forced tool calls in the deepseek_v3 format: type, name, fenced JSON arguments, calls a newline apart", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "deepseek_v3", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  assert.ok(fits(ds(DS_CALL)));
  assert.ok(fits(ds(DS_CALL, DS_NOW)));
  assert.ok(!fits(ds(DS_CALL, DS_NOW), { ...g, parallel: false }), "one call when not parallel");
  for (const bad of [ds(), ds(DS_CALL + DS_NOW), DS_CALL, ds(DS_CALL.replace('"Paris"', "7")), ds(DS_CALL.replace("```json", "```"))]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  assert.equal(grammarForcedText(grammarStart({ ...g, tools: [WEATHER] }), 200).text, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{");
  assert.deepEqual(args(parseChatOutput(ds(DS_CALL, DS_NOW), opts("deepseek_v3")).calls), [["get_weather", { city: "Paris" }], ["now", {}]], "what the grammar accepts, the parser reads");
});

test("grammarStart() writes forced tool calls in the minimax_m2 format: one section, an invoke per call, declared parameters in order", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "minimax_m2", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  const free = '<invoke name="now">\n<parameter name="x">1</parameter>\n</invoke>';
  assert.ok(fits(mm(MM_CALL)));
  assert.ok(fits(mm(MM_CALL, free)), "two calls; free parameters for a tool without declared ones");
  assert.ok(!fits(mm(MM_CALL, free), { ...g, parallel: false }), "one call when not parallel");
  for (const bad of [
    mm(), MM_CALL, mm(MM_CALL.replace("3", "0")), mm('<invoke name="get_weather">\n<parameter name="days">3</parameter>\n</invoke>'),
    mm(MM_CALL.replace("Paris", "a</parameter>b")), `${mm(MM_CALL)}${mm(MM_CALL)}`,
  ]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  assert.equal(grammarForcedText(grammarStart({ ...g, tools: [WEATHER] }), 200).text, '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">');
  assert.deepEqual(args(parseChatOutput(mm(MM_CALL, free), opts("minimax_m2")).calls), [["get_weather", { city: " Paris\n", days: 3 }], ["now", { x: 1 }]]);
});

const dir = mkdtempSync(`${tmpdir()}/minimax-deepseek3-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";
const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: WEATHER }];
const SET_UNIT: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } } };

test("chat completions with --tool-call-parser deepseek_v3 and minimax_m2: a model's call and a forced one come back as tool_calls", async () => {
  const answers = { deepseek_v3: ds(DS_CALL), minimax_m2: mm('<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>') } as const;
  const tags = ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<minimax:tool_call>", "</minimax:tool_call>"];
  for (const [format, answer] of Object.entries(answers) as [keyof typeof answers, string][]) {
    const path = `${dir}/${format}.gguf`;
    await writeScriptedModel(path, { pieces: [answer, ...tags], literalPieces: true, next: [["!", answer], [answer, "<eos>"]], chatTemplate: TEMPLATE, contextLength: 2048 });
    const s = await startServer({ modelPath: path, model: await loadModel(path), host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: format });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const r: OpenAI.ChatCompletion = await client.chat.completions.create({ model: format, messages: [{ role: "user", content: "Weather in Paris!" }], tools: TOOLS, temperature: 0, max_tokens: 8 });
      assert.equal(r.choices[0].finish_reason, "tool_calls", `${format}: ${JSON.stringify(r.choices[0].message)}`);
      const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      assert.deepEqual([call.function.name, JSON.parse(call.function.arguments), r.choices[0].message.content], ["get_weather", { city: "Paris" }, null]);
      const forced: OpenAI.ChatCompletion = await client.chat.completions.create({
        model: format, messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
      });
      assert.equal(forced.choices[0].finish_reason, "tool_calls", `${format}: ${JSON.stringify(forced.choices[0].message)}`);
      const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      assert.equal(got.function.name, "set_unit");
      const a = JSON.parse(got.function.arguments) as { unit: string; days: number };
      assert.ok(["c", "f"].includes(a.unit) && Number.isInteger(a.days) && a.days <= 9, `${format}: ${got.function.arguments}`);
    } finally {
      await s.shutdown();
    }
  }
});

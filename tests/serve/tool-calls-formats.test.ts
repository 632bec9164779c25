/**
 * Kimi K2, DeepSeek V3.1, GLM 4.5 and Qwen3-Coder tool calls (`serve --tool-call-parser
 * kimi_k2|deepseek_v31|glm45|qwen3_coder`): the parsers on their own (whole and streamed), the
 * grammars that write forced calls in each format, and a server with the real openai client — a Kimi
 * model's call keeps the model's id, so the next turn's prompt repeats the answer's text; a forced
 * call comes out in each format and is read back.
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
import { chatRenderer } from "../../src/serve/chat-template.ts";
import type { ChatMessageIn } from "../../src/serve/schemas.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const WEATHER = {
  name: "get_weather",
  parameters: {
    type: "object",
    properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 }, unit: { enum: ["c", "f"] }, note: { type: "string", maxLength: 3 } },
    required: ["city"],
  },
};
const opts = (format: ToolCallFormat): ChatOutputOptions => ({ reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: format, tools: [WEATHER] });
const KIMI_CALL = '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>';
const KIMI_ANSWER = `<|tool_calls_section_begin|>${KIMI_CALL}<|tool_calls_section_end|>`;
const GLM_CALL = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Paris\n</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";

/** The answer split in deltas of `size` characters, then put together again. */
function streamed(text: string, o: ChatOutputOptions, size: number) {
  const s = new ChatOutputStream(o);
  const parts = [];
  for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
  parts.push(...s.end());
  const content = parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join("");
  return { content, calls: parts.flatMap((p) => (p.kind === "call" ? [p.call] : [])) };
}

test("parseChatOutput() with kimi_k2 reads each call block with the model's own id and drops the section tags", () => {
  const paris = { id: "functions.get_weather:0", name: "get_weather", arguments: '{"city": "Paris"}' };
  assert.deepEqual(parseChatOutput(KIMI_ANSWER, opts("kimi_k2")), { reasoning: null, content: null, calls: [paris] });
  const two = `Checking.<|tool_calls_section_begin|>${KIMI_CALL}\n<|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>`;
  assert.deepEqual(parseChatOutput(two, opts("kimi_k2")), { reasoning: null, content: "Checking.\n", calls: [paris, { id: "functions.now:1", name: "now", arguments: "{}" }] });
  assert.deepEqual(parseChatOutput(`<|tool_call_section_begin|>${KIMI_CALL}<|tool_call_section_end|>`, opts("kimi_k2")).calls, [paris], "the singular section tags some checkpoints write");
  assert.deepEqual(parseChatOutput("<|tool_call_begin|>get_weather:7<|tool_call_argument_begin|>{}<|tool_call_end|>", opts("kimi_k2")).calls, [{ id: "get_weather:7", name: "get_weather", arguments: "{}" }], "an id without the functions. prefix");
  for (const bad of ["<|tool_call_begin|>get_weather<|tool_call_argument_begin|>{}<|tool_call_end|>", "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{oops<|tool_call_end|>", "<|tool_call_begin|>functions.f:0{}<|tool_call_end|>"]) {
    assert.deepEqual(parseChatOutput(bad, opts("kimi_k2")), { reasoning: null, content: bad, calls: [] }, `a malformed block stays text: ${bad}`);
  }
  assert.deepEqual(parseChatOutput("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", opts("kimi_k2")).calls, [], "the Hermes format is text to this parser");
});

test("parseChatOutput() with glm45 reads arguments by the tool's schema: strings raw, whitespace kept; other values JSON", () => {
  const r = parseChatOutput(`Let me look.${GLM_CALL}`, opts("glm45"));
  assert.equal(r.content, "Let me look.");
  assert.deepEqual(r.calls.map((c) => [c.name, JSON.parse(c.arguments), c.id]), [["get_weather", { city: " Paris\n", days: 3 }, undefined]]);
  // An enum of strings is raw; a tool the request did not declare: JSON where it parses, else text.
  const other = parseChatOutput("<tool_call>get_weather\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>cats</arg_value>\n<arg_key>n</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>", opts("glm45"));
  assert.deepEqual(other.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", { unit: "c" }], ["search", { q: "cats", n: [1, 2] }]]);
  assert.equal(other.content, null, "the newline between calls is not content");
  const city123 = parseChatOutput("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n</tool_call>", opts("glm45")).calls[0];
  assert.deepEqual(JSON.parse(city123.arguments), { city: "123" }, "a string argument that looks like a number stays a string");
  assert.deepEqual(parseChatOutput("<tool_call>now</tool_call>", opts("glm45")).calls, [{ name: "now", arguments: "{}" }], "a call without arguments");
  for (const bad of ["<tool_call>get weather\n</tool_call>", "<tool_call>f\n<arg_key>a</arg_key> stray <arg_value>1</arg_value>\n</tool_call>", "<tool_call>\n</tool_call>"]) {
    assert.deepEqual(parseChatOutput(bad, opts("glm45")), { reasoning: null, content: bad, calls: [] }, `a malformed block stays text: ${JSON.stringify(bad)}`);
  }
});

test("ChatOutputStream gives the same text and calls as parseChatOutput() for kimi_k2 and glm45 whatever the delta boundaries", () => {
  const cases: [ToolCallFormat, string][] = [
    ["kimi_k2", `So:${KIMI_ANSWER} done`],
    ["kimi_k2", "<|tool_calls_sec not a tag <|tool_call_begin|>broken<|tool_call_end|>"],
    ["kimi_k2", `${KIMI_ANSWER.slice(0, -10)}`],
    ["glm45", `a < b ${GLM_CALL}\n${GLM_CALL}`],
    ["glm45", "<tool_ca no <tool_call>unterminated"],
  ];
  for (const [format, text] of cases) {
    const whole = parseChatOutput(text, opts(format));
    for (const size of [1, 2, 5, 13, 1000]) {
      const s = streamed(text, opts(format), size);
      assert.equal(s.content === "" && whole.calls.length > 0 ? null : s.content, whole.content, `${format} ${JSON.stringify(text)} in deltas of ${size}`);
      assert.deepEqual(s.calls, whole.calls, `${format} ${JSON.stringify(text)} in deltas of ${size}`);
    }
  }
  const s = new ChatOutputStream(opts("kimi_k2"));
  assert.deepEqual(s.push(`<|tool_calls_section_begin|>${KIMI_CALL}<|tool_ca`).map((p) => p.kind), ["call"], "a call is out as soon as its block closes; a tag's start is held");
});

test("ChatOutputStream streams no whitespace-only content beside calls, and keeps whitespace once text shows", () => {
  const hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>';
  const cases: [ToolCallFormat, string][] = [["hermes", hermes], ["glm45", GLM_CALL], ["kimi_k2", KIMI_ANSWER]];
  for (const [format, call] of cases) {
    for (const size of [1, 3, 1000]) {
      const parts = [];
      const s = new ChatOutputStream(opts(format));
      const text = `\n${call}\n\n${call}\n`;
      for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
      parts.push(...s.end());
      assert.deepEqual(parts.map((p) => p.kind), ["call", "call"], `${format} in deltas of ${size}: no content parts`);
      const shown = streamed(`${call}\n\nDone.\n`, opts(format), size);
      assert.equal(shown.content, "\n\nDone.\n", `${format} in deltas of ${size}: text after a call keeps its whitespace`);
      assert.equal(streamed("  \n", opts(format), size).content, "  \n", `${format}: an answer of whitespace alone is content`);
    }
  }
});

test("grammarStart() writes forced tool calls in the kimi_k2 format: the section, each call's functions.NAME:INDEX id and JSON arguments", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "kimi_k2", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  assert.ok(fits(KIMI_ANSWER));
  const now = "<|tool_call_begin|>functions.now:13<|tool_call_argument_begin|>{}<|tool_call_end|>";
  assert.ok(fits(`<|tool_calls_section_begin|>${KIMI_CALL}${now}<|tool_calls_section_end|>`), "two calls, any index");
  assert.ok(!fits(`<|tool_calls_section_begin|>${KIMI_CALL}${now}<|tool_calls_section_end|>`, { ...g, parallel: false }), "one call when not parallel");
  for (const bad of [KIMI_CALL, `<|tool_calls_section_begin|><|tool_calls_section_end|>`, KIMI_ANSWER.replace("get_weather", "get_wether"), KIMI_ANSWER.replace(":0", ":01"), KIMI_ANSWER.replace(":0", ":-0"), KIMI_ANSWER.replace(":0", ":"), KIMI_ANSWER.replace('"Paris"', "7")]) {
    assert.ok(!fits(bad), `accepted ${bad}`);
  }
  const one = grammarForcedText(grammarStart({ ...g, tools: [WEATHER] }), 200).text;
  assert.equal(one, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:", "jump-forward writes the tags and the one tool's name");
});

test("grammarStart() writes forced tool calls in the glm45 format: declared arguments in order, strings raw, others JSON", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "glm45", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  const pair = (k: string, v: string) => `<arg_key>${k}</arg_key>\n<arg_value>${v}</arg_value>\n`;
  const call = (...pairs: string[]) => `<tool_call>get_weather\n${pairs.join("")}</tool_call>`;
  assert.ok(fits(call(pair("city", "Paris <b>&</b> \"x\" \\ \n"))), "raw text holds anything but its end tag");
  assert.ok(fits(call(pair("city", ""), pair("days", "3"), pair("unit", "f"), pair("note", "abc"))));
  assert.ok(fits(`${call(pair("city", "P"))}\n<tool_call>now\n${pair("anything", "[1]")}${pair("more", "x")}</tool_call>`), "a tool without parameters takes free pairs");
  assert.ok(fits("<tool_call>now\n</tool_call>"));
  for (const bad of [
    call(), // city is required
    call(pair("days", "3"), pair("city", "P")), // declared order
    call(pair("city", "P"), pair("days", "0")), // minimum 1
    call(pair("city", "P"), pair("unit", '"c"')), // an enum of strings is raw
    call(pair("city", "P"), pair("note", "abcd")), // maxLength 3
    call(pair("city", "P"), pair("zone", "x")), // undeclared
    call(pair("city", "a</arg_value>b")),
    call(pair("city", "nul\u0000")),
  ]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  assert.ok(!fits(`${call(pair("city", "P"))}\n${call(pair("city", "Q"))}`, { ...g, parallel: false }), "one call when not parallel");
  const forced = grammarForcedText(grammarStart({ ...g, tools: [WEATHER] }), 200).text;
  assert.equal(forced, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>", "jump-forward writes the name and the required key");
  assert.throws(() => grammarStart({ ...g, tools: [{ name: "f", parameters: { type: "array" } }] }), /parameters must be an object schema/);
});

const dir = mkdtempSync(`${tmpdir()}/kimi-glm-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** A Kimi-like template: it writes an assistant's calls back by their ids, as Kimi K2's own does. */
const KIMI_TEMPLATE = "{% for m in messages %}{% if m.role == 'assistant' %}assistant{{ messages[loop.index0 - 1].content[-1:] }}{{ m.content or '' }}" +
  "{% if m.tool_calls %}<|tool_calls_section_begin|>{% for c in m.tool_calls %}<|tool_call_begin|>{{ c.id }}<|tool_call_argument_begin|>{{ c.function.arguments | tojson }}<|tool_call_end|>{% endfor %}<|tool_calls_section_end|>{% endif %}\n" +
  "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";
const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: WEATHER }];
const SET_UNIT: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } } };

test("chat completions with --tool-call-parser kimi_k2: the call keeps the model's id, so the next turn's prompt repeats the answer", async () => {
  const pieces = ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.get_weather:0", "<|tool_call_argument_begin|>", '{"city": "Paris"}', "<|tool_call_end|>", "<|tool_calls_section_end|>", "Sunny."];
  const next: [string, string][] = [["!", pieces[0]], ...pieces.slice(0, 6).map((p, i): [string, string] => [p, pieces[i + 1]]), [pieces[6], "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]];
  const path = `${dir}/kimi.gguf`;
  await writeScriptedModel(path, { pieces, next, chatTemplate: KIMI_TEMPLATE, literalPieces: true, contextLength: 2048 });
  const model = await loadModel(path);
  const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "kimi_k2" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris!" }];
    const r = await client.chat.completions.create({ model: "kimi", messages, tools: TOOLS, temperature: 0, max_tokens: 16 });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    assert.equal(r.choices[0].message.content, null);
    const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments)], ["functions.get_weather:0", "get_weather", { city: "Paris" }]);

    // The next turn, rendered by the template, starts with this turn's prompt and its answer, text for text.
    const render = chatRenderer(KIMI_TEMPLATE, {});
    const turn2 = (id: string): ChatMessageIn[] => [...messages, { ...r.choices[0].message, tool_calls: [{ ...call, id }] }, { role: "tool", tool_call_id: id, content: "18 degrees." }] as ChatMessageIn[];
    const before = render.render(messages as ChatMessageIn[]).text + pieces.slice(0, 7).join("");
    assert.ok(render.render(turn2(call.id)).text.startsWith(before), "the model's id writes the answer back as it was");
    assert.ok(!render.render(turn2("call_0123")).text.startsWith(before), "a server-made id would not (the check can fail)");
    const r2 = await client.chat.completions.create({ model: "kimi", messages: turn2(call.id) as OpenAI.ChatCompletionMessageParam[], tools: TOOLS, temperature: 0, max_tokens: 16 });
    const promptTokens = r.usage!.prompt_tokens + 7;
    assert.ok(r2.usage!.prompt_tokens_details!.cached_tokens! >= Math.floor(promptTokens / 16) * 16, `cached ${r2.usage!.prompt_tokens_details!.cached_tokens} of the ${promptTokens} tokens of turn 1`);

    const stream = await client.chat.completions.create({ model: "kimi", messages, tools: TOOLS, temperature: 0, max_tokens: 16, stream: true });
    const ids: string[] = [];
    let content = "";
    for await (const c of stream) {
      content += c.choices[0]?.delta.content ?? "";
      for (const t of c.choices[0]?.delta.tool_calls ?? []) if (t.id) ids.push(t.id);
    }
    assert.deepEqual([content, ids], ["", ["functions.get_weather:0"]]);

    // Forced: the grammar writes Kimi's tags and the tool's id; the same parser reads it back.
    const forced = await client.chat.completions.create({
      model: "kimi", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.match(got.id, /^functions\.set_unit:\d+$/);
    const args = JSON.parse(got.function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, got.function.arguments);
  } finally {
    await s.shutdown();
  }
});

test("chat completions with --tool-call-parser glm45: a model's call and a forced one come back as tool_calls", async () => {
  const call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>";
  const path = `${dir}/glm.gguf`;
  await writeScriptedModel(path, { pieces: [call, "Sunny."], next: [["!", call], [call, "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: KIMI_TEMPLATE, contextLength: 2048 });
  const s = await startServer({ modelPath: path, model: await loadModel(path), host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "glm45" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const r = await client.chat.completions.create({ model: "glm", messages: [{ role: "user", content: "Weather in Paris!" }], tools: TOOLS, temperature: 0, max_tokens: 8 });
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    const got = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([got.function.name, JSON.parse(got.function.arguments)], ["get_weather", { city: "Paris" }]);
    assert.match(got.id, /^call_/, "GLM writes no id: the server makes one");

    const forced = await client.chat.completions.create({
      model: "glm", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const calls = forced.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    assert.equal(calls[0].function.name, "set_unit");
    const args = JSON.parse(calls[0].function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, calls[0].function.arguments);
  } finally {
    await s.shutdown();
  }
});

const DS_CALL = '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>';
const QWEN_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\n Paris\n\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

test("parseChatOutput() with deepseek_v31 and qwen3_coder reads their calls; malformed blocks stay text", () => {
  const ds = parseChatOutput(`Sure.<｜tool▁calls▁begin｜>${DS_CALL}${DS_CALL.replace("Paris", "Lyon")}<｜tool▁calls▁end｜>`, opts("deepseek_v31"));
  assert.deepEqual([ds.content, ds.calls], ["Sure.", [{ name: "get_weather", arguments: '{"city": "Paris"}' }, { name: "get_weather", arguments: '{"city": "Lyon"}' }]]);
  const dsBad = "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>not json<｜tool▁call▁end｜>";
  assert.deepEqual(parseChatOutput(dsBad, opts("deepseek_v31")), { reasoning: null, content: dsBad, calls: [] });
  // Qwen3-Coder: one newline each side of a value is the template's; a string keeps the rest.
  const q = parseChatOutput(`Checking.\n${QWEN_CALL}`, opts("qwen3_coder"));
  assert.deepEqual([q.content, q.calls.map((c) => [c.name, JSON.parse(c.arguments)])], ["Checking.\n", [["get_weather", { city: " Paris\n", days: 3 }]]]);
  const free = parseChatOutput("<tool_call>\n<function=search>\n<parameter=q>\ncats\n</parameter>\n<parameter=n>\n[1, 2]\n</parameter>\n</function>\n</tool_call>", opts("qwen3_coder"));
  assert.deepEqual(free.calls.map((c) => JSON.parse(c.arguments)), [{ q: "cats", n: [1, 2] }], "an undeclared tool: JSON where it parses, else text");
  for (const bad of ["<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<tool_call>\n<function=f>\nstray\n</function>\n</tool_call>", "<tool_call>\n<function=a b>\n</function>\n</tool_call>"]) {
    assert.deepEqual(parseChatOutput(bad, opts("qwen3_coder")), { reasoning: null, content: bad, calls: [] }, `a malformed block stays text: ${JSON.stringify(bad)}`);
  }
  for (const [format, text] of [["deepseek_v31", `a<｜tool▁calls▁begin｜>${DS_CALL}<｜tool▁calls▁end｜>b<｜tool▁ca`], ["qwen3_coder", `x <tool_c ${QWEN_CALL}\n${QWEN_CALL}`]] as const) {
    const whole = parseChatOutput(text, opts(format));
    for (const size of [1, 3, 7, 1000]) {
      const s = streamed(text, opts(format), size);
      assert.deepEqual([s.content === "" && whole.calls.length > 0 ? null : s.content, s.calls], [whole.content, whole.calls], `${format} in deltas of ${size}`);
    }
  }
});

test("grammarStart() writes forced tool calls in the deepseek_v31 and qwen3_coder formats, and the parsers read them back", () => {
  const tools = [WEATHER, { name: "now" }];
  const ds: OutputGrammar = { kind: "tool_calls", format: "deepseek_v31", parallel: true, tools };
  const qw: OutputGrammar = { kind: "tool_calls", format: "qwen3_coder", parallel: true, tools };
  const fits = (g: OutputGrammar, text: string) => grammarComplete(grammarFeed(grammarStart(g), text));
  const dsText = `<｜tool▁calls▁begin｜>${DS_CALL}<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`;
  assert.ok(fits(ds, dsText));
  assert.ok(!fits({ ...ds, parallel: false }, dsText), "one call when not parallel");
  assert.ok(!fits(ds, `<｜tool▁calls▁begin｜>${DS_CALL.replace('"Paris"', "1")}<｜tool▁calls▁end｜>`), "arguments follow the schema");
  const param = (k: string, v: string) => `<parameter=${k}>\n${v}\n</parameter>\n`;
  const qCall = (...ps: string[]) => `<tool_call>\n<function=get_weather>\n${ps.join("")}</function>\n</tool_call>`;
  const qText = `${qCall(param("city", "two\nlines <b>"), param("days", "3"), param("unit", "c"))}\n<tool_call>\n<function=now>\n${param("x", "1")}</function>\n</tool_call>`;
  assert.ok(fits(qw, qText));
  for (const bad of [qCall(), qCall(param("city", "a\n</parameter>b")), qCall(param("days", "3"), param("city", "P")), qCall(param("city", "P"), param("unit", '"c"'))]) {
    assert.ok(!fits(qw, bad), `accepted ${JSON.stringify(bad)}`);
  }
  assert.equal(grammarForcedText(grammarStart({ ...qw, tools: [WEATHER] }), 200).text, "<tool_call>\n<function=get_weather>\n<parameter=city>\n");
  assert.equal(grammarForcedText(grammarStart({ ...ds, tools: [WEATHER] }), 200).text, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{");
  // What the grammar accepts, the parser reads as the call it spells.
  assert.deepEqual(parseChatOutput(dsText, opts("deepseek_v31")).calls.map((c) => c.name), ["get_weather", "now"]);
  assert.deepEqual(parseChatOutput(qText, opts("qwen3_coder")).calls.map((c) => JSON.parse(c.arguments)), [{ city: "two\nlines <b>", days: 3, unit: "c" }, { x: 1 }]);
});

test("seed_oss: grammarStart() writes Qwen3-Coder's calls inside <seed:tool_call>, and parseChatOutput() reads them whole, streamed, or with the values on lines of their own", () => {
  const qw: OutputGrammar = { kind: "tool_calls", format: "seed_oss", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (g: OutputGrammar, text: string) => grammarComplete(grammarFeed(grammarStart(g), text));
  const call = (name: string, ...ps: [string, string][]) => `<seed:tool_call>\n<function=${name}>\n${ps.map(([k, v]) => `<parameter=${k}>${v}</parameter>\n`).join("")}</function>\n</seed:tool_call>`;
  const text = `${call("get_weather", ["city", "two\nlines <b>"], ["days", "3"], ["unit", "c"])}\n${call("now", ["x", "1"])}`;
  assert.ok(fits(qw, text));
  assert.ok(!fits({ ...qw, parallel: false }, text), "one call when not parallel");
  assert.ok(!fits(qw, call("get_weather", ["days", "3"])), "the required city");
  assert.ok(!fits(qw, text.replaceAll("seed:tool_call", "tool_call")), "Qwen3-Coder's own tags are not Seed-OSS's");
  assert.equal(grammarForcedText(grammarStart({ ...qw, tools: [WEATHER] }), 200).text, "<seed:tool_call>\n<function=get_weather>\n<parameter=city>");
  const read = (t: string) => parseChatOutput(t, opts("seed_oss"));
  assert.deepEqual(read(`Let me check.\n${text}`).calls.map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", { city: "two\nlines <b>", days: 3, unit: "c" }], ["now", { x: 1 }]]);
  assert.equal(read(`Let me check.\n${text}`).content?.trim(), "Let me check.");
  // Qwen3-Coder's layout (a newline on each side of a value) reads the same.
  assert.deepEqual(JSON.parse(read("<seed:tool_call>\n<function=now>\n<parameter=x>\n1\n</parameter>\n</function>\n</seed:tool_call>").calls[0].arguments), { x: 1 });
  // Qwen3-Coder's tags are not Seed-OSS's: such a block stays text.
  assert.deepEqual(read("<tool_call>\n<function=now>\n</function>\n</tool_call>").calls, []);
  for (const size of [1, 3, 17]) assert.deepEqual(streamed(text, opts("seed_oss"), size).calls, read(text).calls, `in deltas of ${size}`);
});

test("chat completions with --tool-call-parser deepseek_v31 and qwen3_coder: a forced call is written in the format and read back", async () => {
  // DeepSeek's tags are tokens of its vocabulary, as here: their fullwidth bars exist only as byte pieces otherwise.
  const path = `${dir}/deepseek.gguf`;
  const tags = ["<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"];
  await writeScriptedModel(path, { pieces: ["Sunny.", ...tags], literalPieces: true, next: [[".", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: KIMI_TEMPLATE, contextLength: 2048 });
  const model = await loadModel(path);
  for (const toolCallParser of ["deepseek_v31", "qwen3_coder", "seed_oss"] as const) {
    const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const forced: OpenAI.ChatCompletion = await client.chat.completions.create({
        model: "deepseek", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
      });
      assert.equal(forced.choices[0].finish_reason, "tool_calls", `${toolCallParser}: ${JSON.stringify(forced.choices[0].message)}`);
      const call = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      assert.equal(call.function.name, "set_unit");
      const args = JSON.parse(call.function.arguments) as { unit: string; days: number };
      assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, `${toolCallParser}: ${call.function.arguments}`);
    } finally {
      await s.shutdown();
    }
  }
});

test("chat completions read calls whose tags are control tokens (skip_special_tokens false with tools), and write them when forced", async () => {
  // Kimi K2's checkpoints make the section and call tags control tokens: they stream as nothing
  // unless special tokens are kept, which a request with tools does by default.
  const tags = ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>"];
  const pieces = [tags[0], tags[1], "functions.get_weather:0", tags[2], '{"city": "Paris"}', tags[3], tags[4]];
  const next: [string, string][] = [["!", pieces[0]], ...pieces.slice(0, 6).map((p, i): [string, string] => [p, pieces[i + 1]]), [pieces[6], "<eos>"]];
  const path = `${dir}/kimi-control.gguf`;
  await writeScriptedModel(path, { pieces, next, chatTemplate: KIMI_TEMPLATE, literalPieces: true, controlPieces: tags, contextLength: 2048 });
  const model = await loadModel(path);
  const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "kimi_k2" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris!" }];
    const r = await client.chat.completions.create({ model: "kimi-control", messages, tools: TOOLS, temperature: 0, max_tokens: 16 });
    assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0].message));
    const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments), r.choices[0].message.content], ["functions.get_weather:0", "get_weather", { city: "Paris" }, null]);

    // Without tools the tags stream as nothing (the default), or as their strings when asked.
    type Extra = Record<string, unknown>;
    const plain = await client.chat.completions.create({ model: "kimi-control", messages, temperature: 0, max_tokens: 16 });
    assert.equal(plain.choices[0].message.content, 'functions.get_weather:0{"city": "Paris"}');
    const kept = await client.chat.completions.create({ model: "kimi-control", messages, temperature: 0, max_tokens: 16, skip_special_tokens: false } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.equal(kept.choices[0].message.content, pieces.join(""));
    // A request with tools keeps them even when it says skip_special_tokens (as vLLM's parsers force):
    // skipped, no call could be read.
    const skipped = await client.chat.completions.create({ model: "kimi-control", messages, tools: TOOLS, temperature: 0, max_tokens: 16, skip_special_tokens: true } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.equal(skipped.choices[0].finish_reason, "tool_calls", JSON.stringify(skipped.choices[0].message));

    // Forced: the grammar's tags are written as the control tokens themselves (one token each).
    const forced = await client.chat.completions.create({
      model: "kimi-control", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.match(got.id, /^functions\.set_unit:\d+$/);
    const args = JSON.parse(got.function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, got.function.arguments);
    // skip_special_tokens true is overridden with tools: the tags stay single control tokens.
    const spelled = await client.chat.completions.create({
      model: "kimi-control", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 300, skip_special_tokens: true,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.equal(spelled.choices[0].finish_reason, "tool_calls");
    assert.equal(spelled.usage!.completion_tokens, forced.usage!.completion_tokens, "the same call in the same tokens");
  } finally {
    await s.shutdown();
  }
});

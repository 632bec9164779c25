/**
 * Mistral tool calls (`serve --tool-call-parser mistral`): the parser on its own (both shapes, whole
 * and streamed), the grammars that write forced calls, the shape chosen from the vocabulary, and a
 * server with the real openai client — the model's `[CALL_ID]` becomes the call's id, so the next
 * turn's prompt repeats the answer; server-made ids are nine letters and digits; ids clients send
 * back are cut to nine, which Mistral's templates require.
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
import { chatRenderer } from "../../src/serve/chat-template.ts";
import type { ChatMessageIn } from "../../src/serve/schemas.ts";
import { startServer } from "../../src/serve/server.ts";
import { MISTRAL_CALL_ID, mistralMessageIds, toolCallSyntax } from "../../src/serve/tool-calls-mistral.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

const WEATHER = {
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
};
const opts: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "mistral" };
const CALL = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}';
/** A call's parts, its id only where the model wrote one (others are random). */
const shape = (c: { id?: string; name: string; arguments: string }, modelId = false) => [c.name, JSON.parse(c.arguments), modelId ? c.id : MISTRAL_CALL_ID.test(c.id ?? "")];

test("parseChatOutput() with mistral reads v11 calls, with or without [CALL_ID], each with a nine-character id", () => {
  const one = parseChatOutput(CALL, opts);
  assert.equal(one.content, null);
  assert.deepEqual(one.calls.map((c) => shape(c)), [["get_weather", { city: "Paris" }, true]]);
  assert.equal(one.calls[0].arguments, '{"city": "Paris"}', "the arguments as the model wrote them");
  const withId = parseChatOutput('Let me check.[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Oslo"}[TOOL_CALLS]now[ARGS]{}', opts);
  assert.equal(withId.content, "Let me check.");
  assert.deepEqual(withId.calls.map((c, i) => shape(c, i === 0)), [["get_weather", { city: "Oslo" }, "a1B2c3D4e"], ["now", {}, true]]);
  assert.notEqual(parseChatOutput(CALL, opts).calls[0].id, one.calls[0].id, "a fresh id per call");
  assert.deepEqual(parseChatOutput('[TOOL_CALLS]get_weather{"city": "Paris"}', opts).calls.map((c) => shape(c)), [["get_weather", { city: "Paris" }, true]], "[ARGS] dropped by a decoder");
  assert.equal(parseChatOutput('[TOOL_CALLS]f[CALL_ID]short[ARGS]{}', opts).calls[0].id!.length, 9, "an id the templates would refuse is replaced");
});

test("parseChatOutput() with mistral reads the older format's JSON list of calls", () => {
  const list = parseChatOutput('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}, "id": "abcdefghi"}]', opts);
  assert.equal(list.content, null);
  assert.deepEqual(list.calls.map((c, i) => shape(c, i === 1)), [["get_weather", { city: "Paris" }, true], ["now", {}, "abcdefghi"]]);
  assert.deepEqual(parseChatOutput('[TOOL_CALLS][{"name": "now"}]', opts).calls.map((c) => shape(c)), [["now", {}, true]], "no space (Tekken), no arguments");
});

test("parseChatOutput() with mistral returns what is not a call as text, tag and all", () => {
  for (const bad of [
    "[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]f[ARGS]{oops", "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]", "[TOOL_CALLS] [] ",
    '[TOOL_CALLS] [{"arguments": {}}]', '[TOOL_CALLS] [{"name": "f", "arguments": [1]}]', '[TOOL_CALLS] [{"name": "f"}, 3]', "[TOOL_CALLS] [{oops}]",
  ]) assert.deepEqual(parseChatOutput(bad, opts), { reasoning: null, content: bad, calls: [] }, `stays text: ${bad}`);
  const mixed = parseChatOutput("[TOOL_CALLS]bad name[ARGS]{}[TOOL_CALLS]now[ARGS]{}", opts);
  assert.deepEqual([mixed.content, mixed.calls.map((c) => c.name)], ["[TOOL_CALLS]bad name[ARGS]{}", ["now"]], "a bad call does not take the next one with it");
  assert.deepEqual(parseChatOutput('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', opts).calls, [], "the Hermes format is text to this parser");
});

test("ChatOutputStream with mistral gives the same text and calls as parseChatOutput() whatever the delta boundaries", () => {
  const cases = [
    `So: ${CALL}`,
    'a [TOOL_ b[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "}{"}[TOOL_CALLS]now[ARGS]{}',
    '[TOOL_CALLS] [{"name": "now", "arguments": {"x": "]"}, "id": "abcdefghi"}] then text',
    "[TOOL_CALLS]get weather then prose",
    CALL.slice(0, -3),
  ];
  for (const text of cases) {
    const whole = parseChatOutput(text, opts);
    for (const size of [1, 2, 5, 13, 1000]) {
      const s = new ChatOutputStream(opts);
      const parts = [];
      for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
      parts.push(...s.end());
      const content = parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join("");
      const calls = parts.flatMap((p) => (p.kind === "call" ? [p.call] : []));
      assert.equal(content === "" && whole.calls.length > 0 ? null : content, whole.content, `${JSON.stringify(text)} in deltas of ${size}`);
      assert.deepEqual(calls.map((c) => shape(c, c.id === "a1B2c3D4e" || c.id === "abcdefghi")), whole.calls.map((c) => shape(c, c.id === "a1B2c3D4e" || c.id === "abcdefghi")), `${JSON.stringify(text)} in deltas of ${size}`);
    }
  }
  const s = new ChatOutputStream(opts);
  assert.deepEqual(s.push("Hi [TOOL_"), [{ kind: "content", text: "Hi " }], "a tag's start is held");
  assert.deepEqual(s.push('CALLS]f[ARGS]{"a": 1}[TOOL').map((p) => p.kind), ["call"], "a call is out as soon as its object closes");
});

test("mistralMessageIds() cuts call ids longer than nine characters to their last nine, and nothing else", () => {
  const messages = [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_0123456789abcdef", type: "function", function: { name: "f", arguments: "{}" } }, { id: "abcdefghi", type: "function", function: { name: "g", arguments: "{}" } }] },
    { role: "tool", tool_call_id: "call_0123456789abcdef", content: "18" },
    { role: "tool", tool_call_id: "abc", content: "19" },
  ] as ChatMessageIn[];
  const out = mistralMessageIds(messages) as unknown as { tool_calls?: { id: string }[]; tool_call_id?: string }[];
  assert.deepEqual(out[1].tool_calls!.map((c) => c.id), ["789abcdef", "abcdefghi"]);
  assert.deepEqual([out[2].tool_call_id, out[3].tool_call_id], ["789abcdef", "abc"]);
  assert.equal(out[0], messages[0]);
  assert.equal((messages[1] as unknown as { tool_calls: { id: string }[] }).tool_calls[0].id, "call_0123456789abcdef", "the request is not changed");
});

test("grammarStart() writes forced tool calls in the mistral format: [TOOL_CALLS]NAME, an optional [CALL_ID], [ARGS] and JSON arguments", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "mistral", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  assert.ok(fits(CALL));
  assert.ok(fits(`${CALL}[TOOL_CALLS]now[CALL_ID]Z9y8X7w6V[ARGS]{}`), "two calls, one with an id");
  assert.ok(!fits(`${CALL}${CALL}`, { ...g, parallel: false }), "one call when not parallel");
  for (const bad of [
    '[TOOL_CALLS]get_weather{"city": "Paris"}', CALL.replace("get_weather", "get_wether"), CALL.replace('"Paris"', "7"), `[TOOL_CALLS]now[CALL_ID]Z9y8X7w6[ARGS]{}`,
    `[TOOL_CALLS]now[CALL_ID]Z9y8X7w6_[ARGS]{}`, "", `${CALL} `,
  ]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  // The text forced ends in the "[" both [CALL_ID] and [ARGS] begin with; the token trie's cover stops before it, so the model picks the tag's token.
  assert.equal(grammarForcedText(grammarStart({ ...g, tools: [WEATHER] }), 200).text, "[TOOL_CALLS]get_weather[", "jump-forward writes the tag and the one tool's name");
  const text = `${CALL}[TOOL_CALLS]now[CALL_ID]Z9y8X7w6V[ARGS]{}`;
  assert.deepEqual(parseChatOutput(text, opts).calls.map((c) => c.name), ["get_weather", "now"], "what the grammar accepts, the parser reads");
});

test("grammarStart() writes forced tool calls in the older mistral format: [TOOL_CALLS] and one JSON list", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "mistral_pre_v11", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  const paris = '{"name": "get_weather", "arguments": {"city": "Paris"}}';
  assert.ok(fits(`[TOOL_CALLS] [${paris}]`));
  assert.ok(fits(`[TOOL_CALLS][${paris}, {"name": "now", "arguments": {}}]`), "no space, two calls");
  assert.ok(!fits(`[TOOL_CALLS] [${paris}, ${paris}]`, { ...g, parallel: false }), "one call when not parallel");
  for (const bad of ["[TOOL_CALLS] []", `[TOOL_CALLS]  [${paris}]`, `[${paris}]`, `[TOOL_CALLS] [${paris.replace("Paris", "Paris\", \"days\": 0")}]`, `[TOOL_CALLS] [{"name": "get_weather"}]`]) {
    assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  }
  assert.equal(grammarForcedText(grammarStart(g), 200).text, "[TOOL_CALLS]");
  assert.deepEqual(parseChatOutput(`[TOOL_CALLS] [${paris}]`, { ...opts, toolCallFormat: "mistral_pre_v11" }).calls.map((c) => shape(c)), [["get_weather", { city: "Paris" }, true]]);
});

const dir = mkdtempSync(`${tmpdir()}/mistral-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** A Mistral-like template: it writes calls back with their ids and, as Mistral's own, refuses ids that are not nine characters. */
const MISTRAL_TEMPLATE = "{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]" +
  "{% elif m.role == 'assistant' %}{% if m.tool_calls %}{% for c in m.tool_calls %}{% if c.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}" +
  "[TOOL_CALLS]{{ c.function.name }}[CALL_ID]{{ c.id }}[ARGS]{{ c.function.arguments | tojson }}{% endfor %}{% else %}{{ m.content }}{% endif %}{{ eos_token }}" +
  "{% elif m.role == 'tool' %}{% if m.tool_call_id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{% endif %}{% endfor %}";
const TAGS = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[CALL_ID]", "[ARGS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"];
const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: WEATHER }];
const SET_UNIT: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } } };
type Extra = Record<string, unknown>;

test("chat completions with --tool-call-parser mistral: the model's [CALL_ID] is the call's id, so the next turn's prompt repeats the answer", async () => {
  const answer = ["[TOOL_CALLS]", "get_weather", "[CALL_ID]", "a1B2c3D4e", "[ARGS]", '{"city": "Paris"}'];
  const next: [string, string][] = [["[/INST]", answer[0]], ...answer.slice(0, -1).map((p, i): [string, string] => [p, answer[i + 1]]), [answer[5], "<eos>"], ["[/TOOL_RESULTS]", "Sunny."], ["Sunny.", "<eos>"]];
  const path = `${dir}/mistral.gguf`;
  await writeScriptedModel(path, { pieces: [...TAGS, ...answer.filter((p) => !TAGS.includes(p)), "Sunny."], next, chatTemplate: MISTRAL_TEMPLATE, literalPieces: true, controlPieces: TAGS, contextLength: 2048 });
  const model = await loadModel(path);
  assert.equal(toolCallSyntax("mistral", model.tokenizer), "mistral", "[ARGS] is one token of this vocabulary");
  assert.equal(toolCallSyntax("hermes", model.tokenizer), "hermes");
  const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "mistral" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
    const r = await client.chat.completions.create({ model: "mistral", messages, tools: TOOLS, temperature: 0, max_tokens: 16 });
    assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0].message));
    const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.deepEqual([call.id, call.function.name, JSON.parse(call.function.arguments), r.choices[0].message.content], ["a1B2c3D4e", "get_weather", { city: "Paris" }, null]);

    // The next turn starts with this turn's prompt and answer, token for token, so its KV is reused.
    const turn2 = (id: string) => [...messages, { ...r.choices[0].message, tool_calls: [{ ...call, id }] }, { role: "tool", tool_call_id: id, content: "18 degrees." }] as OpenAI.ChatCompletionMessageParam[];
    const render = chatRenderer(MISTRAL_TEMPLATE, {});
    assert.ok(render.render(turn2(call.id) as ChatMessageIn[]).text.startsWith(render.render(messages as ChatMessageIn[]).text + answer.join("")));
    const r2 = await client.chat.completions.create({ model: "mistral", messages: turn2(call.id), tools: TOOLS, temperature: 0, max_tokens: 16 });
    assert.equal(r2.choices[0].message.content, "Sunny.");
    const promptTokens = r.usage!.prompt_tokens + answer.length;
    assert.ok(r2.usage!.prompt_tokens_details!.cached_tokens! >= Math.floor(promptTokens / 16) * 16, `cached ${r2.usage!.prompt_tokens_details!.cached_tokens} of the ${promptTokens} tokens of turn 1`);
    // An id another server made is cut to nine characters, which the template takes.
    assert.throws(() => render.render(turn2("call_0123456789abcdef") as ChatMessageIn[]), /length 9/, "the template refuses it as sent (the check can fail)");
    const r3 = await client.chat.completions.create({ model: "mistral", messages: turn2("call_0123456789abcdef"), tools: TOOLS, temperature: 0, max_tokens: 16 });
    assert.equal(r3.choices[0].message.content, "Sunny.");

    const stream = await client.chat.completions.create({ model: "mistral", messages, tools: TOOLS, temperature: 0, max_tokens: 16, stream: true });
    const ids: string[] = [];
    let content = "";
    for await (const c of stream) {
      content += c.choices[0]?.delta.content ?? "";
      for (const t of c.choices[0]?.delta.tool_calls ?? []) if (t.id) ids.push(t.id);
    }
    assert.deepEqual([content, ids], ["", ["a1B2c3D4e"]]);
    // skip_special_tokens with tools is overridden (as vLLM's chat serving does): skipped, [TOOL_CALLS]
    // would hide the call.
    const skipped = await client.chat.completions.create({ model: "mistral", messages, tools: TOOLS, temperature: 0, max_tokens: 16, skip_special_tokens: true } as OpenAI.ChatCompletionCreateParamsNonStreaming & Extra);
    assert.deepEqual([skipped.choices[0].finish_reason, skipped.choices[0].message.content], ["tool_calls", null]);

    // Forced: the grammar writes the tags as the control tokens; the server makes the id.
    const forced = await client.chat.completions.create({
      model: "mistral", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 200,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const got = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.match(got.id, /^[A-Za-z0-9]{9}$/);
    const args = JSON.parse(got.function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, got.function.arguments);
  } finally {
    await s.shutdown();
  }
});

test("chat completions with --tool-call-parser mistral on a vocabulary without [ARGS]: forced calls come as the older format's list", async () => {
  const tags = ["[INST]", "[/INST]", "[TOOL_CALLS]"];
  const path = `${dir}/mistral-v3.gguf`;
  await writeScriptedModel(path, { pieces: [...tags, "Sunny."], next: [["[/INST]", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: MISTRAL_TEMPLATE, literalPieces: true, controlPieces: tags, contextLength: 2048 });
  const model = await loadModel(path);
  assert.equal(toolCallSyntax("mistral", model.tokenizer), "mistral_pre_v11");
  const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: "mistral" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const forced = await client.chat.completions.create({
      model: "mistral-v3", messages: [{ role: "user", content: "Weather." }], tools: [...TOOLS, SET_UNIT], tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 300,
    });
    assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
    const calls = forced.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
    assert.equal(calls.length, 1);
    assert.match(calls[0].id, /^[A-Za-z0-9]{9}$/);
    assert.equal(calls[0].function.name, "set_unit");
    const args = JSON.parse(calls[0].function.arguments) as { unit: string; days: number };
    assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, calls[0].function.arguments);
    assert.equal(forced.choices[0].message.content, null, "the list is not content");
  } finally {
    await s.shutdown();
  }
});

/**
 * Granite 3.x's (`--tool-call-parser granite`), Phi-4-mini's (`phi4_mini_json`) and Nemotron Nano 2's
 * (`nemotron_json`) tool calls: a JSON list of calls after `<|tool_call|>` (or `<tool_call>`), after
 * `functools`, and between `<TOOLCALL>` and `</TOOLCALL>`. The parser on its own,
 * whole and streamed, what stays text, the grammars that write forced calls, and a server with the
 * real openai client forcing a call through each (and through `auto`, told from a Granite-like template).
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
import { writeScriptedModel } from "../model/scripted-model.ts";

const WEATHER = {
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["city"] },
};
/** A tool whose arguments the grammar leaves few ways to write (so the scripted model, which knows none of them, finishes). */
const SET_UNIT: OpenAI.ChatCompletionTool = { type: "function", function: { name: "set_unit", parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", maximum: 9 } }, required: ["unit", "days"] } } };
const PARIS = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 12345678901234567890}}';
const NOW = '{"name": "now", "arguments": {}}';
const FORMATS = [["granite", "<|tool_call|>", ""], ["phi4_mini_json", "functools", ""], ["nemotron_json", "<TOOLCALL>", "</TOOLCALL>"]] as const;
const optsOf = (format: "granite" | "phi4_mini_json" | "nemotron_json"): ChatOutputOptions => ({ reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: format });

for (const [format, marker, close] of FORMATS) {
  const opts = optsOf(format);

  test(`parseChatOutput() with ${format} reads the list after ${marker}, arguments as written, text before it as content`, () => {
    const one = parseChatOutput(`${marker}[${PARIS}]${close}`, opts);
    assert.equal(one.content, null);
    assert.deepEqual(one.calls.map((c) => [c.name, c.arguments, c.id]), [["get_weather", '{"city":"Paris","days":12345678901234567890}', undefined]], "the server makes the ids");
    const two = parseChatOutput(`Checking. ${marker} [${PARIS}, ${NOW}]${close ? ` ${close}` : ""}`, opts);
    assert.deepEqual([two.content, two.calls.map((c) => c.name)], ["Checking. ", ["get_weather", "now"]]);
    assert.deepEqual(parseChatOutput(`${marker}[{"name": "now"}]${close}`, opts).calls.map((c) => [c.name, c.arguments]), [["now", "{}"]], "no arguments");
    if (close) assert.deepEqual(parseChatOutput(`${marker}[${NOW}] then`, opts), { reasoning: null, content: " then", calls: [parseChatOutput(`${marker}[${NOW}]`, opts).calls[0]] }, "a list without its closing tag is still calls");
  });

  test(`parseChatOutput() with ${format} returns what is not a list of calls as text, marker and all`, () => {
    for (const bad of [`${marker}`, `${marker}[]`, `${marker}[{"arguments": {}}]`, `${marker}{"name": "f", "arguments": {}}`, `${marker}[{"name": "f", "arguments": [1]}]`, `${marker}[{oops}]`, `${marker}[${NOW}`]) {
      assert.deepEqual(parseChatOutput(bad, opts), { reasoning: null, content: bad, calls: [] }, `stays text: ${bad}`);
    }
    assert.deepEqual(parseChatOutput(`[TOOL_CALLS][${NOW}]`, opts).calls, [], "another format's marker is text");
  });

  test(`ChatOutputStream with ${format} gives the same text and calls as parseChatOutput() whatever the delta boundaries`, () => {
    const text = `Let me look: ${marker}[${PARIS}, ${NOW}]${close} and ${marker}[{bad}] tail`;
    const whole = parseChatOutput(text, opts);
    for (const size of [1, 2, 3, 7, 13]) {
      const s = new ChatOutputStream(opts);
      let content = "";
      const names: string[] = [];
      for (let i = 0; i < text.length; i += size) {
        for (const p of s.push(text.slice(i, i + size))) {
          if (p.kind === "content") content += p.text;
          if (p.kind === "call") names.push(p.call.name);
        }
      }
      for (const p of s.end()) {
        if (p.kind === "content") content += p.text;
        if (p.kind === "call") names.push(p.call.name);
      }
      assert.deepEqual([content, names], [whole.content, whole.calls.map((c) => c.name)], `deltas of ${size}`);
    }
    assert.equal(whole.content, `Let me look:  and ${marker}[{bad}] tail`);
  });

  test(`grammarStart() writes forced tool calls in the ${format} format: ${marker} and one JSON list`, () => {
    const g: OutputGrammar = { kind: "tool_calls", format, parallel: true, tools: [WEATHER, { name: "now" }] };
    const fits = (text: string, grammar = g) => grammarComplete(grammarFeed(grammarStart(grammar), text));
    assert.ok(fits(`${marker}[{"name": "get_weather", "arguments": {"city": "Paris"}}]${close}`));
    assert.ok(fits(`${marker}[{"name": "get_weather", "arguments": {"city": "Paris"}}, ${NOW}]${close}`), "two calls");
    assert.ok(!fits(`${marker}[${NOW}, ${NOW}]${close}`, { ...g, parallel: false }), "one call when not parallel");
    if (close) assert.ok(!fits(`${marker}[${NOW}]`), "the list is closed");
    for (const bad of [`${marker}[]${close}`, `${marker} [${NOW}]${close}`, `[${NOW}]${close}`, `${marker}[{"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}]${close}`, `${marker}[{"name": "get_weather"}]${close}`]) {
      assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
    }
    assert.equal(grammarForcedText(grammarStart(g), 200).text.startsWith(marker), true, "jump-forward writes the marker");
  });
}

test("parseChatOutput() with granite also reads the list after <tool_call>, as vLLM's granite parser does", () => {
  const r = parseChatOutput(`<tool_call>[${NOW}]`, optsOf("granite"));
  assert.deepEqual([r.content, r.calls.map((c) => c.name)], [null, ["now"]]);
});

const dir = mkdtempSync(`${tmpdir()}/list-tools-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

for (const [format, marker] of [...FORMATS, ["auto", "<|tool_call|>", ""] as const]) {
  test(`chat completions with --tool-call-parser ${format}: a forced call comes back as a tool call, not content`, async () => {
    const tags = ["<|user|>", "<|assistant|>", "<|end|>"];
    // For auto, a template that writes calls back as Granite's does, so the server reads Granite's format.
    const writesCalls = format === "auto" ? "{% if m.tool_calls %}<|tool_call|>{{ m.tool_calls | tojson }}{% endif %}" : "";
    const template = `{% for m in messages %}<|{{ m.role }}|>{{ m.content }}${writesCalls}<|end|>{% endfor %}<|assistant|>`;
    const path = `${dir}/${format}.gguf`;
    await writeScriptedModel(path, { pieces: [...tags, "Sunny."], next: [["<|assistant|>", "Sunny."], ["Sunny.", "<eos>"]], chatTemplate: template, literalPieces: true, controlPieces: tags, contextLength: 2048 });
    const model = await loadModel(path);
    const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, toolCallParser: format });
    try {
      assert.equal(s.toolCallParser, format === "auto" ? "granite" : format);
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const plain = await client.chat.completions.create({ model: format, messages: [{ role: "user", content: "Weather." }], temperature: 0, max_tokens: 20 });
      assert.equal(plain.choices[0].message.content, "Sunny.");
      const forced = await client.chat.completions.create({
        model: format, messages: [{ role: "user", content: "Weather." }], tools: [{ type: "function", function: WEATHER }, SET_UNIT],
        tool_choice: { type: "function", function: { name: "set_unit" } }, temperature: 0, max_tokens: 300,
      });
      assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
      const calls = forced.choices[0].message.tool_calls as OpenAI.ChatCompletionMessageFunctionToolCall[];
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, "set_unit");
      const args = JSON.parse(calls[0].function.arguments) as { unit: string; days: number };
      assert.ok(["c", "f"].includes(args.unit) && Number.isInteger(args.days) && args.days <= 9, calls[0].function.arguments);
      assert.ok(calls[0].id.length > 0);
      assert.equal(forced.choices[0].message.content, null, `the ${marker} list is not content`);
    } finally {
      await s.shutdown();
    }
  });
}

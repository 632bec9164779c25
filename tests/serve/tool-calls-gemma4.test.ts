/**
 * Gemma 4's tool calls and thought channel (`--tool-call-parser gemma4`, `--reasoning-parser gemma4`),
 * as llama.cpp's chat parser reads them: `<|tool_call>call:NAME{...}<tool_call|>` with bare keys and
 * `<|"|>`-delimited strings, read into JSON arguments, whole and streamed; malformed blocks stay text;
 * both told from a template; forced calls written in its notation by the tools' parameters.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { type ChatOutputOptions, ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { parseGemma4Body } from "../../src/serve/tool-calls-gemma4.ts";
import { detectToolCallFormat } from "../../src/serve/tool-call-detect.ts";
import { detectReasoningParser, GEMMA4_THOUGHT_TAGS, ReasoningStream, splitReasoning } from "../../src/serve/reasoning.ts";
import { toolCallGroup, toolCallTrigger } from "../../src/engine/grammar-tool-calls.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";

const Q = '<|"|>';
const opts: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "gemma4", tools: [{ name: "get_weather" }] };
const call = (name: string, args: string) => `<|tool_call>call:${name}${args}<tool_call|>`;

test("parseGemma4Body() reads Gemma 4's notation: bare keys, <|\"|> strings kept raw, numbers, booleans, null, nested objects and arrays", () => {
  const body = `call:get_weather{city:${Q}Paris, "the" {city}${Q},days:3,ratio:-1.5e2,alerts:true,unit:null,where:{lat:48.8,tags:[${Q}a${Q}, 2,[]]},empty:{}}`;
  assert.deepEqual(JSON.parse(parseGemma4Body(body)!.arguments), {
    city: 'Paris, "the" {city}', days: 3, ratio: -150, alerts: true, unit: null, where: { lat: 48.8, tags: ["a", 2, []] }, empty: {},
  });
  assert.deepEqual(parseGemma4Body("call:now{}"), { name: "now", arguments: "{}" });
  for (const bad of ["get_weather{}", "call:get weather{}", `call:f{a:${Q}x}`, "call:f{a:1,}", "call:f{a 1}", "call:f{a:1} trailing", "call:f[1]"]) {
    assert.equal(parseGemma4Body(bad), null, bad);
  }
});

test("parseChatOutput() and ChatOutputStream with gemma4 read each call block, whole and in any deltas; a malformed one stays text", () => {
  const text = `Checking.${call("get_weather", `{city:${Q}Paris <tool_call|> x${Q}}`)}${call("now", "{}")}`;
  const whole = parseChatOutput(text, opts);
  assert.deepEqual(whole.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [["get_weather", { city: "Paris <tool_call|> x" }], ["now", {}]]);
  assert.equal(whole.content, "Checking.");
  for (const size of [1, 2, 7, 13]) {
    const s = new ChatOutputStream(opts);
    const parts = [];
    for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
    parts.push(...s.end());
    assert.deepEqual(parts.flatMap((p) => (p.kind === "call" ? [p.call.name] : [])), ["get_weather", "now"], `deltas of ${size}`);
  }
  const bad = call("get_weather", "{city Paris}");
  assert.deepEqual(parseChatOutput(bad, opts).calls, []);
});

test("detectToolCallFormat() and detectReasoningParser() tell Gemma 4 from its template; splitReasoning() reads its thought channel", () => {
  const template = "{{ '<|turn>model\\n' }}{% if thinking %}<|channel>thought\\n{% endif %}{{ '<|tool_call>call:' + name + '{' }}";
  assert.equal(detectToolCallFormat(template, "gemma4"), "gemma4");
  assert.equal(detectReasoningParser(template, "gemma4"), "gemma4");
  assert.equal(detectReasoningParser("<|start|>assistant<|channel|>analysis", "llama"), "none", "harmony's channel tokens are not Gemma's");
  // The newline after "thought" is not reasoning (llama.cpp's parser takes the whitespace there), in any deltas.
  assert.deepEqual(splitReasoning("<|channel>thought\nIt is July.<channel|>Sunny.", false, GEMMA4_THOUGHT_TAGS), { reasoning: "It is July.", content: "Sunny." });
  const stream = new ReasoningStream(false, GEMMA4_THOUGHT_TAGS);
  const parts = ["<|channel>thou", "ght", "\n", "\n It", " is.<chan", "nel|>\nSunny."].flatMap((d) => stream.push(d));
  assert.deepEqual([...parts, ...stream.end()].map((p) => [p.kind, p.text]), [["reasoning", "It"], ["reasoning", " is."], ["content", "Sunny."]]);
});

test("grammarStart() writes Gemma 4's calls in its notation by the tools' parameters, and parseChatOutput() reads what it accepts", () => {
  const weather = {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer", minimum: 1 }, unit: { enum: ["c", "f"] }, note: { type: "string", maxLength: 3 }, tags: { type: "array", items: { type: "string" } } },
      required: ["city"],
    },
  };
  const g: OutputGrammar = { kind: "tool_calls", format: "gemma4", parallel: true, tools: [weather, { name: "now" }] };
  const fits = (grammar: OutputGrammar, text: string) => grammarComplete(grammarFeed(grammarStart(grammar), text));
  const paris = call("get_weather", `{city:${Q}Paris, "the" {city}${Q},days:3,unit:${Q}c${Q},tags:[${Q}a${Q},${Q}b,c${Q}]}`);
  const free = call("now", `{x:1,deep:{k:[null,true,-2.5e3,${Q}s${Q}]},e:[]}`);
  assert.ok(fits(g, paris));
  assert.ok(fits(g, `${paris}${free}`), "calls back to back");
  assert.ok(fits(g, call("now", "{}")));
  assert.ok(!fits({ ...g, parallel: false }, `${paris}${free}`), "one call when not parallel");
  for (const bad of [`{days:3}`, `{city:${Q}P${Q},days:0}`, `{city:${Q}P${Q},unit:${Q}k${Q}}`, `{city:${Q}P${Q},note:${Q}abcd${Q}}`, `{city:${Q}P${Q},other:1}`, `{city: ${Q}P${Q}}`, `{days:3,city:${Q}P${Q}}`]) {
    assert.ok(!fits(g, call("get_weather", bad)), `refused: ${bad}`);
  }
  const read = parseChatOutput(`${paris}${free}`, { ...opts, tools: [weather, { name: "now" }] }).calls;
  assert.deepEqual(read.map((c) => [c.name, JSON.parse(c.arguments)]), [
    ["get_weather", { city: 'Paris, "the" {city}', days: 3, unit: "c", tags: ["a", "b,c"] }],
    ["now", { x: 1, deep: { k: [null, true, -2500, "s"] }, e: [] }],
  ]);
  assert.equal(grammarForcedText(grammarStart({ ...g, tools: [weather] }), 200).text, `<|tool_call>call:get_weather{city:${Q}`);
  assert.equal(toolCallTrigger("gemma4"), "<|tool_call>");
  const bounded = { name: "f", parameters: { type: "object", properties: { xs: { type: "array", items: { type: "integer" }, maxItems: 2 } } } };
  assert.throws(() => toolCallGroup({ format: "gemma4", tools: [bounded], parallel: false }), /Gemma 4's tool-call notation can be constrained to arrays of any length only/);
});

test("chat completions with --tool-call-parser gemma4: a model's call comes back as tool_calls (whole and streamed), forced ones are written in its notation, strict tools follow their schema", async () => {
  const dir = mkdtempSync(`${tmpdir()}/gemma4-calls-`);
  try {
    // The call tags and the string delimiter are control tokens of the scripted vocabulary, as in Gemma 4's.
    // The closing delimiter comes as a piece of its own with the brace (the scripted model follows one piece to the next).
    const pieces = ["<|tool_call>", "call:get_weather{city:", Q, "Paris", `${Q}}`, "<tool_call|>"];
    const next: [string, string][] = [["!", pieces[0]], [pieces[0], pieces[1]], [pieces[1], Q], [Q, "Paris"], ["Paris", pieces[4]], [pieces[4], pieces[5]], [pieces[5], "<eos>"]];
    const path = `${dir}/gemma4.gguf`;
    await writeScriptedModel(path, {
      pieces, next, literalPieces: true, controlPieces: ["<|tool_call>", "<tool_call|>", Q],
      chatTemplate: "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}model{{ messages[-1].content[-1:] }}{% endif %}{# <|tool_call> #}",
      contextLength: 2048,
    });
    const model = await loadModel(path);
    const s = await startServer({ modelPath: path, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, toolCallParser: "auto" });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
      const body = { model: "gemma4", messages: [{ role: "user" as const, content: "Weather in Paris!" }], tools, temperature: 0, max_tokens: 16 };
      const r = await client.chat.completions.create(body);
      assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r.choices[0].message));
      const call = r.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
      assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ["get_weather", { city: "Paris" }]);
      let args = "";
      for await (const c of await client.chat.completions.create({ ...body, stream: true })) for (const t of c.choices[0]?.delta.tool_calls ?? []) args += t.function?.arguments ?? "";
      assert.deepEqual(JSON.parse(args), { city: "Paris" });
      // Forced: the grammar writes `<|tool_call>call:get_weather{city:<|"|>` (city required), the model the rest.
      const requiredCity: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
      for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }] as const) {
        const forced = await client.chat.completions.create({ ...body, tools: requiredCity, tool_choice });
        assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0].message));
        const f = forced.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
        assert.deepEqual([f.function.name, JSON.parse(f.function.arguments)], ["get_weather", { city: "Paris" }]);
      }
      const strictTools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", strict: true, parameters: { type: "object", properties: { city: { type: "string" } } } } }];
      const strict = await client.chat.completions.create({ ...body, tools: strictTools });
      assert.equal(strict.choices[0].finish_reason, "tool_calls");
    } finally {
      await s.shutdown();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

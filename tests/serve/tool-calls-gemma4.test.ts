/**
 * Gemma 4's tool calls and thought channel (`--tool-call-parser gemma4`, `--reasoning-parser gemma4`),
 * as llama.cpp's chat parser reads them: `<|tool_call>call:NAME{...}<tool_call|>` with bare keys and
 * `<|"|>`-delimited strings, read into JSON arguments, whole and streamed; malformed blocks stay text;
 * both told from a template; forced calls refused with a 400 that says so.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type ChatOutputOptions, ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { parseGemma4Body } from "../../src/serve/tool-calls-gemma4.ts";
import { detectToolCallFormat } from "../../src/serve/tool-call-detect.ts";
import { detectReasoningParser, GEMMA4_THOUGHT_TAGS, splitReasoning } from "../../src/serve/reasoning.ts";
import { toolCallGroup } from "../../src/engine/grammar-tool-calls.ts";

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
  assert.deepEqual(splitReasoning("<|channel>thought\nIt is July.<channel|>Sunny.", false, GEMMA4_THOUGHT_TAGS), { reasoning: "\nIt is July.", content: "Sunny." });
});

test("toolCallGroup() refuses to force calls in Gemma 4's notation, saying to use tool_choice auto", () => {
  assert.throws(() => toolCallGroup({ format: "gemma4", tools: [{ name: "get_weather" }], parallel: false }), /Tool calls in Gemma 4's format cannot be constrained .* use tool_choice "auto"/);
});

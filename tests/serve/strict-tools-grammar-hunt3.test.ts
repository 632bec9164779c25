/**
 * Strict function tools under tool_choice "auto" (OpenAI's `tools[].function.strict`): the output
 * grammar chat builds for them (output-grammar.ts), free text in which a call, once its opening is
 * written, must name a given tool and hold a strict tool's arguments to its parameters (a non-strict
 * tool's to any object), and the token masks it gives with the stories260K vocabulary. Requests
 * without a strict tool keep no grammar at all, as before.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { AFTER_THINK, grammarComplete, grammarFeed, grammarStart, type OutputGrammar, type ToolCallSyntax } from "../../src/engine/grammar.ts";
import { OutputConstraint, TokenTrie } from "../../src/engine/output-constraint.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { ApiError } from "../../src/serve/errors.ts";
import { chatGrammar } from "../../src/serve/output-grammar.ts";
import type { ChatRequest } from "../../src/serve/schemas.ts";

const WEATHER = { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } };
const strictTool = { type: "function", function: { name: "get_weather", parameters: WEATHER, strict: true } };
const looseTool = { type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "string" } } } } };
const body = (tools: unknown[], extra: Record<string, unknown> = {}) => ({ model: "m", messages: [{ role: "user", content: "x" }], tools, ...extra }) as unknown as ChatRequest;

/** Whether `g` takes `text` whole (and may end there), or at least as a start. */
const whole = (g: OutputGrammar, text: string, from = grammarStart(g)) => grammarComplete(grammarFeed(from, text));
const starts = (g: OutputGrammar, text: string) => grammarFeed(grammarStart(g), text).length > 0;

const call = (name: string, args: string) => `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;

test("chatGrammar() with a strict tool under tool_choice auto: calls amid free text, the strict tool held to its parameters, others to any object", () => {
  for (const [extra, parallel] of [[{}, true], [{ tool_choice: "auto" }, true], [{ parallel_tool_calls: false }, false]] as const) {
    const { grammar, parallelToolCalls } = chatGrammar(body([strictTool, looseTool], extra));
    assert.equal(parallelToolCalls, parallel);
    assert.ok(grammar?.kind === "tool_calls" && grammar.amidText === true && grammar.parallel === parallel, JSON.stringify(grammar));
    assert.deepEqual(grammar.tools, [{ name: "get_weather", parameters: WEATHER }, { name: "lookup" }]);
    assert.equal(grammar.format, undefined);
  }
  // The model's syntax and json.dumps spacing carry over.
  const qwen = chatGrammar(body([strictTool], { structured_outputs: { disable_any_whitespace: true } }), "any", "qwen3_coder").grammar;
  assert.ok(qwen?.kind === "tool_calls" && qwen.format === "qwen3_coder" && qwen.whitespace === "compact" && qwen.amidText === true);
  // No strict tool (strict false, absent, or null), or no call possible: no grammar, as before.
  for (const b of [
    body([looseTool]),
    body([{ ...strictTool, function: { ...strictTool.function, strict: false } }]),
    body([{ ...strictTool, function: { ...strictTool.function, strict: null } }]),
    body([strictTool], { tool_choice: "none" }),
  ]) assert.equal(chatGrammar(b).grammar, undefined);
  // Harmony (gpt-oss) writes calls in a message header, never amid text: left free, as before (no 400).
  assert.equal(chatGrammar(body([strictTool]), "any", "harmony").grammar, undefined);
  // Beside a JSON response_format: the union, whose calls branch holds the tools to their parameters.
  const union = chatGrammar(body([strictTool], { response_format: { type: "json_object" } })).grammar;
  assert.ok(union?.kind === "union" && union.options[0].kind === "tool_calls");
  assert.deepEqual(union.options[0].tools, [{ name: "get_weather", parameters: WEATHER }]);
  // Forced calls are held to every tool's parameters already; strict changes nothing there.
  const forced = chatGrammar(body([strictTool, looseTool], { tool_choice: "required" })).grammar;
  assert.ok(forced?.kind === "tool_calls" && forced.amidText === undefined && forced.tools[1].parameters !== undefined);
});

test("A strict tool whose parameters the decoder cannot follow is a 400 naming the tool and the keyword; a non-strict one beside it is not checked", () => {
  const bad = { type: "function", function: { name: "search", strict: true, parameters: { type: "object", patternProperties: { "^x": { type: "string" } } } } };
  assert.throws(() => chatGrammar(body([bad, looseTool])), (e: unknown) =>
    e instanceof ApiError && e.status === 400 && e.param === "tools" && /"search"/.test(e.message) && /patternProperties/.test(e.message));
  const loose = { type: "function", function: { ...bad.function, strict: false } };
  assert.equal(chatGrammar(body([loose])).grammar, undefined);
  const mixed = chatGrammar(body([loose, strictTool])).grammar;
  assert.ok(mixed?.kind === "tool_calls");
  assert.deepEqual(mixed.tools, [{ name: "search" }, { name: "get_weather", parameters: WEATHER }]);
});

test("The strict grammar takes free text and whole calls, never arguments that break a strict tool's schema nor a tool not given", () => {
  const g = chatGrammar(body([strictTool, looseTool])).grammar!;
  assert.ok(whole(g, "Sunny."), "free text");
  assert.ok(whole(g, ""), "an empty answer");
  assert.ok(whole(g, `Let me look. ${call("get_weather", '{"city": "Paris"}')}`), "text, then a valid call");
  assert.ok(whole(g, `${call("get_weather", '{"city": "Tokyo"}')}\n${call("lookup", '{"q": 7, "more": [true]}')}`), "parallel calls; the non-strict tool takes any object");
  assert.ok(!starts(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": 42'), "a number where the schema wants Paris or Tokyo");
  assert.ok(!starts(g, '<tool_call>\n{"name": "get_weather", "arguments": {"town"'), "a key the schema does not have");
  assert.ok(!whole(g, '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>'), "a required key left out");
  assert.ok(!starts(g, '<tool_call>\n{"name": "get_time"'), "a tool not given");
  assert.ok(!starts(g, '<tool_call>\n{"name": "lookup", "arguments": [1]'), "arguments must be an object");
  assert.ok(!whole(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"'), "an unfinished call cannot end the answer");
  // Syntaxes other than Hermes: their own opening starts the call.
  const mistral = chatGrammar(body([strictTool]), "any", "mistral").grammar!;
  assert.ok(whole(mistral, 'Sure. [TOOL_CALLS]get_weather[ARGS]{"city": "Tokyo"}'));
  assert.ok(!starts(mistral, '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"'));
  const pairs: [ToolCallSyntax, string, string][] = [
    ["qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>", "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome"],
    ["glm45", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value>\n</tool_call>", "<tool_call>get_weather\n<arg_key>town"],
  ];
  for (const [format, good, bad] of pairs) {
    const pg = chatGrammar(body([strictTool, looseTool]), "any", format).grammar!;
    assert.ok(whole(pg, `Ok. ${good}`), format);
    assert.ok(!starts(pg, bad), `${format}: ${bad}`);
  }
});

test("After a reasoning block the strict grammar still leaves the text free and holds the calls", () => {
  const g = chatGrammar(body([strictTool])).grammar!;
  const thought = grammarFeed(grammarStart(g, AFTER_THINK), "I might write <tool_call> {\"city\": 42} here.</think>\n\n");
  assert.ok(thought.length > 0, "reasoning is free, tags and all");
  assert.ok(whole(g, call("get_weather", '{"city": "Paris"}'), thought));
  assert.equal(grammarFeed(thought, '<tool_call>\n{"name": "get_weather", "arguments": {"city": 4').length, 0);
  // A reasoning block the model opens itself is free text too.
  assert.ok(whole(g, `<think>Maybe.</think>\n\n${call("get_weather", '{"city": "Tokyo"}')}`));
});

const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const texts = Array.from({ length: stories.config.vocabSize }, (_, id) => tokenTextOf(stories.tokenizer, id));
const trie = new TokenTrie(texts);
/** Token ids spelling `text`, longest tokens first. */
function spell(text: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < text.length;) {
    let best = -1;
    texts.forEach((t, id) => {
      if (t !== "" && text.startsWith(t, i) && (best < 0 || t.length > texts[best].length)) best = id;
    });
    assert.ok(best >= 0, `no token spells ${JSON.stringify(text.slice(i))}`);
    out.push(best);
    i += texts[best].length;
  }
  return out;
}
/** The texts of the tokens the mask allows after `text` has been written. */
function allowedAfter(g: OutputGrammar, text: string): string[] {
  const c = new OutputConstraint(g, trie, stories.config.eosTokenIds);
  const mask = c.next(spell(text), 0);
  return [...new Set(texts.filter((_, id) => mask.allows(id) && !stories.config.eosTokenIds.includes(id)))];
}

test("Token masks (stories260K): free text anywhere, but once a call opens only a given tool, and only schema-valid arguments for a strict one", () => {
  const g = chatGrammar(body([strictTool, looseTool])).grammar!;
  const first = new OutputConstraint(g, trie, stories.config.eosTokenIds).next([], 0);
  for (const word of [" Lily", " the", "<", "{", "4"]) assert.ok(first.allows(texts.indexOf(word)), `free text: ${JSON.stringify(word)}`);
  for (const eos of stories.config.eosTokenIds) assert.ok(first.allows(eos), "free text may end");
  // The name: only the given tools' names go on.
  const name = allowedAfter(g, '<tool_call>\n{"name": "');
  assert.ok(name.length > 0 && name.every((t) => "get_weather".startsWith(t) || "lookup".startsWith(t)), JSON.stringify(name));
  // The strict tool's argument: a string among its enum, never a number, a bracket or another key.
  const value = allowedAfter(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": ');
  assert.ok(value.includes('"') && value.every((t) => t === '"' || t.trim() === "" || t === ' "'), JSON.stringify(value));
  assert.deepEqual(allowedAfter(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "').filter((t) => !"ParisTokyo".includes(t[0])), []);
  const key = allowedAfter(g, '<tool_call>\n{"name": "get_weather", "arguments": {"');
  assert.ok(key.length > 0 && key.every((t) => "city".startsWith(t)), JSON.stringify(key));
  // The non-strict tool's arguments: any object, so a number is as good as a string.
  const loose = allowedAfter(g, '<tool_call>\n{"name": "lookup", "arguments": {"q": ');
  for (const t of ['"', "4", "[", "{", "t"]) assert.ok(loose.includes(t), `${JSON.stringify(t)} in ${JSON.stringify(loose)}`);
  // After the call, free text again.
  assert.ok(allowedAfter(g, `${call("get_weather", '{"city": "Paris"}')} `).includes(" Lily"));
});

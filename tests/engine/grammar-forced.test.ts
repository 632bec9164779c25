/**
 * Jump-forward decoding's grammar side: the text an output grammar forces (grammar-forced.ts) is
 * sound (the forced character is the only one the automaton takes there), and OutputConstraint.forced
 * spells it with the longest tokens, leaving the last one to the model.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, grammarStep, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedChar, grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { OutputConstraint, TokenTrie } from "../../src/engine/output-constraint.ts";

const WEATHER: OutputGrammar = {
  kind: "tool_calls", parallel: false,
  tools: [{ name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city"], additionalProperties: false } }],
};
const TWO_TOOLS: OutputGrammar = {
  kind: "tool_calls", parallel: true,
  tools: [{ name: "get_weather" }, { name: "get_time", parameters: { type: "object", properties: { zone: { const: "UTC" } } } }],
};
const RECORD: OutputGrammar = {
  kind: "json",
  schema: {
    type: "object", additionalProperties: false, required: ["status", "items"],
    properties: { status: { enum: ["pending", "paid"] }, items: { type: "array", items: { type: "object", properties: { sku: { type: "string" } }, additionalProperties: false } }, note: { type: ["string", "null"] } },
  },
};
const compact = (g: OutputGrammar): OutputGrammar => ({ ...g, whitespace: "compact" } as OutputGrammar);
const WEATHER_COMPACT = compact(WEATHER);
const ANSWER: OutputGrammar = { kind: "choice", choices: ["yes", "no", "not sure"] };
const CODE: OutputGrammar = { kind: "regex", pattern: "(\\d{3})-(ab|cd)x+" };
const CASES: [OutputGrammar, string][] = [
  [WEATHER, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'],
  [TWO_TOOLS, '<tool_call>\n{"name":"get_time","arguments":{"zone":"UTC"}}\n</tool_call>\n<tool_call>\n{ "arguments" : {"a": [1, 2.5e3]}, "name": "get_weather"}\n</tool_call>'],
  [RECORD, '{"status":"paid", "items": [{"sku": "a\\"b"}, {}],\n "note": null}'],
  [RECORD, '{\n"note": "x",\n"items":[],"status": "pending"}'],
  [WEATHER_COMPACT, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'],
  [compact(RECORD), '{"status": "paid", "items": [{"sku": "a\\"b"}, {}], "note": null}'],
  [compact(TWO_TOOLS), '<tool_call>\n{"arguments": {"a": [1, 2.5e3, {}]}, "name": "get_weather"}\n</tool_call>'],
  [{ ...TWO_TOOLS, format: "llama3_json" } as OutputGrammar, '{"name": "get_time", "parameters": {"zone": "UTC"}}; {"parameters": {}, "name": "get_weather"}'],
  [ANSWER, "not sure"],
  [CODE, "123-cdxx"],
];
/** Every character the outputs above use, and some they do not. */
const PROBES = [...new Set([...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)), "\n", "\t", "\r", "é", "中", ...CASES.flatMap(([, t]) => [...t])])];

const forcedAfter = (g: OutputGrammar, prefix: string) => grammarForcedText(grammarFeed(grammarStart(g), prefix), 256).text;

test("grammarForcedChar() is the only character the automaton takes, at every prefix of valid outputs", () => {
  let forcedPrefixes = 0;
  for (const [g, out] of CASES) {
    let s = grammarStart(g);
    for (let i = 0; i <= out.length; i++) {
      const c = grammarForcedChar(s);
      const taken = PROBES.filter((p) => grammarStep(s, p).length > 0);
      if (c !== null) {
        forcedPrefixes++;
        assert.deepEqual(taken, [c], `after ${JSON.stringify(out.slice(0, i))} only ${JSON.stringify(c)} may come`);
        assert.equal(grammarComplete(s), false, "a forced character never follows a possible end");
      }
      if (i < out.length) s = grammarStep(s, out[i]);
      assert.ok(s.length > 0, `the case itself fits at ${i}`);
    }
  }
  assert.ok(forcedPrefixes > 60, `forced characters are found (${forcedPrefixes})`);
});

test("grammarForcedText() forces the tool-call frame, the one key left, enum and tool-name tails", () => {
  assert.equal(forcedAfter(WEATHER, ""), "<tool_call>\n{");
  assert.equal(forcedAfter(WEATHER, "<tool_call>\n{ "), "", "whitespace or a key may come");
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"n'), 'ame"');
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name": "'), 'get_weather"');
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name": "get_weather", "'), 'arguments"', "the only key left");
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'), "", "a free string");
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c'), 'elsius"');
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'), "\n</tool_call>", "then the end, where nothing is forced");
  assert.equal(forcedAfter(TWO_TOOLS, '<tool_call>\n{"name": "get_'), "", "two names share the prefix");
  assert.equal(forcedAfter(TWO_TOOLS, '<tool_call>\n{"name": "get_t'), 'ime"');
  assert.equal(forcedAfter(TWO_TOOLS, '<tool_call>\n{"name":"get_time","arguments":{"zone":"'), 'UTC"');
  assert.equal(forcedAfter(TWO_TOOLS, '<tool_call>\n{"name":"get_time","arguments":{"zone":"UTC"}}\n</tool_call>'), "", "another call or the end");
  assert.equal(forcedAfter(RECORD, '{"status": "p'), "", "pending or paid");
  assert.equal(forcedAfter(RECORD, '{"status": "pe'), 'nding"');
  assert.equal(forcedAfter(RECORD, '{"items": [{"s'), 'ku"');
  assert.equal(forcedAfter(RECORD, '{"items":  '), "[", "two spaces fill the whitespace run");
});

test("grammarForcedText() in compact JSON forces the separators, closing brackets and the one key left", () => {
  assert.equal(forcedAfter(WEATHER_COMPACT, ""), '<tool_call>\n{"', "a key must come: no whitespace may");
  assert.equal(forcedAfter(compact({ ...WEATHER, format: "llama3_json" } as OutputGrammar), '{"name'), '": "get_weather", "parameters": {"', "Llama 3's format");
  assert.equal(forcedAfter(WEATHER_COMPACT, '<tool_call>\n{"name'), '": "get_weather", "arguments": {"', "the frame up to the first argument's key");
  assert.equal(forcedAfter(WEATHER_COMPACT, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"'), "", "another key or the end");
  assert.equal(forcedAfter(WEATHER_COMPACT, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius'), '"}}\n</tool_call>', "no key left: both objects close");
  assert.equal(forcedAfter(compact(RECORD), '{"items": []'), ', "', "a required key is left: status or note may come");
  assert.equal(forcedAfter(compact(RECORD), '{"items": [], "note": null'), ', "status": "p', "the one key left, then its enum's shared start");
  assert.equal(forcedAfter(WEATHER, '<tool_call>\n{"name'), '"', "whitespace is free where JSON allows it, by default");
});

test("grammarForcedText() forces a choice's shared characters and a regular expression's only next characters", () => {
  assert.equal(forcedAfter(ANSWER, ""), "");
  assert.equal(forcedAfter(ANSWER, "n"), "o", "no and not sure");
  assert.equal(forcedAfter(ANSWER, "no"), "", "the output may end");
  assert.equal(forcedAfter(ANSWER, "not"), " sure");
  assert.equal(forcedAfter(CODE, "123"), "-");
  assert.equal(forcedAfter(CODE, "123-a"), "bx", "then more x or the end");
  assert.equal(forcedAfter(CODE, "12"), "", "a digit of any kind");
});

// A toy vocabulary: single characters, and longer pieces of the tool-call frame.
const TEXTS = [...new Set([...PROBES, "<tool_call>", "\n{", '{"', "name", '":', "get", "_weather", "arguments", "celsius", '"}', "\n</", "tool_call", ">"])];
const trie = new TokenTrie(["", ...TEXTS]); // id 0 is a special token (no text)
const idOf = (t: string) => TEXTS.indexOf(t) + 1;
const ids = (text: string) => trie.cover(text);
const spell = (tokens: readonly number[]) => tokens.map((t) => trie.texts[t]).join("");

test("TokenTrie.cover() spells text with the longest tokens and stops where no token fits", () => {
  assert.deepEqual(ids("<tool_call>\n{").map((t) => trie.texts[t]), ["<tool_call>", "\n{"]);
  assert.deepEqual(ids('get_weather"').map((t) => trie.texts[t]), ["get", "_weather", '"']);
  assert.deepEqual(ids("ab\u0001c").map((t) => trie.texts[t]), ["a", "b"], "no token starts with U+0001");
});

test("OutputConstraint.forced() spells forced text up to where a token could reach past it, and bounds the count", () => {
  const c = new OutputConstraint(WEATHER, trie, [0]);
  const out = [idOf("<tool_call>")];
  assert.deepEqual(spell(c.forced(out, 0, 100)), "\n{", "no token goes on past '\\n{'");
  out.push(...ids('\n{"n'));
  const f = c.forced(out, 0, 100);
  assert.deepEqual(f.map((t) => trie.texts[t]), ["a", "m", "e"], "'ame\"' spelled a, m, e, then '\"' or '\":' is the model's");
  assert.deepEqual(c.forced(out, 0, 2).map((t) => trie.texts[t]), ["a", "m"], "at most maxTokens");
  out.push(...f);
  // After the jump the model may join the key's closing quote to what follows.
  const mask = c.next(out, 0);
  assert.ok(mask.allows(idOf('":')) && mask.allows(idOf('"')), "the quote alone or with the colon");
  assert.ok(!mask.allows(idOf("a")) && !mask.allows(0), "nothing else, no EOS");
  out.push(...ids('": "'));
  assert.equal(spell(c.forced(out, 0, 100)), 'get_weather"', "the name and its quote: '\"}' cannot come while arguments are due");
  assert.deepEqual(c.forced(out, 0, 0), [], "no room, no jump");
  out.push(...ids('get_weather", "arguments": {"city": "X"}}'));
  assert.equal(spell(c.forced(out, 0, 100)), "\n</tool_call>", "the closing tag whole: no token goes on past it");
});

test("OutputConstraint.forced() leaves the model a token that starts the forced text and goes on past it", () => {
  // A vocabulary where the whole call frame is one token, as a model's own piece might be.
  const long = '\n{"name": "get_weather", "arguments": {';
  const t2 = new TokenTrie(["", ...TEXTS, long]);
  const c = new OutputConstraint(WEATHER, t2, [0]);
  assert.deepEqual(c.forced([t2.texts.indexOf("<tool_call>")], 0, 100), [], "'\\n{' would take the long token away");
});

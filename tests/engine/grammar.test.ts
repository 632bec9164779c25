/** Output grammars: the JSON / JSON Schema / tool-call automaton, its token masks, and the engine's output under them. */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { AFTER_THINK, grammarComplete, grammarFeed, grammarStart, type GrammarState, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { compileSchema, type JsonSchema } from "../../src/engine/json-schema.ts";
import { OutputConstraint, type TokenMask, TokenTrie } from "../../src/engine/output-constraint.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { dumps } from "./json-dumps.ts";

const OBJECT: OutputGrammar = { kind: "json", schema: { type: "object" } };
const JSON_START = grammarStart(OBJECT);
/** Whether `text` can start output under `g` (and, with `whole`, end it). */
const fits = (g: OutputGrammar | GrammarState, text: string, whole = false) => {
  const s = grammarFeed(Array.isArray(g) ? g : grammarStart(g as OutputGrammar), text);
  return whole ? grammarComplete(s) : s.length > 0;
};
const json = (schema: JsonSchema): OutputGrammar => ({ kind: "json", schema });

test("grammarFeed() accepts whole JSON objects and every prefix of them", () => {
  for (const doc of ['{}', '{"a":1}', '{ "a" : [1, -2.5e+3, true, null, {"b": "x\\"y\\u00e9"}], "c": {} }', '{"k":[[]],"n":0.0,"m":-0}']) {
    for (let i = 0; i <= doc.length; i++) assert.ok(fits(JSON_START, doc.slice(0, i)), `prefix ${JSON.stringify(doc.slice(0, i))}`);
    assert.ok(fits(JSON_START, doc, true), doc);
    assert.deepEqual(typeof JSON.parse(doc), "object");
  }
});

test("grammarFeed() refuses what is not the start of one JSON object", () => {
  const bad = ["[1]", '"a"', " {}", "{a:1}", '{"a" 1}', '{"a":01}', '{"a":1,}', '{"a":[1}', '{"a":tru}', '{"a":"\\x"}', '{"a":"\u0001"}', "{}x", "{}{}", '{"a":1.}', '{"a":-}', "{    }"];
  for (const text of bad) assert.ok(!fits(JSON_START, text), `accepted ${JSON.stringify(text)}`);
  assert.equal(fits(JSON_START, '{"a":[1,2]', true), false, "an open object is not complete");
});

test("grammarStart() follows a schema: declared keys in any order, each once, required ones before the close", () => {
  const g = json({
    type: "object",
    properties: { city: { type: "string", maxLength: 5 }, days: { type: "integer" }, unit: { enum: ["c", "f"] }, tags: { type: "array", items: { type: "boolean" }, minItems: 1, maxItems: 2 } },
    required: ["city", "unit"],
  });
  for (const ok of ['{"city": "Paris", "unit": "c"}', '{"unit":"f","days":-3,"city":""}', '{"city":"a","unit":"c","tags":[true,false]}']) {
    assert.ok(fits(g, ok, true), ok);
  }
  const bad = {
    "an undeclared key": '{"town"', "a key twice": '{"city":"a","city"', "a missing required key": '{"city":"a"}',
    "a string too long": '{"city":"London', "a fraction for an integer": '{"days":1.', "a value outside the enum": '{"unit":"k',
    "too few items": '{"tags":[]', "too many items": '{"tags":[true,true,', "a wrong type": '{"city":1',
  };
  for (const [what, text] of Object.entries(bad)) assert.ok(!fits(g, text), `accepted ${what}: ${text}`);
  assert.ok(fits(g, '{"city":"Lond'), "four characters fit maxLength 5");
  const single = json({ type: "object", properties: { a: { type: "null" } } });
  assert.ok(fits(single, '{"a":null}', true) && !fits(single, '{"a":null,'), "a comma with no key left to write");
});

test("grammarStart() follows anyOf, type lists, nullable, const and recursive $ref", () => {
  const g = json({
    $defs: { node: { type: "object", properties: { v: { type: ["number", "null"] }, kids: { type: "array", items: { $ref: "#/$defs/node" } } }, required: ["v"] } },
    anyOf: [{ $ref: "#/$defs/node" }, { const: "leaf" }, { type: "string", nullable: true, maxLength: 0 }],
  });
  for (const ok of ['{"v":1,"kids":[{"v":null},{"v":2.5,"kids":[]}]}', '"leaf"', '""', "null", '{"v":null}']) assert.ok(fits(g, ok, true), ok);
  for (const bad of ['{"kids":[]}', '{"v":"x"}', '"lea"', '"x"', '{"v":1,"kids":[{"v":true']) assert.ok(!fits(g, bad, true), `accepted ${bad}`);
  assert.ok(fits(json({ type: "integer" }), "42", true), "a number at the top ends with the output");
  assert.ok(!fits(json({ type: "integer" }), "4.2"));
});

test("grammarStart() writes enum values and keys outside the Basic Multilingual Plane, one code point at a time", () => {
  // The automaton steps code points; an emoji is two UTF-16 units of the literal it must match.
  const g = json({ type: "object", properties: { "mood😀": { enum: ["😀", "a😀b", "🎉🎉"] } }, additionalProperties: false });
  const doc = '{"mood😀": "a😀b"}';
  const points = [...doc];
  for (let i = 0; i <= points.length; i++) assert.ok(fits(g, points.slice(0, i).join("")), `prefix ${points.slice(0, i).join("")}`);
  assert.ok(fits(g, doc, true));
  for (const ok of ['{"mood😀": "😀"}', '{"mood😀":"🎉🎉"}']) assert.ok(fits(g, ok, true), ok);
  for (const bad of ['{"mood😀": "🎉"}', '{"mood😀": "a😀"}', '{"mood😀": "😀😀"}']) assert.ok(!fits(g, bad, true), `accepted ${bad}`);
  assert.equal(grammarForcedText(grammarFeed(grammarStart(g), '{"mood😀": "a'), 16).text, '😀b"', "forced text is whole code points");
});

test("compileSchema() refuses what the decoder cannot follow, naming the keyword and its place", () => {
  const cases: [unknown, RegExp][] = [
    [{ type: "object", minProperties: 1 }, /keyword "minProperties" at # is not supported/],
    [{ type: "string", pattern: "(?=a)b" }, /"pattern" at # cannot be followed: .*lookahead/],
    [{ properties: { when: { type: "string", format: "iri" } } }, /"format" "iri" at #\/properties\/when is not supported .*supported: date/],
    [{ anyOf: [{ type: "string", pattern: "(?=a)" }, { type: "object", minProperties: 1 }] }, /"pattern" at #\/anyOf\/0 cannot be followed/],
    [{ type: "string", minLength: 3, maxLength: 2 }, /minLength 3 above maxLength 2/],
    [{ $ref: "#/$defs/missing" }, /names no definition/],
    [{ $ref: "http://example.com/s.json" }, /only "#\/\$defs\/NAME"/],
    [{ type: "array", minItems: 3, maxItems: 2 }, /minItems 3 above maxItems 2/],
    [{ type: "object", properties: { a: {} }, required: ["b"], additionalProperties: false }, /requires "b", which its properties do not allow/],
    [{ type: "strin" }, /type "strin" at # is not one of/],
    [{ anyOf: [{ type: "string" }], properties: {} }, /combines "anyOf" with "properties"/],
    [false, /no value can match it/],
    [{ $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, /refers to itself/],
  ];
  for (const [schema, message] of cases) assert.throws(() => compileSchema(schema), message, JSON.stringify(schema));
});

test("compileSchema() follows pydantic's schemas: discriminated unions, Decimal, bytes, paths, UUID versions, durations, dicts with enum keys", () => {
  // What pydantic 2 writes for a field `pet: Cat | Dog = Field(discriminator="pet_type")`.
  const pet = json({
    $defs: {
      Cat: { properties: { pet_type: { const: "cat", title: "Pet Type", type: "string" }, meows: { type: "integer" } }, required: ["pet_type", "meows"], title: "Cat", type: "object" },
      Dog: { properties: { pet_type: { const: "dog", title: "Pet Type", type: "string" }, barks: { type: "number" } }, required: ["pet_type", "barks"], title: "Dog", type: "object" },
    },
    properties: { pet: { discriminator: { mapping: { cat: "#/$defs/Cat", dog: "#/$defs/Dog" }, propertyName: "pet_type" }, oneOf: [{ $ref: "#/$defs/Cat" }, { $ref: "#/$defs/Dog" }] } },
    required: ["pet"], type: "object",
  });
  for (const ok of ['{"pet": {"pet_type": "cat", "meows": 3}}', '{"pet": {"barks": 1.5, "pet_type": "dog"}}']) assert.ok(fits(pet, ok, true), ok);
  for (const bad of ['{"pet": {"pet_type": "cat", "barks": 3}}', '{"pet": {"pet_type": "cow", "meows": 1}}']) assert.ok(!fits(pet, bad, true), `accepted ${bad}`);
  // Decimal: a number, or a string under a lookahead pattern the decoder cannot follow: written as a number.
  const decimal = json({ anyOf: [{ type: "number" }, { type: "string", pattern: "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$" }] });
  assert.ok(fits(decimal, "-12.5", true) && !fits(decimal, '"12.5"'), "the string branch is left out");
  const fields = json({
    type: "object", additionalProperties: false,
    properties: { b: { type: "string", format: "binary" }, p: { type: "string", format: "path" }, u: { type: "string", format: "uuid4" }, t: { type: "string", format: "duration" }, i: { type: "string", format: "ipv6" } },
  });
  assert.ok(fits(fields, '{"b": "\\u0000 any", "p": "/tmp/x y", "u": "123e4567-e89b-42d3-a456-426614174000", "t": "P1Y2M3DT4H5M6S", "i": "fe80::1"}', true));
  // dict[Literal["a", "b"], int], and dict[Key, str] whose enum is defined after the model using it.
  const counts = json({ type: "object", additionalProperties: { type: "integer" }, propertyNames: { enum: ["a", "b"] } });
  assert.ok(fits(counts, '{"b": 2, "a": 1}', true) && fits(counts, "{}", true));
  for (const bad of ['{"c": 1}', '{"a": "x"}', '{"ab": 1}']) assert.ok(!fits(counts, bad, true), `accepted ${bad}`);
  const keyed = json({
    $defs: { AModel: { type: "object", properties: { d: { type: "object", additionalProperties: { type: "string" }, propertyNames: { $ref: "#/$defs/ZKey" } } }, required: ["d"] }, ZKey: { enum: ["x", "y"], type: "string" } },
    $ref: "#/$defs/AModel",
  });
  assert.ok(fits(keyed, '{"d": {"y": "1"}}', true) && !fits(keyed, '{"d": {"z": "1"}}', true));
  assert.throws(() => compileSchema({ type: "object", propertyNames: { pattern: "^[a-z]+$" } }), /"propertyNames" at #\/propertyNames is followed only as an enum or const of names/);
  assert.throws(() => compileSchema({ type: "object", properties: { c: {} }, required: ["c"], propertyNames: { const: "a" } }), /requires "c", which its properties do not allow/);
  for (const bad of ['{"u": "123e4567-e89b-12d3-a456-426614174000"}', '{"u": "123e4567-e89b-42d3-c456-426614174000"}', '{"t": "P"}', '{"t": "PT"}', '{"t": "P1H"}', '{"i": "fe80:::1"}', '{"i": "1:2:3:4:5:6:7:8:9"}']) {
    assert.ok(!fits(fields, bad, true), `accepted ${bad}`);
  }
});

test("grammarStart() writes Hermes tool calls to the named functions, one or several", () => {
  const tools = [{ name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }, { name: "ping" }];
  const one: OutputGrammar = { kind: "tool_calls", tools, parallel: false };
  const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  assert.ok(fits(one, call, true));
  assert.ok(fits(one, '<tool_call>\n{"arguments": {}, "name": "ping"}\n</tool_call>', true), "keys in either order; no parameters: any object");
  assert.ok(!fits(one, '<tool_call>\n{"name": "get_time"'), "an unknown function");
  assert.ok(!fits(one, '<tool_call>\n{"name": "ping", "arguments": {}, "x"'), "an extra key");
  assert.ok(!fits(one, '<tool_call>\n{"name": "get_weather", "arguments": {}}'), "its required argument missing");
  assert.ok(!fits(one, "Sure"), "no text before the call");
  assert.ok(!fits(one, call + "\n<"), "one call only");
  const many: OutputGrammar = { ...one, parallel: true };
  assert.ok(fits(many, call, true) && fits(many, call + "\n" + call, true));
  assert.ok(!fits(many, call + "\n", true), "a separator starts another call");
});

test("grammarStart() with compact whitespace takes exactly json.dumps's separators, in values and tool calls", () => {
  const values = [{}, [], { a: 1, b: [2, 3.5, [], {}], c: { d: null, e: "x, y: z" } }, [{ k: [true, false] }, "s"], { "": [[[]]] }];
  for (const v of values) {
    const doc = dumps(v);
    for (let i = 0; i <= doc.length; i++) assert.ok(fits({ kind: "json", schema: true, whitespace: "compact" }, doc.slice(0, i)), `prefix ${doc.slice(0, i)}`);
    assert.ok(fits({ kind: "json", schema: true, whitespace: "compact" }, doc, true), doc);
    assert.ok(fits({ kind: "json", schema: true }, doc, true), `${doc} under the default`);
  }
  const obj: OutputGrammar = { kind: "json", schema: { type: "object" }, whitespace: "compact" };
  for (const bad of ['{"a":1}', '{"a":  1}', '{ "a": 1}', '{"a": 1 }', '{"a": 1,"b": 2}', '{"a": [1,2]}', '{"a": [ 1]}', '{"a":\n1}', ' {}', '{"a": 1}\n']) {
    assert.ok(!fits(obj, bad, true), `compact accepted ${JSON.stringify(bad)}`);
  }
  assert.ok(fits(OBJECT, '{"a":1}', true) && fits(OBJECT, '{ "a" :  1 }', true), "the default takes any JSON whitespace");
  const call: OutputGrammar = { kind: "tool_calls", tools: [{ name: "f", parameters: { type: "object", properties: { x: { type: "array" } } } }], parallel: true, whitespace: "compact" };
  assert.ok(fits(call, '<tool_call>\n{"name": "f", "arguments": {"x": [1, "2"]}}\n</tool_call>\n<tool_call>\n{"arguments": {}, "name": "f"}\n</tool_call>', true));
  assert.ok(!fits(call, '<tool_call>\n{"name":"f"'), "a tool call's separators too");
});

test("grammarStart() for a choice takes exactly one of the choices, and refuses an empty list or choice", () => {
  const g: OutputGrammar = { kind: "choice", choices: ["yes", "no", "not sure", "n/a 😀"] };
  for (const ok of ["yes", "no", "not sure", "n/a 😀"]) {
    assert.ok(fits(g, ok, true), ok);
    for (const p of [...ok].keys()) assert.ok(fits(g, [...ok].slice(0, p).join("")), `prefix of ${ok}`);
  }
  for (const bad of ["ye", "yess", " yes", '"yes"', "not", "n/a"]) assert.ok(!fits(g, bad, true), `accepted ${bad}`);
  assert.throws(() => grammarStart({ kind: "choice", choices: [] }), /The choice list is empty/);
  assert.throws(() => grammarStart({ kind: "choice", choices: ["a", ""] }), /Choice 1 is the empty string/);
});

test("grammarStart() for a regex takes text the pattern matches whole, anchored or not", () => {
  for (const pattern of ["\\d{3}-[a-z]+", "^\\d{3}-[a-z]+$", "(?:\\d{3})-[a-z]+$"]) {
    const g: OutputGrammar = { kind: "regex", pattern };
    assert.ok(fits(g, "123-ab", true), pattern);
    assert.ok(fits(g, "123-") && !fits(g, "123-", true), "a prefix is not a match");
    for (const bad of ["12a", "x123-ab", "123-ab!", "1234-a"]) assert.ok(!fits(g, bad), `${pattern} took ${bad}`);
  }
  assert.ok(fits({ kind: "regex", pattern: "yes|no" }, "no", true), "a top-level alternation");
  assert.ok(!fits({ kind: "regex", pattern: "yes|no" }, "yesno"));
  assert.throws(() => grammarStart({ kind: "regex", pattern: "(a" }), (e: Error) => e.name === "SchemaError" && /\(a/.test(e.message));
  assert.throws(() => grammarStart({ kind: "regex", pattern: "(?=a)b" }), /lookaround|look/i);
});

test("grammarStart() after AFTER_THINK leaves the thoughts free and constrains what follows </think>", () => {
  const g = grammarStart(OBJECT, AFTER_THINK);
  assert.ok(fits(g, "I think {not json} </thin </think>\n\n{}", true));
  assert.ok(!fits(g, "hmm</think>\n\nfoo"));
  assert.ok(!fits(g, "hmm</think>{}"), "a blank line after the thoughts");
  assert.ok(!fits(g, "no end yet", true));
});

test("grammarStart() with a FreePrefix of several markers awaits each in turn, matching markers that repeat their start", () => {
  const g = grammarStart(OBJECT, { until: ["<|channel|>final", "<|message|>"], then: "" });
  assert.ok(fits(g, "<|channel|>analysis<|message|>{x}<|end|><|start|>assistant<|channel|>final<|message|>{}", true));
  assert.ok(fits(g, "<|channel|>final <|constrain|>json<|message|>{\"a\": 1}", true), "anything between the two markers");
  assert.ok(!fits(g, "<|channel|>final<|message|>not json"));
  assert.ok(!fits(g, "<|channel|>analysis<|message|>{}", true), "the analysis is not the answer");
  // A marker whose start recurs in it: after "ab" of "abac", "abab" still holds "ab" towards it.
  const r = grammarStart({ kind: "regex", pattern: "x" }, { until: ["abac"], then: "" });
  assert.ok(fits(r, "ababacx", true));
  assert.ok(fits(r, "aabacx", true));
  assert.ok(!fits(r, "abacy"));
});

test("grammarStart() follows pattern and format on the decoded string, escapes included, within maxLength", () => {
  const code = json({ type: "string", pattern: "^[a-c]+\\d$" });
  assert.ok(fits(code, '"ab3"', true));
  assert.ok(fits(code, '"\\u0061b3"', true), "an escape is matched as the character it stands for");
  for (const bad of ['"ab"', '"abx', '"3', '"a\\n', '"ab34']) assert.ok(!fits(code, bad), `accepted ${bad}`);
  const cat = json({ type: "string", pattern: "cat" });
  assert.ok(fits(cat, '"a cat!"', true), "unanchored: anywhere in the string");
  assert.ok(!fits(cat, '"dog"', true) && fits(cat, '"dog'), "a string may still come to hold it, but not end without it");
  const date = json({ type: "string", format: "date" });
  assert.ok(fits(date, '"2024-02-29"', true));
  for (const bad of ['"2024-13', '"24-01-01"', '"2024-01-01T']) assert.ok(!fits(date, bad), `accepted ${bad}`);
  const both = json({ type: "string", format: "uuid", pattern: "^0" });
  assert.ok(fits(both, '"0a1b2c3d-0000-4000-8000-00000000000f"', true));
  assert.ok(!fits(both, '"1'), "pattern and format both hold");
  const short = json({ type: "string", pattern: "^a{3,}$", maxLength: 4 });
  assert.ok(fits(short, '"aaaa"', true));
  assert.ok(!fits(short, '"aaaaa'));
  const room = json({ type: "string", pattern: "^a+b{3}$", maxLength: 5 });
  assert.ok(fits(room, '"aa'));
  assert.ok(!fits(room, '"aaa'), "no room left for the three b's within maxLength");
  assert.throws(() => compileSchema({ type: "string", pattern: "^a{5}$", maxLength: 4 }), /no string of at most 4 characters matches/);
});

test("grammarStart() caps a hostname at 253 characters in all, as RFC 1123 does", () => {
  const label = "a".repeat(63);
  const host = [label, label, label, "b".repeat(61)].join("."); // 253 characters
  const g = json({ type: "string", format: "hostname" });
  assert.ok(fits(g, `"${host}"`, true));
  assert.ok(!fits(g, `"${host}c`) && !fits(g, `"${host}.`), "a 254th character");
  assert.throws(() => compileSchema({ type: "string", format: "hostname", minLength: 254 }), /minLength 254 above 253, the longest hostname/);
});

test("OutputConstraint.next() bars exactly the tokens whose text cannot come next, and EOS until the object closes", () => {
  const texts = ["", "{", "}", '"', "a", ":", "1", " ", "\uFFFD", '{"', '"}', "x"];
  const c = new OutputConstraint(OBJECT, new TokenTrie(texts), [0]);
  const barredIds = (m: TokenMask) => {
    const ids = texts.flatMap((_, id) => (m.allows(id) ? [] : [id]));
    assert.equal(m.allowedCount, texts.length - ids.length);
    return ids;
  };
  assert.deepEqual(barredIds(c.next([], 0)), [0, 2, 3, 4, 5, 6, 7, 8, 10, 11], "only '{' and '{\"' may start");
  assert.deepEqual(barredIds(c.next([1], 0)), [0, 1, 4, 5, 6, 8, 9, 11], "after '{': a key, '}', whitespace");
  assert.deepEqual(barredIds(c.next([1, 2], 0)), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "after '{}' only EOS");
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });

async function generate(extra: Partial<GenerateRequest>) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const h = e.submit({ prompt, maxTokens: 60, temperature: 1, seed: 5, ...extra });
    let text = "";
    for await (const d of h.stream) text += d.text;
    return { text, result: await h.result };
  } finally {
    await e.stop();
  }
}

test("TokenTrie.allowed() finds exactly the tokens a feed of every token text accepts, on the story model's vocabulary", () => {
  const texts = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
  const trie = new TokenTrie(texts);
  const g = json({ type: "object", properties: { name: { type: "string" }, n: { type: "number" }, ok: { type: "boolean" } } });
  const states = ["", "{", '{"na', '{"name": "Once upon', '{"n": -1', '{"n": 2.5e', '{"ok": t', '{"ok": true, '].map((t) => grammarFeed(grammarStart(g), t));
  for (const [i, state] of states.entries()) {
    assert.ok(state.length > 0);
    const brute = texts.flatMap((t, id) => (t !== "" && !t.includes("\uFFFD") && grammarFeed(state, t).length > 0 ? [id] : []));
    assert.deepEqual(trie.allowed({ state, pending: [] }, () => []).sort((a, b) => a - b), brute, `state ${i}`);
    assert.ok(brute.length > 0 && brute.length < texts.length);
  }
});

const MASK_CASES: [JsonSchema | OutputGrammar, string][] = [
  [{ type: "object", properties: { a: { type: "string", maxLength: 3 }, b: { type: "array", items: { type: "integer" }, minItems: 2 }, c: { type: "string" } } }, '{"a": "aaa", "b": [1, 1, 1], "c": "aaaa aaaa"}'],
  // Patterns and bounds: states that differ only in a regex position or a number's digits must not share masks.
  [{
    type: "object",
    properties: { p: { type: "string", pattern: "^(ab)+c?$", maxLength: 7 }, q: { type: "string", pattern: "a.a" }, d: { type: "string", format: "date" }, n: { type: "array", items: { type: "integer", minimum: -5, maximum: 120 } } },
  }, '{"p": "ababab", "q": "xa\\"aa", "d": "2024-11-30", "n": [11, -5, 111, 0]}'],
  // Runs of letters, digits and spaces that leave a pattern where it is are taken whole from the trie.
  [{
    type: "object",
    properties: { c: { type: "string", pattern: "^[A-Z][a-z]+( [A-Z][a-z]+)*$", maxLength: 12 }, w: { type: "string", pattern: "^[a-z0-9 ]*$" }, z: { type: "string", pattern: "^[a-z]+[0-9]$", maxLength: 6 }, u: { type: "array", uniqueItems: true, items: { type: "string", pattern: "^[a-z]+$" } } },
  }, '{"c": "San Franc", "w": "ab 12 cd", "z": "abcde1", "u": ["ab", "a", "abc"]}'],
  // A tuple's positions and steps (multipleOf) must not share masks either.
  [{
    type: "object",
    properties: { t: { type: "array", prefixItems: [{ type: "integer", multipleOf: 5 }, { type: "string" }], items: { type: "number", multipleOf: 0.5, maximum: 10 } } },
  }, '{"t": [15, "ab", 2.5, 10, -3]}'],
  // Unique items: states that differ only in the items seen so far must not share masks, and plain
  // subtrees taken whole must leave a duplicate room to grow.
  [{
    type: "object",
    properties: {
      tags: { type: "array", uniqueItems: true, items: { type: "string", maxLength: 3 } },
      ids: { type: "array", uniqueItems: true, items: { type: "integer" } },
      e: { type: "array", uniqueItems: true, items: { enum: ["x", "y", "z"] } },
    },
  }, '{"tags": ["ab", "abc", "a", "b"], "ids": [1, 10, 0], "e": ["y", "x"]}'],
  // Compact whitespace: states before and after the one space must not share masks.
  [{ kind: "json", schema: { type: "object", properties: { a: { type: "array", items: { type: "integer" } }, b: { type: "string" } } }, whitespace: "compact" }, '{"a": [1, 22, 3], "b": "x y"}'],
  // A whole-output regex: runs that leave it where it is are taken whole from the trie; others stepped.
  [{ kind: "regex", pattern: "[A-Z][a-z]+( [A-Z][a-z]+)*, [0-9]{5}" }, "San Francisco, 94103"],
  [{ kind: "choice", choices: ["Paris", "Par", "Lyon", "paris 2"] }, "paris 2"],
  // GLM tool calls: raw text (plain runs taken whole, `<` stepped), optional pairs, free pairs.
  [{
    kind: "tool_calls", format: "glm45", parallel: true,
    tools: [{ name: "f", parameters: { type: "object", properties: { s: { type: "string" }, t: { type: "string", maxLength: 4 }, n: { type: "integer" } }, required: ["s"] } }, { name: "g" }],
  }, '<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>a <b> c</arg</arg_value>\n<arg_key>t</arg_key>\n<arg_value>ab c</arg_value>\n</tool_call>\n<tool_call>g\n<arg_key>k k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>'],
  // Kimi K2 tool calls: the call index, then JSON arguments.
  [{ kind: "tool_calls", format: "kimi_k2", parallel: true, tools: [{ name: "f", parameters: { type: "object", properties: { a: { type: "integer" } } } }] },
    '<|tool_calls_section_begin|><|tool_call_begin|>functions.f:10<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|>'],
  // GBNF: repeated character classes (taken whole from the trie where every character of a kind is
  // in the class), rules referred to from several places, `.` (which takes quotes and backslashes).
  [{ kind: "gbnf", grammar: String.raw`root ::= "{" pair ("," " "? pair)* "}"
pair ::= "\"" [^"\\]* "\": " ([0-9]+ | "\"" [a-z ]* "\"")` }, '{"ab C!": 12, "x": "hi there"}'],
  [{ kind: "gbnf", grammar: 'root ::= "<" .* ">" [A-Z]{2,3}' }, '<a "b\\" >c>>AB'],
  // llama.cpp's JSON-string idioms: a class inside a repeated alternation, and inside a repeated rule.
  [{ kind: "gbnf", grammar: String.raw`root ::= "[" string ("," char-string)* "]"
string ::= "\"" ( [^"\\] | "\\" ["\\n] )* "\""
char-string ::= "\"" char* "\""
char ::= [^"\\a-c] | "\\" ["\\]` }, String.raw`["a b\"c","xy\\z",""]`],
  // A class that does not end its sequence repeats only with what follows it: no run taken whole.
  [{ kind: "gbnf", grammar: 'root ::= ( [a-z] "!" )* "."' }, "a!b!."],
  // A structural tag: free text (plain runs with no trigger's first character taken whole), a
  // trigger's start that goes nowhere, then a whole structure and free text again.
  [{ kind: "structural_tag", triggers: ["<f="], structures: [{ begin: "<f=a>", schema: { type: "object", properties: { x: { type: "integer" } } }, end: "</f>" }] },
    'Hi <f <f=a>{"x": 12}</f> ok.'],
  // Counted runs (no self-loop, a deep run of any plain text): subtrees taken whole only as deep as
  // the count, the maxLength and what the pattern still needs allow; in anyOf branches too.
  [{
    type: "object",
    properties: {
      a: { type: "string", pattern: "^[^<>]{1,8}0$" }, b: { type: "string", pattern: "^[a-z]{2,5}$", maxLength: 4 },
      c: { anyOf: [{ type: "string", pattern: "^[a-z ]{0,6}x$" }, { type: "string", pattern: "^[A-Z]{1,3}[0-9]{2}$" }] },
    },
  }, '{"a": "Ab cd0", "b": "abcd", "c": "ab cx"}'],
  [{ kind: "regex", pattern: "[a-z]{1,12}\\.[0-9]{2,3}( [a-z ]{3})?" }, "abc.123 a b"],
];
const asGrammar = (g: JsonSchema | OutputGrammar): OutputGrammar => (typeof g === "object" && "kind" in g ? g as OutputGrammar : json(g as JsonSchema));

for (const [schema, doc] of MASK_CASES) test(`OutputConstraint.next() masks match a fresh brute-force pass at every step (one token where text is forced), its per-state cache included (${doc.slice(0, 12)}…)`, () => {
  const texts = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
  const g = asGrammar(schema);
  assert.ok(grammarComplete(grammarFeed(grammarStart(g), doc)), "the document follows the grammar");
  // One token per character (the vocabulary has every ASCII byte), so states repeat along the strings.
  const ids = [...doc].map((ch) => texts.indexOf(ch));
  const trie = new TokenTrie(texts);
  const c = new OutputConstraint(g, trie, model.config.eosTokenIds);
  for (let k = 0; k <= ids.length; k++) {
    const state = grammarFeed(grammarStart(g), doc.slice(0, k));
    const ok = new Set(texts.flatMap((t, id) => (t !== "" && !t.includes("\uFFFD") && grammarFeed(state, t).length > 0 ? [id] : [])));
    if (grammarComplete(state)) for (const e of model.config.eosTokenIds) ok.add(e);
    // Where text is forced, only the first token jump-forward would write for it (one of those the grammar takes).
    const forced = grammarForcedText(state, 256);
    const first = forced.text === "" ? undefined : trie.cover(forced.text, forced.state)[0];
    if (first !== undefined) {
      assert.ok(ok.has(first) && forced.text.startsWith(texts[first]), `after ${JSON.stringify(doc.slice(0, k))}`);
      ok.clear();
      ok.add(first);
    }
    const mask = c.next(ids.slice(0, k), 0);
    const allowed = texts.flatMap((_, id) => (mask.allows(id) ? [id] : []));
    assert.equal(mask.allowedCount, allowed.length);
    assert.deepEqual(allowed, [...ok].sort((x, y) => x - y), `after ${JSON.stringify(doc.slice(0, k))}`);
  }
});

test("Engine under a json_object grammar writes a prefix of one JSON object, and ends at EOS once it closes", async () => {
  const free = await generate({});
  assert.ok(!fits(JSON_START, free.text), "the story model does not write JSON by itself");
  for (const seed of [1, 2, 3]) {
    const { text, result } = await generate({ grammar: OBJECT, seed });
    assert.equal(result.text, text);
    assert.ok(fits(JSON_START, text), `not the start of a JSON object: ${JSON.stringify(text)}`);
  }
  // Pushed towards "}" right after "{", the object closes at once and only EOS may follow.
  const close = model.tokenizer.encode("}", { addBos: false }).filter((id) => model.tokenizer.decode([id]).includes("}"));
  const closed = await generate({ grammar: OBJECT, logitBias: close.map((id) => [id, 50]) });
  assert.equal(closed.result.finishReason, "stop");
  assert.deepEqual(JSON.parse(closed.text), {});
  // A bias cannot lift a barred token: " the" pushed by +100 still waits for a string to hold it.
  const the = model.tokenizer.encode(" the", { addBos: false });
  const biased = await generate({ grammar: OBJECT, logitBias: the.map((id) => [id, 100]), maxTokens: 12 });
  assert.ok(fits(JSON_START, biased.text), `not the start of a JSON object: ${JSON.stringify(biased.text)}`);
  assert.ok(biased.result.tokenIds.some((id) => the.includes(id)), "the biased token is taken where the grammar allows it");
});

test("Engine under a json_schema grammar writes whole values of the schema when the schema leaves little choice", async () => {
  const schema = { type: "object", properties: { mood: { enum: ["happy", "sad"] }, ok: { type: "boolean" } }, required: ["mood", "ok"], additionalProperties: false };
  for (const seed of [1, 2, 3]) {
    const { text, result } = await generate({ grammar: json(schema), seed, maxTokens: 80 });
    assert.equal(result.finishReason, "stop", `ended by ${result.finishReason}: ${JSON.stringify(text)}`);
    const v = JSON.parse(text) as { mood: string; ok: boolean };
    assert.deepEqual(Object.keys(v).sort(), ["mood", "ok"]);
    assert.ok(["happy", "sad"].includes(v.mood) && typeof v.ok === "boolean", text);
  }
});

test("Engine under a json_schema grammar sampling freely writes values inside their format, pattern, bounds, steps, tuples and unique items", async () => {
  const schema = {
    type: "object",
    properties: {
      day: { type: "string", format: "date" }, code: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" }, n: { type: "integer", minimum: 1, maximum: 12 },
      x: { type: "number", exclusiveMinimum: -1, exclusiveMaximum: 0 }, m: { type: "integer", multipleOf: 7, minimum: 10, maximum: 99 },
      t: { type: "array", prefixItems: [{ type: "boolean" }, { type: "string", maxLength: 4 }], items: false, minItems: 2 },
      u: { type: "array", uniqueItems: true, items: { type: "integer", minimum: 1, maximum: 3 }, minItems: 3 },
    },
    required: ["day", "code", "n", "x", "m", "t", "u"],
    additionalProperties: false,
  };
  let finished = 0;
  for (const seed of [1, 2, 3, 4]) {
    const { text, result } = await generate({ grammar: json(schema), seed, maxTokens: 300 });
    if (result.finishReason !== "stop") continue; // the fraction of x may run to max_tokens
    finished++;
    const v = JSON.parse(text) as { day: string; code: string; n: number; x: number; m: number; t: [boolean, string]; u: number[] };
    assert.match(v.day, /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/, text);
    assert.match(v.code, /^[A-Z]{2}-\d{3}$/, text);
    assert.ok(Number.isInteger(v.n) && v.n >= 1 && v.n <= 12, text);
    assert.ok(v.x > -1 && v.x < 0, text);
    assert.ok(v.m % 7 === 0 && v.m >= 10 && v.m <= 99, text);
    assert.ok(v.t.length === 2 && typeof v.t[0] === "boolean" && typeof v.t[1] === "string" && v.t[1].length <= 4, text);
    assert.deepEqual([...v.u].sort(), [1, 2, 3], text);
  }
  assert.ok(finished >= 2, `only ${finished} of 4 runs ended`);
});

test("Engine under a tool_calls grammar writes one Hermes call to the named function with arguments of its schema", async () => {
  const tools = [{ name: "set_mood", parameters: { type: "object", properties: { mood: { enum: ["happy", "sad"] } }, required: ["mood"], additionalProperties: false } }];
  const { text, result } = await generate({ grammar: { kind: "tool_calls", tools, parallel: false }, maxTokens: 200 });
  assert.equal(result.finishReason, "stop", text);
  const m = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(text);
  assert.ok(m, text);
  const call = JSON.parse(m[1]) as { name: string; arguments: { mood: string } };
  assert.equal(call.name, "set_mood");
  assert.ok(["happy", "sad"].includes(call.arguments.mood));
});

test("Engine refuses a grammar whose schema it cannot follow, with the keyword in the message", () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  assert.throws(() => e.submit({ prompt, grammar: json({ type: "string", pattern: "a\\1" }) }), { name: "RequestParamError", message: /"pattern"/ });
  return e.stop();
});

test("Engine refuses a schema nested deeper than its compiler's stack as the request's mistake (RequestParamError)", () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  // Built as text: building it by recursion would overflow first.
  const deep = JSON.parse('{"type": "array", "items": '.repeat(20000) + '{"type": "integer"}' + "}".repeat(20000)) as JsonSchema;
  assert.throws(() => e.submit({ prompt, grammar: json(deep) }), { name: "RequestParamError", message: /nests too deeply/ });
  assert.equal(e.activeRequests, 0, "nothing was queued");
  return e.stop();
});

test("OutputConstraint.next() allows only EOS at a dead end: text no token of the vocabulary spells", () => {
  // Token 3 is EOS (no text); "｜" exists only as UTF-8 byte pieces, which the trie leaves out.
  const texts = ["a", "b", "\uFFFD", ""];
  const allowedOf = (choices: string[], out: number[]) => {
    const mask = new OutputConstraint({ kind: "choice", choices }, new TokenTrie(texts), [3]).next(out, 0);
    return texts.flatMap((_, id) => (mask.allows(id) ? [id] : []));
  };
  assert.deepEqual(allowedOf(["ab"], []), [0], "a spellable choice: its first token, not EOS");
  assert.deepEqual(allowedOf(["a｜"], [0]), [3], "after `a`, `｜` cannot be spelled: EOS ends the answer");
  assert.deepEqual(allowedOf(["a", "ab"], [0]), [1, 3], "EOS where the grammar may end, beside what goes on");
});

/**
 * JSON Schema → constrained decoding, checked against what a JSON Schema validator decides: for each
 * schema an agent framework sends, the grammar takes exactly the valid candidates among those tried
 * (or, where the decoder writes a subset, never an invalid one), or compileSchema refuses the schema
 * with a SchemaError naming the keyword. Expected answers are reasoned out per case (draft 2020-12).
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, MAX_DEPTH } from "../../src/engine/grammar.ts";
import { compileSchema, type JsonSchema, SchemaError } from "../../src/engine/json-schema.ts";
import { ApiError } from "../../src/serve/errors.ts";
import { checkSchema } from "../../src/serve/output-grammar.ts";

/** Whether the grammar of `schema` takes `text` whole. */
const takes = (schema: JsonSchema, text: string) => grammarComplete(grammarFeed(grammarStart({ kind: "json", schema }), text));
/** Whether the grammar of `schema` takes `text` as the start of some output. */
const starts = (schema: JsonSchema, text: string) => grammarFeed(grammarStart({ kind: "json", schema }), text).length > 0;

/** Each candidate with a validator's verdict; the grammar must agree on every one. */
function agrees(schema: JsonSchema, cases: readonly (readonly [string, boolean])[]): void {
  for (const [text, valid] of cases) {
    const t0 = performance.now();
    assert.equal(takes(schema, text), valid, `${JSON.stringify(schema)} on ${text}: a validator says ${valid ? "valid" : "invalid"}`);
    assert.ok(performance.now() - t0 < 1000, `${text} took over a second`);
  }
}

/** compileSchema refuses `schema` with a SchemaError whose message matches `message`. */
function refuses(schema: unknown, message: RegExp): void {
  assert.throws(() => compileSchema(schema), (e: unknown) => e instanceof SchemaError && message.test(e.message), JSON.stringify(schema));
}

test("enum and const beside type take only the values of that type (a validator checks both)", () => {
  agrees({ type: "string", enum: ["a", 1, null] }, [['"a"', true], ["1", false], ["null", false]]);
  agrees({ type: ["integer", "null"], enum: [1, 1.5, null, "x"] }, [["1", true], ["null", true], ["1.5", false], ['"x"', false]]);
  agrees({ type: "number", const: 2 }, [["2", true]]);
  agrees({ type: "object", enum: [{ a: 1 }, [1]] }, [['{"a":1}', true], ["[1]", false]]);
  refuses({ type: "integer", const: 1.5 }, /"const" at # has no value of type "integer"/);
  refuses({ type: "string", const: null }, /"const" at # has no value of type "string"/);
  refuses({ properties: { x: { type: "boolean", enum: [0, 1] } } }, /"enum" at #\/properties\/x has no value of type "boolean"/);
});

test("oneOf is followed as anyOf, as vLLM's xgrammar and llama.cpp follow it (a schema vLLM serves is not refused)", () => {
  // Overlapping branches: every value either matches is written (1 matches both here, which a
  // validator would call invalid under oneOf; refusing the schema would refuse what vLLM serves).
  agrees({ oneOf: [{ type: "integer" }, { type: "number" }] }, [["1", true], ["1.5", true], ['"a"', false]]);
  agrees({ oneOf: [{ type: "string" }, { type: "integer" }, { type: "null" }] }, [['"a"', true], ["3", true], ["null", true], ["1.5", false]]);
  const shapes = {
    $defs: {
      Circle: { type: "object", properties: { kind: { const: "circle" }, r: { type: "number" } }, required: ["kind", "r"], additionalProperties: false },
      Square: { type: "object", properties: { kind: { const: "square" }, side: { type: "number" } }, required: ["kind", "side"], additionalProperties: false },
    },
    type: "array", items: { oneOf: [{ $ref: "#/$defs/Circle" }, { $ref: "#/$defs/Square" }] },
  };
  agrees(shapes, [['[{"kind": "circle", "r": 1}, {"side": 2, "kind": "square"}]', true], ['[{"kind": "circle", "side": 1}]', false]]);
  // A branch the decoder cannot follow is left out while another remains, as in anyOf.
  agrees({ oneOf: [{ type: "string" }, { type: "string", pattern: "^(?=a)" }] }, [['"b"', true]]);
});

test("a required property absent from properties takes any value when additionalProperties is absent", () => {
  const schema = { type: "object", properties: { a: { type: "integer" } }, required: ["a", "b"] };
  agrees(schema, [['{"a": 1, "b": [null]}', true], ['{"b": "x", "a": 2}', true], ['{"a": 1}', false], ['{"a": 1, "c": 1}', false]]);
  refuses({ type: "object", properties: { a: {} }, required: ["b"], additionalProperties: false }, /requires "b"/);
});

test("a schema whose values nest deeper than the decoder writes is refused, not left to a dead end", () => {
  let deep: unknown = { type: "integer" };
  for (let i = 0; i < 40; i++) deep = { type: "object", properties: { a: deep }, required: ["a"], additionalProperties: false };
  refuses(deep, /values at # must nest at least 40 levels deep; constrained decoding writes at most 30/);
  let arrays: unknown = { type: "string" };
  for (let i = 0; i < 35; i++) arrays = { type: "array", items: arrays, minItems: 1 };
  refuses({ type: "object", properties: { x: arrays } }, /values at #\/properties\/x must nest at least 35 levels deep/);
  // No finite value: every N holds another N.
  refuses({ $defs: { N: { type: "object", properties: { next: { $ref: "#/$defs/N" } }, required: ["next"] } }, $ref: "#/$defs/N" }, /no finite value/);
  refuses({ type: "object", properties: { loop: { $ref: "#/$defs/L" } }, $defs: { L: { type: "array", minItems: 1, items: { $ref: "#/$defs/L" } } } }, /no finite value/);
  // Recursion that may stop is followed, as deep as the decoder writes.
  const tree = { $defs: { T: { type: "object", properties: { v: { type: "integer" }, kids: { type: "array", items: { $ref: "#/$defs/T" } } }, required: ["v"] } }, $ref: "#/$defs/T" };
  agrees(tree, [['{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}', true], ['{"kids": []}', false]]);
  // Thirty levels fit, with room for a tool call's wrappers around them.
  let fits: unknown = { type: "integer" };
  for (let i = 0; i < 30; i++) fits = { type: "object", properties: { a: fits }, required: ["a"], additionalProperties: false };
  agrees(fits as JsonSchema, [['{"a": '.repeat(30) + "1" + "}".repeat(30), true]]);
});

test("an optional value that would nest past the limit is not started where it cannot end", () => {
  // Twenty optional levels, each of which may hold a value that needs twenty more.
  let need20: unknown = { type: "null" };
  for (let i = 0; i < 20; i++) need20 = { type: "array", items: need20, minItems: 1 };
  let chain: unknown = { type: "null" };
  for (let i = 0; i < 20; i++) chain = { type: "object", properties: { down: chain, heavy: need20 }, additionalProperties: false };
  const schema = chain as JsonSchema;
  const open = '{"down": '.repeat(15);
  assert.ok(starts(schema, `${'{"down": '.repeat(5)}{"heavy": [`), "at depth 6 twenty more levels fit");
  assert.ok(!starts(schema, `${open}{"heavy": [`), "at depth 16 twenty more levels cannot fit: the array is not started");
  assert.ok(takes(schema, `${open}{}${"}".repeat(15)}`), "but the object may close");
  assert.equal(MAX_DEPTH, 32);
});

test("numbers: exclusive bounds, negative zero, fractions and steps agree with a validator", () => {
  agrees({ type: "number", exclusiveMinimum: 0 }, [["-0", false], ["0", false], ["0.0", false], ["-0.0", false], ["0.001", true]]);
  agrees({ type: "integer", exclusiveMaximum: 0 }, [["-0", false], ["-1", true], ["0", false]]);
  agrees({ type: "integer", maximum: 0 }, [["-0", true], ["0", true], ["1", false]]);
  agrees({ type: "number", maximum: 0.1 }, [["0.1", true], ["0.11", false], ["0.1000001", false], ["0.09999", true]]);
  agrees({ type: "number", exclusiveMinimum: 1e-7 }, [["0.0000001", false], ["0.00000011", true]]);
  agrees({ type: "number", minimum: 1, exclusiveMinimum: true, maximum: 2 }, [["1", false], ["2", true], ["1.5", true]]);
  agrees({ type: "number", multipleOf: 0.01 }, [["0.07", true], ["0.075", false], ["1.10", true], ["-3.14", true]]);
  agrees({ type: "integer", multipleOf: 3, minimum: -4 }, [["-3", true], ["-6", false], ["0", true], ["-0", true], ["4", false]]);
  agrees({ type: ["integer", "null"], minimum: 2 }, [["null", true], ["1", false], ["2", true]]);
});

test("strings: lengths in code points, unanchored ECMA-262 patterns, formats", () => {
  agrees({ type: "string", minLength: 2, maxLength: 2 }, [['"😀😀"', true], ['"😀"', false], ['"\\ud83d\\ude00a"', true], ['"é"', false], ['"\\n\\\\"', true]]);
  agrees({ type: "string", pattern: "b" }, [['"abc"', true], ['"ac"', false]]);
  agrees({ type: "string", pattern: "^abc$" }, [['"abc\\n"', false], ['"abc"', true]]);
  agrees({ type: "string", pattern: "^.$" }, [['"\\n"', false], ['"\\u2028"', false], ['"😀"', true], ['"\\r"', false]]);
  agrees({ type: "string", pattern: "^\\s$" }, [['"\\u00a0"', true], ['"\\ufeff"', true], ['"\\u2003"', true], ['"x"', false]]);
  agrees({ type: "string", pattern: "^\\w\\d$" }, [['"a1"', true], ['"é1"', false], ['"a١"', false]]);
  agrees({ type: "string", format: "date" }, [['"2024-02-29"', true], ['"2023-02-29"', false], ['"2024-13-01"', false]]);
  agrees({ type: "string", format: "date-time" }, [['"2024-01-01T00:00:00Z"', true], ['"2024-01-01t00:00:00z"', true], ['"2024-01-01T00:00:00"', false]]);
  agrees({ type: "string", format: "uuid" }, [['"123E4567-e89b-12d3-a456-426614174000"', true], ['"123e4567e89b12d3a456426614174000"', false]]);
  agrees({ type: "string", format: "email" }, [['"a@b.co"', true], ['"a@@b"', false], ['"@b.co"', false]]);
});

test("objects and arrays: keys once, unicode names, schema-valued additionalProperties, unique items", () => {
  agrees({ type: "object", properties: { a: { type: "integer" } }, additionalProperties: { type: "string" } }, [
    ['{"a": 1, "ab": "x"}', true], ['{"a": "x"}', false], ['{"b": 1}', false], ['{"a": 1, "a": 2}', false],
  ]);
  agrees({ type: "object", properties: { "名前": { type: "string" }, "😀": { const: "é" } }, required: ["名前"], additionalProperties: false }, [
    ['{"名前": "x", "😀": "é"}', true], ['{"😀": "é"}', false], ['{"名": "x"}', false],
  ]);
  agrees({ type: "array", uniqueItems: true, items: { type: "number" } }, [["[1, 1.0]", false], ["[1, 1e0]", false], ["[0, -0]", false], ["[1, 2]", true]]);
  agrees({ type: "array", uniqueItems: true, items: { type: "string" } }, [['["a", "\\u0061"]', false], ['["a", "b"]', true]]);
  agrees({ type: "array", prefixItems: [{ type: "integer" }, { type: "string" }], minItems: 2 }, [['[1, "a", null]', true], ["[1]", false]]);
  agrees({ type: "object", properties: { a: { anyOf: [{ type: "string" }, { type: "null" }], default: null, title: "A" } } }, [['{"a": null}', true], ["{}", true], ['{"a": 1}', false]]);
});

test("keywords the decoder cannot follow are refused by name, never ignored", () => {
  const cases: [unknown, RegExp][] = [
    [{ not: { type: "null" } }, /"not"/], [{ type: "object", if: {}, then: {} }, /"if"/], [{ type: "object", dependentRequired: { a: ["b"] } }, /"dependentRequired"/],
    [{ type: "object", patternProperties: { "^x": {} } }, /"patternProperties"/], [{ type: "array", contains: {} }, /"contains"/],
    [{ type: "object", minProperties: 1 }, /"minProperties"/], [{ type: "object", unevaluatedProperties: false }, /"unevaluatedProperties"/],
    [{ allOf: [{ type: "object" }, { required: ["a"] }] }, /"allOf"/], [{ type: "string", pattern: "(a)\\1" }, /backreference/],
    [{ type: "object", propertyNames: { pattern: "^a" } }, /"propertyNames"/], [{ type: "string", format: "iri" }, /"format" "iri"/],
  ];
  for (const [schema, message] of cases) refuses(schema, message);
});

test("a strict tool's parameters that would be followed wrong are a 400 naming the keyword and the function", () => {
  const what = 'The parameters of function "f"';
  const cases: [unknown, RegExp][] = [
    [{ type: "object", properties: { mode: { type: "string", const: 0 } } }, /"const" at #\/properties\/mode has no value of type "string"/],
  ];
  for (const [schema, message] of cases) {
    assert.throws(() => checkSchema(schema, "tools", what), (e: unknown) =>
      e instanceof ApiError && e.status === 400 && e.param === "tools" && e.message.startsWith(`${what} cannot be followed: `) && message.test(e.message));
  }
  // An enum with some values of another type is followed with the rest, not refused.
  checkSchema({ type: "object", properties: { mode: { type: "string", enum: ["a", 0] } }, required: ["mode"] }, "tools", what);
});

test("compileSchema() refuses property names holding a quote, a backslash or a control character, and keeps others", () => {
  for (const name of ['a"b', "a\\b", "a\u0000b", "tab\there", "\u001f"]) {
    assert.throws(() => compileSchema({ type: "object", properties: { [name]: { type: "string" } } }), (e: Error) => e instanceof SchemaError && /quote, backslash or control character/.test(e.message), JSON.stringify(name));
  }
  for (const name of ["plain", "space here", "\u007f", "ünï", "emoji 😀"]) compileSchema({ type: "object", properties: { [name]: { type: "string" } } });
});

/** Arrays in constrained decoding: tuples (`prefixItems`, draft 4's `items` lists) and `uniqueItems`. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, grammarStep, type GrammarState, type OutputGrammar } from "../../src/engine/grammar.ts";
import { compileSchema, type JsonSchema } from "../../src/engine/json-schema.ts";

const json = (schema: JsonSchema): OutputGrammar => ({ kind: "json", schema });
/** Whether `text` can start output under `schema` (and, with `whole`, end it). */
const fits = (schema: JsonSchema, text: string, whole = false) => {
  const s = grammarFeed(grammarStart(json(schema)), text);
  return whole ? grammarComplete(s) : s.length > 0;
};

test("grammarStart() follows prefixItems: each position its own schema, then items for the rest", () => {
  const pair = { type: "array", prefixItems: [{ type: "integer" }, { type: "string" }], items: false };
  assert.ok(fits(pair, '[1, "a"]', true));
  for (const bad of ['["a"', '[1, 2', '[1, "a", ']) assert.ok(!fits(pair, bad), `accepted ${bad}`);
  assert.ok(fits(pair, "[1]", true), "without minItems a tuple may stop early (JSON Schema's meaning)");
  const rest = { type: "array", prefixItems: [{ type: "string" }, { enum: [1, 2] }], items: { type: "boolean" } };
  for (const ok of ['["x", 2, true, false, true]', '["x", 1]', '["x"]', "[]"]) assert.ok(fits(rest, ok, true), ok);
  for (const bad of ['["x", 3', '["x", 1, 1', "[true"]) assert.ok(!fits(rest, bad), `accepted ${bad}`);
  const anyRest = { prefixItems: [{ const: "op" }] };
  assert.ok(fits(anyRest, '["op", {"k": [null]}, 3.5]', true), "an absent items schema allows any items after the tuple");
  assert.ok(!fits(anyRest, '["no"'));
  const exact = { type: "array", prefixItems: [{ type: "null" }, { type: "null" }, { type: "integer" }], minItems: 3, maxItems: 3 };
  assert.ok(fits(exact, "[null, null, 7]", true));
  assert.ok(!fits(exact, "[null, null]", true) && !fits(exact, "[null, null, 7,") && !fits(exact, "[null, 7"));
});

test("grammarStart() follows draft 4's items list with additionalItems", () => {
  const triple = { type: "array", items: [{ type: "number" }, { type: "number" }], additionalItems: false };
  assert.ok(fits(triple, "[1.5, -2]", true));
  assert.ok(!fits(triple, "[1.5, -2, ") && !fits(triple, '[1.5, "'));
  const more = { type: "array", items: [{ type: "string" }], additionalItems: { type: "integer" } };
  assert.ok(fits(more, '["a", 1, 2, 3]', true));
  assert.ok(!fits(more, '["a", "b"'));
  assert.ok(fits({ type: "array", items: [{ type: "string" }] }, '["a", {}, []]', true), "absent additionalItems allows any");
});

test("grammarStart() counts a long tuple exactly: the item after position k is the schema at k", () => {
  // Fifteen positions alternating integer and string, no maximum: each must be told apart.
  const prefix = Array.from({ length: 15 }, (_, i) => ({ type: i % 2 === 0 ? "integer" : "string" }));
  const schema = { type: "array", prefixItems: prefix, items: { type: "null" } };
  let s: GrammarState = grammarFeed(grammarStart(json(schema)), "[");
  for (let i = 0; i < 18; i++) {
    const ok = i >= 15 ? "null" : i % 2 === 0 ? "7" : '"s"';
    const wrong = i >= 15 ? "7" : i % 2 === 0 ? '"s"' : "7";
    if (i > 0) s = grammarFeed(s, ",");
    assert.equal(grammarFeed(s, wrong).length, 0, `position ${i} refuses ${wrong}`);
    s = grammarFeed(s, ok);
    assert.ok(s.length > 0, `position ${i} takes ${ok}`);
  }
  assert.ok(grammarComplete(grammarStep(s, "]")));
});

test("compileSchema() refuses tuples it cannot follow, naming the keyword and its place", () => {
  const cases: [unknown, RegExp][] = [
    [{ type: "array", prefixItems: [{ type: "string" }], items: false, minItems: 2 }, /minItems 2 above the 1 items its tuple allows/],
    [{ type: "array", additionalItems: false }, /"additionalItems" at # needs an "items" list before it/],
    [{ type: "array", prefixItems: { type: "string" } }, /"prefixItems" at # must be a list of schemas/],
    [{ type: "array", prefixItems: [{ type: "string" }], items: [{ type: "string" }] }, /both "prefixItems" and an "items" list/],
    [{ type: "array", prefixItems: [{ type: "strin" }] }, /type "strin" at #\/prefixItems\/0/],
  ];
  for (const [schema, message] of cases) assert.throws(() => compileSchema(schema), { name: "SchemaError", message }, JSON.stringify(schema));
});

/** Every text of at most `depth` characters of `alphabet` the grammar allows, with its state. */
function walk(state: GrammarState, alphabet: readonly string[], depth: number, visit: (text: string, s: GrammarState) => void, text = ""): void {
  visit(text, state);
  if (depth === 0) return;
  for (const c of alphabet) {
    const next = grammarStep(state, c);
    if (next.length > 0) walk(next, alphabet, depth - 1, visit, text + c);
  }
}

/** Whether some continuation of at most `depth` characters of `alphabet` completes the value. */
function completable(state: GrammarState, alphabet: readonly string[], depth: number): boolean {
  if (grammarComplete(state)) return true;
  return depth > 0 && alphabet.some((c) => {
    const next = grammarStep(state, c);
    return next.length > 0 && completable(next, alphabet, depth - 1);
  });
}

/** Whether the items of a JSON array are pairwise unequal (numbers by value, strings decoded). */
const distinct = (items: unknown[]) => new Set(items.map((x) => JSON.stringify(x))).size === items.length;

const UNIQUE_CASES: [JsonSchema, string, number][] = [
  // schema, alphabet, and how many whole arrays of at most 14 characters it allows
  [{ type: "array", uniqueItems: true, items: { enum: ["a", "b", "c"] } }, '[]",abc', 16],
  [{ type: "array", uniqueItems: true, items: { type: "boolean" } }, "[],truefals", 5],
  [{ type: "array", uniqueItems: true, items: { type: "integer", minimum: 0, maximum: 2 } }, "[],0123-", 27], // 0 also as -0
  [{ type: "array", uniqueItems: true, items: { type: "string", pattern: "^[ab]$" } }, '[]",ab', 5],
  [{ type: "array", uniqueItems: true, items: { type: "integer" }, maxItems: 3 }, "[],01-", 0],
  [{ type: "array", uniqueItems: true, items: { anyOf: [{ type: "string", maxLength: 1 }, { const: "x" }, { type: "null" }] } }, '[]",xnul', 0],
  [{ type: "array", uniqueItems: true, prefixItems: [{ enum: [1, 2] }], items: { type: "integer", minimum: 1, maximum: 2 } }, "[],12", 5],
];

for (const [schema, alphabet, wholes] of UNIQUE_CASES) {
  test(`grammarStart() writes only arrays of distinct items, and never a dead end, for ${JSON.stringify(schema)}`, () => {
    const chars = [...alphabet];
    let whole = 0;
    walk(grammarStart(json(schema)), chars, 14, (text, s) => {
      assert.ok(completable(s, chars, 12), `${JSON.stringify(text)} was allowed but cannot be completed`);
      if (!grammarComplete(s)) return;
      whole++;
      const items = JSON.parse(text) as unknown[];
      assert.ok(distinct(items), `${text} repeats an item`);
    });
    if (wholes > 0) assert.equal(whole, wholes, "every array of distinct items, and no other");
    else assert.ok(whole >= 5, `only ${whole} arrays written`);
  });
}

test("grammarStart() compares unique items by value: escapes decoded, numbers by their value", () => {
  const strings = { type: "array", uniqueItems: true, items: { type: "string" } };
  assert.ok(!fits(strings, '["a", "\\u0061"]') && !fits(strings, '["ab", "ab"]'));
  assert.ok(fits(strings, '["ab", "ab'), "an item equal so far to an earlier one may still grow");
  assert.ok(fits(strings, '["ab", "abc", "a"]', true));
  const numbers = { type: "array", uniqueItems: true, items: { type: "number" } };
  for (const bad of ["[1, 1.0]", "[1, 1e0]", "[0, -0]", "[100, 1e2]", "[0.5, 5e-1]"]) assert.ok(!fits(numbers, bad), `accepted ${bad}`);
  assert.ok(fits(numbers, "[1, 1.05, 10, -1, 0]", true));
  const integers = { type: "array", uniqueItems: true, items: { type: "integer" } };
  assert.ok(!fits(integers, "[0, 0") && !fits(integers, "[0, -0"), "an integer 0 cannot grow: barred before it is written twice");
  assert.ok(fits(integers, "[0, 1, 10, -1]", true));
  const mixed = { type: "array", uniqueItems: true, items: { anyOf: [{ enum: ["x", 2] }, { type: "string" }, { type: "number" }] } };
  assert.ok(!fits(mixed, '["x", "x"]') && !fits(mixed, "[2, 2.0]") && !fits(mixed, '["x", "\\u0078"]'), "an enum value and a free value that equals it");
  assert.ok(fits(mixed, '["x", 2, "2", "y"]', true), "a string and a number are never equal");
});

test("compileSchema() refuses uniqueItems it cannot follow, naming the keyword and its place", () => {
  const cases: [unknown, RegExp][] = [
    [{ type: "array", uniqueItems: true }, /"uniqueItems" at # is followed only for items that are strings, numbers, booleans, null or enum values; the items at #\/items may be objects or arrays/],
    [{ type: "array", uniqueItems: true, items: { type: "object" } }, /the items at #\/items may be objects/],
    [{ properties: { p: { type: "array", uniqueItems: true, items: { $ref: "#/$defs/v" } } }, $defs: { v: { anyOf: [{ type: "string" }, { type: "array" }] } } }, /"uniqueItems" at #\/properties\/p/],
    [{ type: "array", uniqueItems: true, items: { enum: ["a", "b"] }, minItems: 3 }, /minItems 3, but its unique items can take only 2 values/],
    [{ type: "array", uniqueItems: true, items: { anyOf: [{ type: "integer", minimum: -1, maximum: 1 }, { type: "boolean" }] }, minItems: 6 }, /minItems 6, but its unique items can take only 5 values/],
    [{ type: "array", uniqueItems: true, items: { type: "integer", multipleOf: 5, exclusiveMinimum: 0, maximum: 20 }, minItems: 5 }, /can take only 4 values/],
    [{ type: "array", uniqueItems: "yes" }, /"uniqueItems" at # must be a boolean, got "yes"/],
  ];
  for (const [schema, message] of cases) assert.throws(() => compileSchema(schema), { name: "SchemaError", message }, JSON.stringify(schema));
  compileSchema({ type: "array", uniqueItems: true, items: { type: "integer", minimum: -1, maximum: 1 }, minItems: 3 });
  compileSchema({ type: "array", uniqueItems: true, items: { anyOf: [{ type: "integer", minimum: 0, maximum: 1 }, { type: "string", maxLength: 1 }] }, minItems: 9 });
  // Items reached through a reference defined after the array are checked once every definition is compiled.
  compileSchema({ $defs: { list: { type: "array", uniqueItems: true, items: { $ref: "#/$defs/tag" } }, tag: { enum: ["a", "b"] } }, $ref: "#/$defs/list" });
});

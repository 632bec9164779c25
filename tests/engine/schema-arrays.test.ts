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

/**
 * `$ref` inside a subschema with its own `$id` (json-schema-resources.ts): that subschema is a new
 * resource (JSON Schema 2020-12 §8.2.1, draft-07 §8.2), so `#/…` and `#` inside it point into it, not
 * into the root (they resolved against the root before: the root's definition of the same name, or a
 * dangling-ref SchemaError). An embedded resource may also be named by its exact `$id`.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart } from "../../src/engine/grammar.ts";
import { compileSchema, type JsonSchema, SchemaError } from "../../src/engine/json-schema.ts";

/** Whether the grammar of `schema` takes `text` whole. */
const takes = (schema: JsonSchema, text: string) => grammarComplete(grammarFeed(grammarStart({ kind: "json", schema }), text));

/** The grammar takes exactly the candidates marked valid. */
function agrees(schema: JsonSchema, cases: readonly (readonly [string, boolean])[]): void {
  for (const [text, valid] of cases) assert.equal(takes(schema, text), valid, `${JSON.stringify(schema)} on ${text}`);
}

/** compileSchema refuses `schema` with a SchemaError whose message matches `message`. */
function refuses(schema: unknown, message: RegExp): void {
  assert.throws(() => compileSchema(schema), (e: unknown) => e instanceof SchemaError && message.test(e.message), JSON.stringify(schema).slice(0, 200));
}

/** A root whose `X` is an integer, and an embedded resource `item` whose own `X` is a string. */
const NESTED: JsonSchema = {
  $id: "https://example.com/root.json",
  type: "object",
  $defs: { X: { type: "integer" } },
  properties: {
    n: { $ref: "#/$defs/X" },
    item: {
      $id: "item.json",
      $defs: { X: { type: "string", enum: ["a", "b"] } },
      type: "object",
      properties: { x: { $ref: "#/$defs/X" } },
      required: ["x"],
      additionalProperties: false,
    },
  },
  required: ["n", "item"],
  additionalProperties: false,
};

test("A local pointer inside a subschema with its own $id points into that subschema; the root's own #/$defs/X still applies outside", () => {
  agrees(NESTED, [
    ['{"n": 1, "item": {"x": "a"}}', true],
    ['{"n": 1, "item": {"x": "b"}}', true],
    // The root's X (an integer) does not apply inside the item, nor the item's X outside.
    ['{"n": 1, "item": {"x": 1}}', false],
    ['{"n": 1, "item": {"x": "c"}}', false],
    ['{"n": "a", "item": {"x": "a"}}', false],
  ]);
});

test("A definition only the embedded resource has is found there (a dangling-ref SchemaError before), and # inside it is the subschema", () => {
  const only = {
    type: "object",
    properties: { item: { $id: "urn:item", $defs: { Y: { type: "boolean" } }, type: "array", items: { $ref: "#/$defs/Y" }, maxItems: 2 } },
    required: ["item"],
    additionalProperties: false,
  };
  agrees(only, [['{"item": [true, false]}', true], ['{"item": [1]}', false]]);
  // `#` inside the resource recurses into it, not into the root.
  const tree = {
    type: "object",
    properties: { tree: { $id: "tree.json", type: "array", items: { anyOf: [{ type: "integer" }, { $ref: "#" }] } } },
    required: ["tree"],
    additionalProperties: false,
  };
  agrees(tree, [['{"tree": [1, [2, []]]}', true], ['{"tree": [1, {"tree": []}]}', false]]);
  // A pointer to nothing in the resource names its place from the root.
  refuses({ properties: { item: { $id: "item.json", $ref: "#/$defs/Gone" } } }, /"#\/properties\/item\/\$defs\/Gone" names no definition/);
  // A fragment-only $id (draft-07's plain-name anchor) starts no resource.
  agrees({ $defs: { X: { type: "integer" } }, type: "array", items: { $id: "#anchor", $ref: "#/$defs/X" } }, [["[1]", true], ['["a"]', false]]);
});

test("An embedded resource is named by its exact $id, with or without a pointer after it; other documents stay refused", () => {
  const byId = {
    $defs: { X: { type: "integer" } },
    type: "array",
    prefixItems: [{ $ref: "item.json" }, { $ref: "item.json#/$defs/X" }, { $ref: "#/$defs/X" }],
    items: false,
    definitions: { item: { $id: "item.json", $defs: { X: { type: "boolean" } }, type: "string" } },
  };
  agrees(byId, [['["s", true, 1]', true], ['[1, true, 1]', false], ['["s", 1, 1]', false], ['["s", true, true]', false]]);
  refuses({ $ref: "other.json" }, /"other\.json" at # is not supported: .*not references to other documents/);
  refuses({ $defs: { a: { $id: "a.json" }, b: { $id: "a.json" } }, $ref: "a.json" }, /"a\.json" at # is ambiguous: 2 subschemas carry the "\$id" "a\.json"/);
});

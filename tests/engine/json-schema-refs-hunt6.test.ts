/**
 * `$ref` as real clients write it (json-schema-refs.ts): zod-to-json-schema's default
 * `$refStrategy: "root"` points anywhere in the schema (`#/properties/a`, `#/definitions/Foo/properties/bar`,
 * `#` for recursion), pydantic writes `#/$defs/Name`. Every local JSON pointer is followed (RFC 6901
 * escapes, a URI fragment's percent-encoding); a pointer to nothing, another document, or recursion
 * with no finite value is a SchemaError naming it; references count toward the open-branch bound.
 * Checked on the token-level grammar, and on what stories260K writes under it (greedy and seeded).
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { grammarComplete, grammarFeed, grammarStart } from "../../src/engine/grammar.ts";
import { compileSchema, type JsonSchema, MAX_OPEN_BRANCHES, SchemaError } from "../../src/engine/json-schema.ts";
import { loadModel } from "../../src/model/load.ts";

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

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = { readonly [k: string]: unknown };

/** The value JSON pointer fragment `ref` names in `root` (a validator's own resolution, for the check below). */
function pointTo(root: Schema, ref: string): Schema {
  const tokens = decodeURIComponent(ref.slice(1)).split("/").slice(1).map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
  return tokens.reduce<unknown>((cur, t) => (cur as Record<string, unknown>)[t], root) as Schema;
}

/** A small validator for the keywords the schemas below use (type, properties, required, additionalProperties, items, maxItems, enum, $ref, anyOf). */
function valid(v: Json, s: Schema, root: Schema): boolean {
  if (typeof s.$ref === "string") return valid(v, pointTo(root, s.$ref), root);
  if (Array.isArray(s.anyOf)) return (s.anyOf as Schema[]).some((o) => valid(v, o, root));
  if (Array.isArray(s.enum)) return s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v));
  switch (s.type) {
    case "integer": return typeof v === "number" && Number.isInteger(v);
    case "string": return typeof v === "string";
    case "boolean": return typeof v === "boolean";
    case "array": {
      if (!Array.isArray(v) || v.length > ((s.maxItems as number | undefined) ?? Infinity)) return false;
      return v.every((x) => valid(x, s.items as Schema, root));
    }
    case "object": {
      if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
      const props = (s.properties ?? {}) as Record<string, Schema>;
      if (((s.required ?? []) as string[]).some((k) => !(k in v))) return false;
      return Object.entries(v).every(([k, x]) => (k in props ? valid(x, props[k], root) : s.additionalProperties !== false));
    }
  }
  return false;
}

/** zod-to-json-schema's output for a recursive tree with a reused enum (`$refStrategy: "root"`). */
const ZOD_TREE: Schema = {
  type: "object",
  properties: {
    mood: { type: "string", enum: ["happy", "sad"] },
    again: { $ref: "#/properties/mood" },
    kids: { type: "array", items: { $ref: "#" }, maxItems: 2 },
  },
  required: ["mood", "again"],
  additionalProperties: false,
};

test("Pointer references zod-to-json-schema writes are followed: #/properties/…, deep paths, #/definitions/X/properties/…, # recursion", () => {
  agrees(ZOD_TREE, [
    ['{"mood": "happy", "again": "sad"}', true],
    ['{"mood": "happy", "again": "ok"}', false],
    ['{"mood": "sad", "again": "sad", "kids": [{"mood": "happy", "again": "happy", "kids": []}]}', true],
    ['{"mood": "sad", "again": "sad", "kids": [{"mood": "happy"}]}', false],
    ['{"mood": "sad", "again": "sad", "kids": [{}, {}, {}]}', false],
  ]);
  // A path through items and a nested object's properties, and one into a definition's property.
  const deep = {
    type: "object",
    properties: {
      items: { type: "array", items: { type: "object", properties: { x: { type: "integer" } }, required: ["x"], additionalProperties: false } },
      same: { $ref: "#/properties/items/items/properties/x" },
      bar: { $ref: "#/definitions/Foo/properties/bar" },
    },
    required: ["same", "bar"],
    additionalProperties: false,
    definitions: { Foo: { type: "object", properties: { bar: { type: "boolean" } } } },
  };
  agrees(deep, [['{"same": 3, "bar": true}', true], ['{"same": "3", "bar": true}', false], ['{"same": 3, "bar": 1}', false], ['{"items": [{"x": 1}], "same": 0, "bar": false}', true]]);
  // Pydantic's $defs still work, and a list index names an entry.
  agrees({ $defs: { N: { type: "integer" } }, prefixItems: [{ $ref: "#/$defs/N" }, { type: "string" }], items: { $ref: "#/prefixItems/1" } }, [['[1, "a", "b"]', true], ['[1, "a", 2]', false]]);
});

test("Pointer tokens unescape ~0 and ~1 (RFC 6901) and a URI fragment's percent-encoding", () => {
  const s = {
    $defs: { "a/b": { type: "integer" }, "c~d": { type: "boolean" }, "e f": { type: "string" }, "100%": { const: "full" } },
    type: "array",
    prefixItems: [{ $ref: "#/$defs/a~1b" }, { $ref: "#/$defs/c~0d" }, { $ref: "#/$defs/e%20f" }, { $ref: "#/%24defs/100%25" }, { $ref: "#/$defs/100%" }],
    items: false,
  };
  agrees(s, [['[1, true, "x", "full", "full"]', true], ['[true, true, "x", "full", "full"]', false], ['[1, 1, "x", "full", "full"]', false], ['[1, true, 2, "full", "full"]', false]]);
  refuses({ $defs: { a: { type: "integer" } }, $ref: "#/$defs/a~2" }, /"#\/\$defs\/a~2" at # is not a valid JSON pointer/);
});

test("Recursion through # compiles when values can end; unavoidable recursion, and references round to themselves, are SchemaErrors", () => {
  compileSchema({ type: "object", properties: { next: { $ref: "#" } } });
  agrees({ anyOf: [{ type: "integer" }, { type: "array", items: { $ref: "#" } }] }, [["[1, [2, []]]", true], ['[1, ["a"]]', false]]);
  refuses({ type: "object", properties: { next: { $ref: "#" } }, required: ["next"] }, /at # has no finite value/);
  refuses({ type: "array", minItems: 1, items: { $ref: "#" } }, /no finite value/);
  refuses({ $ref: "#" }, /"#" refers to itself without a value in between/);
  // A union that names itself among its branches: its grammar would start without end (a stack overflow before).
  refuses({ anyOf: [{ $ref: "#" }, { type: "string" }] }, /"#" refers to itself without a value in between/);
  refuses({ $defs: { A: { anyOf: [{ $ref: "#/$defs/A" }, { type: "string" }] } }, $ref: "#/$defs/A" }, /"#\/\$defs\/A" refers to itself/);
  refuses({ type: "object", properties: { a: { $ref: "#/properties/b" }, b: { $ref: "#/properties/a" } } }, /"#\/properties\/[ab]" refers to itself/);
});

test("A pointer to nothing names the pointer (never dropped as an anyOf branch); other documents and anchors are refused", () => {
  refuses({ type: "object", properties: { a: { $ref: "#/properties/zz" } } }, /"#\/properties\/zz" names no definition: the schema has nothing named "zz" at "#\/properties" \(the reference is at #\/properties\/a\)/);
  refuses({ type: "array", prefixItems: [{ type: "string" }], items: { $ref: "#/prefixItems/1" } }, /"#\/prefixItems\/1" names no definition/);
  refuses({ anyOf: [{ type: "string" }, { $ref: "#/definitions/Gone" }] }, /"#\/definitions\/Gone" names no definition/);
  refuses({ type: "string", $defs: { a: { type: "array", items: { $ref: "#/$defs/gone" } } } }, /"#\/\$defs\/gone" names no definition/);
  for (const ref of ["http://example.com/s.json#/$defs/A", "other.json#/definitions/X", "other.json"]) {
    refuses({ $ref: ref }, new RegExp(`"${ref.replaceAll("$", "\\$").replaceAll(".", "\\.")}" at # is not supported: .*not references to other documents`));
  }
  refuses({ $ref: "#foo" }, /"#foo" at # is not supported: a plain-name fragment needs "\$anchor"/);
  refuses({ $ref: 5 }, /reference 5 at # must be a string/);
});

test("References count toward the open-branch bound as the branches they name (they went uncounted before)", () => {
  const wide = { anyOf: Array.from({ length: 600 }, (_, i) => ({ type: "object", properties: { [`k${i}`]: { type: "integer" } }, required: [`k${i}`] })) };
  // One reference to the wide union is within the bound; two open 1200 branches at one place.
  compileSchema({ $defs: { W: wide }, type: "array", items: { $ref: "#/$defs/W" } });
  refuses({ $defs: { W: wide }, anyOf: [{ $ref: "#/$defs/W" }, { $ref: "#/$defs/W" }] }, new RegExp(`at # has more than ${MAX_OPEN_BRANCHES} branches open at once \\(1200`));
  // Through a chain of unions of references, and through a pointer to an inline union.
  refuses({ $defs: { W: wide, V: { anyOf: [{ $ref: "#/$defs/W" }, { type: "null" }] } }, properties: { p: { anyOf: [{ $ref: "#/$defs/V" }, { $ref: "#/$defs/W" }] } } }, /at #\/properties\/p has more than 1000 branches open at once \(1201/);
  refuses({ properties: { a: wide, b: { anyOf: [{ $ref: "#/properties/a" }, { $ref: "#/properties/a" }] } } }, /at #\/properties\/b has more than 1000 branches/);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });

async function generate(extra: Partial<GenerateRequest>) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    return await e.submit({ prompt, maxTokens: 200, ...extra }).result;
  } finally {
    await e.stop();
  }
}

test("The engine under a schema of pointer references writes values that validate against it (stories260K, greedy and seeded)", async () => {
  const schemas: Schema[] = [
    ZOD_TREE,
    {
      type: "object",
      properties: { tag: { $ref: "#/definitions/Foo/properties/bar" }, n: { $ref: "#/properties/list/items" }, list: { type: "array", items: { type: "integer" }, maxItems: 2 } },
      required: ["tag", "n"],
      additionalProperties: false,
      definitions: { Foo: { type: "object", properties: { bar: { enum: ["x", "y", "z"] } } } },
    },
  ];
  for (const schema of schemas) {
    let finished = 0;
    for (const run of [{ temperature: 0 }, { temperature: 1, seed: 1 }, { temperature: 1, seed: 2 }, { temperature: 1, seed: 3 }]) {
      const result = await generate({ grammar: { kind: "json", schema }, ...run });
      assert.ok(takes(schema, result.text) || result.finishReason === "length", `${JSON.stringify(run)}: ${result.text}`);
      if (result.finishReason !== "stop") continue; // a sampled tree may grow past max_tokens
      finished++;
      assert.ok(valid(JSON.parse(result.text) as Json, schema, schema), `${JSON.stringify(run)} wrote ${result.text}, which the schema does not validate`);
    }
    assert.ok(finished >= 2, `only ${finished} of 4 runs ended`);
  }
});

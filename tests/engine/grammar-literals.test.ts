/**
 * Long literal lists (grammar-literals.ts): an `enum` or `choice` of many values stepped as one sorted
 * run accepts exactly the values and their prefixes (values that are prefixes of others, repeats,
 * characters outside the Basic Multilingual Plane), forces the text all remaining values share, and
 * keeps a token mask's cost flat as the list grows.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { literalNode } from "../../src/engine/json-schema.ts";
import { OutputConstraint } from "../../src/engine/output-constraint.ts";
import { TokenTrie } from "../../src/engine/token-trie.ts";

const VALUES = ["a", "ab", "abc", "abd", "b", "b😀", "b😀x", "b😁", "ba", "zz", "ab", "é", "éa", "\u{1F600}"];

/** Every prefix of every string, with a few strings that are no value's prefix. */
function probes(values: readonly string[]): string[] {
  const out = new Set<string>(["", "c", "ax", "b😂", "abcd", "zzz", "😀"]);
  for (const v of values) for (let i = 1; i <= v.length; i++) out.add(v.slice(0, i));
  return [...out];
}

test("literalNode() sorts and dedupes a long list, and leaves a short one as given", () => {
  assert.deepEqual(literalNode(["b", "a"]), { t: "literal", texts: ["b", "a"] });
  const n = literalNode(VALUES);
  assert.ok(n.t === "literal" && n.sorted);
  assert.deepEqual(n.sorted, [...new Set(VALUES)].sort());
});

test("grammarFeed() over a choice list of many values accepts exactly the values, and every prefix of one", () => {
  const g: OutputGrammar = { kind: "choice", choices: VALUES };
  const set = new Set(VALUES);
  for (const p of probes(VALUES)) {
    const s = grammarFeed(grammarStart(g), p);
    // A lone UTF-16 half of a pair is no code point the grammar steps.
    const prefixOfSome = VALUES.some((v) => v.startsWith(p));
    assert.equal(s.length > 0, prefixOfSome, `prefix ${JSON.stringify(p)}`);
    if (s.length > 0) assert.equal(grammarComplete(s), set.has(p), `whole ${JSON.stringify(p)}`);
  }
});

test("grammarFeed() over a JSON enum of many values accepts each as JSON, and nothing else", () => {
  const values = ["red", "green", "greenish", 3, 30, null, true, "😀 smile", "re"];
  const g: OutputGrammar = { kind: "json", schema: { enum: values } };
  for (const v of values) assert.ok(grammarComplete(grammarFeed(grammarStart(g), JSON.stringify(v))), JSON.stringify(v));
  for (const bad of ['"gree"', '"redd"', "31", '"Red"', "false", '"😀 smil"']) {
    const s = grammarFeed(grammarStart(g), bad);
    assert.ok(s.length === 0 || !grammarComplete(s), bad);
  }
});

test("grammarForcedText() writes what the values still possible share, and stops where they part", () => {
  const g: OutputGrammar = { kind: "choice", choices: ["release-2024-01", "release-2024-02", "release-2025-01", "release-2025-07"] };
  assert.equal(grammarForcedText(grammarStart(g), 100).text, "release-202");
  assert.equal(grammarForcedText(grammarFeed(grammarStart(g), "release-2025"), 100).text, "-0");
  assert.equal(grammarForcedText(grammarFeed(grammarStart(g), "release-2025-0"), 100).text, "");
  assert.equal(grammarForcedText(grammarFeed(grammarStart(g), "release-2025-07"), 100).text, "");
});

test("OutputConstraint.next() masks over a 20 000-value enum allow exactly the tokens that continue a value", () => {
  const texts = ["<eos>", '"', "file_", "1", "2", "3", "_", ".ts", '.ts"', '"file_1', "x", "file_12", "9"];
  const values = Array.from({ length: 20000 }, (_, i) => `file_${i}.ts`);
  const c = new OutputConstraint({ kind: "json", schema: { enum: values } }, new TokenTrie(texts), [0]);
  const allowed = (out: number[]) => {
    const mask = c.next(out, 0);
    return texts.map((_, id) => id).filter((id) => mask.allows(id)).map((id) => texts[id]);
  };
  assert.deepEqual(allowed([]), ['"', '"file_1']);
  assert.deepEqual(allowed([1, 2]), ["1", "2", "3", "9"], "no value starts file__ or file_x");
  // "file_12" then ".ts\"" ends value 12; "file_129" too goes on.
  assert.deepEqual(allowed([1, 2, 3, 4]), ["1", "2", "3", ".ts", '.ts"', "9"]);
  assert.deepEqual(allowed([1, 2, 3, 4, 8]), ["<eos>"]);
});

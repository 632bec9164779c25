/** Escapes in JSON strings under the output grammar: surrogate pairs written as two `\u` escapes, and backslashes under patterns. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, grammarStateKey, grammarStep, type GrammarState, ObjectIds } from "../../src/engine/grammar.ts";
import type { JsonSchema } from "../../src/engine/json-schema.ts";

const start = (schema: JsonSchema): GrammarState => grammarStart({ kind: "json", schema });
/** Whether `text` is a whole value of `schema` to the grammar. */
const whole = (schema: JsonSchema, text: string) => grammarComplete(grammarFeed(start(schema), text));
/** Whether `text` can begin a value of `schema`. */
const begins = (schema: JsonSchema, text: string) => grammarFeed(start(schema), text).length > 0;

test("grammarStep() counts an escaped surrogate pair as one character toward minLength and maxLength", () => {
  // json.dumps writes an emoji as "\ud83d\ude00" (ensure_ascii): one character, as JSON.parse reads it.
  const pair = '"\\ud83d\\ude00"';
  assert.equal([...(JSON.parse(pair) as string)].length, 1);
  assert.equal(whole({ type: "string", minLength: 2 }, pair), false, "one character is under minLength 2");
  assert.equal(whole({ type: "string", minLength: 2 }, '"\\ud83d\\ude00a"'), true);
  assert.equal(whole({ type: "string", maxLength: 1 }, pair), true, "one character is within maxLength 1");
  assert.equal(whole({ type: "string", minLength: 1, maxLength: 1 }, '"\\uD83D\\uDE00"'), true);
  assert.equal(whole({ type: "string", maxLength: 1 }, '"\\ud83d\\ude00a"'), false);
});

test("grammarStep() refuses half a surrogate pair alone, as soon as no other half can follow", () => {
  const s: JsonSchema = { type: "string" };
  assert.equal(whole(s, '"\\ud83d"'), false, "a high half alone");
  assert.equal(begins(s, '"\\ud83dx'), false, "a high half before a plain character");
  assert.equal(begins(s, '"\\ud83d\\n'), false, "a high half before a short escape");
  assert.equal(begins(s, '"\\ud83d\\u00'), false, "a high half before an escape that is no low half");
  assert.equal(begins(s, '"\\ude'), false, "a low half alone");
  assert.equal(begins(s, '"\\udbff\\udf'), true);
  for (const text of ['"\\ud7ff\\ue000\\uffff\\u0000"', '"\\udbff\\udfff"', '"\\ud800\\udc00"']) assert.equal(whole(s, text), true, text);
  // Every value of a pair's escapes can still end: no dead end after any hex digit.
  for (const prefix of ['"\\u', '"\\ud', '"\\ud8', '"\\ud83', '"\\ud83d', '"\\ud83d\\', '"\\ud83d\\u', '"\\ud83d\\ud', '"\\ud83d\\ude', '"\\ud83d\\ude0']) {
    const state = grammarFeed(start(s), prefix);
    assert.ok(state.length > 0, prefix);
    assert.ok([..."0123456789abcdef\\u"].some((c) => grammarStep(state, c).length > 0), `something follows ${prefix}`);
  }
});

test("grammarStep() takes a backslash in a string under a pattern or format only where some escape can follow it", () => {
  const date: JsonSchema = { type: "string", format: "date" };
  assert.equal(whole(date, '"2020\\u002d01-31"'), true, "an escaped hyphen inside the date");
  assert.equal(begins(date, '"2020-01-31\\'), false, "nothing more may follow a whole date");
  assert.equal(begins({ type: "string", pattern: "^[a-z]{3}$" }, '"abc\\'), false, "the pattern has matched for good");
  assert.equal(begins({ type: "string", pattern: "^[a-z]+$" }, '"abc\\'), true, "\\u0064 writes a lowercase letter");
  assert.equal(begins({ type: "string", pattern: "^[a-z]+$" }, '"abc\\n'), false);
  assert.equal(whole({ type: "string", pattern: "^[a-z]+$" }, '"ab\\u0063"'), true);
  assert.equal(whole({ type: "string", pattern: "^a\\n$" }, '"a\\n"'), true);
  // Under a pattern a surrogate's escape cannot be stepped: refused at its first digits, not its last.
  assert.equal(begins({ type: "string", pattern: "^a.*$" }, '"a\\ud8'), false);
  assert.equal(begins({ type: "string", pattern: "^a.*$" }, '"a\\ud7f'), true);
});

test("grammarStateKey() tells apart a string's escape after a surrogate's high half from a fresh one", () => {
  const s = start({ type: "string" });
  const ids = new ObjectIds();
  const fresh = grammarFeed(s, '"\\u'), lowHalf = grammarFeed(s, '"\\ud83d\\u');
  assert.notEqual(grammarStateKey(lowHalf, ids), grammarStateKey(fresh, ids), "the mask cache must not share their masks");
  assert.equal(grammarStep(lowHalf, "0").length, 0);
  assert.ok(grammarStep(fresh, "0").length > 0);
});

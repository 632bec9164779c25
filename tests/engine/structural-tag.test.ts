/**
 * Structural tags (grammar.ts `structural_tag`, vLLM's): free text in which a trigger, once written
 * whole, must go on into one of its structures (the rest of the begin, a JSON value of the schema,
 * the end), then free text again; in the automaton and on the story model.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { TokenTrie } from "../../src/engine/output-constraint.ts";
import { SchemaError } from "../../src/engine/json-schema.ts";
import { loadModel } from "../../src/model/load.ts";
import { SET_UNIT_CALLS, UNIT } from "./set-unit-calls.ts";

const WEATHER = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false };
const TAG: OutputGrammar = {
  kind: "structural_tag",
  triggers: ["<function="],
  structures: [
    { begin: "<function=get_weather>", schema: WEATHER, end: "</function>" },
    { begin: "<function=get_time>", schema: { type: "object", properties: {}, additionalProperties: false }, end: "</function>" },
  ],
};

test("grammarStart() for a structural tag takes free text, and after a trigger only a whole structure", () => {
  const s = grammarStart(TAG);
  const ok = (text: string) => grammarComplete(grammarFeed(s, text));
  assert.ok(ok(""));
  assert.ok(ok("Let me check. <func is not a trigger> and <function but no equals"));
  assert.ok(ok('Sure. <function=get_weather>{"city": "Paris"}</function> Then <function=get_time>{}</function> done.'));
  assert.ok(!ok('<function=get_weather>{"city": "Paris"}'), "a structure must end");
  assert.equal(grammarFeed(s, "<function=get_wind>").length, 0, "no structure begins so");
  assert.equal(grammarFeed(s, '<function=get_weather>{"town": 1}').length, 0, "the schema holds");
  assert.equal(grammarFeed(s, "x<<function=get_time>{} ").length, 0, "the end follows the value");
  // After the trigger, what every structure shares is forced: here "get_".
  assert.equal(grammarForcedText(grammarFeed(s, "<function="), 40).text, "get_");
  assert.equal(grammarForcedText(grammarFeed(s, "<function=get_w"), 40).text, "eather>{");
});

test("TokenTrie.allowed() under a structural tag finds exactly the tokens a feed of every text accepts, trigger pieces inside tokens included", () => {
  // Tokens that hold a trigger's start, or a whole trigger, after plain text; and plain runs without one.
  const texts = ["Hi", " there", "ok<", "<f", "unc", "a<function=", "<function=get_time>", "<function=get_w", "<function=zz", "b<function=q", "{}", "</function>", "<", "=", "x", " ", "é", "tion=", "tion=x"];
  const trie = new TokenTrie(texts);
  for (const prefix of ["", "Hi <", "Hi <func", "<function=get_time>{}</function>"]) {
    const state = grammarFeed(grammarStart(TAG), prefix);
    const brute = texts.flatMap((t, id) => (grammarFeed(state, t).length > 0 ? [id] : []));
    assert.deepEqual(trie.allowed({ state, pending: [] }, () => []).sort((a, b) => a - b), brute, `after ${JSON.stringify(prefix)}`);
  }
});

test("grammarStart() refuses a structural tag whose structure no trigger begins, or with nothing in it", () => {
  assert.throws(() => grammarStart({ ...TAG, structures: [{ begin: "<tool>", schema: {}, end: "</tool>" }] } as OutputGrammar), (e: unknown) => e instanceof SchemaError && /starts with none of the triggers/.test(e.message));
  assert.throws(() => grammarStart({ ...TAG, triggers: [] } as OutputGrammar), SchemaError);
  assert.throws(() => grammarStart({ ...TAG, structures: [] } as OutputGrammar), SchemaError);
});

test("Engine under a structural tag writes free text whose every trigger opens a whole structure (stories260K)", async () => {
  const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  // The story model writes "." often: each must go on as ". N: " with N from 1 to 9.
  const grammar: OutputGrammar = { kind: "structural_tag", triggers: ["."], structures: [{ begin: ". ", schema: { type: "integer", minimum: 1, maximum: 9 }, end: ": " }] };
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    for (const seed of [1, 2, 3]) {
      const r = await e.submit({ prompt: model.tokenizer.encode("Once upon a time", { addBos: true }), maxTokens: 80, temperature: 0.8, seed, grammar }).result;
      const parts = r.text.split(".");
      assert.ok(parts.length >= 2, `a trigger was written: ${r.text}`);
      for (const after of parts.slice(1, -1)) assert.match(after, /^ [1-9]: /, r.text);
      // After the last ".": a whole structure, or the start of one where max_tokens cut it.
      const last = parts[parts.length - 1];
      assert.ok(/^ [1-9]: /.test(last) || " 9: ".startsWith(last.replace(/^ [1-9]/, " 9")), r.text);
    }
  } finally {
    await e.stop();
  }
});

test("grammarStart() for tool calls amid text (allowed_tools auto) takes prose, and after each syntax's opening only an allowed call", () => {
  // The same call to set_unit in each syntax; get_weather in its place must be refused.
  const calls = SET_UNIT_CALLS;
  for (const [format, call] of Object.entries(calls)) {
    const g = { kind: "tool_calls", tools: [{ name: "set_unit", parameters: UNIT }], parallel: true, amidText: true, ...(format === "hermes" ? {} : { format }) } as OutputGrammar;
    const s = grammarStart(g);
    const ok = (text: string) => grammarComplete(grammarFeed(s, text));
    assert.ok(ok("It is sunny: 21 degrees, {name} of the city aside."), `${format}: prose alone`);
    assert.ok(ok(`Switching units. ${call}`), `${format}: prose, then an allowed call`);
    assert.ok(!ok(`Switching. ${call.slice(0, -3)}`), `${format}: a call must end`);
    assert.equal(grammarFeed(s, `Checking. ${call.replace("set_unit", "get_weather")}`).length, 0, `${format}: get_weather is not allowed`);
    assert.equal(grammarFeed(s, call.replace('"c"', '"k"').replace(">\nc\n<", ">\nk\n<").replace(">c<", ">k<")).length, 0, `${format}: the arguments follow the parameters`);
  }
  assert.throws(() => grammarStart({ kind: "tool_calls", tools: [{ name: "set_unit" }], parallel: false, amidText: true, format: "harmony" }), /harmony format's calls begin in a message header/);
});

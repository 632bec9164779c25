/** `response_format: json_object`: the JSON automaton, its token masks, and the engine's output under it. */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { JSON_START, JsonConstraint, jsonComplete, jsonFeed } from "../../src/engine/json-constraint.ts";
import { loadModel } from "../../src/model/load.ts";

test("jsonFeed() accepts whole JSON objects and every prefix of them", () => {
  for (const doc of ['{}', '{"a":1}', '{ "a" : [1, -2.5e+3, true, null, {"b": "x\\"y\\u00e9"}], "c": {} }', '{"k":[[]],"n":0.0,"m":-0}']) {
    for (let i = 0; i <= doc.length; i++) assert.notEqual(jsonFeed(JSON_START, doc.slice(0, i)), null, `prefix ${JSON.stringify(doc.slice(0, i))}`);
    assert.ok(jsonComplete(jsonFeed(JSON_START, doc)!), doc);
    assert.deepEqual(typeof JSON.parse(doc), "object");
  }
});

test("jsonFeed() refuses what is not the start of one JSON object", () => {
  const bad = ["[1]", '"a"', " {}", "{a:1}", '{"a" 1}', '{"a":01}', '{"a":1,}', '{"a":[1}', '{"a":tru}', '{"a":"\\x"}', '{"a":"\u0001"}', "{}x", "{}{}", '{"a":1.}', '{"a":-}', "{    }"];
  for (const text of bad) assert.equal(jsonFeed(JSON_START, text), null, `accepted ${JSON.stringify(text)}`);
  assert.equal(jsonComplete(jsonFeed(JSON_START, '{"a":[1,2]')!), false, "an open object is not complete");
});

test("JsonConstraint.next() bars exactly the tokens whose text cannot come next, and EOS until the object closes", () => {
  const texts = ["", "{", "}", '"', "a", ":", "1", " ", "\uFFFD", '{"', '"}', "x"];
  const eos = [0];
  const c = new JsonConstraint(texts, eos);
  const barredIds = (m: Map<number, number>) => [...m.keys()].sort((a, b) => a - b);
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

test("Engine under responseFormat json_object writes a prefix of one JSON object, and ends at EOS once it closes", async () => {
  const free = await generate({});
  assert.equal(jsonFeed(JSON_START, free.text), null, "the story model does not write JSON by itself");
  for (const seed of [1, 2, 3]) {
    const { text, result } = await generate({ responseFormat: "json_object", seed });
    assert.equal(result.text, text);
    assert.notEqual(jsonFeed(JSON_START, text), null, `not the start of a JSON object: ${JSON.stringify(text)}`);
  }
  // Pushed towards "}" right after "{", the object closes at once and only EOS may follow.
  const close = model.tokenizer.encode("}", { addBos: false }).filter((id) => model.tokenizer.decode([id]).includes("}"));
  const closed = await generate({ responseFormat: "json_object", logitBias: close.map((id) => [id, 50]) });
  assert.equal(closed.result.finishReason, "stop");
  assert.deepEqual(JSON.parse(closed.text), {});
});

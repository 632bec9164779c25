/**
 * The `union` output grammar (grammar.ts): output that one of several grammars matches whole, the
 * branch chosen as it is written. Chat's tools beside a JSON response_format use it: tool calls in
 * the model's syntax, or the answer's JSON, and nothing else, nor a mix of the two.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { AFTER_THINK, grammarComplete, grammarFeed, grammarStart, type OutputGrammar, type ToolCallSyntax } from "../../src/engine/grammar.ts";
import { SchemaError } from "../../src/engine/json-schema.ts";
import { OutputConstraint, TokenTrie } from "../../src/engine/output-constraint.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";

const ANSWER = { type: "object", additionalProperties: false, required: ["answer"], properties: { answer: { enum: ["yes", "no"] } } } as const;
const TOOLS = [{ name: "get_weather", parameters: { type: "object", additionalProperties: false, required: ["city"], properties: { city: { enum: ["Paris", "Tokyo"] } } } }];

/** Tool calls in `format` (`parallel` or one), or the answer's JSON. */
function callsOrJson(parallel = true, format?: ToolCallSyntax): OutputGrammar {
  return { kind: "union", options: [{ kind: "tool_calls", tools: TOOLS, parallel, ...(format ? { format } : {}) }, { kind: "json", schema: ANSWER }] };
}

const CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const JSON_ANSWER = '{"answer": "yes"}';

/** Whether the grammar (after `prefix`, when given) takes `text` whole and may end there. */
const whole = (g: OutputGrammar, text: string, prefix = grammarStart(g)) => grammarComplete(grammarFeed(prefix, text));
/** Whether the grammar takes `text` as a start (it may go on). */
const starts = (g: OutputGrammar, text: string) => grammarFeed(grammarStart(g), text).length > 0;

test("A union grammar takes either option whole, never a mix, nor text neither option starts", () => {
  const g = callsOrJson();
  assert.ok(whole(g, CALL), "the tool branch");
  assert.ok(whole(g, `${CALL}\n${CALL}`), "parallel calls");
  assert.ok(whole(g, JSON_ANSWER), "the JSON branch");
  assert.ok(!whole(g, '{"answer": "maybe"}'), "the schema holds in the JSON branch");
  assert.ok(!starts(g, '<tool_call>\n{"name": "get_time"'), "only the request's tools are called");
  assert.ok(!starts(g, `${JSON_ANSWER}<tool_call>`), "no call after the JSON answer");
  assert.ok(!starts(g, `${CALL}{`), "no JSON answer after the calls");
  assert.ok(!starts(g, "Sure"), "no free text");
  assert.ok(!starts(g, " {"), "no text before the JSON either");
  assert.throws(() => grammarStart({ kind: "union", options: [] }), (e: unknown) => e instanceof SchemaError && /at least one option/.test(e.message));
});

test("A union's tool branch keeps parallel false (one call, then the end) and the model's syntax", () => {
  const one = callsOrJson(false);
  assert.ok(whole(one, CALL));
  assert.equal(grammarFeed(grammarStart(one), `${CALL}\n`).length, 0, "no second call");
  assert.ok(grammarFeed(grammarStart(callsOrJson(true)), `${CALL}\n`).length > 0);
  // Llama 3's calls and a JSON answer both start with "{": the two branches run side by side.
  const llama = callsOrJson(true, "llama3_json");
  assert.ok(whole(llama, '{"name": "get_weather", "parameters": {"city": "Tokyo"}}'));
  assert.ok(whole(llama, JSON_ANSWER));
  const mistral = callsOrJson(false, "mistral");
  assert.ok(whole(mistral, '[TOOL_CALLS]get_weather[ARGS]{"city": "Tokyo"}'));
  assert.ok(whole(mistral, JSON_ANSWER));
});

test("A union after a reasoning block: free until </think>, then either branch", () => {
  const g = callsOrJson();
  const thought = grammarFeed(grammarStart(g, AFTER_THINK), "I could call a tool <tool_call> or not.</think>\n\n");
  assert.ok(thought.length > 0);
  assert.ok(whole(g, CALL, thought));
  assert.ok(whole(g, JSON_ANSWER, thought));
  assert.equal(grammarFeed(thought, "Sure").length, 0);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const texts = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
const trie = new TokenTrie(texts);
const idOf = (text: string) => {
  const id = texts.indexOf(text);
  assert.ok(id >= 0, `${JSON.stringify(text)} is a token of stories260K`);
  return id;
};

test("The first token's mask under the union allows the start of a call and of the JSON answer, and nothing else (stories260K)", () => {
  const mask = new OutputConstraint(callsOrJson(), trie, model.config.eosTokenIds).next([], 0);
  const allowed = texts.flatMap((_, id) => (mask.allows(id) ? [id] : []));
  // The vocabulary's only tokens that begin "<tool_call>\n" or an object: those whose text is "<" or "{".
  const starts = texts.flatMap((t, id) => (t === "<" || t === "{" ? [id] : []));
  assert.deepEqual(allowed, starts);
  assert.ok(mask.allows(idOf("<")) && mask.allows(idOf("{")));
  for (const eos of model.config.eosTokenIds) assert.ok(!mask.allows(eos), "the answer cannot be empty");
  // Each option alone allows its own start only.
  const alone = (g: OutputGrammar) => [...new Set(texts.filter((_, id) => new OutputConstraint(g, trie, model.config.eosTokenIds).next([], 0).allows(id)))];
  assert.deepEqual(alone({ kind: "json", schema: ANSWER }), ["{"]);
  assert.deepEqual(alone({ kind: "tool_calls", tools: TOOLS, parallel: true }), ["<"]);
});

test("The engine under a union writes a whole call or a whole JSON answer, as the first token picks (stories260K, logit_bias)", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const prompt = model.tokenizer.encode("Once upon a time, Lily wanted to know the weather.", { addBos: true });
    const bias = (text: string): [number, number][] => texts.flatMap((t, id) => (t === text ? [[id, 100] as [number, number]] : []));
    const run = (first: string) => e.submit({ prompt, maxTokens: 200, temperature: 0, grammar: callsOrJson(false), logitBias: bias(first) }).result;
    const call = await run("<");
    assert.equal(call.finishReason, "stop", call.text);
    const body = /^<tool_call>\n([^]*)\n<\/tool_call>$/.exec(call.text);
    assert.ok(body, call.text);
    const parsed = JSON.parse(body[1]) as { name: string; arguments: { city: string } };
    assert.equal(parsed.name, "get_weather");
    assert.ok(["Paris", "Tokyo"].includes(parsed.arguments.city), call.text);
    const answer = await run("{");
    assert.equal(answer.finishReason, "stop", answer.text);
    assert.ok(["yes", "no"].includes((JSON.parse(answer.text) as { answer: string }).answer), answer.text);
  } finally {
    await e.stop();
  }
});

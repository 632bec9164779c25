/**
 * Jump-forward decoding in the engine (EngineOptions.jumpForward): forced text is appended without
 * sampling, streamed, counted, computed as one chunk whose KV the next sample reads, and kept within
 * max_tokens, stop strings and log-probability requests.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest, GenerateResult, StreamDelta } from "../../src/engine/engine-types.ts";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { OutputConstraint, TokenTrie } from "../../src/engine/output-constraint.ts";
import type { StepRecord } from "../../src/engine/step-record.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const WEATHER: OutputGrammar = {
  kind: "tool_calls", parallel: false,
  tools: [{
    name: "get_weather",
    parameters: {
      type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: { city: { enum: ["Paris", "London", "Tokyo"] }, unit: { enum: ["celsius", "fahrenheit"] } },
    },
  }],
};
const prompt = model.tokenizer.encode("Once upon a time, Lily wanted to know the weather.", { addBos: true });

interface Run {
  result: GenerateResult;
  deltas: StreamDelta[];
  steps: StepRecord[];
  jumped: number;
}

async function generate(req: Partial<GenerateRequest>, jumpForward = true): Promise<Run> {
  const steps: StepRecord[] = [];
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, jumpForward, onStep: (r) => steps.push(r) });
  try {
    const h = e.submit({ prompt, maxTokens: 120, temperature: 0, grammar: WEATHER, ...req });
    const deltas: StreamDelta[] = [];
    for await (const d of h.stream) deltas.push(d);
    return { result: await h.result, deltas, steps, jumped: e.metrics.jumpForwardTokens };
  } finally {
    await e.stop();
  }
}

const jumped = await generate({});
const plain = await generate({}, false);

test("Engine jumpForward writes a whole tool call in fewer steps than tokens", () => {
  for (const { result } of [jumped, plain]) {
    assert.equal(result.finishReason, "stop");
    assert.ok(grammarComplete(grammarFeed(grammarStart(WEATHER), result.text)), `a whole call: ${JSON.stringify(result.text)}`);
    const call = JSON.parse(result.text.slice("<tool_call>\n".length, -"\n</tool_call>".length));
    assert.equal(call.name, "get_weather");
  }
  assert.ok(jumped.jumped >= 10, `tokens jumped: ${jumped.jumped}`);
  assert.equal(plain.jumped, 0);
  // Every step of one request samples one token, except the prefill chunks before its first.
  assert.equal(plain.steps.length, plain.result.completionTokens);
  assert.equal(jumped.steps.length, jumped.result.completionTokens - jumped.jumped, "a step per sampled token");
  assert.ok(jumped.steps.some((s) => s.prefillTokens > 1 && s.decodeSeqs === 0 && s !== jumped.steps[0]), "jumped tokens run as a chunk");
});

test("Engine jumpForward streams what it appends: deltas add up to the result", () => {
  assert.equal(jumped.deltas.map((d) => d.text).join(""), jumped.result.text);
  assert.deepEqual(jumped.deltas.flatMap((d) => d.tokenIds), jumped.result.tokenIds);
  assert.ok(jumped.deltas.some((d) => d.tokenIds.length > 1), "a jump arrives as one delta");
  // completionTokens counts the EOS too, which tokenIds leaves out.
  assert.equal(jumped.result.completionTokens, jumped.result.tokenIds.length + 1);
});

test("Engine jumpForward samples each free token from the KV of the jumped ones (greedy = best allowed under a rescoring)", async () => {
  // Score prompt + output in one pass: at each sampled position the greedy choice must be the likeliest
  // token the grammar allowed there. Wrong KV for jumped tokens would change the choices after them.
  const out = jumped.result.tokenIds;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  let scored: GenerateResult;
  try {
    scored = await e.submit({ prompt: [...prompt, ...out], maxTokens: 1, temperature: 0, promptLogprobs: 20 }).result;
  } finally {
    await e.stop();
  }
  const trie = new TokenTrie(Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id)));
  // One constraint serves both: it feeds the output in order, the mask before token k, the jump after it.
  const c = new OutputConstraint(WEATHER, trie, model.config.eosTokenIds);
  const forced = new Set<number>();
  // Replay the engine's decisions: after each sampled token, the jump it would append.
  for (let k = 0; k < out.length;) {
    const mask = c.next(out.slice(0, k), 0);
    assert.ok(mask.allows(out[k]), `token ${k} is allowed`);
    const lp = scored!.promptLogprobs![prompt.length + k]!;
    const better = lp.top.filter(([id, v]) => v > lp.logprob + 1e-4 && mask.allows(id));
    assert.deepEqual(better, [], `token ${k} (${JSON.stringify(trie.texts[out[k]])}) is the likeliest allowed`);
    const jump = c.forced(out.slice(0, k + 1), 0, 1000);
    assert.deepEqual(out.slice(k + 1, k + 1 + jump.length), jump, `the jump after token ${k}`);
    jump.forEach((_, j) => forced.add(k + 1 + j));
    k += 1 + jump.length;
  }
  assert.equal(forced.size, jumped.jumped, "the replay finds every jumped token");
});

test("Engine jumpForward stays within max_tokens and stop strings, and is off with logprobs", async () => {
  const short = await generate({ maxTokens: 4 });
  assert.equal(short.result.completionTokens, 4);
  assert.equal(short.result.finishReason, "length");
  assert.ok(short.jumped > 0, "the first jump was cut to the budget");
  const stopped = await generate({ stop: ["weat"] });
  assert.equal(stopped.result.finishReason, "stop");
  assert.ok(stopped.result.text.endsWith('"get_'), `stopped inside the forced name: ${JSON.stringify(stopped.result.text)}`);
  const withLogprobs = await generate({ logprobs: 1 });
  assert.equal(withLogprobs.jumped, 0);
  assert.equal(withLogprobs.result.logprobs!.length, withLogprobs.result.tokenIds.length, "one per token: none was jumped");
  assert.equal(withLogprobs.steps.length, withLogprobs.result.completionTokens);
});

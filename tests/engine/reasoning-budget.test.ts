/**
 * Reasoning budgets (reasoning-budget.ts): the rules on the next token as a sequence's reasoning
 * grows, their masks, and the engine keeping them on a scripted model that would think forever and
 * then open its reasoning again, with and without speculative decoding.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { RequestParamError } from "../../src/engine/engine-types.ts";
import type { NgramSpeculation } from "../../src/engine/ngram-draft.ts";
import { TokenMask } from "../../src/engine/output-constraint.ts";
import { BudgetMasks, budgetDraftLength, budgetRule, budgetRules, endsMidChar, MAX_CHAR_WAIT } from "../../src/engine/reasoning-budget.ts";
import { ReasoningSpans } from "../../src/engine/reasoning-spans.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ScriptedModelSpec, scriptedVocab, writeScriptedModel } from "../model/scripted-model.ts";

const TAGS = { start: 1, end: 2 };
// Harmony: <|channel|> = 1, <|end|> = 2, "analysis" encoded as 7 8, <|message|> = 3.
const HARMONY = { start: 1, end: 2, harmony: { analysis: [7, 8], message: 3, alsoEnd: [4, 6] } };

/** Spans after generating `tokens` from position 10 on (`openAt`: the prompt opened reasoning there). */
function spansOf(tags: typeof TAGS | typeof HARMONY, tokens: number[], openAt?: number): ReasoningSpans {
  const s = new ReasoningSpans(tags, openAt);
  tokens.forEach((t, i) => s.push(t, 10 + i));
  return s;
}

test("ReasoningSpans.thought() counts reasoning content: tags, harmony's header and a prompt's open aside", () => {
  assert.equal(spansOf(TAGS, [5, 1, 5, 5, 5]).thought(15), 3, "open span: <think> aside");
  assert.equal(spansOf(TAGS, [1, 5, 5, 2, 5, 1, 5]).thought(17), 3, "two spans, the first closed");
  assert.equal(spansOf(TAGS, [1, 5, 5, 2, 5, 1, 5]).thought(13), 2, "below a position only");
  assert.equal(spansOf(TAGS, [5, 5, 2], 10).thought(13), 2, "opened by the prompt: no tag to leave out");
  assert.equal(spansOf(TAGS, [1, 2]).thought(12), 0);
  // <|channel|> analysis <|message|> x x <|end|>: two tokens of content.
  assert.equal(spansOf(HARMONY, [1, 7, 8, 3, 5, 5, 2]).thought(17), 2);
  assert.equal(spansOf(HARMONY, [5, 5, 5], 10).thought(13), 3);
});

test("ReasoningSpans.clone() follows its own tokens without moving the original", () => {
  const s = spansOf(HARMONY, [1, 7]);
  const c = s.clone();
  c.push(8, 12);
  c.push(3, 13);
  assert.equal(c.inside, true);
  assert.equal(s.inside, false);
  assert.equal(s.nextOpener, 8, "the original still awaits the header's second token");
});

test("budgetRule() forces the end at the budget and then bars a new span", () => {
  const rule = (tokens: number[], budget: number, openAt?: number) => budgetRule(spansOf(TAGS, tokens, openAt), 10 + tokens.length, budget);
  assert.equal(rule([5, 1, 5, 5], 3), undefined, "two of three spent");
  assert.deepEqual(rule([5, 1, 5, 5, 5], 3), { force: 2 });
  assert.deepEqual(rule([1, 5, 5, 5, 2], 3), { bar: 1 }, "spent and closed: <think> may not open again");
  assert.equal(rule([1, 5, 2], 3), undefined, "closed early: the rest of the budget stays");
  assert.equal(rule([5], 0), undefined, "budget 0 before any reasoning: <think> may open");
  assert.deepEqual(rule([5, 1], 0), { force: 2 }, "and closes at once");
  assert.deepEqual(rule([], 0, 10), { force: 2 }, "a prompt that opened reasoning closes it first thing");
});

test("budgetRule() with harmony forces <|end|> and bars the analysis channel's name, token by token", () => {
  const rule = (tokens: number[], budget: number) => budgetRule(spansOf(HARMONY, tokens), 10 + tokens.length, budget);
  assert.deepEqual(rule([1, 7, 8, 3, 5, 5], 2), { force: 2 });
  assert.equal(rule([1, 7, 8, 3, 5, 5, 2, 6], 2), undefined, "<|start|>: nothing to bar yet");
  assert.deepEqual(rule([1, 7, 8, 3, 5, 5, 2, 6, 1], 2), { bar: 7 }, "after <|channel|>, not \"analysis\" again");
  assert.deepEqual(rule([1, 7, 8, 3, 5, 5, 2, 6, 1, 7], 2), { bar: 8 });
  assert.equal(rule([1, 7, 8, 3, 5, 2, 6, 1], 2), undefined, "one of two spent: a second analysis may come");
});

test("budgetRules() gives each draft row the rule after the draft tokens before it; budgetDraftLength() cuts at the first refused", () => {
  const s = spansOf(TAGS, [1, 5]);
  const tokens = [...Array<number>(10).fill(0), 1, 5];
  assert.deepEqual(budgetRules(s, tokens, [5, 5, 2, 5, 1], 2), [undefined, { force: 2 }, { force: 2 }, { bar: 1 }, { bar: 1 }, { force: 2 }]);
  assert.equal(s.thought(12), 1, "the spans did not move");
  assert.equal(budgetDraftLength(s, tokens, [5, 5, 2, 5, 1], 2), 1, "the second 5 is past the budget");
  assert.equal(budgetDraftLength(s, tokens, [5, 2, 5, 1], 2), 3, "a new <think> after the end is refused");
  assert.equal(budgetDraftLength(s, tokens, [5, 2, 5], 2), 3);
});

// Bytes: 0 is " ", 5 is "x"; 20, 21, 22 are the three bytes of "中" (e4 b8 ad); 23 is "é" whole (c3 a9); tags have none.
const BYTES: Record<number, number[]> = { 0: [0x20], 1: [], 2: [], 5: [0x78], 20: [0xe4], 21: [0xb8], 22: [0xad], 23: [0xc3, 0xa9] };
const bytesOf = (id: number) => (id in BYTES ? new Uint8Array(BYTES[id]) : undefined);

test("endsMidChar() finds a UTF-8 character begun but not finished by the last tokens' bytes", () => {
  assert.equal(endsMidChar([5, 20], bytesOf), true);
  assert.equal(endsMidChar([20, 21], bytesOf), true);
  assert.equal(endsMidChar([20, 21, 22], bytesOf), false);
  assert.equal(endsMidChar([5, 23], bytesOf), false);
  assert.equal(endsMidChar([20, 2], bytesOf), true, "a tag has no bytes: the character is still open before it");
  assert.equal(endsMidChar([5, 99], bytesOf), false, "unknown bytes: not waited for");
  assert.equal(endsMidChar([], bytesOf), false);
});

test("budgetRules() lets the end wait while the reasoning ends inside a character, MAX_CHAR_WAIT tokens at most", () => {
  const rules = (out: number[], draft: number[], budget: number) => {
    const spans = spansOf(TAGS, out);
    return budgetRules(spans, [...Array<number>(10).fill(0), ...out], draft, budget, bytesOf);
  };
  // <think> x 中(3 tokens) with a budget of 2: "中"'s first byte is the second token; the end waits for its two others.
  assert.deepEqual(rules([1, 5, 20], [21, 22], 2), [undefined, undefined, { force: 2 }]);
  assert.deepEqual(rules([1, 5, 20], [21, 22], 2).slice(0, 1), budgetRules(spansOf(TAGS, [1, 5, 20]), [...Array<number>(10).fill(0), 1, 5, 20], [], 2, bytesOf));
  assert.deepEqual(rules([1, 5, 5], [], 2), [{ force: 2 }], "whole characters: forced at once");
  assert.deepEqual(budgetRules(spansOf(TAGS, [1, 5, 20]), [...Array<number>(10).fill(0), 1, 5, 20], [], 2), [{ force: 2 }], "no bytes known: forced at once");
  // Endless partial characters: four of content (two waited for), then the fifth is MAX_CHAR_WAIT past the budget.
  assert.equal(MAX_CHAR_WAIT, 3);
  assert.deepEqual(rules([1, 5, 20, 21, 20], [21, 20], 2), [undefined, { force: 2 }, { force: 2 }]);
});

test("BudgetMasks makes forcing and barring masks and intersects them with a grammar's", () => {
  const masks = new BudgetMasks(70);
  const force = masks.of({ force: 2 })!;
  assert.equal(force.allowedCount, 1);
  assert.ok(force.allows(2));
  const bar = masks.of({ bar: 1 })!;
  assert.equal(bar.allowedCount, 69, "every token of the vocabulary but one, none past it");
  assert.equal(bar.allows(1), false);
  assert.equal(masks.of({ bar: 1 }), bar, "kept, not rebuilt");
  const grammar = new TokenMask(70);
  [1, 2, 3].forEach((t) => grammar.set(t));
  const both = masks.combine(grammar, { bar: 1 })!;
  assert.deepEqual([1, 2, 3].map((t) => both.allows(t)), [false, true, true]);
  assert.equal(grammar.allows(1), true, "the grammar's mask is not changed");
  const none = new TokenMask(70);
  none.set(5);
  assert.equal(masks.combine(none, { force: 2 }), none, "no common token: the grammar's mask alone");
  assert.equal(masks.combine(grammar, undefined), grammar);
  assert.equal(masks.combine(undefined, undefined), undefined);
});

// A model that thinks forever (" a b a b …"), and after </think> opens <think> again.
const SPEC: ScriptedModelSpec = {
  pieces: ["<think>", "</think>", " a", " b", "Done."],
  literalPieces: true,
  next: [["?", "<think>"], ["<think>", " a"], [" a", " b"], [" b", " a"], ["</think>", "<think>"], ["!", "Done."], ["Done.", "<eos>"]],
};
const dir = mkdtempSync(`${tmpdir()}/reasoning-budget-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
await writeScriptedModel(`${dir}/thinker.gguf`, SPEC);
const model = await loadModel(`${dir}/thinker.gguf`);
const vocab = scriptedVocab(SPEC);
const THINK = { start: vocab.idOf("<think>"), end: vocab.idOf("</think>") };
const NGRAM: NgramSpeculation = { method: "ngram", numTokens: 4, maxN: 3, minN: 2 };

/** Runs one request on a fresh engine; its tokens as texts, its result and the engine's metrics. */
async function run(budget: number | undefined, o: { speculative?: boolean; temperature?: number; logprobs?: number } = {}) {
  const engine = createEngine(createReferenceBackend(), model, {
    numBlocks: 16, blockSize: 4, scheduler: { reasoningTokens: THINK }, ...(o.speculative ? { speculative: NGRAM } : {}),
  });
  try {
    const prompt = model.tokenizer.encode("Why?", { addBos: false });
    const h = engine.submit({
      prompt, maxTokens: 14, temperature: o.temperature ?? 0, seed: 5, ...(budget === undefined ? {} : { reasoningBudget: budget }),
      ...(o.logprobs === undefined ? {} : { logprobs: o.logprobs }),
    });
    const r = await h.result;
    return { texts: r.tokenIds.map((id) => model.tokenizer.decode([id])), r, metrics: engine.metrics };
  } finally {
    await engine.stop();
  }
}

test("Engine keeps a reasoning budget: the end is forced at the budget and <think> cannot open again", async () => {
  const free = await run(undefined);
  assert.deepEqual(free.texts.slice(0, 5), ["<think>", " a", " b", " a", " b"], "unbounded, it thinks to max_tokens");
  assert.equal(free.r.finishReason, "length");
  assert.equal(free.r.reasoningTokens, 14);
  const kept = await run(3);
  assert.deepEqual(kept.texts.slice(0, 5), ["<think>", " a", " b", " a", "</think>"]);
  assert.equal(kept.texts.filter((t) => t === "<think>").length, 1, `no second span: ${JSON.stringify(kept.texts)}`);
  assert.equal(kept.r.reasoningTokens, 5, "three of content and the two tags");
  const none = await run(0);
  assert.deepEqual(none.texts.slice(0, 2), ["<think>", "</think>"]);
});

test("Engine keeps a reasoning budget under speculative decoding: the same tokens and log probabilities, drafts accepted", async () => {
  for (const o of [{}, { temperature: 0.8, logprobs: 2 }]) {
    const off = await run(5, o);
    const on = await run(5, { ...o, speculative: true });
    assert.deepEqual(on.texts, off.texts, JSON.stringify(o));
    assert.deepEqual(on.r.logprobs, off.r.logprobs);
    assert.deepEqual(off.texts.slice(4, 7), [" b", " a", "</think>"]);
    assert.ok(on.metrics.specAcceptedTokens > 0, `drafts were accepted (${on.metrics.specAcceptedTokens} of ${on.metrics.specDraftTokens})`);
  }
});

test("Engine.submit() refuses a reasoning budget that is not a count, or without the model's reasoning tokens", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 16, blockSize: 4, scheduler: { reasoningTokens: THINK } });
  const plain = createEngine(createReferenceBackend(), model, { numBlocks: 16, blockSize: 4 });
  try {
    const prompt = [vocab.idOf("?")];
    for (const bad of [-1, 2.5]) {
      assert.throws(() => engine.submit({ prompt, reasoningBudget: bad }), (e: Error) => e instanceof RequestParamError && e.message.includes(`got ${bad}`));
    }
    assert.throws(() => plain.submit({ prompt, reasoningBudget: 4 }), (e: Error) => e instanceof RequestParamError && /--reasoning-parser/.test(e.message));
  } finally {
    await Promise.all([engine.stop(), plain.stop()]);
  }
});

test("Engine lets a reasoning budget's end wait for a character spelled in byte tokens (stories260K's byte fallback)", async () => {
  const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const tok = stories.tokenizer;
  const lead = Array.from({ length: stories.config.vocabSize }, (_, id) => id).find((id) => tok.tokenBytes?.(id)?.join() === "228")!; // <0xE4>
  const space = tok.encode(" a", { addBos: false })[0];
  assert.equal(tok.tokenBytes?.(space)?.join(), "32");
  // Any two tokens serve as the tags here; the prompt opened the reasoning.
  const tags = { start: 100, end: 101 };
  const engine = createEngine(createReferenceBackend(), stories, { numBlocks: 16, blockSize: 4, scheduler: { reasoningTokens: tags } });
  try {
    const ids = async (favoured: number) => {
      const prompt = tok.encode("Once upon a time", { addBos: true });
      const r = await engine.submit({ prompt, maxTokens: 8, temperature: 0, startsInReasoning: true, reasoningBudget: 2, logitBias: [[favoured, 100]] }).result;
      return r.tokenIds;
    };
    // Every <0xE4> begins a character none finishes: the end waits MAX_CHAR_WAIT tokens past the budget of 2.
    assert.deepEqual((await ids(lead)).slice(0, 6), [lead, lead, lead, lead, lead, tags.end]);
    assert.deepEqual((await ids(space)).slice(0, 3), [space, space, tags.end], "whole characters: the end comes at the budget");
  } finally {
    await engine.stop();
  }
});

/**
 * OutputConstraint along a draft (speculative decoding): the masks of rows that verify draft tokens
 * are those feeding the tokens for real would give, the committed state does not move, and a draft
 * is cut where the grammar bars it or, under jump-forward, before a row would sample forced text.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import type { OutputGrammar } from "../../src/engine/grammar.ts";
import { OutputConstraint, type TokenMask, TokenTrie } from "../../src/engine/output-constraint.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const EOS = model.config.eosTokenIds[0];
const texts = Array.from({ length: model.config.vocabSize }, (_, id) => (id === EOS ? "" : tokenTextOf(model.tokenizer, id)));
const trie = new TokenTrie(texts);
/** At most 12 characters of story, then the object must close: the masks change along a draft. */
const STORY: OutputGrammar = {
  kind: "json", whitespace: "compact",
  schema: { type: "object", additionalProperties: false, required: ["story"], properties: { story: { type: "string", maxLength: 12 } } },
};
const constraint = () => new OutputConstraint(STORY, trie, [EOS]);
const spell = (text: string) => trie.cover(text);
const tokenOf = (text: string) => {
  const id = texts.indexOf(text);
  assert.ok(id >= 0, `a token spells ${JSON.stringify(text)}`);
  return id;
};
/** The masks of feeding `draft` for real after `out`, one token a step, on a constraint of its own. */
const fedMasks = (out: readonly number[], draft: readonly number[]): TokenMask[] => {
  const c = constraint();
  return Array.from({ length: draft.length + 1 }, (_, j) => c.next([...out, ...draft.slice(0, j)], 0));
};

test("OutputConstraint.continuation() gives the masks of feeding the draft for real, without feeding it", () => {
  const out = spell('{"story": "Once');
  const draft = spell(" upon a time there");
  const c = constraint();
  const before = c.next(out, 0);
  const masks = c.continuation(out, 0, draft);
  const real = fedMasks(out, draft);
  // "Once upon a time there" is longer than 12 characters: a token reaching past them is barred.
  const allowed = real.findIndex((m, j) => j < draft.length && !m.allows(draft[j]));
  assert.ok(allowed > 0 && allowed < draft.length, `the grammar bars draft token ${allowed} of ${draft.length}`);
  assert.equal(masks.length, allowed + 1, "masks up to the first barred token");
  masks.forEach((m, j) => assert.deepEqual(m.bits, real[j].bits, `mask ${j}`));
  assert.ok(masks[masks.length - 1].allowedCount < masks[0].allowedCount, "fewer tokens fit as the string fills");
  // The committed state is where it was: the next mask is still the one after `out`.
  assert.deepEqual(c.next(out, 0).bits, before.bits);
  assert.deepEqual(c.continuation(out, 0, draft.slice(0, 2)).map((m) => m.bits), real.slice(0, 3).map((m) => m.bits), "a prefix of the draft");
  // Committing part of the draft moves the state as feeding would.
  const more = [...out, ...draft.slice(0, 1)];
  assert.deepEqual(c.continuation(more, 0, draft.slice(1, 2)).map((m) => m.bits), real.slice(1, 3).map((m) => m.bits));
});

test("OutputConstraint.continuation() allows EOS only where the value is whole, and goes on after it as feeding does", () => {
  const out = spell('{"story": "ab"');
  const draft = [tokenOf("}"), EOS, EOS];
  const masks = constraint().continuation(out, 0, draft);
  const real = fedMasks(out, draft);
  assert.equal(masks.length, draft.length + 1);
  masks.forEach((m, j) => assert.deepEqual(m.bits, real[j].bits, `mask ${j}`));
  assert.ok(!masks[0].allows(EOS) && masks[1].allows(EOS) && masks[2].allows(EOS));
  assert.equal(constraint().continuation(out, 0, [EOS, tokenOf("}")]).length, 1, "EOS before the object closes is barred");
});

test("OutputConstraint.draftLength() cuts a draft where the grammar bars it, and before forced text under jump-forward", () => {
  const out = spell('{"story": "ab');
  // After 'c"' the grammar forces '}': one token a step, jump-forward writes it unsampled.
  const draft = [tokenOf("c"), tokenOf('"'), tokenOf("}"), EOS];
  const c = constraint();
  assert.ok(constraint().forced([...out, ...draft.slice(0, 2)], 0, 10).length > 0 && constraint().forced([...out, draft[0]], 0, 10).length === 0);
  assert.equal(c.draftLength(out, 0, draft, false), 4, "all allowed");
  assert.equal(c.draftLength(out, 0, draft, true), 1, "the row after '\"' would sample forced text: the draft keeps 'c' only");
  const full = spell('{"story": "abcdefghijk');
  assert.equal(c.draftLength(full, 0, [tokenOf("l"), tokenOf("m"), tokenOf('"')], false), 1, "a 13th character is barred");
});

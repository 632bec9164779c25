/**
 * OutputText at the end of an output: text held back for an unfinished character and released by
 * `flush()` is still cut at a stop string it holds (a byte-level BPE token can hold a stop's text
 * and the first byte of a character, and the output can end right after it).
 */
import assert from "node:assert/strict";
import { OutputText } from "../../src/engine/engine-text.ts";
import { BpeTokenizer, bytesToUnicode } from "../../src/model/tokenizer-bpe.ts";
import { test } from "../harness.ts";
import { bpeVocab } from "../model/test-vocab.ts";

const byteChar = bytesToUnicode();
const bpe = bpeVocab(300);
// One more token: "!" and the first byte of "☕" (E2 98 95), as byte-level vocabularies hold such merges.
const tokens = [...bpe.tokens, "!" + byteChar[0xe2]];
const tok = new BpeTokenizer({ tokens, types: [...bpe.types, 1], merges: bpe.merges, pre: "qwen2" });
const bang = tokens.length - 1;
const ids = (s: string) => tok.encode(s, { addBos: false });

/** The deltas of `out` for `seq`, then its flush. */
function run(out: OutputText, seq: readonly number[]): string {
  let text = "";
  for (const id of seq) {
    text += out.push(id);
    if (out.stopped) return text;
  }
  return text + out.flush();
}

test("OutputText.flush() cuts at a stop string in text held back for an unfinished character", () => {
  // Sanity: the token decodes to "!" and a broken character; with the rest of ☕ it completes it.
  assert.equal(tok.decode([bang]), "!\uFFFD");
  // The byte tokens come first in the vocabulary: byte b is token b.
  assert.equal(tok.decode([bang, 0x98, 0x95]), "!☕");
  const seq = [...ids("Hi there"), bang];
  assert.equal(run(new OutputText(tok, ["!"]), seq), "Hi there", "the output ends inside ☕: the text before the stop");
  assert.equal(run(new OutputText(tok, ["!"], false, 0, true), seq), "Hi there!", "include_stop_str_in_output keeps the stop, not what follows");
  assert.equal(run(new OutputText(tok, ["?"]), seq), "Hi there!\uFFFD", "no stop: everything, the broken character as U+FFFD");
  // Completed by the next tokens, the stop is caught as before.
  assert.equal(run(new OutputText(tok, ["!"]), [...seq, 0x98, 0x95]), "Hi there");
});

test("OutputText.flush() after a stop caught before an unfinished character releases nothing more", () => {
  const out = new OutputText(tok, ["!"], false, 0, true);
  let text = "";
  for (const id of [...ids("Hi there"), bang]) text += out.push(id);
  assert.equal(out.stopped, true);
  assert.equal(text + out.flush() + out.flush(), "Hi there!");
  assert.equal(out.text, "Hi there!");
});

test("OutputText.push() ends the output at the token that completes a stop string before an unfinished character", () => {
  const seq = [...ids("Hi there"), bang];
  for (const [includeStop, want] of [[false, "Hi there"], [true, "Hi there!"]] as const) {
    const out = new OutputText(tok, ["!"], false, 0, includeStop);
    let text = "";
    for (const id of seq) text += out.push(id);
    assert.equal(out.stopped, true, "stopped at the token holding the stop, before the character completes");
    assert.equal(out.stopString, "!");
    assert.equal(text, want);
    assert.equal(out.push(0x98), "", "nothing after the stop");
  }
  // Within min_tokens: the stop is text, and the character completes as usual.
  const early = new OutputText(tok, ["!"], false, seq.length + 5);
  let text = "";
  for (const id of [...seq, 0x98, 0x95]) text += early.push(id);
  assert.equal(early.stopped, false);
  assert.equal(text + early.flush(), "Hi there!☕");
});

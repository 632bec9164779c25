/**
 * OutputText, the engine's incremental detokenizer: its deltas put together are the whole output
 * decoded at once, for SentencePiece (leading spaces, byte fallback), byte-level BPE (characters
 * split over tokens) and Hugging Face tokenizers, with and without control tokens; stop strings cut
 * the text where the whole decode would.
 */
import assert from "node:assert/strict";
import type { Tokenizer } from "../../src/model/config.ts";
import { OutputText } from "../../src/engine/engine-text.ts";
import { loadModel } from "../../src/model/load.ts";
import { BpeTokenizer } from "../../src/model/tokenizer-bpe.ts";
import { HfTokenizer } from "../../src/model/tokenizer-hf.ts";
import { projectRoot, test } from "../harness.ts";
import { bpeVocab, tokenizerJson } from "../model/test-vocab.ts";

const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const bpe = bpeVocab(300);
const TOKENIZERS: [string, Tokenizer][] = [
  ["SpmTokenizer (stories260K)", stories.tokenizer],
  ["BpeTokenizer", new BpeTokenizer({ tokens: bpe.tokens, types: bpe.types, merges: bpe.merges, pre: "qwen2" })],
  ["HfTokenizer", new HfTokenizer(tokenizerJson(bpe), {}, "<|endoftext|>", "test")],
];
const TEXT = "Once upon a time, Lily said: «naïve café 🙂» — then\n  two  spaces, 中文 and more.\n";

/** A small deterministic generator (the test must not depend on the run). */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

/** Output ids: the text's own tokens, then random ids of the vocabulary (byte pieces and control tokens among them). */
function outputIds(tok: Tokenizer, seed: number): number[] {
  const rand = lcg(seed);
  const ids = tok.encode(TEXT.repeat(3));
  for (let i = 0; i < 200; i++) ids.push(Math.floor(rand() * tok.vocabSize));
  return ids;
}

/** Every delta `OutputText` hands out for `ids`, then what `flush` releases. */
function deltas(tok: Tokenizer, ids: readonly number[], stops: readonly string[], special = false): { text: string; out: OutputText } {
  const out = new OutputText(tok, stops, special);
  let text = "";
  for (const id of ids) {
    text += out.push(id);
    if (out.stopped) break;
  }
  return { text: text + out.flush(), out };
}

test("OutputText.push() deltas put together are the whole output decoded at once", () => {
  for (const [name, tok] of TOKENIZERS) {
    for (const special of [false, true]) {
      for (const seed of [1, 2, 3]) {
        const ids = outputIds(tok, seed);
        const whole = tok.decode(ids, { special });
        const { text, out } = deltas(tok, ids, [], special);
        assert.equal(text, whole, `${name}, special ${special}, seed ${seed}`);
        assert.equal(out.text, whole, `${name}: .text is what went out`);
      }
    }
  }
});

test("OutputText.push() holds an unfinished character back and hands it out whole", () => {
  for (const [name, tok] of TOKENIZERS) {
    const ids = tok.encode("a🙂");
    const out = new OutputText(tok, []);
    const got = ids.map((id) => out.push(id));
    assert.ok(got.every((d) => !d.includes("\ufffd")), `${name}: ${JSON.stringify(got)}`);
    assert.equal(got.join(""), tok.decode(ids), name);
  }
});

test("OutputText.push() stops before the first stop string, wherever tokens split it", () => {
  for (const [name, tok] of TOKENIZERS) {
    const ids = tok.encode(TEXT.repeat(2));
    const whole = tok.decode(ids);
    for (const stops of [["café"], [" two", "Lily"], ["\n  "], ["🙂»"], ["not there"], ["e"]]) {
      const cuts = stops.map((s) => whole.indexOf(s)).filter((at) => at >= 0);
      const expected = cuts.length > 0 ? whole.slice(0, Math.min(...cuts)) : whole;
      const { text, out } = deltas(tok, ids, stops);
      assert.equal(text, expected, `${name}, stops ${JSON.stringify(stops)}`);
      assert.equal(out.stopped, cuts.length > 0);
      assert.equal(out.flush(), "", "nothing after a stop");
    }
  }
});

test("OutputText.push() takes stop strings only past min_tokens: one ending within them stays text", () => {
  for (const [name, tok] of TOKENIZERS) {
    const ids = tok.encode(TEXT.repeat(2));
    const whole = tok.decode(ids);
    for (const minTokens of [0, 3, 10]) {
      // vLLM checks a stop once the output holds more than min_tokens tokens, in the text that ends past them.
      const before = tok.decode(ids.slice(0, minTokens)).length;
      for (const stop of ["e", " two", "Lily"]) {
        const out = new OutputText(tok, [stop], false, minTokens);
        let text = "";
        for (const id of ids) {
          text += out.push(id);
          if (out.stopped) break;
        }
        text += out.flush();
        let at = whole.indexOf(stop);
        while (at >= 0 && at + stop.length <= before) at = whole.indexOf(stop, at + 1);
        assert.equal(text, at >= 0 ? whole.slice(0, at) : whole, `${name}, stop ${JSON.stringify(stop)}, min_tokens ${minTokens}`);
        assert.equal(out.stopped, at >= 0);
      }
    }
  }
});

/** Tokenizers: the stories260K golden, hand-computed merge orders, and our BPE against tokenizers.js. */
import assert from "node:assert/strict";
import { readTextFile } from "../../src/runtime/fs.ts";
import { loadModel } from "../../src/model/load.ts";
import { BpeTokenizer, bytesToUnicode, PRE_TOKENIZER_PATTERNS, preTokenize } from "../../src/model/tokenizer-bpe.ts";
import { HfTokenizer } from "../../src/model/tokenizer-hf.ts";
import { SpmTokenizer } from "../../src/model/tokenizer-spm.ts";
import { projectRoot, sharedRoot, test } from "../harness.ts";
import { bpeVocab, spmVocab, tokenizerJson } from "./test-vocab.ts";

interface Golden {
  prompt: string;
  prompt_ids_with_bos: number[];
  greedy20: number[];
  text: string;
}

const golden = JSON.parse(await readTextFile(`${sharedRoot}/reference/stories260K-greedy.json`)) as Golden;
const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);

test("SpmTokenizer.encode() gives the stories260K golden prompt ids", () => {
  assert.deepEqual(stories.tokenizer.encode(golden.prompt, { addBos: true }), golden.prompt_ids_with_bos);
  assert.deepEqual(stories.tokenizer.encode(golden.prompt), golden.prompt_ids_with_bos.slice(1));
});

test("SpmTokenizer.decode() turns the golden greedy ids into the reference text", () => {
  assert.equal(stories.tokenizer.decode(golden.greedy20), golden.text);
  assert.equal(golden.greedy20.map((id) => stories.tokenizer.tokenText!(id)).join(""), golden.text);
});

test("SpmTokenizer round-trips text through byte fallback, newlines and control tokens", () => {
  const tok = stories.tokenizer;
  for (const text of ["Once upon a time", "naïve café 🙂 — done", "line one\nline two", "  double  spaces "]) {
    const ids = tok.encode(text, { addBos: true });
    assert.equal(tok.decode(ids), text, JSON.stringify(text));
  }
  // "<s>" in text is the BOS control token, which decode skips.
  assert.deepEqual(tok.encode("<s>Once").slice(0, 1), [1]);
});

function smallSpm(scoreOfAb: number, scoreOfSpaceA: number): SpmTokenizer {
  const v = spmVocab(259);
  const tokens = [...v.tokens, "\u2581", "a", "b", "\u2581a", "ab"];
  const scores = [...v.scores, -10, -10, -10, scoreOfSpaceA, scoreOfAb];
  const types = [...v.types, 1, 1, 1, 1, 1];
  return new SpmTokenizer({ tokens, scores, types, bosId: 1, unkId: 0, addSpacePrefix: true });
}

test("SpmTokenizer merges the highest-scoring pair first", () => {
  // " ab" → ▁ a b: the better of "▁a" and "ab" wins, and the rest cannot merge further.
  assert.deepEqual(smallSpm(-1, -2).encode("ab"), [259, 263]); // ▁, ab
  assert.deepEqual(smallSpm(-2, -1).encode("ab"), [262, 261]); // ▁a, b
  // Unknown characters fall back to their UTF-8 bytes: "é" = C3 A9 → <0xC3> <0xA9>.
  assert.deepEqual(smallSpm(-1, -2).encode("é"), [259, 3 + 0xc3, 3 + 0xa9]);
});

function smallBpe(merges: string[]): BpeTokenizer {
  const bc = bytesToUnicode();
  const tokens = [...bc, "ab", "bc", "abc", "<|end|>"];
  const types = [...bc.map(() => 1), 1, 1, 1, 3];
  return new BpeTokenizer({ tokens, types, merges, pre: "qwen2" });
}

test("BpeTokenizer merges by rank, lowest first, and splits out special tokens", () => {
  assert.deepEqual(smallBpe(["a b", "b c", "ab c"]).encode("abc"), [258]); // abc
  assert.deepEqual(smallBpe(["b c", "a b", "ab c"]).encode("abc"), [97, 257]); // a, bc
  assert.deepEqual(smallBpe(["a b"]).encode("ab<|end|>ab"), [256, 259, 256]);
  assert.equal(smallBpe(["a b"]).decode([256, 259, 256]), "abab");
});

test("BpeTokenizer matches tokenizers.js on the same vocab and merges", () => {
  const v = bpeVocab(400);
  const ours = new BpeTokenizer({ tokens: v.tokens, types: v.types, merges: v.merges, pre: "qwen2" });
  const hf = new HfTokenizer(tokenizerJson(v), {}, undefined, "test");
  const texts = [
    "Once upon a time there was a little girl named Lily.",
    "She loved to play outside, and it's 2024: 12345 tools!",
    "  leading spaces\n\nand\ttabs  ",
    "naïve café 🙂 ünïcödé",
    "The agent's tool call<|endoftext|>hello world",
  ];
  for (const text of texts) {
    const ids = ours.encode(text);
    assert.deepEqual(ids, hf.encode(text), JSON.stringify(text));
    assert.equal(ours.decode(ids), text.replace("<|endoftext|>", ""), JSON.stringify(text));
  }
});

test("HfTokenizer prepends BOS only when asked and skips special tokens when decoding", () => {
  const v = bpeVocab(300);
  const hf = new HfTokenizer(tokenizerJson(v), {}, "<|endoftext|>", "test");
  assert.equal(hf.bosId, v.bosId);
  const ids = hf.encode("hello world", { addBos: true });
  assert.equal(ids[0], v.bosId);
  assert.deepEqual(ids.slice(1), hf.encode("hello world"));
  assert.equal(hf.decode(ids), "hello world");
});

test("tokenBytes() gives each token's bytes, pieces of characters included, alike in every tokenizer", () => {
  const v = bpeVocab(400);
  const bpe = new BpeTokenizer({ tokens: v.tokens, types: v.types, merges: v.merges, pre: "qwen2" });
  const hf = new HfTokenizer(tokenizerJson(v), {}, undefined, "test");
  const text = "naïve café 🙂 東京 ünïcödé";
  for (const tok of [bpe, hf, stories.tokenizer]) {
    const ids = tok.encode(text);
    const bytes = ids.flatMap((id) => Array.from(tok.tokenBytes!(id)!));
    // The story model adds a space prefix (SentencePiece): its bytes are those of " " + text.
    const want = new TextEncoder().encode(tok === stories.tokenizer ? ` ${text}` : text);
    assert.deepEqual(bytes, Array.from(want), tok.constructor.name);
    assert.ok(ids.some((id) => tok.tokenText!(id).includes("\uFFFD")), `${tok.constructor.name} spells some character with pieces`);
  }
  assert.deepEqual(Array.from(hf.tokenBytes(v.eosId)!), [], "a special token stands for no bytes");
});

test("preTokenize() applies DeepSeek V3's three patterns in turn, keeping the text between matches", () => {
  const deepseek = PRE_TOKENIZER_PATTERNS["deepseek-v3"].map((p) => new RegExp(p, "gu"));
  // Digits in threes first; then CJK runs come away from the Latin word they touch (Llama 3's single
  // pattern keeps "和abc" whole); then words, punctuation (with the letters it leads: "+y") and spaces.
  assert.deepEqual(preTokenize("数字12345和abc (x+y)", deepseek), ["数字", "123", "45", "和", "abc", " (", "x", "+y", ")"]);
  const llama = PRE_TOKENIZER_PATTERNS["llama-bpe"].map((p) => new RegExp(p, "gu"));
  assert.deepEqual(preTokenize("数字12345和abc", llama), ["数字", "123", "45", "和abc"]);
  assert.deepEqual(preTokenize("", deepseek), []);
});

test("preTokenize() splits Kimi K2's text as its tiktoken pattern does: Han runs apart, cased words without Han", () => {
  const kimi = PRE_TOKENIZER_PATTERNS["kimi-k2"].map((p) => new RegExp(p, "gu"));
  // Han runs stand alone; kana and Latin letters around them make words of their own.
  assert.deepEqual(preTokenize("数字12345和日本語のテキスト", kimi), ["数字", "123", "45", "和日本語", "のテキスト"]);
  assert.deepEqual(preTokenize("漢字abc", kimi), ["漢字", "abc"]);
  // Words end where lower case turns upper (camelCase splits, as in o200k); contractions in any case.
  assert.deepEqual(preTokenize("helloWorld THE'S don'T", kimi), ["hello", "World", " THE'S", " don'T"]);
  assert.deepEqual(preTokenize("  two\n\nx", kimi), [" ", " two", "\n\n", "x"]);
});

test("preTokenize() splits GPT-4o's o200k words at case changes and keeps contractions, as llama.cpp does", () => {
  const gpt4o = PRE_TOKENIZER_PATTERNS["gpt-4o"].map((p) => new RegExp(p, "gu"));
  assert.deepEqual(preTokenize("HelloWorld THE'S don't", gpt4o), ["Hello", "World", " THE'S", " don't"]);
  // Digits in threes; one punctuation mark may lead a word; a run of it takes the slashes and newlines after it.
  assert.deepEqual(preTokenize("x 12345 a/b.c;//\n", gpt4o), ["x", " ", "123", "45", " a", "/b", ".c", ";//\n"]);
  // llama.cpp's rewrite reads a letter outside ASCII as either case, so "Über" does not start a word.
  assert.deepEqual(preTokenize("ÄpfelÜber", gpt4o), ["ÄpfelÜber"]);
  // Llama 3's pattern keeps camel case whole and splits the contraction off.
  const llama = PRE_TOKENIZER_PATTERNS["llama-bpe"].map((p) => new RegExp(p, "gu"));
  assert.deepEqual(preTokenize("HelloWorld THE'S", llama), ["HelloWorld", " THE", "'S"]);
});

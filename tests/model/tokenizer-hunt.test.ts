/**
 * Tokenizer edge cases found against llama.cpp (node-llama-cpp's tokenize/detokenize with special
 * tokens parsed and written) and tokenizers.js: unknown tokens in text, the SentencePiece space
 * prefix after a written BOS, lone surrogates, long words, llama.cpp's pre-tokenizer names, and
 * Hugging Face decoding of skipped-only ids and added tokens that strip whitespace.
 */
import assert from "node:assert/strict";
import { loadModel } from "../../src/model/load.ts";
import { BpeTokenizer, bytesToUnicode, PRE_TOKENIZER_PATTERNS, resolvePreTokenizer } from "../../src/model/tokenizer-bpe.ts";
import { HfTokenizer } from "../../src/model/tokenizer-hf.ts";
import { SpecialSplitter, TokenType } from "../../src/model/tokenizer-special.ts";
import { projectRoot, test } from "../harness.ts";
import { bpeVocab, tokenizerJson } from "./test-vocab.ts";

const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const bc = bytesToUnicode();

/** Byte-level BPE over the 256 byte symbols plus `extra` tokens (each built by the merges given). */
function bpe(pre: string, extra: string[], merges: string[], types: number[] = extra.map(() => TokenType.NORMAL)): BpeTokenizer {
  return new BpeTokenizer({ tokens: [...bc, ...extra], types: [...bc.map(() => TokenType.NORMAL), ...types], merges, pre });
}

test("SpmTokenizer.encode() reads \"<unk>\" in text as the unknown token, and decode() writes it only with special, as llama.cpp does", () => {
  const tok = stories.tokenizer;
  // stories260K's token 0 is "<unk>" of type UNKNOWN, which llama.cpp's special-token cache holds.
  const ids = tok.encode("a<unk>b");
  assert.ok(ids.includes(0), JSON.stringify(ids));
  assert.equal(tok.decode(ids, { special: true, whole: true }), "a<unk> b", "the space prefix after a special token stays, as in llama.cpp");
  assert.equal(tok.decode([0], { special: true }), "<unk>");
  assert.equal(tok.decode([0]), "");
});

test("BpeTokenizer.encode() reads an UNKNOWN-type token's string as that token, and decode({ special }) writes it", () => {
  const tok = bpe("qwen2", ["<unk>"], [], [TokenType.UNKNOWN]);
  assert.deepEqual(tok.encode("x<unk>"), [0x78, 256]);
  assert.equal(tok.decode([0x78, 256], { special: true }), "x<unk>");
  assert.equal(tok.decode([0x78, 256]), "x");
});

test("SpmTokenizer.decode() drops the space prefix from the first piece written: a written BOS keeps \" a\" after it", () => {
  const tok = stories.tokenizer;
  const ids = tok.encode("a", { addBos: true });
  assert.equal(ids[0], 1);
  assert.equal(tok.decode(ids), "a");
  // llama.cpp's detokenize (unparse_special) and tokenizers' Strip decoder on "<s>▁a" both give "<s> a".
  assert.equal(tok.decode(ids, { special: true }), "<s> a");
  // A skipped control token after BOS writes nothing, so the prefix comes off the next piece.
  assert.equal(tok.decode([1, 2, ...ids.slice(1)]), "a");
});

test("BpeTokenizer.encode() pre-tokenizes a lone surrogate as the U+FFFD its UTF-8 bytes spell (DeepSeek V3's pattern)", () => {
  // "'s" is one token; DeepSeek V3's pattern reads U+FFFD as a symbol, so "\uFFFD'" is one pre-token.
  const tok = bpe("deepseek-v3", [`'s`], [`' s`]);
  assert.deepEqual(tok.encode("\ud800's"), tok.encode("\uFFFD's"));
  assert.deepEqual(tok.encode("x\udc00's"), tok.encode("x\uFFFD's"));
  assert.equal(tok.decode(tok.encode("\ud83d\ude42's")), "\ud83d\ude42's", "a surrogate pair stays its character");
});

test("BpeTokenizer.encode() merges a long word in n log n and returns a million ids without overflowing the stack", () => {
  // Spaces pair up by the merges: 4·k spaces are k tokens of four. Rescanning every pair after each
  // merge took 48 s for 20,000 spaces.
  const sp = bc[0x20];
  const tok = bpe("qwen2", [sp + sp, sp.repeat(4)], [`${sp} ${sp}`, `${sp + sp} ${sp + sp}`]);
  const n = 200_000;
  const t0 = performance.now();
  const ids = tok.encode(" ".repeat(n));
  assert.equal(ids.length, n / 4);
  assert.ok(ids.every((id) => id === 257));
  assert.ok(performance.now() - t0 < 20_000, `took ${Math.round(performance.now() - t0)} ms`);
  // One pre-token of letters with no merges: a million single-byte ids.
  assert.equal(tok.encode("a".repeat(1 << 20)).length, 1 << 20);
});

test("resolvePreTokenizer() reads llama.cpp's other tokenizer.ggml.pre names: gpt-2, deepseek-r1-qwen, llama3, llama4, default", () => {
  assert.deepEqual(resolvePreTokenizer("gpt-2").patterns, PRE_TOKENIZER_PATTERNS.gpt2);
  assert.deepEqual(resolvePreTokenizer("deepseek-r1-qwen").patterns, PRE_TOKENIZER_PATTERNS.qwen2);
  assert.deepEqual(resolvePreTokenizer("llama4").patterns, PRE_TOKENIZER_PATTERNS["gpt-4o"]);
  assert.equal(resolvePreTokenizer("llama3").ignoreMerges, true);
  assert.equal(resolvePreTokenizer("unheard-of").ignoreMerges, false);
  // GPT-2 keeps a digit run whole where Llama 3 splits it in threes; Qwen2 takes digits one by one.
  const digits = ["12", "123", "1234", "12345"];
  const merges = ["1 2", "12 3", "123 4", "1234 5"];
  assert.deepEqual(bpe("gpt-2", digits, merges).encode("12345"), [259]);
  assert.deepEqual(bpe("deepseek-r1-qwen", digits, merges).encode("12345"), [0x31, 0x32, 0x33, 0x34, 0x35]);
  // Llama 3's ignore_merges: a pre-token in the vocab is taken whole, whatever the merges would build.
  const abc = ["ab", "abc", "bc"];
  assert.deepEqual(bpe("llama3", abc, ["b c", "a bc"]).encode("abc"), [257]);
  assert.deepEqual(bpe("glm4", abc, ["a b", "b c"]).encode("abc"), [256, 0x63]);
  // A file without tokenizer.ggml.pre: llama.cpp's "default" splits punctuation off first, where
  // Llama 3's pattern lets one mark lead a word ("+b").
  assert.deepEqual(bpe("default", ["+b"], ["+ b"]).encode("a+b"), [0x61, 0x2b, 0x62]);
  assert.deepEqual(bpe("llama-bpe", ["+b"], ["+ b"]).encode("a+b"), [0x61, 256]);
});

test("HfTokenizer.decode() gives \"\" for no ids or only skipped special ones (a lone EOS), where tokenizers.js throws", () => {
  const v = bpeVocab(300);
  const hf = new HfTokenizer(tokenizerJson(v), {}, undefined, "test");
  assert.equal(hf.decode([]), "");
  assert.equal(hf.decode([v.eosId]), "");
  assert.equal(hf.decode([v.eosId, v.eosId]), "");
  assert.equal(hf.decode([v.eosId], { special: true }), "<|endoftext|>");
});

test("HfTokenizer.maxCharsPerToken() sets no bound when an added token strips the whitespace beside it", () => {
  const v = bpeVocab(300);
  const json = tokenizerJson(v) as { added_tokens: object[]; model: { vocab: Record<string, number> } };
  json.added_tokens.push({ id: 300, content: "<mask>", single_word: false, lstrip: true, rstrip: true, normalized: false, special: true });
  json.model.vocab["<mask>"] = 300;
  const hf = new HfTokenizer(json, {}, undefined, "test");
  const text = `x${" ".repeat(1000)}<mask>${"\n".repeat(1000)}y`;
  const ids = hf.encode(text);
  assert.equal(hf.decode(ids, { special: true }), "x<mask>y", "the runs went into the added token");
  const bound = hf.maxCharsPerToken();
  assert.ok(bound === undefined || ids.length >= Math.ceil(text.length / bound), `${ids.length} ids, bound ${bound}`);
});

test("SpecialSplitter.split() takes the longest special token, the first of duplicates, and scans a megabyte of \"<\" quickly", () => {
  const tokens = ["<|a|>", "<|a|>x", "<|a|>", "<|b", "plain"];
  const types = [TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.CONTROL, TokenType.CONTROL, TokenType.NORMAL];
  const small = new SpecialSplitter(tokens, types);
  assert.deepEqual(small.split("<|a|>x<|a|>y<|b|plain"), [{ id: 1 }, { id: 0 }, { text: "y" }, { id: 3 }, { text: "|plain" }]);
  assert.deepEqual(small.split("<|a"), [{ text: "<|a" }]);
  // Llama 3's 256 reserved tokens all begin "<|": trying each at every "<" took 7.6 s for 1 MB.
  const reserved = Array.from({ length: 256 }, (_, i) => `<|reserved_special_token_${i}|>`);
  const llama3 = new SpecialSplitter(reserved, reserved.map(() => TokenType.CONTROL));
  const t0 = performance.now();
  assert.deepEqual(llama3.split("<".repeat(1 << 20)), [{ text: "<".repeat(1 << 20) }]);
  assert.deepEqual(llama3.split("a<|reserved_special_token_7|>"), [{ text: "a" }, { id: 7 }]);
  assert.ok(performance.now() - t0 < 3000, `took ${Math.round(performance.now() - t0)} ms`);
});

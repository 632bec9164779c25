/**
 * Tokenizer hunt 5: Hugging Face tokenizers with more entries than the model has embedding rows
 * (Gemma 3's 262,145 for 262,144 rows, CodeLlama-34b's added tokens), and edge cases against
 * llama.cpp's `llm_tokenizer_spm` / `llm_tokenizer_bpe` and Hugging Face tokenizers: special tokens
 * typed in text, NUL bytes, lone surrogates, long runs, whitespace, partial UTF-8 across tokens.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { checkPromptTokens } from "../../src/engine/engine.ts";
import { OutputText } from "../../src/engine/engine-text.ts";
import { loadModel } from "../../src/model/load.ts";
import { HfTokenizer } from "../../src/model/tokenizer-hf.ts";
import { TokenType } from "../../src/model/tokenizer-special.ts";
import { SpmTokenizer } from "../../src/model/tokenizer-spm.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { spmVocab, type TestVocab } from "./test-vocab.ts";

const dir = mkdtempSync(`${tmpdir()}/tokenizer-hunt5-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "qwen2", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300,
  tied: true, dtype: "f32", seed: 7,
};

type TokenizerJson = {
  added_tokens: { id: number; content: string; special: boolean }[];
  model: { vocab: Record<string, number>; merges: string[] };
};

test("HfTokenizer never produces an added or vocabulary id at or past the embedding rows: its text is split by the model", async () => {
  const path = `${dir}/beyond-rows`;
  await writeHfDirectory(path, SPEC, randomHfWeights(SPEC));
  const original = readFileSync(`${path}/tokenizer.json`, "utf8");
  const plain = new HfTokenizer(JSON.parse(original), {}, undefined, "plain");
  const json = JSON.parse(original) as TokenizerJson;
  const added = (id: number, content: string, special: boolean) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special });
  // Gemma 3's <image_soft_token> sits at 262,144 of 262,144 rows; CodeLlama-34b adds plain words.
  json.added_tokens.push(added(300, "<image_soft_token>", true), added(301, " hello", false));
  // A vocabulary entry past the rows, built by a merge of two entries within them.
  json.model.vocab["\u0120helloworld"] = 302;
  json.model.merges.push("\u0120hello world");
  await writeFile(`${path}/tokenizer.json`, JSON.stringify(json));
  const model = await loadModel(path);
  assert.equal(model.config.vocabSize, 300);
  const tok = model.tokenizer;
  assert.equal(tok.vocabSize, 300, "ids at or past the rows are not the model's");
  for (const text of ["<image_soft_token>", "say hello", " helloworld", "a<image_soft_token> hello<|endoftext|>"]) {
    const ids = tok.encode(text, { addBos: true });
    assert.doesNotThrow(() => checkPromptTokens(ids, model.config.vocabSize), `${JSON.stringify(text)}: ${JSON.stringify(ids)}`);
    assert.deepEqual(ids.slice(1), plain.encode(text), JSON.stringify(text));
    assert.equal(tok.decode(ids), plain.decode(plain.encode(text)));
  }
  // Decoding an id past the rows writes nothing (documented on HfTokenizer.decode).
  for (const id of [300, 301, 302, 1_000_000]) {
    assert.equal(tok.decode([id]), "");
    assert.equal(tok.decode([id], { special: true }), "");
    assert.equal(tok.tokenText?.(id, { special: true }), "");
  }
  assert.equal(tok.decode([0x68, 300, 0x69]), "hi");
});

/**
 * Llama 2's tokenizer.json layout over a SentencePiece-style test vocab: a BPE with byte fallback
 * whose merges build each piece (as transformers' SpmConverter writes them), "▁" for spaces, and
 * a decoder that strips the space the normalizer prefixed.
 */
function llama2Json(v: TestVocab): object {
  const vocab: Record<string, number> = {};
  v.tokens.forEach((t, i) => (vocab[t] = i));
  const merges: string[] = [];
  const pieces = v.tokens.map((t, i) => [t, i] as const).filter(([, i]) => v.types[i] === TokenType.NORMAL);
  for (const [t] of pieces.sort((a, b) => v.scores[b[1]] - v.scores[a[1]])) {
    const cs = Array.from(t);
    for (let k = 1; k < cs.length; k++) {
      const [a, b] = [cs.slice(0, k).join(""), cs.slice(k).join("")];
      if (a in vocab && b in vocab) merges.push(`${a} ${b}`);
    }
  }
  const special = (id: number) => ({ id, content: v.tokens[id], single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return {
    version: "1.0",
    added_tokens: [special(0), special(1), special(2)],
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
    pre_tokenizer: null,
    post_processor: null,
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: "\u2581" }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 },
      ],
    },
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges },
  };
}

test("HfTokenizer over Llama 2's tokenizer.json keeps a continuation's leading space, as the GGUF tokenizer does: \"▁once\" streams as \" once\"", () => {
  const v = spmVocab(400);
  const spm = new SpmTokenizer({ ...v, addSpacePrefix: true });
  const hf = new HfTokenizer(llama2Json(v), {}, "<s>", "llama2");
  const once = v.tokens.indexOf("\u2581once");
  assert.equal(hf.tokenText(once), " once");
  assert.deepEqual(hf.tokenBytes(once), new TextEncoder().encode(" once"), "a grammar places the token by these bytes");
  for (let id = 0; id < v.tokens.length; id++) assert.deepEqual(hf.tokenBytes(id), spm.tokenBytes(id), `token ${id} ${JSON.stringify(v.tokens[id])}`);
  for (const text of ["once upon a time", "  two spaces", "日本 a\u0000b", "\tthe\r\nend ", "<s>hi</s> there<unk>"]) {
    const ids = spm.encode(text);
    assert.deepEqual(hf.encode(text), ids, JSON.stringify(text));
    for (const prefix of [[], [1], [2]]) {
      for (const options of [{}, { special: true }, { whole: true }, { special: true, whole: true }]) {
        const all = [...prefix, ...ids];
        assert.equal(hf.decode(all, options), spm.decode(all, options), `${JSON.stringify(text)} after ${JSON.stringify(prefix)}, ${JSON.stringify(options)}`);
      }
    }
  }
});

/** `bytes` with every `from` (ASCII) written as `to`, of the same length. */
function renamed(bytes: Uint8Array, from: string, to: string): Uint8Array {
  const [f, t] = [new TextEncoder().encode(from), new TextEncoder().encode(to)];
  const out = bytes.slice();
  for (let i = 0; i + f.length <= out.length; i++) if (f.every((b, k) => out[i + k] === b)) out.set(t, i);
  return out;
}

test("A GGUF without tokenizer.ggml.add_bos_token adds BOS as llama.cpp defaults: SentencePiece and Llama 3's pre-tokenizer yes, Qwen2's no", async () => {
  const cases: [ModelFileSpec, boolean][] = [
    [{ ...SPEC, architecture: "llama", tokenizer: "spm" }, true],
    [{ ...SPEC, architecture: "llama", tokenizer: "llama-bpe" }, true],
    [{ ...SPEC, architecture: "qwen2", tokenizer: "qwen2" }, false],
  ];
  for (const [spec, addBos] of cases) {
    const path = `${dir}/no-add-bos-${spec.tokenizer}.gguf`;
    // The key renamed to one llama.cpp does not read: the file has no add_bos_token.
    await writeFile(path, renamed(ggufBytes(spec, randomHfWeights(spec)), "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_bos_tokeX"));
    const model = await loadModel(path);
    assert.equal(model.config.addBos, addBos, `${spec.tokenizer}`);
  }
});

test("Streaming Llama 2's tokenizer.json through OutputText gives the GGUF tokenizer's text: the first token's space, characters split over byte tokens whole", () => {
  const v = spmVocab(400);
  const spm = new SpmTokenizer({ ...v, addSpacePrefix: true });
  const hf = new HfTokenizer(llama2Json(v), {}, "<s>", "llama2");
  const ids = spm.encode("once 日本\u0000 upon\r\n\ttime");
  const streamed = (tok: SpmTokenizer | HfTokenizer) => {
    const out = new OutputText(tok, []);
    const deltas = ids.map((id) => out.push(id));
    deltas.push(out.flush());
    assert.ok(deltas.every((d) => !d.includes("\uFFFD")), JSON.stringify(deltas));
    return deltas;
  };
  const gguf = streamed(spm);
  assert.equal(gguf.join(""), " once 日本\u0000 upon\r\n\ttime");
  assert.deepEqual(streamed(hf), gguf);
});

/**
 * Small but real vocabularies for test models: a SentencePiece-style one (byte tokens, scored
 * word pieces) and a GPT-2 byte-level BPE one (256 byte symbols, merges building common words),
 * plus the equivalent Hugging Face tokenizer.json for the BPE one.
 */
import { bytesToUnicode } from "../../src/model/tokenizer-bpe.ts";

/** A vocab as written into GGUF metadata. */
export interface TestVocab {
  kind: "spm" | "bpe" | "gemma4";
  tokens: string[];
  types: number[];
  scores: number[];
  merges: string[];
  bosId: number;
  eosId: number;
}

const WORDS = [
  "the", "once", "upon", "time", "there", "was", "little", "girl", "named", "lily", "she", "loved", "to",
  "play", "outside", "and", "in", "a", "hello", "world", "tool", "call", "agent", "model", "token", "cache",
  "ing", "er", "on", "at", "it", "is", "he", "of", "for", "with", "you", "that", "this", "be",
];

/** SentencePiece-style vocab of exactly `size` tokens: <unk>, <s>, </s>, 256 byte tokens, pieces. */
export function spmVocab(size: number): TestVocab {
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, 3, 3];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
  }
  const seen = new Set(tokens);
  const add = (t: string) => {
    if (tokens.length < size && !seen.has(t)) {
      seen.add(t);
      tokens.push(t);
      types.push(1);
    }
  };
  add("\u2581");
  for (const ch of "abcdefghijklmnopqrstuvwxyz,.") add(ch);
  for (const w of WORDS) for (let k = 2; k <= w.length + 1; k++) add(("\u2581" + w).slice(0, k));
  for (const w of WORDS) for (let k = 2; k <= w.length; k++) add(w.slice(0, k));
  for (let i = 0; tokens.length < size; i++) add(`\u2581x${i}`);
  // Earlier pieces score higher, as SentencePiece orders pieces by log probability.
  const scores = tokens.map((_, i) => (i < 259 ? 0 : -(i - 259)));
  return { kind: "spm", tokens, types, scores, merges: [], bosId: 1, eosId: 2 };
}

/** GPT-2 byte-level BPE vocab of exactly `size` tokens; the last one is <|endoftext|>. */
export function bpeVocab(size: number): TestVocab {
  if (size < 258) throw new RangeError(`A byte-level BPE test vocab needs at least 258 tokens, got ${size}`);
  const byteChar = bytesToUnicode();
  const tokens = byteChar.slice();
  const seen = new Set(tokens);
  const merges: string[] = [];
  const mapped = (s: string) => Array.from(new TextEncoder().encode(s), (b) => byteChar[b]);
  const words = [...WORDS.map((w) => " " + w), ...WORDS];
  outer: for (const w of words) {
    const chars = mapped(w);
    let cur = chars[0];
    for (let k = 1; k < chars.length; k++) {
      if (tokens.length >= size - 1) break outer;
      const next = cur + chars[k];
      if (!seen.has(next)) {
        merges.push(`${cur} ${chars[k]}`);
        tokens.push(next);
        seen.add(next);
      }
      cur = next;
    }
  }
  for (let i = 0; tokens.length < size - 1; i++) {
    const a = byteChar[0x61 + (i % 26)];
    const b = byteChar[0x61 + Math.floor(i / 26) % 26];
    if (!seen.has(a + b)) {
      merges.push(`${a} ${b}`);
      tokens.push(a + b);
      seen.add(a + b);
    } else if (i > 26 * 26) {
      tokens.push(`<|pad${i}|>`);
    }
  }
  const types: number[] = tokens.map((t) => (t.startsWith("<|pad") ? 4 : 1));
  tokens.push("<|endoftext|>");
  types.push(3);
  const eos = tokens.length - 1;
  return { kind: "bpe", tokens, types, scores: [], merges, bosId: eos, eosId: eos };
}

/**
 * Gemma 4-style vocab (tokenizer.ggml.model "gemma4") of exactly `size` tokens: <pad>, <eos>, <bos>,
 * <unk>, its turn tokens, newline runs, 256 byte tokens, single characters (spaces as "▁"), then
 * pieces merged from them, in merge order.
 */
export function gemma4Vocab(size: number): TestVocab {
  const tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", "\n", "\n\n"];
  const types = [3, 3, 3, 2, 3, 3, 1, 1];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
  }
  const seen = new Set(tokens);
  const merges: string[] = [];
  const add = (t: string) => {
    if (tokens.length < size && !seen.has(t)) {
      seen.add(t);
      tokens.push(t);
      types.push(1);
      return true;
    }
    return false;
  };
  for (const ch of "\u2581abcdefghijklmnopqrstuvwxyzTHELO,.'!0123456789") add(ch);
  outer: for (const w of [...WORDS.map((x) => "\u2581" + x), ...WORDS]) {
    let cur = w[0];
    for (let k = 1; k < w.length; k++) {
      if (tokens.length >= size) break outer;
      const next = cur + w[k];
      if (add(next)) merges.push(`${cur} ${w[k]}`);
      cur = next;
    }
  }
  for (let i = 0; tokens.length < size; i++) add(`<unused${i}>`) && (types[types.length - 1] = 5);
  return { kind: "gemma4", tokens, types, scores: [], merges, bosId: 2, eosId: 1 };
}

/** Qwen2's pre-tokenizer regex, as its tokenizer.json writes it. */
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** A Hugging Face tokenizer.json equivalent to a BPE test vocab (Qwen2-style pre-tokenizer). */
export function tokenizerJson(v: TestVocab): object {
  const vocab: Record<string, number> = {};
  const added: object[] = [];
  v.tokens.forEach((t, id) => {
    if (v.types[id] === 3 || v.types[id] === 4) {
      added.push({ id, content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: v.types[id] === 3 });
    }
    vocab[t] = id;
  });
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: QWEN2_SPLIT }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: v.merges,
    },
  };
}

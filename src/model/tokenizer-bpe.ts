/**
 * GPT-2-style byte-level BPE from a GGUF vocab (tokenizer.ggml.model "gpt2"): text is split by a
 * pre-tokenizer regex chosen from tokenizer.ggml.pre, each piece's UTF-8 bytes are mapped to
 * printable characters (GPT-2's bytes_to_unicode), then merged by merge rank (lowest first).
 */
import type { Tokenizer } from "./config.ts";
import { mergeSymbols, PieceBytesDecoder, SpecialSplitter, TokenType, wellFormed } from "./tokenizer-special.ts";

/** The vocab fields a byte-level BPE tokenizer needs. */
export interface BpeVocab {
  tokens: readonly string[];
  types: readonly number[];
  /** "left right" pairs in priority order. */
  merges: readonly string[];
  /** tokenizer.ggml.pre ("llama-bpe", "qwen2", "gpt2", ...). */
  pre: string;
  bosId?: number;
}

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

/**
 * Pre-tokenizer patterns, as llama.cpp uses them for each `tokenizer.ggml.pre`: applied in turn, each
 * splitting every piece so far into its matches and the text between them (llama.cpp's
 * `unicode_regex_split`); most vocabs have one.
 */
export const PRE_TOKENIZER_PATTERNS: Readonly<Record<string, readonly string[]>> = {
  gpt2: ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"],
  "llama-bpe": [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  qwen2: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`],
  // GPT-4o's o200k (GPT-OSS): cased words (an upper-case run, then lower case), each with a
  // trailing contraction, in llama.cpp's rewrite, which treats letters outside ASCII as both cases.
  "gpt-4o": [
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|" +
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|" +
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  // Kimi K2 (tokenization_kimi.py's tiktoken pattern): runs of Han characters apart, then o200k-style
  // cased words without Han. Written as the model's own regex reads: llama.cpp's hand-written
  // splitter for it ignores case (it keeps "helloWorld" whole where this gives "hello", "World").
  "kimi-k2": [
    "\\p{Script=Han}+|" +
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Script=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*(?:(?!\\p{Script=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|" +
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Script=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+(?:(?!\\p{Script=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|" +
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  // A file without tokenizer.ggml.pre (llama.cpp reads it as "default" and warns): punctuation runs
  // apart first, then GPT-2's words, then digit runs, then threes of ASCII digits.
  default: [
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
  ],
  // Mistral's Tekken (Nemo, Pixtral 12B): o200k-style cased words without contractions, single digits; llama.cpp's rewrite.
  tekken: [
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|" +
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  // DeepSeek V3 / R1: digits in threes, then runs of CJK and kana, then words and punctuation.
  "deepseek-v3": [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
};

/**
 * Other `tokenizer.ggml.pre` names llama.cpp gives the same pattern (llama-vocab.cpp's pre-type
 * table): real GPT-2 files say "gpt-2", DeepSeek-R1's Qwen distills "deepseek-r1-qwen", Llama 4 "llama4".
 */
const PRE_TOKENIZER_ALIASES: Readonly<Record<string, string>> = {
  "llama3": "llama-bpe", "llama-v3": "llama-bpe", "falcon3": "llama-bpe", "falcon-h1": "llama-bpe",
  "pixtral": "llama-bpe", "midm-2.0": "llama-bpe", "lfm2": "llama-bpe",
  "deepseek-r1-qwen": "qwen2", "megrez": "qwen2", "stablelm2": "qwen2",
  "llama4": "gpt-4o",
  "gpt-2": "gpt2", "phi-2": "gpt2", "jina-es": "gpt2", "jina-de": "gpt2", "gigachat": "gpt2",
  "jina-v2-es": "gpt2", "jina-v2-de": "gpt2", "a.x-4.0": "gpt2", "mellum": "gpt2", "exaone4": "gpt2",
};

/** Pre-tokenizers whose whole pre-token, when in the vocab, is taken without merging (llama.cpp's `ignore_merges`). */
const IGNORES_MERGES = new Set(["llama-bpe", "tekken"]);

/** The pattern set a `tokenizer.ggml.pre` name stands for; unknown names fall back to Llama 3's, which covers most modern BPE vocabs. */
export function resolvePreTokenizer(pre: string): { name: string; patterns: readonly string[]; ignoreMerges: boolean } {
  const name = PRE_TOKENIZER_ALIASES[pre] ?? pre;
  const patterns = PRE_TOKENIZER_PATTERNS[name];
  if (patterns === undefined) return { name: "llama-bpe", patterns: PRE_TOKENIZER_PATTERNS["llama-bpe"], ignoreMerges: false };
  return { name, patterns, ignoreMerges: IGNORES_MERGES.has(name) };
}

/**
 * Whether llama.cpp adds BOS for a `tokenizer.ggml.pre` when the file has no
 * `tokenizer.ggml.add_bos_token` (llama-vocab.cpp sets `add_bos` for Llama 3's pre-tokenizer and its
 * aliases, Tekken and Chameleon): early Llama 3 GGUFs lack the key and need their <|begin_of_text|>.
 */
export function preAddsBos(pre: string): boolean {
  const name = PRE_TOKENIZER_ALIASES[pre] ?? pre;
  return name === "llama-bpe" || name === "tekken" || name === "chameleon";
}

/** Splits `text` by each pattern in turn, keeping matches and the text between them as pieces. */
export function preTokenize(text: string, patterns: readonly RegExp[]): string[] {
  let pieces = [text];
  for (const re of patterns) {
    const next: string[] = [];
    for (const piece of pieces) {
      let last = 0;
      for (const m of piece.matchAll(re)) {
        if (m[0].length === 0) continue;
        if (m.index > last) next.push(piece.slice(last, m.index));
        next.push(m[0]);
        last = m.index + m[0].length;
      }
      if (last < piece.length) next.push(piece.slice(last));
    }
    pieces = next;
  }
  return pieces;
}

/** GPT-2's reversible map from bytes to printable unicode characters. */
export function bytesToUnicode(): string[] {
  const keep: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const table: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    table[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
  }
  return table;
}

/** Byte-level BPE tokenizer over a GGUF vocab. */
export class BpeTokenizer extends PieceBytesDecoder implements Tokenizer {
  readonly vocabSize: number;
  private readonly ids = new Map<string, number>();
  private readonly ranks = new Map<string, number>();
  private readonly byteChar = bytesToUnicode();
  private readonly charByte = new Map<string, number>();
  private readonly patterns: RegExp[];
  private readonly specials: SpecialSplitter;
  private readonly cache = new Map<string, number[]>();
  private readonly ignoreMerges: boolean;
  /** Some byte has no token of its own: such bytes are dropped, as llama.cpp drops them. */
  private readonly missingBytes: boolean;

  constructor(private readonly vocab: BpeVocab) {
    super(vocab);
    this.vocabSize = vocab.tokens.length;
    vocab.tokens.forEach((t, i) => {
      if (!this.ids.has(t)) this.ids.set(t, i);
    });
    vocab.merges.forEach((m, i) => this.ranks.set(m, i));
    this.byteChar.forEach((c, b) => this.charByte.set(c, b));
    this.missingBytes = this.byteChar.some((c) => !this.ids.has(c));
    const pre = resolvePreTokenizer(vocab.pre);
    this.patterns = pre.patterns.map((p) => new RegExp(p, "gu"));
    this.specials = new SpecialSplitter(vocab.tokens, vocab.types);
    this.ignoreMerges = pre.ignoreMerges;
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const out: number[] = [];
    if (options.addBos && this.vocab.bosId !== undefined) out.push(this.vocab.bosId);
    for (const frag of this.specials.split(wellFormed(text))) {
      if ("id" in frag) {
        out.push(frag.id);
        continue;
      }
      // A loop, not push(...ids): one long word's ids (a 1 MB run of letters) overflow the call stack as arguments.
      for (const piece of preTokenize(frag.text, this.patterns)) for (const id of this.encodeWord(piece)) out.push(id);
    }
    return out;
  }

  private encodeWord(word: string): number[] {
    const cached = this.cache.get(word);
    if (cached) return cached;
    const mapped = Array.from(new TextEncoder().encode(word), (b) => this.byteChar[b]);
    const whole = this.ids.get(mapped.join(""));
    let result: number[];
    // llama.cpp's Llama 3 tokenizer takes a whole pre-token that is in the vocab without merging.
    if (this.ignoreMerges && whole !== undefined && this.vocab.types[whole] !== TokenType.CONTROL) {
      result = [whole];
    } else {
      const parts = this.merge(mapped);
      result = [];
      for (const p of parts) {
        const id = this.ids.get(p);
        if (id !== undefined) result.push(id);
        else {
          // A byte without a token is dropped (llama.cpp), never written as token 0.
          for (const ch of p) {
            const byte = this.ids.get(ch);
            if (byte !== undefined) result.push(byte);
          }
        }
      }
    }
    if (this.cache.size < 65536) this.cache.set(word, result);
    return result;
  }

  /** Merges the adjacent pair of lowest rank (leftmost on ties) until none has a rank. */
  private merge(parts: string[]): string[] {
    return mergeSymbols(parts, (left, right) => {
      const rank = this.ranks.get(left + " " + right);
      return rank === undefined ? undefined : -rank;
    });
  }

  protected override dropsBytes(): boolean {
    return this.missingBytes;
  }

  /** Byte-level characters, one a byte (a character outside the table as its own UTF-8). */
  protected override textBytes(t: string): number[] {
    const out: number[] = [];
    for (const ch of t) {
      const b = this.charByte.get(ch);
      if (b !== undefined) out.push(b);
      else out.push(...new TextEncoder().encode(ch));
    }
    return out;
  }
}

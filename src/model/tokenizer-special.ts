/**
 * Pieces shared by the GGUF tokenizers: token types and splitting text at special-token strings
 * (chat templates put "<|im_start|>" etc. in the text; they must become one id, as in llama.cpp),
 * and decoding by each token's bytes.
 */
import type { DecodeOptions } from "./config.ts";

/** GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`). */
export const TokenType = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

/** A stretch of text to tokenize normally, or a special token already resolved to its id. */
export type Fragment = { text: string } | { id: number };

/**
 * Finds special tokens inside text, longest match first: control, user-defined and unknown tokens,
 * as llama.cpp's `cache_special_tokens` holds them (so "<unk>" in text is the unknown token, as in
 * Hugging Face tokenizers, where it is an added special token).
 */
export class SpecialSplitter {
  /**
   * A trie of the special tokens' UTF-16 code units: a scan stops at the first code unit no token
   * continues with, so text full of "<" costs one lookup per character, not a try of each of
   * Llama 3's 256 "<|reserved_special_token_N|>" (seconds for a megabyte).
   */
  private readonly root: TrieNode = { next: new Map() };
  private readonly empty: boolean;

  constructor(tokens: readonly string[], types: readonly number[]) {
    let empty = true;
    tokens.forEach((text, id) => {
      const t = types[id];
      if ((t !== TokenType.CONTROL && t !== TokenType.USER_DEFINED && t !== TokenType.UNKNOWN) || text.length === 0) return;
      let node = this.root;
      for (let i = 0; i < text.length; i++) {
        let child = node.next.get(text[i]);
        if (child === undefined) node.next.set(text[i], child = { next: new Map() });
        node = child;
      }
      node.id ??= id; // the first of duplicate strings wins
      empty = false;
    });
    this.empty = empty;
  }

  /** Splits `text` into plain fragments and special-token ids, left to right. */
  split(text: string): Fragment[] {
    if (this.empty) return [{ text }];
    const out: Fragment[] = [];
    let start = 0;
    let plainFrom = 0;
    while (start < text.length) {
      const hit = this.matchAt(text, start);
      if (hit) {
        if (start > plainFrom) out.push({ text: text.slice(plainFrom, start) });
        out.push({ id: hit.id });
        start += hit.length;
        plainFrom = start;
      } else {
        start++;
      }
    }
    if (plainFrom < text.length) out.push({ text: text.slice(plainFrom) });
    return out;
  }

  /** The longest special token at `at`. */
  private matchAt(text: string, at: number): { id: number; length: number } | undefined {
    let node: TrieNode | undefined = this.root;
    let best: { id: number; length: number } | undefined;
    for (let i = at; i < text.length; i++) {
      node = node.next.get(text[i]);
      if (node === undefined) break;
      if (node.id !== undefined) best = { id: node.id, length: i - at + 1 };
    }
    return best;
  }
}

interface TrieNode {
  next: Map<string, TrieNode>;
  id?: number;
}

/** Decodes collected bytes as UTF-8 (invalid sequences become U+FFFD). */
export function utf8(bytes: readonly number[]): string {
  return new TextDecoder("utf-8").decode(new Uint8Array(bytes));
}

/**
 * What tokenizers whose every token stands for bytes share (byte-level BPE, Gemma 4's SentencePiece-style
 * BPE): each token's bytes by its type (a control or unknown token's string only with `special`, unused
 * ones none, user-defined ones their text, the rest as the subclass reads its strings: `textBytes`), and
 * decoding by them.
 */
export abstract class PieceBytesDecoder {
  #maxChars: number | undefined;

  constructor(private readonly pieces: { readonly tokens: readonly string[]; readonly types: readonly number[] }) {}

  /** A normal or byte token's bytes, from its string as the vocabulary writes it. */
  protected abstract textBytes(text: string, type: number): number[];

  /** Whether some byte has no token (it is dropped): then nothing bounds the text a token stands for. */
  protected abstract dropsBytes(): boolean;

  /** A token's bytes; a control or unknown token's string only with `special`. */
  protected pieceBytes(id: number, special = false): number[] {
    const t = this.pieces.tokens[id];
    if (t === undefined) return [];
    const type = this.pieces.types[id] ?? TokenType.NORMAL;
    const control = type === TokenType.CONTROL || type === TokenType.UNKNOWN; // llama.cpp's attr_special
    if ((control && !special) || type === TokenType.UNUSED) return [];
    if (type === TokenType.USER_DEFINED || control) return Array.from(new TextEncoder().encode(t));
    return this.textBytes(t, type);
  }

  /**
   * A token's string is at least as long as the text it stands for (a byte-level character or "▁" per
   * byte, `<0xXX>` for one; a special token its own string), unless some byte has no token.
   */
  maxCharsPerToken(): number | undefined {
    if (this.dropsBytes()) return undefined;
    this.#maxChars ??= this.pieces.tokens.reduce((m, t) => Math.max(m, t.length), 1);
    return this.#maxChars;
  }

  decode(ids: readonly number[], options?: DecodeOptions): string {
    const bytes: number[] = [];
    for (const id of ids) for (const b of this.pieceBytes(id, options?.special === true)) bytes.push(b);
    return utf8(bytes);
  }

  tokenText(id: number, options?: DecodeOptions): string {
    return utf8(this.pieceBytes(id, options?.special === true));
  }

  tokenBytes(id: number): Uint8Array {
    return Uint8Array.from(this.pieceBytes(id));
  }
}

/**
 * `text` with each lone UTF-16 surrogate (a JSON "\ud800" escape) replaced by U+FFFD, the character
 * its UTF-8 bytes spell: pre-tokenizer patterns must see the text the merges see (a lone surrogate
 * is no symbol, U+FFFD is, so "\ud800's" would split unlike the "\uFFFD's" llama.cpp is given).
 */
export function wellFormed(text: string): string {
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}

interface Bigram {
  left: number;
  right: number;
  score: number;
  text: string;
}

/** Binary max-heap of bigrams by score, ties broken by the smaller left index. */
class BigramQueue {
  private readonly items: Bigram[] = [];
  private before(a: Bigram, b: Bigram): boolean {
    return a.score > b.score || (a.score === b.score && a.left < b.left);
  }
  get size(): number {
    return this.items.length;
  }
  push(b: Bigram): void {
    const h = this.items;
    h.push(b);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }
  pop(): Bigram {
    const h = this.items;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.before(h[l], h[m])) m = l;
        if (r < h.length && this.before(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Merges adjacent symbols, the best-scoring pair first (the leftmost on ties), while `score` knows
 * a pair (undefined: never merged): SentencePiece's scores and BPE's negated merge ranks alike. A
 * heap of pairs over a linked list, as llama.cpp's tokenizers do, so a long word (a 1 MB run of
 * spaces is one pre-token) costs n log n, not a rescan of every pair after each merge.
 */
export function mergeSymbols(chars: readonly string[], score: (left: string, right: string) => number | undefined): string[] {
  const text = chars.slice();
  const prev = chars.map((_, i) => i - 1);
  const next = chars.map((_, i) => (i + 1 < chars.length ? i + 1 : -1));
  const queue = new BigramQueue();
  const tryAdd = (left: number, right: number) => {
    if (left < 0 || right < 0) return;
    const s = score(text[left], text[right]);
    if (s !== undefined) queue.push({ left, right, score: s, text: text[left] + text[right] });
  };
  for (let i = 1; i < chars.length; i++) tryAdd(i - 1, i);
  while (queue.size > 0) {
    const b = queue.pop();
    // Stale entry: one side was merged away or already grew since this pair was queued.
    if (text[b.left].length === 0 || text[b.right].length === 0 || text[b.left] + text[b.right] !== b.text) continue;
    text[b.left] = b.text;
    text[b.right] = "";
    next[b.left] = next[b.right];
    if (next[b.right] >= 0) prev[next[b.right]] = b.left;
    tryAdd(prev[b.left], b.left);
    tryAdd(b.left, next[b.left]);
  }
  const out: string[] = [];
  for (let i = chars.length > 0 ? 0 : -1; i >= 0; i = next[i]) out.push(text[i]);
  return out;
}

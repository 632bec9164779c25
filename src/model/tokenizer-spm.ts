/**
 * SentencePiece-style tokenizer from a GGUF vocab (tokenizer.ggml.model "llama"): tokens, scores
 * and token types, "▁" for spaces, byte fallback through "<0xNN>" tokens. Encoding follows
 * llama.cpp's `llm_tokenizer_spm`: start from UTF-8 characters and repeatedly merge the adjacent
 * pair whose concatenation is the highest-scoring vocab entry (ties: leftmost).
 */
import type { DecodeOptions, Tokenizer } from "./config.ts";
import { type Fragment, SpecialSplitter, TokenType, utf8 } from "./tokenizer-special.ts";

/** The vocab fields an SPM tokenizer needs. */
export interface SpmVocab {
  tokens: readonly string[];
  scores: readonly number[];
  types: readonly number[];
  bosId?: number;
  unkId?: number;
  /** Prepend "▁" to the text (tokenizer.ggml.add_space_prefix; default true). */
  addSpacePrefix: boolean;
}

interface Symbol {
  text: string;
  prev: number;
  next: number;
}

interface Bigram {
  left: number;
  right: number;
  score: number;
  text: string;
}

const SPACE = "\u2581";

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

/** SentencePiece-style tokenizer over a GGUF vocab. */
export class SpmTokenizer implements Tokenizer {
  readonly vocabSize: number;
  private readonly ids = new Map<string, number>();
  private readonly byteIds = new Map<number, number>();
  private readonly specials: SpecialSplitter;

  constructor(private readonly vocab: SpmVocab) {
    this.vocabSize = vocab.tokens.length;
    vocab.tokens.forEach((t, i) => {
      if (!this.ids.has(t)) this.ids.set(t, i);
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t);
      if (m && vocab.types[i] === TokenType.BYTE) this.byteIds.set(parseInt(m[1], 16), i);
    });
    this.specials = new SpecialSplitter(vocab.tokens, vocab.types);
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const out: number[] = [];
    if (options.addBos && this.vocab.bosId !== undefined) out.push(this.vocab.bosId);
    let afterSpecial = true; // llama.cpp adds the space prefix at the start and after each special token
    for (const frag of this.specials.split(text) as Fragment[]) {
      if ("id" in frag) {
        out.push(frag.id);
        afterSpecial = true;
        continue;
      }
      const prefixed = this.vocab.addSpacePrefix && afterSpecial ? " " + frag.text : frag.text;
      this.encodeText(prefixed.replaceAll(" ", SPACE), out);
      afterSpecial = false;
    }
    return out;
  }

  private encodeText(text: string, out: number[]): void {
    const chars = Array.from(text);
    const symbols: Symbol[] = chars.map((ch, i) => ({ text: ch, prev: i - 1, next: i + 1 < chars.length ? i + 1 : -1 }));
    if (symbols.length === 0) return;
    const queue = new BigramQueue();
    const tryAdd = (left: number, right: number) => {
      if (left < 0 || right < 0) return;
      const joined = symbols[left].text + symbols[right].text;
      const id = this.ids.get(joined);
      if (id === undefined) return;
      queue.push({ left, right, score: this.vocab.scores[id] ?? 0, text: joined });
    };
    for (let i = 1; i < symbols.length; i++) tryAdd(i - 1, i);
    while (queue.size > 0) {
      const b = queue.pop();
      const l = symbols[b.left];
      const r = symbols[b.right];
      // Stale entry: one side was merged away or already grew since this bigram was queued.
      if (l.text.length === 0 || r.text.length === 0 || l.text + r.text !== b.text) continue;
      l.text = b.text;
      r.text = "";
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = b.left;
      tryAdd(l.prev, b.left);
      tryAdd(b.left, l.next);
    }
    for (let i = 0; i >= 0 && i < symbols.length; i = symbols[i].next) this.emit(symbols[i].text, out);
  }

  /** A final symbol is a vocab entry, or (never merged and unknown) falls back to byte tokens. */
  private emit(text: string, out: number[]): void {
    const id = this.ids.get(text);
    if (id !== undefined) {
      out.push(id);
      return;
    }
    for (const byte of new TextEncoder().encode(text)) {
      const b = this.byteIds.get(byte) ?? this.vocab.unkId;
      if (b !== undefined) out.push(b);
    }
  }

  decode(ids: readonly number[], options?: DecodeOptions): string {
    const bytes: number[] = [];
    ids.forEach((id, i) => {
      const piece = this.pieceBytes(id, options?.special === true);
      // The space prefix added at encode time is dropped again right after BOS (or first, in a whole text).
      const first = ids[0] === this.vocab.bosId ? i === 1 : i === 0 && options?.whole === true;
      const skipSpace = this.vocab.addSpacePrefix && first && piece[0] === 0x20;
      for (let k = skipSpace ? 1 : 0; k < piece.length; k++) bytes.push(piece[k]);
    });
    return utf8(bytes);
  }

  tokenText(id: number, options?: DecodeOptions): string {
    return utf8(this.pieceBytes(id, options?.special === true));
  }

  tokenBytes(id: number): Uint8Array {
    return Uint8Array.from(this.pieceBytes(id));
  }

  private maxChars: number | undefined | null = null;
  /**
   * Every token stands for a piece of the (space-prefixed) text no longer than its vocabulary
   * string, or for one byte (byte fallback, unknown). Without a byte token or an unknown token for
   * every byte, bytes can be dropped, and there is no bound.
   */
  maxCharsPerToken(): number | undefined {
    if (this.maxChars === null) {
      const dropsBytes = this.byteIds.size < 256 && this.vocab.unkId === undefined;
      this.maxChars = dropsBytes ? undefined : this.vocab.tokens.reduce((m, t) => Math.max(m, t.length), 1);
    }
    return this.maxChars;
  }

  /** A token's bytes; a control token's string only with `special`. */
  private pieceBytes(id: number, special = false): number[] {
    const t = this.vocab.tokens[id];
    if (t === undefined) return [];
    switch (this.vocab.types[id] ?? TokenType.NORMAL) {
      case TokenType.BYTE: {
        const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t);
        return m ? [parseInt(m[1], 16)] : [];
      }
      case TokenType.CONTROL:
        return special ? Array.from(new TextEncoder().encode(t)) : [];
      case TokenType.UNKNOWN:
      case TokenType.UNUSED:
        return [];
      default:
        return Array.from(new TextEncoder().encode(t.replaceAll(SPACE, " ")));
    }
  }
}

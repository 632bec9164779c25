/**
 * SentencePiece-style tokenizer from a GGUF vocab (tokenizer.ggml.model "llama"): tokens, scores
 * and token types, "▁" for spaces, byte fallback through "<0xNN>" tokens. Encoding follows
 * llama.cpp's `llm_tokenizer_spm`: start from UTF-8 characters and repeatedly merge the adjacent
 * pair whose concatenation is the highest-scoring vocab entry (ties: leftmost).
 */
import type { DecodeOptions, Tokenizer } from "./config.ts";
import { type Fragment, mergeSymbols, SpecialSplitter, TokenType, utf8, wellFormed } from "./tokenizer-special.ts";

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

const SPACE = "\u2581";

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
    for (const frag of this.specials.split(wellFormed(text)) as Fragment[]) {
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
    const score = (left: string, right: string) => {
      const id = this.ids.get(left + right);
      return id === undefined ? undefined : this.vocab.scores[id] ?? 0;
    };
    for (const piece of mergeSymbols(Array.from(text), score)) this.emit(piece, out);
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
    // The space prefix added at encode time is dropped again from the text's start (after BOS, or
    // in a whole text): from the first piece that writes anything, as Hugging Face's Strip decoder
    // strips the joined text and llama.cpp the first piece. A written "<s>" keeps " a" after it.
    let strip = this.vocab.addSpacePrefix && (ids[0] === this.vocab.bosId || options?.whole === true);
    for (const id of ids) {
      const piece = this.pieceBytes(id, options?.special === true);
      if (piece.length === 0) continue;
      for (let k = strip && piece[0] === 0x20 ? 1 : 0; k < piece.length; k++) bytes.push(piece[k]);
      strip = false;
    }
    return this.utf8.decode(new Uint8Array(bytes));
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

  /** As tokenizer-special.ts `utf8` decodes (invalid sequences become U+FFFD), made once: decoding runs at every generated token. */
  private readonly utf8 = new TextDecoder("utf-8");
  /** Each token's bytes once found, by id (`special` ones apart): decoding runs at every generated token. */
  private readonly pieces = [new Map<number, readonly number[]>(), new Map<number, readonly number[]>()];

  /** A token's bytes; a control or unknown token's string only with `special`. Shared: never modify. */
  private pieceBytes(id: number, special = false): readonly number[] {
    const cache = this.pieces[special ? 1 : 0];
    let bytes = cache.get(id);
    if (bytes === undefined) cache.set(id, bytes = this.findPieceBytes(id, special));
    return bytes;
  }

  private findPieceBytes(id: number, special: boolean): number[] {
    const t = this.vocab.tokens[id];
    if (t === undefined) return [];
    switch (this.vocab.types[id] ?? TokenType.NORMAL) {
      case TokenType.BYTE: {
        const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t);
        return m ? [parseInt(m[1], 16)] : [];
      }
      case TokenType.CONTROL:
      case TokenType.UNKNOWN: // llama.cpp writes both only when asked (its attr_special)
        return special ? Array.from(new TextEncoder().encode(t)) : [];
      case TokenType.UNUSED:
        return [];
      default:
        return Array.from(new TextEncoder().encode(t.replaceAll(SPACE, " ")));
    }
  }
}

/**
 * SentencePiece-style BPE (a GGUF's tokenizer.ggml.model "gemma4", Gemma 4's vocab), as llama.cpp
 * runs it: spaces become "▁" (U+2581), the text is split only into runs of newlines and runs of the
 * rest, each run's characters (not bytes, unlike GPT-2's BPE) are merged by merge rank (lowest first),
 * and a piece the vocab lacks is written byte by byte as `<0xXX>` tokens. A run of newlines that is a
 * token is taken whole. Decoding turns "▁" back into spaces and byte tokens into their bytes.
 */
import type { DecodeOptions, Tokenizer } from "./config.ts";
import { mergeSymbols, SpecialSplitter, TokenType, utf8, wellFormed } from "./tokenizer-special.ts";

/** The vocab fields the tokenizer needs. */
export interface SpmBpeVocab {
  tokens: readonly string[];
  types: readonly number[];
  /** "left right" pairs in priority order. */
  merges: readonly string[];
  bosId?: number;
}

const SPACE = "\u2581";
const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

/** Gemma 4's tokenizer over a GGUF vocab (see the module comment). */
export class SpmBpeTokenizer implements Tokenizer {
  readonly vocabSize: number;
  private readonly ids = new Map<string, number>();
  private readonly ranks = new Map<string, number>();
  private readonly specials: SpecialSplitter;
  private readonly cache = new Map<string, number[]>();
  private readonly byteIds: (number | undefined)[];
  private maxChars: number | undefined;

  constructor(private readonly vocab: SpmBpeVocab) {
    this.vocabSize = vocab.tokens.length;
    vocab.tokens.forEach((t, i) => {
      if (!this.ids.has(t)) this.ids.set(t, i);
    });
    vocab.merges.forEach((m, i) => this.ranks.set(m, i));
    this.specials = new SpecialSplitter(vocab.tokens, vocab.types);
    this.byteIds = Array.from({ length: 256 }, (_, b) => this.ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const out: number[] = [];
    if (options.addBos && this.vocab.bosId !== undefined) out.push(this.vocab.bosId);
    for (const frag of this.specials.split(wellFormed(text))) {
      if ("id" in frag) {
        out.push(frag.id);
        continue;
      }
      for (const run of frag.text.replaceAll(" ", SPACE).match(/[^\n]+|\n+/g) ?? []) for (const id of this.encodeRun(run)) out.push(id);
    }
    return out;
  }

  private encodeRun(run: string): number[] {
    const cached = this.cache.get(run);
    if (cached) return cached;
    const whole = run[0] === "\n" ? this.ids.get(run) : undefined;
    const result: number[] = [];
    if (whole !== undefined) result.push(whole);
    else {
      const parts = mergeSymbols(Array.from(run), (left, right) => {
        const rank = this.ranks.get(left + " " + right);
        return rank === undefined ? undefined : -rank;
      });
      for (const p of parts) {
        const id = this.ids.get(p);
        if (id !== undefined) {
          result.push(id);
          continue;
        }
        // Byte fallback; a byte without its token is dropped, as llama.cpp drops it.
        for (const b of new TextEncoder().encode(p)) {
          const byte = this.byteIds[b];
          if (byte !== undefined) result.push(byte);
        }
      }
    }
    if (this.cache.size < 65536) this.cache.set(run, result);
    return result;
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

  /** A token's string is at least as long as the text it stands for ("▁" for a space, `<0xXX>` for a byte). */
  maxCharsPerToken(): number | undefined {
    if (this.byteIds.some((b) => b === undefined)) return undefined; // dropped bytes stand for no token
    this.maxChars ??= this.vocab.tokens.reduce((m, t) => Math.max(m, t.length), 1);
    return this.maxChars;
  }

  /** A token's bytes; a control or unknown token's string only with `special`. */
  private pieceBytes(id: number, special = false): number[] {
    const t = this.vocab.tokens[id];
    if (t === undefined) return [];
    const type = this.vocab.types[id] ?? TokenType.NORMAL;
    const control = type === TokenType.CONTROL || type === TokenType.UNKNOWN;
    if ((control && !special) || type === TokenType.UNUSED) return [];
    if (type === TokenType.USER_DEFINED || control) return Array.from(new TextEncoder().encode(t));
    const byte = type === TokenType.BYTE ? BYTE_TOKEN.exec(t) : null;
    if (byte) return [parseInt(byte[1], 16)];
    return Array.from(new TextEncoder().encode(t.replaceAll(SPACE, " ")));
  }
}

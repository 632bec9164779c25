/**
 * SentencePiece-style BPE (a GGUF's tokenizer.ggml.model "gemma4", Gemma 4's vocab), as llama.cpp
 * runs it: spaces become "▁" (U+2581), the text is split only into runs of newlines and runs of the
 * rest, each run's characters (not bytes, unlike GPT-2's BPE) are merged by merge rank (lowest first),
 * and a piece the vocab lacks is written byte by byte as `<0xXX>` tokens. A run of newlines that is a
 * token is taken whole. Decoding turns "▁" back into spaces and byte tokens into their bytes.
 */
import type { Tokenizer } from "./config.ts";
import { mergeSymbols, PieceBytesDecoder, SpecialSplitter, TokenType, wellFormed } from "./tokenizer-special.ts";

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
export class SpmBpeTokenizer extends PieceBytesDecoder implements Tokenizer {
  readonly vocabSize: number;
  private readonly ids = new Map<string, number>();
  private readonly ranks = new Map<string, number>();
  private readonly specials: SpecialSplitter;
  private readonly cache = new Map<string, number[]>();
  private readonly byteIds: (number | undefined)[];

  constructor(private readonly vocab: SpmBpeVocab) {
    super(vocab);
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

  protected override dropsBytes(): boolean {
    return this.byteIds.some((b) => b === undefined);
  }

  /** "▁" for a space, `<0xXX>` for a byte. */
  protected override textBytes(t: string, type: number): number[] {
    const byte = type === TokenType.BYTE ? BYTE_TOKEN.exec(t) : null;
    if (byte) return [parseInt(byte[1], 16)];
    return Array.from(new TextEncoder().encode(t.replaceAll(SPACE, " ")));
  }
}

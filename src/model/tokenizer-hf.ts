/**
 * Hugging Face `tokenizer.json` through `@huggingface/tokenizers`. BOS is prepended by us (not by
 * the post-processor) so `encode(text, { addBos })` means the same thing for every tokenizer.
 */
import { Tokenizer as HfTokenizerImpl } from "@huggingface/tokenizers";
import type { DecodeOptions, Tokenizer } from "./config.ts";
import { ModelLoadError } from "./config.ts";
import { bytesToUnicode } from "./tokenizer-bpe.ts";

/**
 * Tokenizer backed by a parsed tokenizer.json (+ tokenizer_config.json).
 *
 * Given `embeddingRows`, ids at or past them are not the model's (Gemma 3's tokenizer.json has
 * 262,145 entries for 262,144 embedding rows, CodeLlama-34b's 32,004 for 32,000): the tokenizer is
 * built as if those entries did not exist, as llama.cpp's convert_hf_to_gguf.py leaves them out of
 * a GGUF ("ignore token N: id is out of range"), so text spelling one is split by the model like
 * any other text and such ids are never produced; {@link decode} writes nothing for them.
 */
export class HfTokenizer implements Tokenizer {
  /** Token ids run 0..vocabSize-1: the tokenizer's, cut at the embedding rows when given. */
  readonly vocabSize: number;
  private readonly impl: HfTokenizerImpl;
  private readonly specialIds: Set<number>;
  /** BOS id, given directly or resolved from its token string. */
  readonly bosId: number | undefined;

  /** `embeddingRows`: the model's token embedding rows; entries at or past them are left out (undefined: none are). */
  constructor(json: object, tokenizerConfig: object, bos: number | string | undefined, source: string, embeddingRows?: number) {
    checkTokenizerJson(json, source);
    const tokenizerJson = embeddingRows === undefined ? json : withinRows(json, embeddingRows);
    try {
      this.impl = new HfTokenizerImpl(tokenizerJson, tokenizerConfig);
    } catch (e) {
      throw new ModelLoadError(`Cannot build the tokenizer from "${source}": ${(e as Error).message.split("\n")[0]}`);
    }
    const vocab = this.impl.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    this.bosId = typeof bos === "string" ? this.impl.token_to_id(bos) : bos;
    if (this.bosId !== undefined && this.bosId >= this.vocabSize) this.bosId = undefined;
    this.specialIds = new Set<number>();
    for (const [id, tok] of this.impl.get_added_tokens_decoder()) if (tok.special) this.specialIds.add(id);
    this.boundFactor = hfBoundFactor(tokenizerJson);
    const decoder = JSON.stringify((tokenizerJson as Json).decoder ?? null);
    this.byteLevel = decoder.includes('"ByteLevel"');
    this.stripsStart = decoder.includes('"Metaspace"') || decoder.includes('"Strip"');
  }

  /** The decoder maps token strings through GPT-2's byte alphabet (tokenizer-bpe.ts bytesToUnicode). */
  private readonly byteLevel: boolean;

  /** See {@link hfBoundFactor}; undefined: no bound. */
  private readonly boundFactor: number | undefined;
  private maxChars: number | undefined | null = null;
  /** The longest vocabulary string (added tokens included), times what the normalizer may contract. */
  maxCharsPerToken(): number | undefined {
    if (this.maxChars === null) {
      let longest = 1;
      for (const t of this.impl.get_vocab(true).keys()) longest = Math.max(longest, t.length);
      this.maxChars = this.boundFactor === undefined ? undefined : longest * this.boundFactor;
    }
    return this.maxChars;
  }

  encode(text: string, options: { addBos?: boolean } = {}): number[] {
    const ids = this.impl.encode(text, { add_special_tokens: false }).ids;
    return options.addBos && this.bosId !== undefined ? [this.bosId, ...ids] : ids;
  }

  /**
   * Decodes ids; special ones only with `special`. An id outside 0..vocabSize-1 (past the embedding
   * rows, or no token at all) writes nothing, as llama.cpp writes nothing for an unused token.
   * A decoder that drops the text's leading space (Llama 2's Strip, Metaspace) drops it only from
   * a whole text or one after BOS, as SpmTokenizer does: a continuation ("▁once" streamed after a
   * prompt) keeps it, as vLLM's and llama.cpp's output does.
   */
  decode(ids: readonly number[], options?: DecodeOptions): string {
    const special = options?.special === true;
    const kept = ids.filter((id) => this.isToken(id) && (special || !this.specialIds.has(id)));
    // tokenizers.js throws on an empty list: no ids, or only special ones skipped (a lone EOS).
    if (kept.length === 0) return "";
    return this.decodeKept(kept, special, options?.whole !== true && (ids[0] !== this.bosId || this.bosId === undefined));
  }

  /** One token's text as it streams (a continuation's: "▁once" is " once"), "" for an id {@link decode} writes nothing for. */
  tokenText(id: number, options?: DecodeOptions): string {
    if (!this.isToken(id)) return "";
    if (this.specialIds.has(id)) return options?.special === true ? this.impl.id_to_token(id) ?? "" : "";
    return this.decodeKept([id], false, true);
  }

  /**
   * `ids` decoded; with `keepLead`, under a decoder that strips the text's start, after an anchor
   * token that the decoder strips nothing from, whose text is then cut off again.
   */
  private decodeKept(ids: number[], special: boolean, keepLead: boolean): string {
    const options = { skip_special_tokens: !special, clean_up_tokenization_spaces: false };
    const anchor = keepLead && this.stripsStart ? this.anchor() : undefined;
    if (anchor !== undefined) {
      const text = this.impl.decode([anchor.id, ...ids], options);
      if (text.startsWith(anchor.text)) return text.slice(anchor.text.length);
    }
    return this.impl.decode(ids, options);
  }

  /** Whether the decoder may drop the text's leading space (a Metaspace or Strip step). */
  private readonly stripsStart: boolean;
  private anchorToken: { id: number; text: string } | undefined | null = null;
  /** A plain token decoding to one ASCII character, alone and twice over; found on first use. */
  private anchor(): { id: number; text: string } | undefined {
    if (this.anchorToken !== null) return this.anchorToken;
    this.anchorToken = undefined;
    const options = { skip_special_tokens: false, clean_up_tokenization_spaces: false };
    for (const c of "a.x0") {
      const id = this.impl.token_to_id(c) ?? this.impl.token_to_id(`<0x${c.charCodeAt(0).toString(16).toUpperCase()}>`);
      if (id === undefined || this.specialIds.has(id)) continue;
      if (this.impl.decode([id], options) === c && this.impl.decode([id, id], options) === c + c) {
        this.anchorToken = { id, text: c };
        break;
      }
    }
    return this.anchorToken;
  }

  /**
   * A token's bytes: its text's where that is whole characters; else a byte-fallback token's
   * (`<0xE6>`) or, under a byte-level decoder, its string read through the byte alphabet.
   */
  tokenBytes(id: number): Uint8Array | undefined {
    const text = this.tokenText(id);
    if (!text.includes("\uFFFD")) return new TextEncoder().encode(text);
    const token = this.impl.id_to_token(id);
    if (token === undefined) return undefined;
    const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(token);
    if (m) return Uint8Array.of(parseInt(m[1], 16));
    if (!this.byteLevel) return undefined;
    this.charByte ??= new Map(bytesToUnicode().map((c, b) => [c, b]));
    const bytes: number[] = [];
    for (const c of token) {
      const b = this.charByte.get(c);
      if (b === undefined) return undefined;
      bytes.push(b);
    }
    return Uint8Array.from(bytes);
  }

  /** The byte-level alphabet's characters to bytes, built on first use. */
  private charByte: Map<string, number> | undefined;

  private isToken(id: number): boolean {
    return Number.isInteger(id) && id >= 0 && id < this.vocabSize && this.impl.id_to_token(id) !== undefined;
  }

  /** The id of a token string, if the vocab has it. */
  tokenId(token: string): number | undefined {
    return this.impl.token_to_id(token);
  }
}

type Json = Record<string, unknown>;
const isJson = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Refuses, naming the entry, the tokenizer.json parts the tokenizers library would trip over deep
 * inside with a TypeError: `added_tokens` entries without a whole-number id and a string content, and
 * BPE merges that are neither "a b" strings nor ["a", "b"] pairs.
 */
function checkTokenizerJson(json: object, source: string): void {
  const j = json as Json;
  const fail = (why: string) => new ModelLoadError(`Cannot build the tokenizer from "${source}": ${why}`);
  const added = j.added_tokens;
  if (added !== undefined && added !== null) {
    if (!Array.isArray(added)) throw fail(`tokenizer.json's added_tokens should be an array, got ${JSON.stringify(added)}`);
    added.forEach((t, i) => {
      if (!isJson(t) || !Number.isSafeInteger(t.id) || (t.id as number) < 0 || typeof t.content !== "string") {
        throw fail(`tokenizer.json's added_tokens[${i}] should have a whole-number id and a string content, got ${JSON.stringify(t)}`);
      }
    });
  }
  const model = isJson(j.model) ? j.model : undefined;
  const merges = model?.merges;
  if (model?.type === "BPE" && merges !== undefined && merges !== null) {
    if (!Array.isArray(merges)) throw fail(`tokenizer.json's model.merges should be an array, got ${JSON.stringify(merges)}`);
    merges.forEach((m, i) => {
      const ok = typeof m === "string" ? m.includes(" ") : Array.isArray(m) && m.length === 2 && m.every((p) => typeof p === "string");
      if (!ok) throw fail(`tokenizer.json's model.merges[${i}] should be a "left right" string or a [left, right] pair, got ${JSON.stringify(m)}`);
    });
  }
}
/**
 * `json` without the entries whose ids are at or past `rows`: added tokens, and the model's own
 * (BPE and WordPiece vocab entries with the merges that build them; a Unigram vocab's tail, whose
 * ids are its positions). The rest is shared, not copied.
 */
function withinRows(json: object, rows: number): object {
  const j = json as Json;
  const out: Json = { ...j };
  if (Array.isArray(j.added_tokens)) out.added_tokens = (j.added_tokens as Json[]).filter((t) => (t.id as number) < rows);
  const model = isJson(j.model) ? j.model : undefined;
  if (model === undefined) return out;
  if (Array.isArray(model.vocab)) {
    if (model.vocab.length > rows) out.model = { ...model, vocab: model.vocab.slice(0, rows) };
  } else if (isJson(model.vocab)) {
    const dropped = new Set(Object.keys(model.vocab).filter((t) => !((model.vocab as Json)[t] as number < rows)));
    if (dropped.size === 0) return out;
    const vocab = Object.fromEntries(Object.entries(model.vocab).filter(([t]) => !dropped.has(t)));
    const pair = (m: unknown): string[] => (typeof m === "string" ? m.split(" ", 2) : m as string[]);
    const merges = Array.isArray(model.merges)
      ? model.merges.filter((m) => !pair(m).some((p) => dropped.has(p)) && !dropped.has(pair(m).join("")))
      : model.merges;
    out.model = { ...model, vocab, merges };
  }
  return out;
}

const parts = (v: Json, key: string): unknown[] => (Array.isArray(v[key]) ? v[key] as unknown[] : []);

/**
 * How far `tokenizer.json`'s pipeline may shrink text before the model splits it into vocabulary
 * strings: 1 without a normalizer, 4 under Unicode normalization (canonical composition can turn a
 * base and three combining marks, four code units, into one character, e.g. U+1F87 from α and three
 * marks; a vocabulary of characters rather than bytes counts that one character once); undefined when a step may drop or fuse text
 * (whitespace-splitting pre-tokenizers, Strip, Replace, a fused unknown token, WordPiece, added tokens
 * that strip the whitespace beside them).
 */
function hfBoundFactor(json: object): number | undefined {
  const j = json as Json;
  const normalizer = (n: unknown): number | undefined => {
    if (n === null || n === undefined) return 1;
    if (!isJson(n)) return undefined;
    if (n.type === "Sequence") {
      let f = 1;
      for (const m of parts(n, "normalizers")) {
        const g = normalizer(m);
        if (g === undefined) return undefined;
        f = Math.max(f, g);
      }
      return f;
    }
    if (["NFC", "NFKC", "NFD", "NFKD"].includes(String(n.type))) return 4;
    return ["Prepend", "Lowercase"].includes(String(n.type)) ? 1 : undefined;
  };
  const preTokenizerKeeps = (p: unknown): boolean => {
    if (p === null || p === undefined) return true;
    if (!isJson(p)) return false;
    if (p.type === "Sequence") return parts(p, "pretokenizers").every(preTokenizerKeeps);
    if (p.type === "Split") return p.behavior !== "Removed";
    return ["ByteLevel", "Metaspace", "Digits", "Punctuation"].includes(String(p.type));
  };
  const model = isJson(j.model) ? j.model : {};
  const fusesUnknown = model.fuse_unk === true && model.byte_fallback !== true;
  // An added token with lstrip or rstrip takes the whitespace run beside it (Phi-3's "<|end|>"), however long.
  const stripsSpace = parts(j, "added_tokens").some((t) => isJson(t) && (t.lstrip === true || t.rstrip === true));
  if (model.type !== "BPE" || fusesUnknown || stripsSpace || !preTokenizerKeeps(j.pre_tokenizer)) return undefined;
  return normalizer(j.normalizer);
}

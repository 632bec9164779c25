/**
 * Token masks from an output grammar (src/engine/grammar.ts): before each step, every token whose
 * text cannot come next gets a logit of -1e30 (`Backend.maskLogits`, a bit per token), and EOS is
 * allowed only where the grammar may end.
 *
 * The vocabulary's token texts sit in a character trie built once per engine (token-trie.ts), so
 * finding the allowed tokens walks only the prefixes the grammar accepts: in most states a handful of
 * first characters, not the whole vocabulary. The mask is a bit per token, set for the allowed ones.
 */
import { type FreePrefix, grammarComplete, grammarStart, grammarStateKey, ObjectIds, type OutputGrammar } from "./grammar.ts";
import { grammarForcedText } from "./grammar-forced.ts";
import { wideCharEdges } from "./grammar-wide-chars.ts";
import { type PieceState, TokenTrie } from "./token-trie.ts";

export { TokenTrie } from "./token-trie.ts";

/**
 * The tokens allowed at one step, a bit per token (bit v of word v >> 5): what
 * `Backend.maskLogits` reads, vocab / 8 bytes to upload where a scatter of every barred token
 * costs 8 bytes per token (and, at 150k tokens, ~18 ms of host time per step; see
 * docs/results/bench-grammar.md).
 */
export class TokenMask {
  readonly bits: Int32Array;

  constructor(readonly vocabSize: number) {
    this.bits = new Int32Array(Math.ceil(vocabSize / 32));
  }

  /** A mask allowing every token of the vocabulary but `barred`. */
  static allBut(vocabSize: number, barred: readonly number[]): TokenMask {
    const mask = new TokenMask(vocabSize);
    mask.bits.fill(-1);
    // No bits past the vocabulary: they name no token.
    for (let t = vocabSize; t < mask.bits.length * 32; t++) mask.set(t, false);
    for (const t of barred) mask.set(t, false);
    return mask;
  }

  /** Allows (or bars, with `ok` false) token `id`. */
  set(id: number, ok = true): void {
    if (ok) this.bits[id >> 5] |= 1 << (id & 31);
    else this.bits[id >> 5] &= ~(1 << (id & 31));
  }

  /** Whether token `id` may come next. */
  allows(id: number): boolean {
    return id >= 0 && id < this.vocabSize && ((this.bits[id >> 5] >>> (id & 31)) & 1) === 1;
  }

  /** How many tokens may come next. */
  get allowedCount(): number {
    let n = 0;
    for (let w of this.bits) {
      // Popcount of a 32-bit word.
      w = w - ((w >>> 1) & 0x55555555);
      w = (w & 0x33333333) + ((w >>> 2) & 0x33333333);
      n += (((w + (w >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
    }
    return n;
  }
}

/**
 * The tokens both masks allow (either alone where the other is undefined). Where they share none,
 * `primary` alone: a grammar's mask is the request's contract, the others (a reasoning budget,
 * min_tokens) limits that yield to it.
 */
export function intersectMasks(primary: TokenMask | undefined, extra: TokenMask | undefined): TokenMask | undefined {
  if (extra === undefined) return primary;
  if (primary === undefined) return extra;
  const both = new TokenMask(primary.vocabSize);
  let any = 0;
  for (let w = 0; w < both.bits.length; w++) any |= both.bits[w] = primary.bits[w] & extra.bits[w];
  return any === 0 ? primary : both;
}

/** Allowed-token lists kept per request, by grammar state (a free string repeats one state). */
const MASK_CACHE_ENTRIES = 16;
/** Forced characters looked at per jump (a long enum value or key is still one jump). */
const MAX_JUMP_CHARS = 256;

/** The grammar states along a draft and the masks they imply (states[j]: after draft[0..j-1]). */
interface DraftWalk {
  readonly masks: readonly TokenMask[];
  readonly states: readonly PieceState[];
}

/** One request's output constraint: its grammar state and the masks it implies. */
export class OutputConstraint {
  #at: PieceState;
  #fed = 0;
  readonly #ids = new ObjectIds();
  /** Allowed tokens by state key, oldest first. */
  readonly #cache = new Map<string, Int32Array>();
  /** The grammar's wide-character edges (grammar-wide-chars.ts), found on first use. */
  #edges: readonly number[] | undefined;
  readonly #edgesOf: () => readonly number[];
  /** The masks built from each allowed set of `#cache` (index: whether EOS is allowed); they go with it. */
  readonly #masks = new WeakMap<Int32Array, (TokenMask | undefined)[]>();
  /** The last draft walked, from the committed state after `fed` output tokens. */
  #lastWalk: { fed: number; draft: readonly number[]; walk: DraftWalk } | undefined;

  /**
   * Throws SchemaError when the grammar's schema is outside the supported subset. With `prefix`
   * the output is free until the prefix's markers (grammar.ts `FreePrefix`: a reasoning block's end).
   */
  constructor(grammar: OutputGrammar, private readonly trie: TokenTrie, private readonly eos: readonly number[], prefix?: FreePrefix) {
    const state = grammarStart(grammar, prefix);
    this.#at = { state, pending: [] };
    this.#edgesOf = () => (this.#edges ??= wideCharEdges(grammar, state));
  }

  /**
   * The mask of the next token, the output so far being `tokens` from `outputStart` on: the tokens
   * that may come next (EOS only once the grammar may end, or where no other token may). Where the
   * grammar forces text, only the first token jump-forward would write for it.
   */
  next(tokens: readonly number[], outputStart: number): TokenMask {
    this.#feed(tokens, outputStart);
    return this.#maskAt(this.#at);
  }

  /**
   * The masks of the rows that verify `draft` (speculative decoding), the output so far being
   * `tokens` from `outputStart` on: masks[j] is {@link next}'s mask after the output and draft[0..j-1],
   * found without feeding the draft to the committed state. Ends at the first draft token its mask
   * bars, so `masks.length - 1` leading draft tokens are allowed. The masks are shared with later
   * calls for the same output and draft: read them, do not change them.
   */
  continuation(tokens: readonly number[], outputStart: number, draft: readonly number[]): readonly TokenMask[] {
    return this.#walk(tokens, outputStart, draft).masks;
  }

  /**
   * How many leading tokens of `draft` are worth verifying: those the grammar allows, and, with
   * `jumpForward`, only as far as no verifying row would sample where the grammar forces text (one
   * token a step, jump-forward writes that text unsampled, drawing no uniform, so a row sampling it
   * would shift a seeded request's draws). The state after the committed output is the next step's
   * to sample either way.
   */
  draftLength(tokens: readonly number[], outputStart: number, draft: readonly number[], jumpForward: boolean): number {
    const { masks, states } = this.#walk(tokens, outputStart, draft);
    if (!jumpForward) return masks.length - 1;
    // Row j samples in states[j]; states[j] for j >= 1 follows a draft token, after which jump-forward would write.
    let rows = 1;
    while (rows < states.length && this.#forcedTokens(states[rows]).length === 0) rows++;
    return rows - 1;
  }
  /**
   * Jump-forward decoding: tokens to append without sampling them, at most `maxTokens`, because the
   * grammar forces their text after the output so far (grammar-forced.ts). The forced text is spelled
   * with the longest tokens that fit, up to the first place where a token reaching past the forced
   * text could be written instead (`":` where the forced text ends in a key's `"`): from there the model
   * picks, so the jump never takes a tokenization from it. Empty when nothing is forced, or in the
   * middle of a character.
   */
  forced(tokens: readonly number[], outputStart: number, maxTokens: number): number[] {
    this.#feed(tokens, outputStart);
    if (maxTokens <= 0) return [];
    return this.#forcedTokens(this.#at).slice(0, maxTokens);
  }

  /** The mask of the token after state `at` (see {@link next}). */
  #maskAt(at: PieceState): TokenMask {
    // Where the grammar forces text, the next token is the one jump-forward would write: a shorter
    // piece of it (`<` of a tag spelled `<｜tool▁call▁begin｜>`) could leave text no token goes on with.
    const first = this.#forcedTokens(at)[0];
    if (first !== undefined) {
      const only = new TokenMask(this.trie.texts.length);
      only.set(first);
      return only;
    }
    const allowed = this.#allowed(at);
    // A dead end (text no token of this vocabulary spells) ends the answer at EOS, not at whatever
    // token an all-barred row would pick; mid-character the answer cannot end otherwise.
    const done = (at.pending.length === 0 && grammarComplete(at.state)) || allowed.length === 0;
    // Built once per allowed set (and EOS choice): inside a string that is most of the vocabulary,
    // set bit by bit at every token before. Masks handed out are only read.
    const kept = this.#masks.get(allowed) ?? [];
    const built = kept[done ? 1 : 0];
    if (built) return built;
    const made = new TokenMask(this.trie.texts.length);
    for (const id of allowed) made.set(id);
    for (const id of this.eos) made.set(id, done);
    kept[done ? 1 : 0] = made;
    this.#masks.set(allowed, kept);
    return made;
  }

  /** The tokens spelling the text forced from state `at` (see {@link forced}); empty mid-character. */
  #forcedTokens(at: PieceState): number[] {
    if (at.pending.length > 0) return [];
    const { text, state } = grammarForcedText(at.state, MAX_JUMP_CHARS);
    return text === "" ? [] : this.trie.cover(text, state);
  }

  /**
   * The states and masks along `draft` from the committed state (see {@link continuation}), the
   * last walk kept: a step verifies the draft its proposal just walked, or a prefix of it (a step's
   * token budget may cut a draft), whose masks are a prefix of the proposal's.
   */
  #walk(tokens: readonly number[], outputStart: number, draft: readonly number[]): DraftWalk {
    this.#feed(tokens, outputStart);
    const last = this.#lastWalk;
    if (last && last.fed === this.#fed && draft.length <= last.draft.length && draft.every((t, j) => last.draft[j] === t)) {
      return { masks: last.walk.masks.slice(0, draft.length + 1), states: last.walk.states.slice(0, draft.length + 1) };
    }
    const states = [this.#at], masks = [this.#maskAt(this.#at)];
    for (const tok of draft) {
      const at = states[states.length - 1];
      if (!masks[masks.length - 1].allows(tok)) break;
      // As #feed does: an allowed token that does not feed (EOS mid-character) keeps the state.
      const next = this.trie.feed(at, tok) ?? at;
      states.push(next);
      masks.push(this.#maskAt(next));
    }
    const walk = { masks, states };
    this.#lastWalk = { fed: this.#fed, draft: [...draft], walk };
    return walk;
  }

  /** Feeds the output tokens not fed yet to the grammar. */
  #feed(tokens: readonly number[], outputStart: number): void {
    for (; outputStart + this.#fed < tokens.length; this.#fed++) {
      const fed = this.trie.feed(this.#at, tokens[outputStart + this.#fed]);
      // A token the mask allowed always feeds; a stale state (none should arise) keeps the last good one.
      if (fed !== null) this.#at = fed;
    }
  }

  /** The tokens the grammar allows after state `at`, cached by the state's key (committed or a draft's). */
  #allowed(at: PieceState): Int32Array {
    const key = `${grammarStateKey(at.state, this.#ids)}#${at.pending.join()}`;
    let ids = this.#cache.get(key);
    if (ids === undefined) {
      ids = Int32Array.from(this.trie.allowed(at, this.#edgesOf));
      if (this.#cache.size >= MASK_CACHE_ENTRIES) this.#cache.delete(this.#cache.keys().next().value!);
      this.#cache.set(key, ids);
    }
    return ids;
  }
}

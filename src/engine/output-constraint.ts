/**
 * Token masks from an output grammar (src/engine/grammar.ts): before each step, every token whose
 * text cannot come next gets a logit of -1e30 (`Backend.maskLogits`, a bit per token), and EOS is
 * allowed only where the grammar may end.
 *
 * The vocabulary's token texts sit in a character trie built once per engine, so finding the
 * allowed tokens walks only the prefixes the grammar accepts: in most states a handful of first
 * characters, not the whole vocabulary. The mask is a bit per token, set for the allowed ones.
 */
import {
  grammarComplete, grammarFeed, grammarStart, grammarStateKey, grammarPlainTextRooms, grammarStep, type GrammarState, isPlainText, ObjectIds,
  type OutputGrammar,
} from "./grammar.ts";
import { kindOf } from "./char-kinds.ts";
import { grammarForcedText } from "./grammar-forced.ts";

interface TrieNode {
  readonly children: Map<string, TrieNode>;
  /** Tokens whose text ends here. */
  readonly ids: number[];
  /** Its subtree's tokens are `order[lo..hi)`. */
  lo: number;
  hi: number;
  /** The character into it and every one below it are plain (grammar.ts isPlainText). */
  plain: boolean;
  /** Characters of the longest text from here down (0 at a leaf). */
  height: number;
  /** The kinds (char-kinds.ts) of the character into it and of every one below it. */
  kinds: number;
}

/** The token texts of a vocabulary as a character trie (empty texts and partial UTF-8 pieces left out). */
export class TokenTrie {
  readonly root: TrieNode = { children: new Map(), ids: [], lo: 0, hi: 0, plain: true, height: 0, kinds: 0 };
  /** Token ids in depth-first order, so that a subtree's tokens are one range. */
  readonly order: Int32Array;

  /** @param texts each token's text as it streams (tokenizer.tokenText), "" for special tokens */
  constructor(readonly texts: readonly string[]) {
    texts.forEach((t, id) => {
      // A piece of a UTF-8 character decodes to U+FFFD: no grammar can place it.
      if (t === "" || t.includes("\uFFFD")) return;
      let node = this.root;
      for (const c of t) {
        let next = node.children.get(c);
        if (next === undefined) node.children.set(c, (next = { children: new Map(), ids: [], lo: 0, hi: 0, plain: true, height: 0, kinds: 0 }));
        node = next;
      }
      node.ids.push(id);
    });
    const order: number[] = [];
    const number = (node: TrieNode, edge: string) => {
      node.lo = order.length;
      order.push(...node.ids);
      let plain = isPlainText(edge);
      node.kinds = edge === "" ? 0 : kindOf(edge);
      for (const [c, child] of node.children) {
        plain = number(child, c) && plain;
        node.height = Math.max(node.height, 1 + child.height);
        node.kinds |= child.kinds;
      }
      node.hi = order.length;
      node.plain = plain;
      return plain;
    };
    number(this.root, "");
    this.order = Int32Array.from(order);
  }

  /** Ids of the tokens whose whole text the grammar accepts from `state`. */
  allowed(state: GrammarState): number[] {
    const out: number[] = [];
    const walk = (node: TrieNode, s: GrammarState) => {
      const rooms = grammarPlainTextRooms(s);
      for (const [c, child] of node.children) {
        // Inside a string a subtree of plain texts that fit, of kinds that leave its patterns where they
        // are, is all allowed: no need to step through it.
        if (child.plain && rooms.some((r) => 1 + child.height <= r.room && (child.kinds & ~r.kinds) === 0)) {
          for (let i = child.lo; i < child.hi; i++) out.push(this.order[i]);
          continue;
        }
        const next = grammarStep(s, c);
        if (next.length === 0) continue;
        out.push(...child.ids);
        walk(child, next);
      }
    };
    walk(this.root, state);
    return out;
  }

  /**
   * Token ids that spell `text` from its start, each the longest token text that begins what is
   * left; stops early where no token does, and, given `after` (the grammar state at the text's end),
   * before a place where a token that goes on past the end, into what `after` allows, could be
   * written instead.
   */
  cover(text: string, after?: GrammarState): number[] {
    const chars = [...text];
    const out: number[] = [];
    for (let i = 0; i < chars.length;) {
      let node: TrieNode | undefined = this.root;
      let best = -1, bestLength = 0;
      for (let j = i; j < chars.length && node !== undefined; j++) {
        node = node.children.get(chars[j]);
        if (node !== undefined && node.ids.length > 0) [best, bestLength] = [node.ids[0], j - i + 1];
      }
      // `node` is defined only when the walk from here reached the text's end.
      if (best < 0 || (after !== undefined && node !== undefined && continuesInto(node, after))) break;
      out.push(best);
      i += bestLength;
    }
    return out;
  }
}

/** Whether some token below `node` continues with a character `state` takes. */
function continuesInto(node: TrieNode, state: GrammarState): boolean {
  for (const c of node.children.keys()) if (grammarStep(state, c).length > 0) return true;
  return false;
}

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

/** Allowed-token lists kept per request, by grammar state (a free string repeats one state). */
const MASK_CACHE_ENTRIES = 16;
/** Forced characters looked at per jump (a long enum value or key is still one jump). */
const MAX_JUMP_CHARS = 256;

/** One request's output constraint: its grammar state and the masks it implies. */
export class OutputConstraint {
  #state: GrammarState;
  #fed = 0;
  readonly #ids = new ObjectIds();
  /** Allowed tokens by state key, oldest first. */
  readonly #cache = new Map<string, Int32Array>();

  /**
   * Throws SchemaError when the grammar's schema is outside the supported subset. With
   * `afterReasoning` the output starts as reasoning, free until `</think>` (grammar.ts).
   */
  constructor(grammar: OutputGrammar, private readonly trie: TokenTrie, private readonly eos: readonly number[], afterReasoning = false) {
    this.#state = grammarStart(grammar, afterReasoning);
  }

  /**
   * The mask of the next token, the output so far being `tokens` from `outputStart` on: the tokens
   * that may come next (EOS only once the grammar may end, or where no other token may). Where the
   * grammar forces text, only the first token jump-forward would write for it.
   */
  next(tokens: readonly number[], outputStart: number): TokenMask {
    this.#feed(tokens, outputStart);
    const mask = new TokenMask(this.trie.texts.length);
    // Where the grammar forces text, the next token is the one jump-forward would write: a shorter
    // piece of it (`<` of a tag spelled `<｜tool▁call▁begin｜>`) could leave text no token goes on with.
    const first = this.#firstForced();
    if (first !== undefined) {
      mask.set(first);
      return mask;
    }
    const allowed = this.#allowed();
    for (const id of allowed) mask.set(id);
    // A dead end (text no token of this vocabulary spells, e.g. a character it has only as UTF-8
    // byte pieces) ends the answer at EOS, not at whatever token an all-barred row would pick.
    const done = grammarComplete(this.#state) || allowed.length === 0;
    for (const id of this.eos) mask.set(id, done);
    return mask;
  }

  /**
   * Jump-forward decoding: tokens to append without sampling them, at most `maxTokens`, because the
   * grammar forces their text after the output so far (grammar-forced.ts). The forced text is spelled
   * with the longest tokens that fit, up to the first place where a token reaching past the forced
   * text could be written instead (`":` where the forced text ends in a key's `"`): from there the model
   * picks, so the jump never takes a tokenization from it. Empty when nothing is forced.
   */
  forced(tokens: readonly number[], outputStart: number, maxTokens: number): number[] {
    this.#feed(tokens, outputStart);
    if (maxTokens <= 0) return [];
    const { text, state } = grammarForcedText(this.#state, MAX_JUMP_CHARS);
    if (text === "") return [];
    return this.trie.cover(text, state).slice(0, maxTokens);
  }

  /** The first token spelling the text forced from the current state (see {@link forced}), if any. */
  #firstForced(): number | undefined {
    const { text, state } = grammarForcedText(this.#state, MAX_JUMP_CHARS);
    return text === "" ? undefined : this.trie.cover(text, state)[0];
  }

  /** Feeds the output tokens not fed yet to the grammar. */
  #feed(tokens: readonly number[], outputStart: number): void {
    for (; outputStart + this.#fed < tokens.length; this.#fed++) {
      const fed = grammarFeed(this.#state, this.trie.texts[tokens[outputStart + this.#fed]] ?? "");
      // A token the mask allowed always feeds; a stale state (none should arise) keeps the last good one.
      if (fed.length > 0) this.#state = fed;
    }
  }

  #allowed(): Int32Array {
    const key = grammarStateKey(this.#state, this.#ids);
    let ids = this.#cache.get(key);
    if (ids === undefined) {
      ids = Int32Array.from(this.trie.allowed(this.#state));
      if (this.#cache.size >= MASK_CACHE_ENTRIES) this.#cache.delete(this.#cache.keys().next().value!);
      this.#cache.set(key, ids);
    }
    return ids;
  }
}

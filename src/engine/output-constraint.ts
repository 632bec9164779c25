/**
 * Token masks from an output grammar (src/engine/grammar.ts): before each step, every token whose
 * text cannot come next gets a logit of -1e30 through the same sparse add as logit biases, and EOS
 * is allowed only where the grammar may end.
 *
 * The vocabulary's token texts sit in a character trie built once per engine, so finding the
 * allowed tokens walks only the prefixes the grammar accepts: in most states a handful of first
 * characters, not the whole vocabulary. Building the mask still touches every token id (the barred
 * ones are the output), a cost to know at 150k-token vocabularies.
 */
import {
  grammarComplete, grammarFeed, grammarStart, grammarStateKey, grammarPlainTextRooms, grammarStep, type GrammarState, isPlainText, ObjectIds,
  type OutputGrammar,
} from "./grammar.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import { kindOf } from "./char-kinds.ts";

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
}

/**
 * The additions that bar every token but the allowed ones (-1e30 each), read from a flag per token
 * instead of a Map of tens of thousands of entries.
 */
class BarredTokens implements LogitAdditions {
  readonly size: number;

  constructor(private readonly ok: Uint8Array) {
    let n = 0;
    for (let id = 0; id < ok.length; id++) n += 1 - ok[id];
    this.size = n;
  }

  get(id: number): number | undefined {
    return this.has(id) ? -1e30 : undefined;
  }
  has(id: number): boolean {
    return id >= 0 && id < this.ok.length && this.ok[id] === 0;
  }
  *keys(): MapIterator<number> {
    for (let id = 0; id < this.ok.length; id++) if (this.ok[id] === 0) yield id;
  }
  *values(): MapIterator<number> {
    for (let i = 0; i < this.size; i++) yield -1e30;
  }
  *entries(): MapIterator<[number, number]> {
    for (const id of this.keys()) yield [id, -1e30];
  }
  [Symbol.iterator](): MapIterator<[number, number]> {
    return this.entries();
  }
  forEach(fn: (value: number, key: number, map: ReadonlyMap<number, number>) => void): void {
    for (const id of this.keys()) fn(-1e30, id, this);
  }
}

/** Allowed-token lists kept per request, by grammar state (a free string repeats one state). */
const MASK_CACHE_ENTRIES = 16;

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
   * Masks for the next token, the output so far being `tokens` from `outputStart` on: the tokens
   * barred next, as additions of -1e30 (EOS barred until the grammar may end).
   */
  next(tokens: readonly number[], outputStart: number): LogitAdditions {
    for (; outputStart + this.#fed < tokens.length; this.#fed++) {
      const fed = grammarFeed(this.#state, this.trie.texts[tokens[outputStart + this.#fed]] ?? "");
      // A token the mask allowed always feeds; a stale state (none should arise) keeps the last good one.
      if (fed.length > 0) this.#state = fed;
    }
    const ok = new Uint8Array(this.trie.texts.length);
    for (const id of this.#allowed()) ok[id] = 1;
    const done = grammarComplete(this.#state);
    for (const id of this.eos) ok[id] = done ? 1 : 0;
    return new BarredTokens(ok);
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

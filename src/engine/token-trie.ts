/**
 * A vocabulary's token texts as a character trie, built once per engine, for output constraints
 * (output-constraint.ts): finding the tokens an output grammar allows walks only the prefixes the
 * grammar accepts — in most states a handful of first characters, not the whole vocabulary.
 *
 * Tokens that are pieces of UTF-8 characters (utf8-pieces.ts) are placed too, given their bytes: one
 * that ends in the first bytes of a character sits at the node of its whole characters and is allowed
 * where the grammar takes some character those bytes begin (grammar-wide-chars.ts); one that starts
 * by finishing a character is looked at only while a character is unfinished (`pending` bytes). So a
 * constrained string can hold a character the vocabulary has only as byte pieces.
 */
import {
  grammarFeed, grammarPlainTextRooms, grammarStep, type GrammarState, isPlainText,
} from "./grammar.ts";
import { kindOf, WIDE_KIND } from "./char-kinds.ts";
import { stepsSomeOf, takesEveryWide, takesSomeOf } from "./grammar-wide-chars.ts";
import { charBytes, completionRange, decodeChar, isCharPrefix, splitPiece, type Utf8Piece, utf8Length } from "./utf8-pieces.ts";

interface TrieNode {
  readonly children: Map<string, TrieNode>;
  /** Tokens whose text ends here. */
  readonly ids: number[];
  /** Tokens whose whole characters end here, followed by the first bytes of another character. */
  readonly leads: { readonly id: number; readonly lead: readonly number[] }[];
  /** Its subtree's tokens are `order[lo..hi)`. */
  lo: number;
  hi: number;
  /** The character into it and every one below it are plain (grammar.ts isPlainText). */
  plain: boolean;
  /** Characters of the longest text from here down (0 at a leaf; a lead's character counts one). */
  height: number;
  /** The kinds (char-kinds.ts) of the character into it and of every one below it. */
  kinds: number;
}

/** A grammar state inside the output's text, with the bytes of a character begun but not finished. */
export interface PieceState {
  readonly state: GrammarState;
  /** The first bytes of an unfinished character (utf8-pieces.ts isCharPrefix), or none. */
  readonly pending: readonly number[];
}

const newNode = (): TrieNode => ({ children: new Map(), ids: [], leads: [], lo: 0, hi: 0, plain: true, height: 0, kinds: 0 });

/** The token texts of a vocabulary as a character trie (empty texts left out). */
export class TokenTrie {
  readonly root: TrieNode = newNode();
  /** Token ids in depth-first order, so that a subtree's tokens are one range. */
  readonly order: Int32Array;
  /** The tokens whose texts hold U+FFFD, split (utf8-pieces.ts): pieces of characters, mostly. */
  readonly #pieces = new Map<number, Utf8Piece>();
  /** Of those, the ones that start by finishing a character. */
  readonly #heads: { readonly id: number; readonly piece: Utf8Piece }[] = [];

  /**
   * @param texts each token's text as it streams (tokenizer.tokenText), "" for special tokens
   * @param bytesOf a token's bytes, asked for each text holding U+FFFD (a piece of a character decodes
   *   to it); without them such tokens are left out and no grammar places them
   */
  constructor(readonly texts: readonly string[], bytesOf?: (id: number) => Uint8Array | undefined) {
    texts.forEach((t, id) => {
      if (t === "") return;
      if (!t.includes("\uFFFD")) return void this.#insert(t).ids.push(id);
      const bytes = bytesOf?.(id);
      const piece = bytes === undefined ? null : splitPiece(Array.from(bytes));
      if (piece === null) return;
      this.#pieces.set(id, piece);
      if (piece.head.length === 0 && piece.lead.length === 0) return void this.#insert(piece.text).ids.push(id);
      if (piece.head.length > 0) this.#heads.push({ id, piece });
      else this.#insert(piece.text).leads.push({ id, lead: piece.lead });
    });
    const order: number[] = [];
    const number = (node: TrieNode, edge: string) => {
      node.lo = order.length;
      order.push(...node.ids, ...node.leads.map((l) => l.id));
      let plain = isPlainText(edge);
      node.kinds = edge === "" ? 0 : kindOf(edge);
      if (node.leads.length > 0) [node.height, node.kinds] = [1, node.kinds | WIDE_KIND];
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

  #insert(text: string): TrieNode {
    let node = this.root;
    for (const c of text) {
      let next = node.children.get(c);
      if (next === undefined) node.children.set(c, (next = newNode()));
      node = next;
    }
    return node;
  }

  /**
   * Ids of the tokens the grammar accepts from `at`; `edges` gives the grammar's wide-character edges
   * (grammar-wide-chars.ts), asked for only where a token's lead bytes need them.
   */
  allowed(at: PieceState, edges: () => readonly number[]): number[] {
    const out: number[] = [];
    // Whether the grammar in state `s` takes some character the lead bytes begin: in free text any;
    // else no lead whose first byte alone leads nowhere, and the others by their ranges.
    const leadsFit = (s: GrammarState) => {
      if (takesEveryWide(s)) return () => true;
      const known = new Map<string, boolean>();
      const fits = (lead: readonly number[]): boolean => {
        const key = lead.join();
        let ok = known.get(key);
        if (ok === undefined) {
          ok = (lead.length === 1 || fits(lead.slice(0, 1))) && stepsSomeOf(s, ...completionRange(lead), edges());
          known.set(key, ok);
        }
        return ok;
      };
      return fits;
    };
    if (at.pending.length > 0) {
      this.#allowedHeads(at, leadsFit(at.state), edges, out);
      return out;
    }
    const walk = (node: TrieNode, s: GrammarState) => {
      // Where no character past ASCII may come (between JSON values, in a number), the thousands of
      // texts and pieces that start with one are skipped without stepping each.
      let noWide: boolean | undefined;
      const takesNoWide = () => (noWide ??= !takesEveryWide(s) && !stepsSomeOf(s, 0x80, 0x10ffff, edges()));
      if (node.leads.length > 0 && !takesNoWide()) {
        const fits = leadsFit(s);
        for (const l of node.leads) if (fits(l.lead)) out.push(l.id);
      }
      // Runs deeper than the subtree's texts are of no use: looked at no further.
      const rooms = grammarPlainTextRooms(s, node.height);
      for (const [c, child] of node.children) {
        if (c >= "\u0080" && takesNoWide()) continue;
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
    walk(this.root, at.state);
    return out;
  }

  /** The tokens that finish (or go on with) the character `at.pending` begins, into `out`. */
  #allowedHeads(at: PieceState, pendingFits: (lead: readonly number[]) => boolean, edges: () => readonly number[], out: number[]): void {
    for (const { id, piece } of this.#heads) {
      const bytes = [...at.pending, ...piece.head];
      if (bytes.length < utf8Length(bytes[0])) {
        // Still unfinished: a token of continuation bytes alone.
        if (piece.text === "" && piece.lead.length === 0 && isCharPrefix(bytes) && pendingFits(bytes)) out.push(id);
        continue;
      }
      const next = this.feed(at, id);
      if (next !== null && (next.pending.length === 0 || takesSomeOf(next.state, ...completionRange(next.pending), edges()))) out.push(id);
    }
  }

  /** The state after token `id` from `at`, or null when the token cannot come there. */
  feed(at: PieceState, id: number): PieceState | null {
    const piece = this.#pieces.get(id);
    if (piece === undefined) {
      // A piece of a character whose bytes are unknown (or no UTF-8) is never placed.
      const text = this.texts[id] ?? "";
      if (at.pending.length > 0 || text.includes("\uFFFD")) return null;
      const state = grammarFeed(at.state, text);
      return state.length > 0 ? { state, pending: [] } : null;
    }
    let state = at.state;
    if (at.pending.length > 0 || piece.head.length > 0) {
      const bytes = [...at.pending, ...piece.head];
      const need = utf8Length(bytes[0]);
      if (at.pending.length === 0 || bytes.length > need) return null;
      if (bytes.length < need) return piece.text === "" && piece.lead.length === 0 && isCharPrefix(bytes) ? { state, pending: bytes } : null;
      const cp = decodeChar(bytes);
      if (cp === null) return null;
      state = grammarStep(state, String.fromCodePoint(cp));
      if (state.length === 0) return null;
    }
    state = grammarFeed(state, piece.text);
    return state.length > 0 ? { state, pending: piece.lead } : null;
  }

  /**
   * Token ids that spell `text` from its start, each the longest token text that begins what is
   * left; stops early where no token does, and, given `after` (the grammar state at the text's end),
   * before a place where a token that goes on past the end, into what `after` allows, could be
   * written instead. Pieces of characters are never used: where the text holds a character the
   * vocabulary has only as pieces, the model picks them.
   */
  cover(text: string, after?: GrammarState): number[] {
    const chars = [...text];
    const out: number[] = [];
    for (let i = 0; i < chars.length;) {
      let node: TrieNode | undefined = this.root;
      let best = -1, bestLength = 0, bestNode = this.root;
      for (let j = i; j < chars.length && node !== undefined; j++) {
        node = node.children.get(chars[j]);
        if (node !== undefined && node.ids.length > 0) [best, bestLength, bestNode] = [node.ids[0], j - i + 1, node];
      }
      // `node` is defined only when the walk from here reached the text's end. A token that goes on
      // into the first bytes of the next character would be the longer one: the model picks there.
      if (best < 0 || (after !== undefined && node !== undefined && continuesInto(node, after))) break;
      if (i + bestLength < chars.length && beginsChar(bestNode, chars[i + bestLength])) break;
      out.push(best);
      i += bestLength;
    }
    return out;
  }
}

/** Whether a token at `node` ends in the first bytes of character `c`. */
function beginsChar(node: TrieNode, c: string): boolean {
  if (node.leads.length === 0) return false;
  const bytes = charBytes(c);
  return node.leads.some((l) => l.lead.every((b, k) => bytes[k] === b));
}

/** Whether some token below `node` continues with a character `state` takes (or with lead bytes). */
function continuesInto(node: TrieNode, state: GrammarState): boolean {
  if (node.leads.length > 0) return true;
  for (const c of node.children.keys()) if (grammarStep(state, c).length > 0) return true;
  return false;
}

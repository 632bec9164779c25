/**
 * Whether an output grammar (grammar.ts) may take some character of a range of code points next: what
 * the token trie (token-trie.ts) asks of a token that ends in the first bytes of a character (a UTF-8
 * piece, utf8-pieces.ts), whose character a later token finishes — it may come when some character
 * those bytes begin may.
 *
 * Stepping each of the range's code points (up to 4096 for one lead byte, 196,608 for `F0`) would
 * cost too much, so the grammar's own characters decide: every character a grammar treats apart from
 * its neighbours is in one of its literals (keys, enum values, tags, choices) or at an edge of one of
 * its expressions' character classes. Between two such edges every character is taken alike, so
 * stepping the range's first code point and each edge inside it answers for the whole range.
 */
import { grammarPlainTextRooms, grammarStep, type GrammarState } from "./grammar.ts";
import { WIDE_KIND } from "./char-kinds.ts";
import { formatPattern } from "./regex-nfa.ts";
import { parseRegex, type RegexNode } from "./regex-parse.ts";

/** The code points past ASCII where what `roots` (a grammar and its start state) accept may change, sorted. */
export function wideCharEdges(...roots: readonly unknown[]): number[] {
  const edges = new Set<number>();
  const seen = new Set<object>();
  const addSet = (set: readonly number[]) => {
    for (let k = 0; k < set.length; k += 2) edges.add(set[k]).add(set[k + 1] + 1);
  };
  const addRegex = (source: string) => {
    try {
      const walk = (n: RegexNode): void => {
        if (n.t === "set") addSet(n.set);
        else if (n.t === "seq") n.items.forEach(walk);
        else if (n.t === "alt") n.options.forEach(walk);
        else walk(n.node);
      };
      walk(parseRegex(source).body);
    } catch {
      // Not an expression: its characters count as literals (below).
    }
  };
  const addString = (s: string) => {
    for (const c of s) {
      const cp = c.codePointAt(0)!;
      if (cp >= 0x80) edges.add(cp).add(cp + 1);
    }
    addRegex(s);
    const format = formatPattern(s);
    if (format !== undefined) addRegex(format);
  };
  const visit = (v: unknown): void => {
    if (typeof v === "string") return addString(v);
    if (typeof v !== "object" || v === null || seen.has(v)) return;
    seen.add(v);
    if (v instanceof Map) for (const [k, x] of v) visit(k), visit(x);
    else if (v instanceof Set || Array.isArray(v)) for (const x of v) visit(x);
    else for (const [k, x] of Object.entries(v)) visit(k), visit(x);
  };
  roots.forEach(visit);
  return [...edges].filter((cp) => cp >= 0x80 && cp <= 0x10ffff).sort((a, b) => a - b);
}

/**
 * Whether `state` takes some code point of `lo..hi` (no surrogates among them) next, `edges` being
 * {@link wideCharEdges} of its grammar.
 */
export function takesSomeOf(state: GrammarState, lo: number, hi: number, edges: readonly number[]): boolean {
  return takesEveryWide(state) || stepsSomeOf(state, lo, hi, edges);
}

/** Whether `state` takes any one character past ASCII next (free text: every such character alike). */
export function takesEveryWide(state: GrammarState): boolean {
  return grammarPlainTextRooms(state).some((r) => r.room >= 1 && (r.kinds & WIDE_KIND) !== 0);
}

/** {@link takesSomeOf} by stepping the range's first code point and the edges inside it. */
export function stepsSomeOf(state: GrammarState, lo: number, hi: number, edges: readonly number[]): boolean {
  const takes = (cp: number) => grammarStep(state, String.fromCodePoint(cp)).length > 0;
  if (takes(lo)) return true;
  // The first edge past `lo` (binary search), then each edge up to `hi`.
  let a = 0, b = edges.length;
  while (a < b) {
    const m = (a + b) >> 1;
    if (edges[m] <= lo) a = m + 1;
    else b = m;
  }
  for (let i = a; i < edges.length && edges[i] <= hi; i++) {
    if (edges[i] >= 0xd800 && edges[i] <= 0xdfff) continue;
    if (takes(edges[i])) return true;
  }
  return false;
}

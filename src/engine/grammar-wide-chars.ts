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
import { type CompiledRegex, compilePattern, formatPattern } from "./regex-nfa.ts";
import { someBetweenEdges } from "./regex-parse.ts";

/** Keys whose strings never constrain output (JSON Schema annotations). */
const ANNOTATIONS = new Set(["description", "title", "$comment"]);

/**
 * The code points past ASCII where what `roots` (a grammar and its start state) accept may change,
 * sorted: each wide character of a string in them (c and c + 1), and the edges of each expression —
 * compiled (regex-nfa.ts `edges`) or given as a `pattern` or a `format`.
 */
export function wideCharEdges(...roots: readonly unknown[]): number[] {
  const edges = new Set<number>();
  const seen = new Set<object>();
  const addLiteral = (s: string) => {
    for (const c of s) {
      const cp = c.codePointAt(0)!;
      if (cp >= 0x80) edges.add(cp).add(cp + 1);
    }
  };
  const addRegex = (source: string | undefined) => {
    if (source === undefined) return;
    try {
      compilePattern(source).edges().forEach((e) => edges.add(e));
    } catch {
      // Refused where the grammar is built: it never steps it.
    }
  };
  const visit = (v: unknown, key: string): void => {
    if (typeof v === "string") {
      if (ANNOTATIONS.has(key)) return;
      addLiteral(v);
      if (key === "pattern") addRegex(v);
      else if (key === "format") addRegex(formatPattern(v));
      return;
    }
    if (typeof v !== "object" || v === null || seen.has(v)) return;
    seen.add(v);
    if (isCompiledRegex(v)) v.edges().forEach((e) => edges.add(e));
    else if (v instanceof Map) for (const [k, x] of v) visit(k, ""), visit(x, typeof k === "string" ? k : "");
    else if (v instanceof Set || Array.isArray(v)) for (const x of v) visit(x, key);
    else for (const [k, x] of Object.entries(v)) addLiteral(k), visit(x, k);
  };
  roots.forEach((r) => visit(r, ""));
  return [...edges].filter((cp) => cp >= 0x80 && cp <= 0x10ffff).sort((a, b) => a - b);
}

function isCompiledRegex(v: object): v is CompiledRegex {
  return typeof (v as Partial<CompiledRegex>).edges === "function" && typeof (v as Partial<CompiledRegex>).step === "function";
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
  return grammarPlainTextRooms(state, 1).some((r) => r.room >= 1 && (r.kinds & WIDE_KIND) !== 0);
}

/** {@link takesSomeOf} by stepping the range's first code point and the edges inside it. */
export function stepsSomeOf(state: GrammarState, lo: number, hi: number, edges: readonly number[]): boolean {
  return someBetweenEdges(lo, hi, edges, (cp) => grammarStep(state, String.fromCodePoint(cp)).length > 0);
}

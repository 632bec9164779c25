/**
 * The parser behind src/engine/regex-nfa.ts: a JSON Schema `pattern` (ECMA-262 syntax, the subset
 * constrained decoding follows) into a small tree over sets of code points. A construct outside the
 * subset is refused with a {@link RegexError} naming it, never ignored.
 *
 * Syntax is ECMA-262's without the `u` flag (so `\-`, a lone `]` or `}`, and a `{` that starts no
 * quantifier are literals, and a class escape beside `-` in a class makes the `-` literal), except
 * that `\u{H...}` is a code point and text is read by code point: `\uD83D\uDE00` is one character.
 */

/** A regular expression the decoder cannot follow; the message names the construct and quotes the source. */
export class RegexError extends Error {
  override name = "RegexError";
}

/** Code points as sorted, disjoint, non-adjacent inclusive ranges, flattened: [lo0, hi0, lo1, hi1, ...]. */
export type CharSet = readonly number[];

/** A parsed expression; an empty `seq` matches the empty string. */
export type RegexNode =
  | { readonly t: "set"; readonly set: CharSet }
  | { readonly t: "seq"; readonly items: readonly RegexNode[] }
  | { readonly t: "alt"; readonly options: readonly RegexNode[] }
  | { readonly t: "rep"; readonly node: RegexNode; readonly min: number; readonly max: number };

/** A whole pattern: its body and whether it starts with `^` / ends with `$`. */
export interface ParsedRegex {
  readonly body: RegexNode;
  readonly anchorStart: boolean;
  readonly anchorEnd: boolean;
}

const MAX_CODE_POINT = 0x10ffff;
/** Deepest nesting of groups (the parser and the automaton builder recurse per level). */
const MAX_DEPTH = 100;

/** The union of `parts`. */
export function union(parts: readonly CharSet[]): CharSet {
  const pairs: [number, number][] = [];
  for (const p of parts) for (let k = 0; k < p.length; k += 2) pairs.push([p[k], p[k + 1]]);
  pairs.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  for (const [lo, hi] of pairs) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1] + 1) out[n - 1] = Math.max(out[n - 1], hi);
    else out.push(lo, hi);
  }
  return out;
}

/** Every code point not in `set`. */
export function complement(set: CharSet): CharSet {
  const out: number[] = [];
  let next = 0;
  for (let k = 0; k < set.length; k += 2) {
    if (set[k] > next) out.push(next, set[k] - 1);
    next = set[k + 1] + 1;
  }
  if (next <= MAX_CODE_POINT) out.push(next, MAX_CODE_POINT);
  return out;
}

/**
 * Whether `takes` holds for some code point of `lo..hi` (surrogates aside), where `edges` (sorted)
 * holds every code point at which what `takes` answers may change (regex-nfa.ts `edges`, a grammar's
 * wide-character edges): between two edges it answers alike, so trying the range's first code point,
 * the first past the surrogates and each edge inside the range decides for the whole range.
 */
export function someBetweenEdges(lo: number, hi: number, edges: readonly number[], takes: (cp: number) => boolean): boolean {
  const scalar = (cp: number) => cp < 0xd800 || cp > 0xdfff;
  if (scalar(lo) && takes(lo)) return true;
  if (lo < 0xe000 && hi >= 0xe000 && takes(0xe000)) return true;
  // The first edge past `lo` (binary search), then each edge up to `hi`.
  let a = 0, b = edges.length;
  while (a < b) {
    const m = (a + b) >> 1;
    if (edges[m] <= lo) a = m + 1;
    else b = m;
  }
  for (let i = a; i < edges.length && edges[i] <= hi; i++) if (scalar(edges[i]) && takes(edges[i])) return true;
  return false;
}

/** Whether code point `cp` is in `set` (binary search). */
export function contains(set: CharSet, cp: number): boolean {
  let lo = 0, hi = set.length / 2 - 1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (cp < set[2 * m]) hi = m - 1;
    else if (cp > set[2 * m + 1]) lo = m + 1;
    else return true;
  }
  return false;
}

/** Every code point (`[\s\S]`). */
export const ANY_CHAR: CharSet = [0, MAX_CODE_POINT];
const DIGIT: CharSet = [0x30, 0x39];
const WORD: CharSet = [0x30, 0x39, 0x41, 0x5a, 0x5f, 0x5f, 0x61, 0x7a];
/** ECMA-262 WhiteSpace and LineTerminator. */
const SPACE: CharSet = [
  0x09, 0x0d, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000,
  0xfeff, 0xfeff,
];
/** `.`: anything but a line terminator (\n \r \u2028 \u2029). */
const DOT: CharSet = complement([0x0a, 0x0a, 0x0d, 0x0d, 0x2028, 0x2029]);
const CLASS_ESCAPES: ReadonlyMap<string, CharSet> = new Map([
  ["d", DIGIT], ["D", complement(DIGIT)], ["w", WORD], ["W", complement(WORD)], ["s", SPACE], ["S", complement(SPACE)],
]);
const CONTROL_ESCAPES: ReadonlyMap<string, number> = new Map([["n", 0x0a], ["r", 0x0d], ["t", 0x09], ["f", 0x0c], ["v", 0x0b]]);

/** `source` as JSON, shortened for messages. */
export function quote(source: string): string {
  const s = JSON.stringify(source);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** Parses `source`; throws {@link RegexError} for invalid syntax or a construct outside the subset. */
export function parseRegex(source: string): ParsedRegex {
  return new Parser(source).parse();
}

const set = (s: CharSet): RegexNode => ({ t: "set", set: s });
const isHex = (c: string | undefined) => c !== undefined && /^[0-9A-Fa-f]$/.test(c);

class Parser {
  readonly #cps: string[];
  #i = 0;
  #depth = 0;
  #anchorStart = false;
  #anchorEnd = false;

  constructor(readonly source: string) {
    this.#cps = Array.from(source);
  }

  parse(): ParsedRegex {
    const branches = this.#branches();
    if (this.#i < this.#cps.length) this.#fail(`unmatched ")" at offset ${this.#i}`);
    if (branches.length > 1 && (this.#anchorStart || this.#anchorEnd)) {
      this.#refuse(`an anchor ("^" or "$") beside a top-level alternation "|" (it would bind to one branch; write "^(?:a|b)$")`);
    }
    return { body: branches.length === 1 ? branches[0] : { t: "alt", options: branches }, anchorStart: this.#anchorStart, anchorEnd: this.#anchorEnd };
  }

  #fail(what: string): never {
    throw new RegexError(`The pattern ${quote(this.source)} is invalid: ${what}`);
  }

  #refuse(construct: string): never {
    throw new RegexError(`The pattern ${quote(this.source)} uses ${construct}, which constrained decoding does not support`);
  }

  #peek(k = 0): string | undefined {
    return this.#cps[this.#i + k];
  }

  #branches(): RegexNode[] {
    const out = [this.#sequence()];
    while (this.#peek() === "|") {
      this.#i++;
      out.push(this.#sequence());
    }
    return out;
  }

  #sequence(): RegexNode {
    const items: RegexNode[] = [];
    for (let c = this.#peek(); c !== undefined && c !== "|" && c !== ")"; c = this.#peek()) {
      const atom = this.#atom();
      if (atom !== null) items.push(this.#quantified(atom));
    }
    return items.length === 1 ? items[0] : { t: "seq", items };
  }

  /** The next atom, or null for an anchor. */
  #atom(): RegexNode | null {
    const at = this.#i;
    const c = this.#cps[this.#i++];
    switch (c) {
      case "^":
        if (at !== 0) return this.#refuse(`an anchor "^" other than as the pattern's first character (at offset ${at})`);
        this.#anchorStart = true;
        return null;
      case "$":
        if (at !== this.#cps.length - 1) return this.#refuse(`an anchor "$" other than as the pattern's last character (at offset ${at})`);
        this.#anchorEnd = true;
        return null;
      case ".": return set(DOT);
      case "(": return this.#group(at);
      case "[": return this.#charClass(at);
      case "\\": {
        const e = this.#escape(false);
        return set(typeof e === "number" ? [e, e] : e);
      }
      case "*": case "+": case "?": return this.#fail(`nothing to repeat before "${c}" at offset ${at}`);
      case "{": if (this.#bounds(at) !== null) this.#fail(`nothing to repeat before "{" at offset ${at}`);
    }
    const cp = c.codePointAt(0)!;
    return set([cp, cp]);
  }

  #quantified(atom: RegexNode): RegexNode {
    const at = this.#i;
    let min: number, max: number;
    switch (this.#peek()) {
      case "*": [min, max] = [0, Infinity]; this.#i++; break;
      case "+": [min, max] = [1, Infinity]; this.#i++; break;
      case "?": [min, max] = [0, 1]; this.#i++; break;
      case "{": {
        const b = this.#bounds(at);
        if (b === null) return atom;
        [min, max] = [b.min, b.max];
        this.#i = b.end;
        const text = this.#cps.slice(at, b.end).join("");
        if (!Number.isSafeInteger(min) || (max !== Infinity && !Number.isSafeInteger(max))) this.#fail(`the quantifier "${text}" has a count too large`);
        if (min > max) this.#fail(`the quantifier "${text}" has its numbers out of order`);
        break;
      }
      default: return atom;
    }
    if (this.#peek() === "?") this.#i++; // lazy: the same language
    return { t: "rep", node: atom, min, max };
  }

  /** The quantifier `{n}`, `{n,}` or `{n,m}` starting at `at`, or null when the `{` starts none. */
  #bounds(at: number): { min: number; max: number; end: number } | null {
    const close = this.#cps.indexOf("}", at);
    const m = close < 0 ? null : /^\{(\d+)(,(\d*))?\}$/.exec(this.#cps.slice(at, close + 1).join(""));
    if (m === null) return null;
    // A count of too many digits stays NaN, not Infinity, so that "{2,9999...9}" is not read as "{2,}".
    const count = (d: string) => (d.length > 15 ? NaN : Number(d));
    return { min: count(m[1]), max: m[2] === undefined ? count(m[1]) : m[3] === "" ? Infinity : count(m[3]), end: at + m[0].length };
  }

  #group(at: number): RegexNode {
    if (this.#peek() === "?") {
      const a = this.#peek(1), b = this.#peek(2);
      if (a === "=" || a === "!") this.#refuse(`a lookahead "(?${a}"`);
      if (a === "<" && (b === "=" || b === "!")) this.#refuse(`a lookbehind "(?<${b}"`);
      if (a === ":") this.#i += 2;
      else if (a === "<") {
        const close = this.#cps.indexOf(">", this.#i + 2);
        const name = close < 0 ? "" : this.#cps.slice(this.#i + 2, close).join("");
        if (!/^[\p{ID_Start}$_][\p{ID_Continue}$\u200c\u200d]*$/u.test(name)) this.#fail(`the group at offset ${at} has no valid name in "(?<...>"`);
        this.#i = close + 1;
      } else if (a !== undefined && /^[a-zA-Z-]$/.test(a)) this.#refuse(`inline flags "(?${a}"`);
      else this.#fail(`"(?" at offset ${at} starts no known group`);
    }
    if (++this.#depth > MAX_DEPTH) this.#fail(`groups nest deeper than ${MAX_DEPTH}`);
    const branches = this.#branches();
    this.#depth--;
    if (this.#peek() !== ")") this.#fail(`the group "(" at offset ${at} is not closed`);
    this.#i++;
    return branches.length === 1 ? branches[0] : { t: "alt", options: branches };
  }

  #charClass(at: number): RegexNode {
    const negated = this.#peek() === "^";
    if (negated) this.#i++;
    const parts: CharSet[] = [];
    const one = (x: number | CharSet): CharSet => (typeof x === "number" ? [x, x] : x);
    for (;;) {
      const c = this.#peek();
      if (c === undefined) this.#fail(`the character class "[" at offset ${at} is not closed`);
      if (c === "]") break;
      const from = this.#i;
      const lo = this.#classAtom();
      if (this.#peek() !== "-" || this.#peek(1) === undefined || this.#peek(1) === "]") {
        parts.push(one(lo));
        continue;
      }
      this.#i++;
      const hi = this.#classAtom();
      if (typeof lo !== "number" || typeof hi !== "number") parts.push(one(lo), [0x2d, 0x2d], one(hi)); // "-" beside \d etc. is literal
      else if (lo > hi) this.#fail(`the class range "${this.#cps.slice(from, this.#i).join("")}" is out of order`);
      else parts.push([lo, hi]);
    }
    this.#i++;
    const s = union(parts);
    return set(negated ? complement(s) : s);
  }

  #classAtom(): number | CharSet {
    const c = this.#cps[this.#i++];
    return c === "\\" ? this.#escape(true) : c.codePointAt(0)!;
  }

  /** The escape after a backslash: a code point or a class (`\d` etc.). */
  #escape(inClass: boolean): number | CharSet {
    const c = this.#cps[this.#i++];
    if (c === undefined) return this.#fail("it ends with a lone backslash");
    const cls = CLASS_ESCAPES.get(c);
    if (cls !== undefined) return cls;
    const ctl = CONTROL_ESCAPES.get(c);
    if (ctl !== undefined) return ctl;
    switch (c) {
      case "0":
        if (/^[0-9]$/.test(this.#peek() ?? "")) this.#refuse(`an octal escape "\\0${this.#peek()}"`);
        return 0;
      case "b": return inClass ? 0x08 : this.#refuse(`a word boundary "\\b"`);
      case "B": return this.#refuse(`a word boundary "\\B"`);
      case "k": return this.#refuse(`a backreference "\\k<...>"`);
      case "p": case "P": return this.#refuse(`a Unicode property escape "\\${c}{...}"`);
      case "x": {
        const h = this.#cps.slice(this.#i, this.#i + 2).join("");
        if (!isHex(h[0]) || !isHex(h[1])) this.#fail(`"\\x" must be followed by two hex digits`);
        this.#i += 2;
        return parseInt(h, 16);
      }
      case "u": return this.#unicode();
      case "c": {
        const l = this.#peek();
        if (l === undefined || !/^[A-Za-z]$/.test(l)) this.#fail(`"\\c" must be followed by a letter`);
        this.#i++;
        return l.charCodeAt(0) % 32;
      }
    }
    if (/^[1-9]$/.test(c)) this.#refuse(inClass ? `an octal escape "\\${c}"` : `a backreference "\\${c}"`);
    if (/^[A-Za-z_]$/.test(c)) this.#refuse(`an unknown escape "\\${c}"`);
    return c.codePointAt(0)!;
  }

  /** `\uHHHH` (a surrogate pair of them is one code point) or `\u{H...}`, after the `u`. */
  #unicode(): number {
    if (this.#peek() === "{") {
      const close = this.#cps.indexOf("}", this.#i);
      const h = close < 0 ? "" : this.#cps.slice(this.#i + 1, close).join("");
      if (!/^[0-9A-Fa-f]+$/.test(h) || parseInt(h, 16) > MAX_CODE_POINT) this.#fail(`"\\u{" must hold a code point in hex up to 10FFFF and a "}"`);
      this.#i = close + 1;
      return parseInt(h, 16);
    }
    const four = (k: number) => {
      const h = this.#cps.slice(k, k + 4).join("");
      return h.length === 4 && [...h].every(isHex) ? parseInt(h, 16) : -1;
    };
    const cp = four(this.#i);
    if (cp < 0) this.#fail(`"\\u" must be followed by four hex digits or "{...}"`);
    this.#i += 4;
    if (cp >= 0xd800 && cp <= 0xdbff && this.#peek() === "\\" && this.#peek(1) === "u") {
      const low = four(this.#i + 2);
      if (low >= 0xdc00 && low <= 0xdfff) {
        this.#i += 6;
        return 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
      }
    }
    return cp;
  }
}

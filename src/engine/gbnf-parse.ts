/**
 * The parser of gbnf.ts's notation: a recursive descent over the source into {@link Expr} trees, one
 * per rule, with errors that give the grammar's line and column (SchemaError).
 */
import { SchemaError } from "./json-schema.ts";
import type { CharClass } from "./grammar-frames.ts";

/** The most copies a counted repetition (`{m,n}`) may spell out. */
export const MAX_GBNF_REPEAT = 1000;

/**
 * The most alternatives one `|` list may hold: each step's token mask walks every open alternative
 * (100,000 words took 12 s to answer and stalled the other requests' steps); a list of literal
 * choices that long belongs in `structured_outputs.choice` or a JSON schema `enum`, which are indexed.
 */
export const MAX_GBNF_ALTERNATIVES = 10_000;

/** An expression of the notation, as parsed. */
export type Expr =
  | { readonly t: "lit"; readonly text: string }
  | { readonly t: "cls"; readonly cls: CharClass }
  | { readonly t: "ref"; readonly name: string; readonly at: string }
  | { readonly t: "seq"; readonly items: readonly Expr[] }
  | { readonly t: "alt"; readonly alts: readonly Expr[] }
  | { readonly t: "rep"; readonly e: Expr; readonly min: number; readonly max: number; readonly at: string };

const ANY_CHAR: CharClass = { ranges: [0, 0x10ffff], negated: false };

/** A recursive-descent parser of the notation. */
export class GbnfParser {
  private i = 0;

  /** Where each line starts, for where() (finding them anew each time took time quadratic in the source). */
  private readonly lineStarts: number[] = [0];

  constructor(private readonly src: string) {
    for (let i = src.indexOf("\n"); i >= 0; i = src.indexOf("\n", i + 1)) this.lineStarts.push(i + 1);
  }

  /** Every rule, in order; throws SchemaError at the first syntax error. */
  rules(): Map<string, Expr> {
    const rules = new Map<string, Expr>();
    this.space();
    while (this.i < this.src.length) {
      const at = this.where();
      const name = this.name();
      if (name === "") throw this.error(`expected a rule name, got ${this.seen()}`);
      this.space();
      if (!this.src.startsWith("::=", this.i)) throw this.error(`expected "::=" after the rule name ${JSON.stringify(name)}, got ${this.seen()}`);
      this.i += 3;
      this.space();
      if (rules.has(name)) throw new SchemaError(`${at}: the rule ${JSON.stringify(name)} is defined twice`);
      rules.set(name, this.alternatives());
      if (this.i < this.src.length && this.src[this.i] === ")") throw this.error('a ")" closes no group');
    }
    if (rules.size === 0) throw new SchemaError("The grammar is empty: define at least the rule root");
    return rules;
  }

  private alternatives(): Expr {
    const at = this.i;
    const alts = [this.sequence()];
    while (this.src[this.i] === "|") {
      this.i++;
      this.space();
      alts.push(this.sequence());
      if (alts.length > MAX_GBNF_ALTERNATIVES) {
        throw new SchemaError(`${this.where(at)}: more than ${MAX_GBNF_ALTERNATIVES} alternatives in one list are not supported; give a long list of words as structured_outputs.choice or a JSON schema enum`);
      }
    }
    return alts.length === 1 ? alts[0] : { t: "alt", alts };
  }

  /** Items until `|`, `)`, the end, or the next rule's `name ::=`. */
  private sequence(): Expr {
    const items: Expr[] = [];
    while (this.i < this.src.length && this.src[this.i] !== "|" && this.src[this.i] !== ")" && !this.atRuleStart()) {
      items.push(this.postfix(this.primary()));
      this.space();
    }
    return items.length === 1 ? items[0] : { t: "seq", items };
  }

  private postfix(e: Expr): Expr {
    for (;;) {
      const at = this.where();
      const c = this.src[this.i];
      if (c === "*" || c === "+" || c === "?") {
        this.i++;
        e = { t: "rep", e, min: c === "+" ? 1 : 0, max: c === "?" ? 1 : Infinity, at };
      } else if (c === "{") {
        const m = /^\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}/.exec(this.src.slice(this.i));
        if (m === null) throw this.error(`expected a count as {m}, {m,} or {m,n}, got ${this.seen()}`);
        this.i += m[0].length;
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
        if (max < min) throw new SchemaError(`${at}: the count {${min},${max}} has its maximum below its minimum`);
        if (min > MAX_GBNF_REPEAT || (max !== Infinity && max > MAX_GBNF_REPEAT)) throw new SchemaError(`${at}: counts above ${MAX_GBNF_REPEAT} are not supported, got ${m[0]}`);
        e = { t: "rep", e, min, max, at };
      } else return e;
    }
  }

  private primary(): Expr {
    const c = this.src[this.i];
    if (c === '"') return { t: "lit", text: this.literal() };
    if (c === "[") return { t: "cls", cls: this.charClass() };
    if (c === ".") {
      this.i++;
      return { t: "cls", cls: ANY_CHAR };
    }
    if (c === "(") {
      this.i++;
      this.space();
      const e = this.alternatives();
      if (this.src[this.i] !== ")") throw this.error(`expected ")" to close the group, got ${this.seen()}`);
      this.i++;
      return e;
    }
    const at = this.where();
    const name = this.name();
    if (name === "") throw this.error(`expected a literal, a character class, a rule name or a group, got ${this.seen()}`);
    return { t: "ref", name, at };
  }

  private literal(): string {
    this.i++; // the opening quote
    let text = "";
    while (this.src[this.i] !== '"') {
      if (this.i >= this.src.length || this.src[this.i] === "\n") throw this.error("a literal is not closed with a quote");
      text += String.fromCodePoint(this.char());
    }
    this.i++;
    return text;
  }

  private charClass(): CharClass {
    this.i++; // [
    const negated = this.src[this.i] === "^";
    if (negated) this.i++;
    const ranges: number[] = [];
    while (this.src[this.i] !== "]") {
      if (this.i >= this.src.length) throw this.error('a character class is not closed with "]"');
      const lo = this.char();
      let hi = lo;
      if (this.src[this.i] === "-" && this.src[this.i + 1] !== "]") {
        this.i++;
        hi = this.char();
        if (hi < lo) throw this.error(`the range ${JSON.stringify(String.fromCodePoint(lo))}-${JSON.stringify(String.fromCodePoint(hi))} runs backwards`);
      }
      ranges.push(lo, hi);
    }
    this.i++;
    if (ranges.length === 0) throw this.error("a character class is empty");
    return { ranges, negated };
  }

  /** One character of a literal or class, escapes decoded, as a code point. */
  private char(): number {
    const c = this.src.codePointAt(this.i)!;
    if (c !== 0x5c) {
      this.i += c > 0xffff ? 2 : 1;
      return c;
    }
    const e = this.src[this.i + 1];
    const simple: Record<string, number> = { n: 10, r: 13, t: 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94, "/": 47 };
    if (e !== undefined && e in simple) {
      this.i += 2;
      return simple[e];
    }
    const digits = e === "x" ? 2 : e === "u" ? 4 : e === "U" ? 8 : 0;
    const hex = this.src.slice(this.i + 2, this.i + 2 + digits);
    if (digits === 0 || !/^[0-9a-fA-F]+$/.test(hex) || hex.length !== digits) throw this.error(`unknown escape ${JSON.stringify(this.src.slice(this.i, this.i + 2 + digits))}`);
    const cp = parseInt(hex, 16);
    if (cp > 0x10ffff) throw this.error(`the escape \\${e}${hex} is past the last code point`);
    this.i += 2 + digits;
    return cp;
  }

  private name(): string {
    const m = /^[A-Za-z0-9_-]+/.exec(this.src.slice(this.i, this.i + 256));
    if (m === null) return "";
    this.i += m[0].length;
    return m[0];
  }

  private atRuleStart(): boolean {
    return /^[A-Za-z0-9_-]+[ \t\r\n]*::=/.test(this.src.slice(this.i, this.i + 300));
  }

  /** Skips whitespace, newlines and comments. */
  private space(): void {
    for (;;) {
      const c = this.src[this.i];
      if (c === " " || c === "\t" || c === "\n" || c === "\r") this.i++;
      else if (c === "#") while (this.i < this.src.length && this.src[this.i] !== "\n") this.i++;
      else return;
    }
  }

  /** "Grammar line L, column C" of the current position. */
  private where(i = this.i): string {
    let lo = 0;
    let hi = this.lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.lineStarts[mid] <= i) lo = mid;
      else hi = mid - 1;
    }
    return `Grammar line ${lo + 1}, column ${i - this.lineStarts[lo] + 1}`;
  }

  private seen(): string {
    return this.i >= this.src.length ? "the end" : JSON.stringify(this.src.slice(this.i, this.i + 12));
  }

  private error(message: string): SchemaError {
    return new SchemaError(`${this.where()}: ${message}`);
  }
}

/**
 * Strings of the output-grammar automaton (grammar.ts): JSON strings (escapes, `maxLength`, patterns
 * matched by code point) and raw text (GLM's string arguments: no quotes or escapes, ended by a tag).
 */
import { type Config, type Frame, SHORT_ESCAPES } from "./grammar-frames.ts";
import type { RegexState } from "./regex-nfa.ts";
import { someBetweenEdges } from "./regex-parse.ts";
import { stringKey } from "./value-key.ts";

type StrFrame = Extract<Frame, { k: "str" }>;
type RawFrame = Extract<Frame, { k: "raw" }>;
/** The configurations once a value below `up` has ended (`key`: its key, as grammar-step.ts `complete` takes). */
export type Done = (up: Frame | null, key?: string) => Config[];

/** What a backslash escape's letter stands for (same order as SHORT_ESCAPES). */
const ESCAPED = '"\\/\b\f\n\r\t';
const isHex = (c: string) => (c >= "0" && c <= "9") || (c >= "a" && c <= "f") || (c >= "A" && c <= "F");

/** A JSON string's next character `c`; `done` gives the configurations once the string has ended. */
export function stepString(f: StrFrame, c: string, done: Done): Config[] {
  // After a high surrogate's escape only its low half's may come (a lone half is no character).
  if (f.esc === -2) return c === "\\" ? [{ top: { ...f, esc: -3 }, ws: 0 }] : [];
  if (f.esc === -3) return c === "u" ? [{ top: { ...f, esc: 4 }, ws: 0 }] : [];
  if (f.esc === -1) {
    if (c === "u") return escapeMayEnd(f, 0, 4) ? [{ top: { ...f, esc: 4, hex: 0 }, ws: 0 }] : [];
    const i = SHORT_ESCAPES.indexOf(c);
    return i < 0 ? [] : char(f, ESCAPED[i]);
  }
  if (f.esc > 0) {
    if (!isHex(c)) return [];
    const hex = f.hex * 16 + parseInt(c, 16);
    if (f.esc > 1) return escapeMayEnd(f, hex, f.esc - 1) ? [{ top: { ...f, esc: f.esc - 1, hex }, ws: 0 }] : [];
    // A pair's low half (escapeMayEnd kept it in range): one character, counted once.
    if (hex > 0xffff) return char(f, String.fromCharCode(Math.floor(hex / 0x10000), hex % 0x10000));
    if (hex >= 0xd800 && hex <= 0xdfff) {
      // A pattern is matched by code point: half a surrogate pair cannot be stepped through it.
      // Without one, a high half waits for its low half (its value then the high half times 0x10000
      // plus the low half's digits); a low half alone is refused.
      return f.re.length === 0 && hex < 0xdc00 ? [{ top: { ...f, esc: -2, hex }, ws: 0 }] : [];
    }
    return char(f, String.fromCharCode(hex));
  }
  if (c === '"') return f.n >= f.min && f.re.every((r, i) => r.accepts(f.rs[i])) ? done(f.up, f.v === null ? undefined : stringKey(f.v)) : [];
  if (c < " " || f.n >= f.max) return [];
  if (c === "\\") return f.re.length === 0 || someEscape(f) ? [{ top: { ...f, esc: -1 }, ws: 0 }] : [];
  return char(f, c);
}

/**
 * Whether a `\u` escape whose hex digits so far read `hex`, with `rest` digits to come, can still
 * end in a character the string's patterns take, tried at the patterns' edges (regex-parse.ts
 * `someBetweenEdges`; half a surrogate pair is refused under a pattern). Without patterns: anything
 * but a low surrogate alone, and after a high surrogate's escape, only its low half.
 */
function escapeMayEnd(f: StrFrame, hex: number, rest: number): boolean {
  const read = 16 ** (4 - rest), span = 16 ** rest;
  // A pair's low half (`hex` above the digits read: its high half's value rides above them).
  if (hex >= read) {
    const lo = (hex % read) * span;
    return lo <= 0xdfff && lo + span - 1 >= 0xdc00;
  }
  const lo = hex * span, hi = lo + span - 1;
  if (f.re.length === 0) return !(lo >= 0xdc00 && hi <= 0xdfff);
  const edges = f.re.flatMap((re) => re.edges()).sort((a, b) => a - b);
  const surrogate = (cp: number) => cp >= 0xd800 && cp <= 0xdfff;
  return someBetweenEdges(lo, hi, edges, (cp) => !surrogate(cp) && char(f, String.fromCharCode(cp)).length > 0);
}

/** Whether some escape may follow a backslash here: a short one, or a `\u` one, under the string's patterns. */
function someEscape(f: StrFrame): boolean {
  return [...ESCAPED].some((v) => char(f, v).length > 0) || escapeMayEnd({ ...f, esc: 4, hex: 0 }, 0, 4);
}

/** `f` after one more character of the string's value (`v`, escapes decoded), or nothing when it cannot come. */
function char(f: StrFrame, v: string): Config[] {
  const n = count(f);
  const value = f.v === null ? null : f.v + v;
  if (f.re.length === 0) return [{ top: { ...f, esc: 0, n, v: value }, ws: 0 }];
  const rs: RegexState[] = [];
  for (let i = 0; i < f.re.length; i++) {
    const next = f.re[i].step(f.rs[i], v);
    // Each expression must still be able to end within maxLength.
    if (next === null || f.n + 1 + f.re[i].minToAccept(next) > f.max) return [];
    rs.push(next);
  }
  return [{ top: { ...f, esc: 0, n, rs, v: value }, ws: 0 }];
}

/**
 * The string's length after one more character, counted only as far as its bounds need: without a
 * maximum, past the minimum every length is alike, so the state (and the mask cache keyed by it)
 * stays the same along free text.
 */
function count(f: StrFrame): number {
  return f.max === Infinity ? Math.min(f.n + 1, f.min) : f.n + 1;
}

/**
 * Raw text's next character `c`: where the text may end, `ended()` (`c` starting what follows it: the
 * end tag, a literal piece); as content, `c` may not complete the end tag (which repeats no prefix of
 * itself, so a mismatch restarts the match at `c`).
 */
export function stepRaw(f: RawFrame, c: string, ended: () => Config[]): Config[] {
  const out = f.n >= f.min && f.re.every((r, i) => r.accepts(f.rs[i])) ? ended() : [];
  const m = c === f.end[f.m] ? f.m + 1 : c === f.end[0] ? 1 : 0;
  // Control characters but tab, newline and carriage return are no text a model means to write.
  if (m === f.end.length || f.n >= f.max || (c < " " && c !== "\t" && c !== "\n" && c !== "\r")) return out;
  const n = f.max === Infinity ? Math.min(f.n + 1, f.min) : f.n + 1;
  if (f.re.length === 0) return [...out, { top: { ...f, m, n }, ws: 0 }];
  const rs: RegexState[] = [];
  for (let i = 0; i < f.re.length; i++) {
    const next = f.re[i].step(f.rs[i], c);
    if (next === null || f.n + 1 + f.re[i].minToAccept(next) > f.max) return out;
    rs.push(next);
  }
  return [...out, { top: { ...f, m, n, rs }, ws: 0 }];
}

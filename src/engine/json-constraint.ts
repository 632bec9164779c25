/**
 * `response_format: {"type": "json_object"}`: the output must be one JSON object. A character-level
 * pushdown automaton over RFC 8259 JSON decides, before each step, which tokens may come next (a
 * token is allowed when every character of its text is); the others get a logit of -1e30 through
 * the same sparse add as logit biases, and EOS is allowed only once the object is closed.
 *
 * Cost, on the host: one pass over the vocabulary's token texts per step and constrained request,
 * and a vocabulary-sized upload (most tokens are barred in most states). Fine for a laptop's model;
 * a cost to know at 150k-token vocabularies.
 */

/** What the automaton expects next. */
const enum Mode {
  Start, // the first character: "{"
  KeyOrEnd, // after "{": a key or "}"
  Key, // after "," in an object: a key
  Colon, // after a key
  Value, // after ":" or "," in an array
  ValueOrEnd, // after "[": a value or "]"
  AfterValue, // after a value inside a container: "," or the closing bracket
  Str, // inside a string
  StrEscape, // after "\" in a string
  StrHex, // inside "\uXXXX" (aux: hex digits still due)
  Num, // inside a number (aux: its grammar state)
  Literal, // inside true/false/null (aux: characters still due)
  Done, // the object is closed: only EOS
}

/** Number grammar states; the ones that may end a number are marked in NUM_END. */
const enum NumState { Sign, Zero, Int, Dot, Frac, E, ESign, Exp }
const NUM_END = new Set([NumState.Zero, NumState.Int, NumState.Frac, NumState.Exp]);

/** Deepest nesting allowed (a model looping on "[" would otherwise nest until max_tokens). */
const MAX_DEPTH = 32;
/** Longest whitespace run allowed between tokens of JSON (a model can loop on spaces). */
const MAX_WHITESPACE = 2;

/** The automaton's state; immutable, so testing a token never disturbs the request's. */
export interface JsonState {
  readonly mode: Mode;
  /** Open containers, innermost last: "o" object, "a" array. */
  readonly stack: string;
  /** Inside a string: whether it is an object key (then a colon follows). */
  readonly key: boolean;
  readonly aux: number | string;
  readonly ws: number;
}

/** The state before any output. */
export const JSON_START: JsonState = { mode: Mode.Start, stack: "", key: false, aux: 0, ws: 0 };

const isWs = (c: string) => c === " " || c === "\n" || c === "\t" || c === "\r";
const isDigit = (c: string) => c >= "0" && c <= "9";
const isHex = (c: string) => isDigit(c) || (c >= "a" && c <= "f") || (c >= "A" && c <= "F");

/** After a value ends: the next thing its container expects, or Done at the top. */
function afterValue(s: JsonState, stack = s.stack): JsonState {
  return { mode: stack === "" ? Mode.Done : Mode.AfterValue, stack, key: false, aux: 0, ws: 0 };
}

/** The start of a value at character `c`, or null. */
function startValue(s: JsonState, c: string): JsonState | null {
  const base = { stack: s.stack, key: false, aux: 0, ws: 0 };
  if (c === "{" || c === "[") {
    if (s.stack.length >= MAX_DEPTH) return null;
    return { ...base, stack: s.stack + (c === "{" ? "o" : "a"), mode: c === "{" ? Mode.KeyOrEnd : Mode.ValueOrEnd };
  }
  if (c === '"') return { ...base, mode: Mode.Str };
  if (c === "-") return { ...base, mode: Mode.Num, aux: NumState.Sign };
  if (c === "0") return { ...base, mode: Mode.Num, aux: NumState.Zero };
  if (isDigit(c)) return { ...base, mode: Mode.Num, aux: NumState.Int };
  for (const lit of ["true", "false", "null"]) if (c === lit[0]) return { ...base, mode: Mode.Literal, aux: lit.slice(1) };
  return null;
}

/** The next number state at `c`, or null when `c` does not continue the number. */
function numberStep(n: NumState, c: string): NumState | null {
  switch (n) {
    case NumState.Sign: return c === "0" ? NumState.Zero : isDigit(c) ? NumState.Int : null;
    case NumState.Zero: return c === "." ? NumState.Dot : c === "e" || c === "E" ? NumState.E : null;
    case NumState.Int: return isDigit(c) ? NumState.Int : c === "." ? NumState.Dot : c === "e" || c === "E" ? NumState.E : null;
    case NumState.Dot: return isDigit(c) ? NumState.Frac : null;
    case NumState.Frac: return isDigit(c) ? NumState.Frac : c === "e" || c === "E" ? NumState.E : null;
    case NumState.E: return c === "+" || c === "-" ? NumState.ESign : isDigit(c) ? NumState.Exp : null;
    case NumState.ESign: return isDigit(c) ? NumState.Exp : null;
    case NumState.Exp: return isDigit(c) ? NumState.Exp : null;
  }
}

/** The state after character `c`, or null when `c` cannot come next. */
export function jsonStep(s: JsonState, c: string): JsonState | null {
  switch (s.mode) {
    case Mode.Str:
      if (c === '"') return s.key ? { mode: Mode.Colon, stack: s.stack, key: false, aux: 0, ws: 0 } : afterValue(s);
      if (c === "\\") return { ...s, mode: Mode.StrEscape };
      return c < " " ? null : s;
    case Mode.StrEscape:
      if (c === "u") return { ...s, mode: Mode.StrHex, aux: 4 };
      return '"\\/bfnrt'.includes(c) ? { ...s, mode: Mode.Str } : null;
    case Mode.StrHex: {
      if (!isHex(c)) return null;
      const left = (s.aux as number) - 1;
      return left === 0 ? { ...s, mode: Mode.Str, aux: 0 } : { ...s, aux: left };
    }
    case Mode.Literal: {
      const rest = s.aux as string;
      if (c !== rest[0]) return null;
      return rest.length === 1 ? afterValue(s) : { ...s, aux: rest.slice(1) };
    }
    case Mode.Num: {
      const next = numberStep(s.aux as NumState, c);
      if (next !== null) return { ...s, aux: next };
      // The number ends here; `c` belongs to what follows it.
      return NUM_END.has(s.aux as NumState) ? jsonStep(afterValue(s), c) : null;
    }
    case Mode.Done:
      return null;
  }
  // Between tokens of JSON: whitespace, up to a short run.
  if (isWs(c)) return s.mode !== Mode.Start && s.ws < MAX_WHITESPACE ? { ...s, ws: s.ws + 1 } : null;
  const t = { ...s, ws: 0 };
  switch (s.mode) {
    case Mode.Start:
      return c === "{" ? startValue(t, c) : null;
    case Mode.KeyOrEnd:
      if (c === "}") return afterValue(t, t.stack.slice(0, -1));
      return c === '"' ? { ...t, mode: Mode.Str, key: true } : null;
    case Mode.Key:
      return c === '"' ? { ...t, mode: Mode.Str, key: true } : null;
    case Mode.Colon:
      return c === ":" ? { ...t, mode: Mode.Value } : null;
    case Mode.Value:
      return startValue(t, c);
    case Mode.ValueOrEnd:
      return c === "]" ? afterValue(t, t.stack.slice(0, -1)) : startValue(t, c);
    case Mode.AfterValue: {
      const top = t.stack[t.stack.length - 1];
      if (c === ",") return { ...t, mode: top === "o" ? Mode.Key : Mode.Value };
      if ((c === "}" && top === "o") || (c === "]" && top === "a")) return afterValue(t, t.stack.slice(0, -1));
      return null;
    }
  }
  return null;
}

/** The state after `text`, or null when some character of it cannot come where it does. */
export function jsonFeed(s: JsonState, text: string): JsonState | null {
  let cur: JsonState | null = s;
  for (const c of text) {
    cur = jsonStep(cur, c);
    if (cur === null) return null;
  }
  return cur;
}

/** Whether the output so far is one whole JSON object (nothing may follow but EOS). */
export function jsonComplete(s: JsonState): boolean {
  return s.mode === Mode.Done;
}

/** One request's JSON constraint: its automaton state and the masks it implies. */
export class JsonConstraint {
  #state: JsonState = JSON_START;
  #fed = 0;

  /**
   * @param texts each token's text as it streams (tokenizer.tokenText), "" for special tokens
   * @param eos the end-of-sequence token ids
   */
  constructor(private readonly texts: readonly string[], private readonly eos: readonly number[]) {}

  /**
   * Masks for the next token, the output so far being `tokens` from `outputStart` on: the tokens
   * barred next, as additions of -1e30 (EOS barred until the object closes, then everything else).
   */
  next(tokens: readonly number[], outputStart: number): Map<number, number> {
    for (; outputStart + this.#fed < tokens.length; this.#fed++) {
      const fed = jsonFeed(this.#state, this.texts[tokens[outputStart + this.#fed]] ?? "");
      // A token the mask allowed always feeds; a stale state (none should arise) keeps the last good one.
      if (fed !== null) this.#state = fed;
    }
    const barred = new Map<number, number>();
    const done = jsonComplete(this.#state);
    for (let id = 0; id < this.texts.length; id++) {
      const t = this.texts[id];
      const ok = this.eos.includes(id) ? done : t !== "" && !t.includes("\uFFFD") && jsonFeed(this.#state, t) !== null;
      if (!ok) barred.set(id, -1e30);
    }
    return barred;
  }
}

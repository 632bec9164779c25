/**
 * Forced text of an output grammar (grammar.ts): the characters that must come next whatever the
 * model does — the rest of a literal (`<tool_call>\n`, an enum value, a tool's name), of the one key
 * a prefix leaves, a `{` where a value must be an object. Jump-forward decoding
 * (output-constraint.ts `OutputConstraint.forced`) appends such text without sampling it.
 *
 * The answer is sound, not complete: a character is reported only when every configuration allows
 * that one character and no other (and the output may not end there), so where whitespace is
 * optional, or a number or a free string goes on, nothing is forced. In compact JSON (grammar.ts
 * `JsonWhitespace`) the separators `, ` and `: ` are forced too, and a closing bracket or a `,` where
 * the keys or item counts leave only that; in a `regex` grammar, each character the expression alone
 * allows (regex-nfa.ts `only`).
 */
import { fitsDepth, grammarComplete, grammarStep, type GrammarState, MAX_WHITESPACE } from "./grammar.ts";
import type { ArrFrame, Config, Frame, ObjFrame } from "./grammar-frames.ts";
import { resolve, type SchemaNode } from "./json-schema.ts";

/** The one character that may come next in `state`, or null when there are several, none, or an end. */
export function grammarForcedChar(state: GrammarState): string | null {
  if (state.length === 0 || grammarComplete(state)) return null;
  let only: string | null = null;
  for (const cfg of state) {
    const c = forcedIn(cfg);
    if (c === null || (only !== null && c !== only)) return null;
    only = c;
  }
  return only;
}

/**
 * The text forced from `state` on (at most `maxChars` characters) and the state after it.
 */
export function grammarForcedText(state: GrammarState, maxChars: number): { text: string; state: GrammarState } {
  let text = "";
  let s = state;
  while (text.length < maxChars) {
    const c = grammarForcedChar(s);
    if (c === null) break;
    const next = grammarStep(s, c);
    if (next.length === 0) break;
    text += c;
    s = next;
  }
  return { text, state: s };
}

/** The one character configuration `cfg` allows next, or null. Mirrors grammar-step.ts `step` frame by frame. */
function forcedIn(cfg: Config): string | null {
  const f = cfg.top;
  if (f === null) return null;
  // Whitespace may come wherever an object, an array or a value after `:`/`,` allows it, until the run
  // is full; in compact JSON only the one space after a `:` or `,`, and that one must come.
  const wsAllowed = cfg.ws < MAX_WHITESPACE;
  switch (f.k) {
    case "lit": return codePointAt(f.text, f.i);
    // Sorted, the run's texts all take the next code point when its first and last do.
    case "lits": {
      const first = codePointAt(f.texts[f.lo], f.i);
      return first === codePointAt(f.texts[f.hi - 1], f.i) ? first : null;
    }
    case "key": return forcedInKey(f);
    case "value":
      if (f.compact && f.ws) return cfg.ws === 0 ? " " : forcedStart(f.node, f.d);
      return f.ws && wsAllowed ? null : forcedStart(f.node, f.d);
    case "obj":
      if (f.compact && f.phase === "next" && cfg.ws === 0) return " ";
      return f.compact || !wsAllowed ? forcedInObject(f) : null;
    case "arr": return f.compact || !wsAllowed ? forcedInArray(f) : null;
    case "re": return f.re.only(f.rs);
    case "cls": return !f.cls.negated && f.cls.ranges.length === 2 && f.cls.ranges[0] === f.cls.ranges[1] ? String.fromCodePoint(f.cls.ranges[0]) : null;
    default: return null;
  }
}

/** The one character `f` takes (whitespace aside): a colon, a key's quote, or the one of `,` and `}` its keys leave. */
function forcedInObject(f: ObjFrame): string | null {
  const n = f.node;
  const keysLeft = n.extra !== null || f.seen.length < n.props.size;
  const requiredMet = [...n.required].every((k) => f.seen.includes(k));
  switch (f.phase) {
    case "colon": return ":";
    case "next": return '"';
    case "first": return one(keysLeft ? '"' : null, requiredMet ? "}" : null);
    case "after": return one(keysLeft ? "," : null, requiredMet ? "}" : null);
    default: return null;
  }
}

/** The one character `f` takes (whitespace aside): `,` or `]` as its item count allows, or its first item's start. */
function forcedInArray(f: ArrFrame): string | null {
  const n = f.node;
  const close = f.count >= n.min ? "]" : null;
  if (f.phase === "after") return one(f.count < n.max ? "," : null, close);
  if (f.phase !== "first") return null;
  if (n.max === 0) return close;
  return close === null ? forcedStart(n.prefix.length > 0 ? n.prefix[0] : n.items!, f.d) : null;
}

/** The one of `a` and `b` that is not null, or null when both or neither are. */
function one(a: string | null, b: string | null): string | null {
  return a === null ? b : b === null ? a : null;
}

/** Inside a key of an object without additional properties: the next character of the only keys left. */
function forcedInKey(f: Extract<Frame, { k: "key" }>): string | null {
  const obj = f.up;
  if (obj.node.extra !== null) return null;
  let only: string | null = null;
  for (const k of obj.node.props.keys()) {
    if (!k.startsWith(f.text) || obj.seen.includes(k)) continue;
    const c = k.length === f.text.length ? '"' : codePointAt(k, f.text.length);
    if (only !== null && c !== only) return null;
    only = c;
  }
  return only;
}

/** The one character a value of `node` can start with (depth `d`), or null. */
function forcedStart(node: SchemaNode, d: number): string | null {
  const n = resolve(node);
  switch (n.t) {
    case "literal": {
      const c = codePointAt(n.texts[0], 0);
      return n.texts.every((t) => t.startsWith(c)) ? c : null;
    }
    case "object": return fitsDepth(n, d) ? "{" : null;
    case "array": return fitsDepth(n, d) ? "[" : null;
    case "string": return '"';
    case "anyOf": {
      const cs = n.options.map((o) => forcedStart(o, d));
      return cs.every((c) => c !== null && c === cs[0]) ? cs[0] : null;
    }
    default: return null;
  }
}

/** The code point of `text` at UTF-16 index `i`, as a string (two units outside the Basic Multilingual Plane): the grammar steps code points. */
function codePointAt(text: string, i: number): string {
  return String.fromCodePoint(text.codePointAt(i)!);
}

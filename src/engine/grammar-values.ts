/**
 * JSON values in the output automaton (grammar.ts): the configurations that start a value of a
 * schema node at its first character, and an object's keys, colons and commas stepped a character
 * at a time. What follows a value is the caller's: it passes grammar-step.ts `complete` in.
 */
import { ANY, ANY_OBJECT, resolve, type SchemaNode } from "./json-schema.ts";
import { stepLiterals } from "./grammar-literals.ts";
import { canReach, type NumberRange } from "./number-bounds.ts";
import { literalKey } from "./value-key.ts";
import { type ArrayNode, type ArrFrame, type Config, type Frame, type ObjFrame, uniqueSeen } from "./grammar-frames.ts";
import { numberStep } from "./grammar-number.ts";
import { decide } from "./grammar-pick.ts";
import type { Done } from "./grammar-strings.ts";
import { MAX_DEPTH } from "./grammar-types.ts";

const ANY_STRING: SchemaNode = { t: "string", min: 0, max: Infinity, patterns: [] };
const ANY_NUMBER: SchemaNode = { t: "number", integer: false, range: null };
const ANY_ARRAY: SchemaNode = { t: "array", prefix: [], items: ANY, min: 0, max: Infinity, unique: false };

/**
 * The configurations that start a value of `node` at character `c`, below `up` (`compact`: its whitespace
 * rule); `complete` gives those once the value has ended (grammar-step.ts `complete`).
 */
export function startValue(node: SchemaNode, up: Frame | null, d: number, c: string, compact: boolean, complete: Done): Config[] {
  const n = resolve(node);
  switch (n.t) {
    case "anyOf": {
      // Objects told apart by one constant (grammar-pick.ts) start as one undecided object.
      const pick = n.pick;
      if (pick !== undefined && fitsDepth(pick.shape, d)) return c === "{" ? [{ top: { k: "obj", node: pick.shape, seen: [], phase: "first", key: "", compact, up, d: d + 1, pick }, ws: 0 }] : [];
      return n.options.flatMap((o) => startValue(o, up, d, c, compact, complete));
    }
    case "literal": {
      // The constant telling an undecided object's options apart: one run of their values.
      if (up !== null && up.k === "obj" && up.pick !== undefined && up.key === up.pick.key) {
        const texts = up.pick.texts;
        return stepLiterals({ k: "lits", texts, lo: 0, hi: texts.length, i: 0, up, d, then: up.pick }, c, complete);
      }
      // In a uniqueItems array an enum value already written cannot start again.
      const seen = uniqueSeen(up);
      if (seen === null && n.sorted) return stepLiterals({ k: "lits", texts: n.sorted, lo: 0, hi: n.sorted.length, i: 0, up, d }, c, complete);
      return n.texts.flatMap((t) => {
        if (!t.startsWith(c) || (seen !== null && seen.includes(literalKey(t)))) return [];
        return t.length === c.length ? complete(up, seen === null ? undefined : literalKey(t)) : [{ top: { k: "lit", text: t, i: c.length, up, d }, ws: 0 }];
      });
    }
    case "object":
      return c === "{" && fitsDepth(n, d) ? [{ top: { k: "obj", node: n, seen: [], phase: "first", key: "", compact, up, d: d + 1 }, ws: 0 }] : [];
    case "array":
      return c === "[" && fitsDepth(n, d) ? [{ top: { k: "arr", node: n, count: 0, phase: "first", seen: n.unique ? [] : null, compact, up, d: d + 1 }, ws: 0 }] : [];
    // compileSchema has checked that each pattern can end within maxLength.
    case "string": {
      if (c !== '"') return [];
      const v = uniqueSeen(up) === null ? null : "";
      return [{ top: { k: "str", min: n.min, max: n.max, n: 0, esc: 0, hex: 0, re: n.patterns, rs: n.patterns.map((r) => r.start), v, up, d }, ws: 0 }];
    }
    case "number": {
      const ns = numberStep(null, c, n.integer, n.range === null);
      if (ns === null || (n.range !== null && !canReach(c, n.integer, n.range))) return [];
      return [{ top: { k: "num", integer: n.integer, range: n.range, text: keepsText(n.range, up) ? c : "", ns, up, d }, ws: 0 }];
    }
    case "any": {
      if (c === "{") return startValue(ANY_OBJECT, up, d, c, compact, complete);
      if (c === "[") return startValue(ANY_ARRAY, up, d, c, compact, complete);
      if (c === '"') return startValue(ANY_STRING, up, d, c, compact, complete);
      if (c === "t" || c === "f" || c === "n") return startValue({ t: "literal", texts: ["true", "false", "null"] }, up, d, c, compact, complete);
      return startValue(ANY_NUMBER, up, d, c, compact, complete);
    }
  }
}

/**
 * Whether an object or array of `n` may start below depth `d`: its values need `n.need` levels
 * (compileSchema's count of the fewest), which must fit under MAX_DEPTH, or the model would start a
 * value it cannot end.
 */
export function fitsDepth(n: { readonly need?: number }, d: number): boolean {
  return d + (n.need ?? 1) <= MAX_DEPTH;
}

/** The schema of item `i` of an array (`max` keeps `i` inside the tuple when no other items may follow). */
export function itemAt(n: ArrayNode, i: number): SchemaNode {
  return i < n.prefix.length ? n.prefix[i] : n.items!;
}

/**
 * The array's item count after one more, counted only as far as its schema needs: without a maximum,
 * past its minimum and its tuple every count is alike, so the state (and the mask cache keyed by it)
 * stays the same along a long list.
 */
export function countItem(f: ArrFrame): number {
  const n = f.node;
  return n.max === Infinity ? Math.min(f.count + 1, Math.max(n.min, n.prefix.length)) : f.count + 1;
}

/** Whether a number below `up` keeps the text it writes: under bounds, or as a unique item. */
export function keepsText(range: NumberRange | null, up: Frame | null): boolean {
  return range !== null || uniqueSeen(up) !== null;
}

/** An object key's frame after `c`: a closing quote ends a key the object may hold; keys no property begins are refused. */
export function stepKey(f: Extract<Frame, { k: "key" }>, c: string): Config[] {
  const obj = f.up;
  if (c === '"') {
    if (obj.seen.includes(f.text) || (!obj.node.props.has(f.text) && obj.node.extra === null)) return [];
    return [{ top: { ...obj, phase: "colon", key: f.text }, ws: 0 }];
  }
  // Keys are written without escapes (json-schema.ts refuses property names that would need them).
  if (c === "\\" || c < " ") return [];
  const text = f.text + c;
  if (obj.node.extra !== null) return [{ top: { ...f, text }, ws: 0 }];
  for (const k of obj.node.props.keys()) if (k.startsWith(text) && !obj.seen.includes(k)) return [{ top: { ...f, text }, ws: 0 }];
  return [];
}

/** An object between its values after `c` (a key's opening quote, a colon, a comma, or its closing brace). */
export function stepObject(f: ObjFrame, c: string, complete: Done): Config[] {
  const n = f.node;
  const keysLeft = n.extra !== null || f.seen.length < n.props.size;
  const requiredMet = () => [...n.required].every((k) => f.seen.includes(k));
  switch (f.phase) {
    case "first": case "next":
      if (c === '"' && keysLeft) return [{ top: { k: "key", text: "", up: { ...f, phase: "key" }, d: f.d }, ws: 0 }];
      return c === "}" && f.phase === "first" && requiredMet() ? complete(f.up) : [];
    case "colon": {
      if (c !== ":") return [];
      // Another key than the telling one, in an undecided object: each option goes its own way.
      if (f.pick !== undefined && f.key !== f.pick.key) {
        return f.pick.all.map((o): Config => {
          const node = o.props.get(f.key) ?? o.extra ?? ANY;
          return { top: { k: "value", node, ws: true, compact: f.compact, up: { ...decide(f, o), phase: "value", seen: [...f.seen, f.key] }, d: f.d }, ws: 0 };
        });
      }
      const node = n.props.get(f.key) ?? n.extra ?? ANY;
      return [{ top: { k: "value", node, ws: true, compact: f.compact, up: { ...f, phase: "value", seen: [...f.seen, f.key] }, d: f.d }, ws: 0 }];
    }
    case "after":
      if (c === ",") return keysLeft ? [{ top: { ...f, phase: "next" }, ws: 0 }] : [];
      return c === "}" && requiredMet() ? complete(f.up) : [];
  }
  return [];
}

/**
 * The `uniqueItems` guard of the output-grammar automaton (grammar.ts): inside an array whose items
 * must differ, a configuration that could only end its item at a value already written is dropped
 * as soon as that is so, before it becomes a dead end.
 */
import { ASCII_KINDS } from "./char-kinds.ts";
import { type ArrFrame, type Config, SHORT_ESCAPES } from "./grammar-frames.ts";
import { numberMayEnd } from "./grammar-number.ts";
import { numberKey, stringKey } from "./value-key.ts";

/**
 * Probe characters for the search of {@link distinctAhead}: the closing quote first (the shortest way
 * out of a string), then digits, letters and the rest of printable ASCII.
 */
const PROBE = ['"', ...ASCII_KINDS[2], ...ASCII_KINDS[0], ...ASCII_KINDS[1], ...ASCII_KINDS[3], ...ASCII_KINDS[4], "\\"];
/** Steps the search of {@link distinctAhead} may take before it assumes a way out exists. */
const DISTINCT_SEARCH_STEPS = 2000;

/** One step of the automaton (grammar-step.ts `step`), without the guard. */
export type StepFn = (cfg: Config, c: string) => Config[];

/**
 * Of `out` (the configurations after one `step`), those that are not inside a `uniqueItems` array
 * with items already, or can still end the item at a value not written before: a string equal so far
 * to an earlier item, any number, and a new item's start are checked by a short search
 * ({@link distinctAhead}), so a duplicate is barred before it becomes a dead end (`[true, false, `
 * refused; `"ab"` refused, `"ab` kept while it can grow).
 */
export function keepDistinct(out: Config[], step: StepFn): Config[] {
  if (out.every((x) => atRisk(x) === null)) return out;
  return out.filter((x) => {
    const arr = atRisk(x);
    return arr === null || distinctAhead(x, arr, step);
  });
}

/** The unique array whose item `cfg` is writing when it could end in a duplicate, else null. */
function atRisk(cfg: Config): ArrFrame | null {
  const f = cfg.top;
  if (f === null || f.up === null || f.up.k !== "arr" || f.up.seen === null || f.up.seen.length === 0) return null;
  const seen = f.up.seen;
  if (f.k === "value" || f.k === "num") return f.up;
  if (f.k === "str" && f.v !== null) {
    const key = stringKey(f.v);
    return seen.some((s) => s.startsWith(key)) ? f.up : null;
  }
  return null;
}

/** Whether the item `cfg` is writing can still end at a value its array (`arr`) has not seen. */
function distinctAhead(cfg: Config, arr: ArrFrame, step: StepFn): boolean {
  let steps = DISTINCT_SEARCH_STEPS;
  const ended = (x: Config): boolean => {
    const f = x.top;
    if (f === null) return false;
    if (f.k === "arr") return f.node === arr.node && f.d === arr.d && f.phase === "after";
    return f.k === "num" && f.up === arr && numberMayEnd(f) && !arr.seen!.includes(numberKey(f.text));
  };
  const visit = (x: Config): boolean => {
    if (ended(x)) return true;
    // An enum value's next character may be outside the probe set: try it first. After a backslash,
    // the short escapes only: \uXXXX writes what a plain character or a short escape writes, and
    // would take the search through 65536 values.
    const t = x.top;
    const chars = t?.k === "lit" ? [String.fromCodePoint(t.text.codePointAt(t.i)!), ...PROBE] : t?.k === "str" && t.esc === -1 ? SHORT_ESCAPES : PROBE;
    for (const ch of chars) {
      // A long search means many ways on; assume one of them ends well.
      if (--steps < 0) return true;
      for (const next of step(x, ch)) if (visit(next)) return true;
    }
    return false;
  };
  return visit(cfg);
}

/**
 * JSON numbers in the output-grammar automaton (grammar.ts): the character-level number states and
 * whether a number may end.
 */
import { type Frame, NUM_END, NumState } from "./grammar-frames.ts";
import { inRange } from "./number-bounds.ts";

const isDigit = (c: string) => c >= "0" && c <= "9";

/** Whether the number in `f` may end here: a whole number, inside its bounds. */
export function numberMayEnd(f: Extract<Frame, { k: "num" }>): boolean {
  return NUM_END.has(f.ns) && (f.range === null || inRange(f.text, f.range));
}

/**
 * The next number state at `c` (from the start when `n` is null), or null when `c` does not continue
 * it; `exp`: whether an exponent may follow (never in an integer).
 */
export function numberStep(n: NumState | null, c: string, integer: boolean, exp: boolean): NumState | null {
  const e = exp && !integer && (c === "e" || c === "E");
  switch (n) {
    case null: return c === "-" ? NumState.Sign : c === "0" ? NumState.Zero : isDigit(c) ? NumState.Int : null;
    case NumState.Sign: return c === "0" ? NumState.Zero : isDigit(c) ? NumState.Int : null;
    case NumState.Zero: return c === "." && !integer ? NumState.Dot : e ? NumState.E : null;
    case NumState.Int: return isDigit(c) ? NumState.Int : c === "." && !integer ? NumState.Dot : e ? NumState.E : null;
    case NumState.Dot: return isDigit(c) ? NumState.Frac : null;
    case NumState.Frac: return isDigit(c) ? NumState.Frac : e ? NumState.E : null;
    case NumState.E: return c === "+" || c === "-" ? NumState.ESign : isDigit(c) ? NumState.Exp : null;
    case NumState.ESign: return isDigit(c) ? NumState.Exp : null;
    case NumState.Exp: return isDigit(c) ? NumState.Exp : null;
  }
}

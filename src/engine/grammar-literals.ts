/**
 * A long list of literal texts (an `enum` of hundreds of values, a `choice` list) stepped as one
 * configuration: the texts sorted, and the ones still possible a run of them sharing what is written
 * so far. Stepping narrows the run by two binary searches, so a token mask costs the same for a
 * 20 000-value enum as for a 4-value one, where one configuration per text made it grow with the
 * list (and blocked the server for seconds on large ones). The same run steps the literals that tell
 * alternatives apart (grammar-pick.ts: a tool call's name among many tools).
 */
import type { Config, Frame, LiteralsFrame } from "./grammar-frames.ts";
import { thenFrames } from "./grammar-pick.ts";

/**
 * The configurations after code point `c` (one or two UTF-16 units) in run `f`: `complete(up)`
 * where a text ends with it, and the texts that go on past it (one `lit` frame when one is left).
 */
export function stepLiterals(f: LiteralsFrame, c: string, complete: (up: Frame | null) => Config[]): Config[] {
  const { texts, i } = f;
  const end = i + c.length;
  // Sorted texts sharing their first i units are sorted by what follows: those going on with `c` are a run.
  const piece = (t: string) => t.slice(i, end);
  let a = firstIndex(texts, f.lo, f.hi, (t) => piece(t) >= c);
  const b = firstIndex(texts, a, f.hi, (t) => piece(t) > c);
  if (a === b) return [];
  const out: Config[] = [];
  // A text that ends here sorts first in its run: it is the run's shared prefix.
  // Texts that part alternatives (grammar-pick.ts) go on in each alternative's own frame.
  if (texts[a].length === end) {
    if (f.then === undefined) out.push(...complete(f.up));
    else for (const up of thenFrames(f, a)) out.push(...complete(up));
    a++;
  }
  if (b - a === 1) {
    if (f.then === undefined) out.push({ top: { k: "lit", text: texts[a], i: end, up: f.up, d: f.d }, ws: 0 });
    else for (const up of thenFrames(f, a)) out.push({ top: { k: "lit", text: texts[a], i: end, up, d: f.d }, ws: 0 });
  } else if (b > a) out.push({ top: { ...f, lo: a, hi: b, i: end }, ws: 0 });
  return out;
}

/** The first index in [lo, hi) where `ok` holds, `ok` being false then true along the range (hi when never). */
function firstIndex(texts: readonly string[], lo: number, hi: number, ok: (t: string) => boolean): number {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ok(texts[mid])) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

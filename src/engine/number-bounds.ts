/**
 * Numeric bounds for constrained decoding (JSON Schema `minimum`, `maximum`, `exclusiveMinimum`,
 * `exclusiveMaximum`). The grammar writes a bounded number digit by digit, so before each character it
 * asks whether the number written so far can still be completed to a value inside the bounds
 * ({@link canReach}), and lets the number end only at a value inside them ({@link inRange}). A bounded
 * number is written without an exponent (plain decimals reach every value, and the reachable values of
 * a prefix then form a few intervals). Values are compared as JavaScript numbers, as the request's
 * own bounds were parsed.
 */

/** Bounds on a number; an absent side is ±Infinity. `loOpen`/`hiOpen`: the bound itself is excluded. */
export interface NumberRange {
  readonly lo: number;
  readonly loOpen: boolean;
  readonly hi: number;
  readonly hiOpen: boolean;
}

/** The range's bounds on magnitudes |v| of one sign; null when no value of that sign is in it. */
interface MagnitudeRange {
  lo: number;
  loIn: boolean;
  hi: number;
  hiIn: boolean;
}

/** Whether the number `text` (complete JSON, no exponent) is inside `r`. */
export function inRange(text: string, r: NumberRange): boolean {
  const v = Number(text);
  return (r.loOpen ? v > r.lo : v >= r.lo) && (r.hiOpen ? v < r.hi : v <= r.hi);
}

/** Whether `r` holds any value (any integer, with `integer`). */
export function rangeHolds(r: NumberRange, integer: boolean): boolean {
  return canReach("", integer, r) || canReach("-", integer, r);
}

/**
 * Whether some JSON number without exponent that starts with `text` (a prefix of one: `-`, digits,
 * `.`, digits) lies in `r`; with `integer`, an integer.
 */
export function canReach(text: string, integer: boolean, r: NumberRange): boolean {
  if (text === "") return canReach("-", integer, r) || canReachMagnitude("", integer, magnitudes(r, false));
  const negative = text[0] === "-";
  return canReachMagnitude(negative ? text.slice(1) : text, integer, magnitudes(r, negative));
}

/** The part of `r` on one side of zero, as bounds on |v| (zero belongs to both sides: "-0" is 0). */
function magnitudes(r: NumberRange, negative: boolean): MagnitudeRange | null {
  const m = negative
    ? { lo: Math.max(0, -r.hi), loIn: r.hi <= 0 ? !r.hiOpen : true, hi: -r.lo, hiIn: !r.loOpen }
    : { lo: Math.max(0, r.lo), loIn: r.lo >= 0 ? !r.loOpen : true, hi: r.hi, hiIn: !r.hiOpen };
  if (m.lo > m.hi || (m.lo === m.hi && !(m.loIn && m.hiIn))) return null;
  return m;
}

/** Whether a magnitude written as `digits` (integer part, then maybe `.` and fraction) can reach `m`. */
function canReachMagnitude(digits: string, integer: boolean, m: MagnitudeRange | null): boolean {
  if (m === null) return false;
  if (integer) {
    const a = m.loIn ? Math.ceil(m.lo) : Math.floor(m.lo) + 1;
    const b = m.hiIn ? Math.floor(m.hi) : Math.ceil(m.hi) - 1;
    if (a > b) return false;
    if (digits === "") return true;
    if (digits === "0") return a <= 0;
    // "D" then j more digits: the integers D·10^j … (D+1)·10^j − 1.
    const d = Number(digits);
    for (let scale = 1; d * scale <= b; scale *= 10) if ((d + 1) * scale - 1 >= a) return true;
    return false;
  }
  if (digits === "") return true;
  const dot = digits.indexOf(".");
  if (dot >= 0) {
    // "D.F": from D.F (written as it is) up to, not reaching, D.F + 10^-|F|.
    const frac = digits.length - dot - 1;
    const v = Number(frac === 0 ? digits.slice(0, dot) : digits);
    return overlaps(v, v + 10 ** -frac, m);
  }
  if (digits === "0") return overlaps(0, 1, m);
  // "D" then j more digits, then maybe a fraction: [D·10^j, (D+1)·10^j).
  const d = Number(digits);
  for (let scale = 1; d * scale <= m.hi && Number.isFinite(d * scale); scale *= 10) if (overlaps(d * scale, (d + 1) * scale, m)) return true;
  return false;
}

/** Whether [from, to) meets `m`. */
function overlaps(from: number, to: number, m: MagnitudeRange): boolean {
  if (from > m.hi || (from === m.hi && !m.hiIn)) return false;
  return to > m.lo;
}

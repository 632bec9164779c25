/**
 * Numeric bounds for constrained decoding (JSON Schema `minimum`, `maximum`, `exclusiveMinimum`,
 * `exclusiveMaximum`). The grammar writes a bounded number digit by digit, so before each character it
 * asks whether the number written so far can still be completed to a value inside the bounds
 * ({@link canReach}), and lets the number end only at a value inside them ({@link inRange}). A bounded
 * number is written without an exponent (plain decimals reach every value, and the reachable values of
 * a prefix then form a few intervals). Values are compared as JavaScript numbers, as the request's
 * own bounds were parsed.
 */

/**
 * Bounds on a number; an absent side is ±Infinity. `loOpen`/`hiOpen`: the bound itself is excluded.
 * `step`: the value must be a multiple of it (`multipleOf`).
 */
export interface NumberRange {
  readonly lo: number;
  readonly loOpen: boolean;
  readonly hi: number;
  readonly hiOpen: boolean;
  readonly step?: DecimalStep;
}

/**
 * A `multipleOf` as an exact decimal, p·10^-d (p ≥ 1). A number following it is written with at most
 * d fraction digits, so that its value times 10^d is an integer, checked for divisibility by p.
 */
export interface DecimalStep {
  readonly p: bigint;
  readonly d: number;
}

/** The range's bounds on magnitudes |v| of one sign; null when no value of that sign is in it. */
interface MagnitudeRange {
  lo: number;
  loIn: boolean;
  hi: number;
  hiIn: boolean;
}

/** Whether the number `text` (complete JSON, no exponent) is inside `r` (and a multiple of its step). */
export function inRange(text: string, r: NumberRange): boolean {
  const v = Number(text);
  if (!((r.loOpen ? v > r.lo : v >= r.lo) && (r.hiOpen ? v < r.hi : v <= r.hi))) return false;
  if (r.step === undefined) return true;
  const [whole, frac = ""] = text.replace("-", "").split(".");
  if (frac.length > r.step.d && /[^0]/.test(frac.slice(r.step.d))) return false;
  return BigInt(whole + frac.slice(0, r.step.d).padEnd(r.step.d, "0")) % r.step.p === 0n;
}

/**
 * The step of `multipleOf` (a positive finite number, as JSON gave it); for integers, the integer
 * step their multiples of it share (every integer is a multiple of 0.5: step 1).
 */
export function decimalStep(multipleOf: number, integer: boolean): DecimalStep {
  const { m, e } = decimal(multipleOf);
  const step = e >= 0 ? { p: m * 10n ** BigInt(e), d: 0 } : { p: m, d: -e };
  if (!integer || step.d === 0) return step;
  return { p: step.p / gcd(step.p, 10n ** BigInt(step.d)), d: 0 };
}

/** How many integers `r` holds (multiples of its step, which for integers is whole), Infinity when unbounded. */
export function integersIn(r: NumberRange): number {
  if (!Number.isFinite(r.lo) || !Number.isFinite(r.hi)) return Infinity;
  const lo = r.loOpen && Number.isInteger(r.lo) ? r.lo + 1 : Math.ceil(r.lo);
  const hi = r.hiOpen && Number.isInteger(r.hi) ? r.hi - 1 : Math.floor(r.hi);
  const p = r.step === undefined || r.step.d > 0 ? 1 : Number(r.step.p);
  return Math.max(0, Math.floor(hi / p) - Math.ceil(lo / p) + 1);
}

/** `x` (finite) as m·10^e exactly, from its shortest decimal form. */
function decimal(x: number): { m: bigint; e: number } {
  const [mantissa, exp = "0"] = Math.abs(x).toString().split("e");
  const [whole, frac = ""] = mantissa.split(".");
  return { m: BigInt(whole + frac), e: Number(exp) - frac.length };
}

function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
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
  if (text === "") return canReach("-", integer, r) || canReachSide("", integer, r, false);
  const negative = text[0] === "-";
  return canReachSide(negative ? text.slice(1) : text, integer, r, negative);
}

function canReachSide(digits: string, integer: boolean, r: NumberRange, negative: boolean): boolean {
  const m = magnitudes(r, negative);
  return r.step === undefined ? canReachMagnitude(digits, integer, m) : canReachStepped(digits, m, r.step);
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

/**
 * {@link canReachMagnitude} for a stepped number: whether `digits` can still become a multiple of
 * p·10^-d inside `m`, written with at most d fraction digits. Magnitudes are scaled by 10^d to
 * integers, so every comparison is exact.
 */
function canReachStepped(digits: string, m: MagnitudeRange | null, step: DecimalStep): boolean {
  if (m === null) return false;
  const { p, d } = step;
  const lo = m.loIn ? scaled(m.lo, d, true) : scaled(m.lo, d, false) + 1n;
  const hi = m.hi === Infinity ? null : m.hiIn ? scaled(m.hi, d, false) : scaled(m.hi, d, true) - 1n;
  // Whether [a, b] (b null: unbounded) holds a multiple of p inside [lo, hi].
  const holds = (a: bigint, b: bigint | null): boolean => {
    const from = a > lo ? a : lo;
    const to = b === null ? hi : hi === null || b < hi ? b : hi;
    const first = ((from + p - 1n) / p) * p;
    return to === null || first <= to;
  };
  const unit = (k: number) => 10n ** BigInt(k);
  if (digits === "") return holds(0n, null);
  const dot = digits.indexOf(".");
  if (dot >= 0) {
    const frac = digits.length - dot - 1;
    if (frac > d || d === 0) return false;
    // "D.F": D.F followed by up to d − |F| more digits.
    const base = BigInt(digits.slice(0, dot) + digits.slice(dot + 1)) * unit(d - frac);
    return holds(base, base + unit(d - frac) - 1n);
  }
  if (digits === "0") return holds(0n, unit(d) - 1n);
  // "D" then k more digits, then up to d fraction digits: [D·10^(k+d), (D+1)·10^(k+d)). The loop
  // ends: the intervals grow tenfold, so once one starts above lo and is longer than p it holds one.
  const lead = BigInt(digits);
  for (let k = 0; ; k++) {
    const from = lead * unit(k + d);
    if (hi !== null && from > hi) return false;
    if (holds(from, from + unit(k + d) - 1n)) return true;
  }
}

/** `x` (≥ 0, finite) times 10^d, rounded up or down to an integer exactly. */
function scaled(x: number, d: number, up: boolean): bigint {
  const { m, e } = decimal(x);
  if (e + d >= 0) return m * 10n ** BigInt(e + d);
  const div = 10n ** BigInt(-(e + d));
  const q = m / div;
  return up && q * div !== m ? q + 1n : q;
}

/**
 * Keys under which JSON values compare equal as JSON Schema's `uniqueItems` compares them: strings by
 * their decoded text (`"a"` and `"\u0061"` are one value), numbers by their exact value (`1`, `1.0` and
 * `1e0` are one), other values by their JSON text. The three kinds never share a key.
 */

/** The key of a string whose decoded text is `text`. */
export function stringKey(text: string): string {
  return `s${text}`;
}

/** The key of the JSON number written as `text`: its digits without leading or trailing zeros, and its exponent. */
export function numberKey(text: string): string {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (m === null) throw new RangeError(`The text ${JSON.stringify(text)} is not a JSON number`);
  const frac = m[3] ?? "";
  const all = (m[2] + frac).replace(/^0+/, "");
  // Zero is one value whatever its sign or digits.
  if (all === "") return "n0";
  const digits = all.replace(/0+$/, "");
  const exp = BigInt(m[4] ?? "0") - BigInt(frac.length) + BigInt(all.length - digits.length);
  return `n${m[1]}${digits}e${exp}`;
}

/** The key of the JSON text `text` (an enum or const value). */
export function literalKey(text: string): string {
  const v: unknown = JSON.parse(text);
  if (typeof v === "string") return stringKey(v);
  if (typeof v === "number") return numberKey(text.trim());
  return JSON.stringify(v);
}

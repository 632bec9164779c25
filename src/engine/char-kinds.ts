/**
 * Kinds of plain characters (no quote, backslash or control character), as bits of a mask. The token
 * trie records which kinds occur in each subtree; inside a patterned string, a subtree whose kinds all
 * lead the pattern back to where it is can be allowed whole, without stepping through its texts
 * (src/engine/output-constraint.ts).
 */

/** The printable ASCII characters of each kind but the last, in bit order: lowercase, uppercase, digits, space, other. */
export const ASCII_KINDS: readonly string[] = Object.freeze([
  "abcdefghijklmnopqrstuvwxyz",
  "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "0123456789",
  " ",
  "!#$%&'()*+,-./:;<=>?@[]^_`{|}~",
]);
/** The bit of the "other" printable ASCII characters (punctuation, the quote and backslash among them). */
export const OTHER_KIND = 1 << (ASCII_KINDS.length - 1);
/** The bit of every character outside printable ASCII (never checked character by character). */
export const WIDE_KIND = 1 << ASCII_KINDS.length;
/** Every kind. */
export const ALL_KINDS = (WIDE_KIND << 1) - 1;

/** The kind bit of each ASCII code (0: not printable), from ASCII_KINDS; a quote or backslash counts as other. */
const ASCII_KIND_BITS: Readonly<Uint8Array> = (() => {
  const bits = new Uint8Array(128);
  ASCII_KINDS.forEach((chars, k) => {
    for (const c of chars) bits[c.charCodeAt(0)] = 1 << k;
  });
  bits[0x22] = bits[0x5c] = 1 << (ASCII_KINDS.length - 1);
  return bits;
})();

/** The kind bit of `c` (one code point; a control or non-ASCII character is wide). */
export function kindOf(c: string): number {
  const x = c.codePointAt(0)!;
  return (x < 128 ? ASCII_KIND_BITS[x] : 0) || WIDE_KIND;
}

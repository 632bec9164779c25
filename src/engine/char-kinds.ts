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
/** The bit of every character outside printable ASCII (never checked character by character). */
export const WIDE_KIND = 1 << ASCII_KINDS.length;
/** Every kind. */
export const ALL_KINDS = (WIDE_KIND << 1) - 1;

/** The kind bit of `c` (one code point; a quote or backslash counts as other, a control character as wide). */
export function kindOf(c: string): number {
  const x = c.codePointAt(0)!;
  if (x >= 97 && x <= 122) return 1;
  if (x >= 65 && x <= 90) return 2;
  if (x >= 48 && x <= 57) return 4;
  if (x === 32) return 8;
  return x > 32 && x < 127 ? 16 : WIDE_KIND;
}

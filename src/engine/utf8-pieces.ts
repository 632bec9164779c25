/**
 * Tokens that are pieces of UTF-8 characters: a byte-level BPE vocabulary (Llama 3, Qwen, DeepSeek,
 * Kimi, GLM) spells a rare character with two or three tokens of its bytes, and a SentencePiece
 * vocabulary with byte fallback spells every character it lacks as `<0xHH>` tokens. An output
 * grammar steps characters (grammar.ts), so the token trie (token-trie.ts) splits such a token into
 * the bytes that finish a character begun by earlier tokens (`head`), whole characters (`text`) and
 * the bytes that begin one a later token finishes (`lead`).
 */

/** A token's bytes split at character boundaries; `head` and `lead` each hold at most three bytes. */
export interface Utf8Piece {
  /** Continuation bytes that finish a character an earlier token began. */
  readonly head: readonly number[];
  /** Whole characters. */
  readonly text: string;
  /** The first bytes of a character a later token finishes. */
  readonly lead: readonly number[];
}

const isContinuation = (b: number) => (b & 0xc0) === 0x80;

/** Bytes a character starting with lead byte `b` takes (0: `b` starts none). */
export function utf8Length(b: number): number {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) return 2;
  if (b >= 0xe0 && b <= 0xef) return 3;
  if (b >= 0xf0 && b <= 0xf4) return 4;
  return 0;
}

/** The continuation bytes allowed second after lead byte `b` (UTF-8 bars overlong forms, surrogates and code points past U+10FFFF). */
function secondByteRange(b: number): [number, number] {
  switch (b) {
    case 0xe0: return [0xa0, 0xbf];
    case 0xed: return [0x80, 0x9f];
    case 0xf0: return [0x90, 0xbf];
    case 0xf4: return [0x80, 0x8f];
    default: return [0x80, 0xbf];
  }
}

/** Whether `bytes` begins some character: a lead byte and continuation bytes it allows, fewer than it needs. */
export function isCharPrefix(bytes: readonly number[]): boolean {
  const n = utf8Length(bytes[0] ?? 0);
  if (n < 2 || bytes.length >= n) return false;
  if (bytes.length > 1) {
    const [lo, hi] = secondByteRange(bytes[0]);
    if (bytes[1] < lo || bytes[1] > hi) return false;
  }
  return bytes.slice(2).every(isContinuation);
}

/** The code point of whole-character bytes `bytes` (one character, well formed), or null. */
export function decodeChar(bytes: readonly number[]): number | null {
  const n = utf8Length(bytes[0] ?? 0);
  if (n === 0 || bytes.length !== n) return null;
  if (n === 1) return bytes[0];
  if (!isCharPrefix(bytes.slice(0, n - 1)) || !isContinuation(bytes[n - 1])) return null;
  let cp = bytes[0] & (0xff >> (n + 1));
  for (let i = 1; i < n; i++) cp = (cp << 6) | (bytes[i] & 0x3f);
  return cp;
}

/** The first and last code points of the characters that begin with `prefix` (a {@link isCharPrefix}). */
export function completionRange(prefix: readonly number[]): [number, number] {
  const n = utf8Length(prefix[0]);
  const [lo2, hi2] = secondByteRange(prefix[0]);
  const fill = (second: number, rest: number) => {
    const bytes = [...prefix];
    while (bytes.length < n) bytes.push(bytes.length === 1 ? second : rest);
    return decodeChar(bytes)!;
  };
  return [fill(lo2, 0x80), fill(hi2, 0xbf)];
}

/**
 * `bytes` split into head, whole characters and lead, or null when they are no such run (a byte that
 * starts no character, a character cut short inside them, more than three bytes of head).
 */
export function splitPiece(bytes: readonly number[]): Utf8Piece | null {
  let i = 0;
  while (i < bytes.length && isContinuation(bytes[i])) i++;
  if (i > 3) return null;
  const head = bytes.slice(0, i);
  let text = "";
  while (i < bytes.length) {
    const n = utf8Length(bytes[i]);
    if (n === 0) return null;
    if (i + n > bytes.length) {
      const lead = bytes.slice(i);
      return isCharPrefix(lead) ? { head, text, lead } : null;
    }
    const cp = decodeChar(bytes.slice(i, i + n));
    if (cp === null) return null;
    text += String.fromCodePoint(cp);
    i += n;
  }
  return { head, text, lead: [] };
}

/** The UTF-8 bytes of one character. */
export function charBytes(c: string): number[] {
  return Array.from(new TextEncoder().encode(c));
}

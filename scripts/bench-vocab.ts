/** Shared by the grammar benchmarks: a synthetic 150k-token vocabulary, its tokenizer, medians. */

/** A synthetic `n`-token vocabulary: the 256 bytes, JSON punctuation, numbers and words (seeded). */
export function synthetic(n: number): string[] {
  let s = 12345;
  const rand = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const letters = "etaoinshrdlcumwfgypbvkjxqz";
  const punct = ['{"', '":', '",', '"}', "},", "],", '["', ' "', ": ", ", ", "\n  ", "\n", "  ", "{", "}", "[", "]", '"', ":", ","];
  const out = new Set<string>();
  for (let b = 0; b < 256; b++) out.add(b < 128 ? String.fromCharCode(b) : "\uFFFD");
  for (const p of punct) out.add(p);
  while (out.size < n) {
    const r = rand();
    if (r < 0.05) out.add(String(Math.floor(rand() * 1000)));
    else {
      const len = 1 + Math.floor(rand() * 8);
      let w = rand() < 0.5 ? " " : "";
      for (let i = 0; i < len; i++) w += letters[Math.floor(rand() ** 2 * letters.length)];
      out.add(rand() < 0.1 ? w[0].toUpperCase() + w.slice(1) : w);
    }
  }
  return [...out];
}

/** Greedy longest-match tokenization of `text` over `texts`. */
export function tokenize(text: string, texts: readonly string[]): number[] {
  return longestMatch(text, new Map(texts.map((t, id) => [t, id])));
}

/**
 * Ids of the longest keys that spell `all` in turn (at most 32 units each: long enough for the
 * tool-call tags, Kimi K2's being 28 characters); the first unit of what is left when none is longer.
 */
function longestMatch(all: string, byKey: ReadonlyMap<string, number>): number[] {
  const ids: number[] = [];
  for (let i = 0; i < all.length;) {
    let len = Math.min(32, all.length - i);
    while (len > 1 && !byKey.has(all.slice(i, i + len))) len--;
    ids.push(byKey.get(all.slice(i, i + len))!);
    i += len;
  }
  return ids;
}

/** Median of `xs`. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Mean of `xs`. */
export function mean(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * `synthetic(n)` made byte-level like Llama 3's or Qwen's vocabulary: its 128 bytes past ASCII as
 * byte tokens, and (seeded) 3000 whole CJK characters, 1500 tokens of a CJK character's first two
 * bytes and 1500 of its last byte then a few letters. Texts as they stream (U+FFFD for a piece) and
 * each token's bytes.
 */
export function syntheticPieces(n: number): { texts: string[]; bytes: Uint8Array[] } {
  let s = 777;
  const rand = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const cjk = () => String.fromCodePoint(0x4e00 + Math.floor(rand() * 0x5000));
  const encode = (t: string) => new TextEncoder().encode(t);
  const base = synthetic(n - 6000).filter((t) => t !== "\uFFFD");
  const bytes: Uint8Array[] = base.map(encode);
  for (let b = 128; b < 256; b++) bytes.push(Uint8Array.of(b));
  const whole = new Set<string>();
  while (whole.size < 3000) whole.add(cjk());
  for (const c of whole) bytes.push(encode(c));
  for (let i = 0; i < 1500; i++) bytes.push(encode(cjk()).slice(0, 2));
  for (let i = 0; i < 1500; i++) bytes.push(Uint8Array.from([...encode(cjk()).slice(2), ...encode("abc".slice(0, Math.floor(rand() * 3)))]));
  const texts = bytes.map((b) => new TextDecoder().decode(b));
  return { texts, bytes };
}

/** Greedy longest-match tokenization of `text`'s UTF-8 bytes over tokens' `bytes`. */
export function tokenizeBytes(text: string, bytes: readonly Uint8Array[]): number[] {
  // Bytes as the characters U+0000–U+00FF, so that byte strings compare as strings.
  const key = (b: Uint8Array) => String.fromCharCode(...b);
  const byKey = new Map<string, number>();
  bytes.forEach((b, id) => byKey.has(key(b)) || byKey.set(key(b), id));
  return longestMatch(key(new TextEncoder().encode(text)), byKey);
}

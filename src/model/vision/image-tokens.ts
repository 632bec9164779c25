/**
 * An image's identity in a prompt. Its positions take the vision tower's embeddings, so their token
 * ids are free: they are drawn from a digest of the image's pixels, so that everything that compares
 * prompts by their tokens (prefix caching, the global block index, session routing, KV hand-offs)
 * tells two images apart and finds the same image again, with nothing image-specific in it.
 */
import { createHash } from "node:crypto";

/** A hex SHA-256 digest of preprocessed pixels: the same image, the same key. */
export function imageKey(pixels: Float32Array): string {
  return createHash("sha256").update(new Uint8Array(pixels.buffer, pixels.byteOffset, pixels.byteLength)).digest("hex");
}

/** 32-bit mix (murmur3's finaliser). */
function mix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * The `length` token ids an image with `key` (a hex digest, at least 16 digits) takes in a prompt,
 * each below `vocabSize`: a stream seeded by the digest's first 128 bits, so two images' spans
 * coincide only if their digests' first 128 bits do.
 */
export function imageTokenIds(key: string, length: number, vocabSize: number): number[] {
  if (!/^[0-9a-f]{16,}$/.test(key)) throw new RangeError(`An image key should be a hex digest of 16 digits or more, got ${JSON.stringify(key)}`);
  const words = [0, 8, 16, 24].map((at) => parseInt(key.slice(at, at + 8).padEnd(8, "0"), 16) >>> 0);
  const ids = new Array<number>(length);
  for (let i = 0; i < length; i++) {
    // Each id hashes all four words with the position, so a span is a function of the whole seed.
    let h = mix(i + 0x9e3779b9);
    for (const w of words) h = mix(h ^ w) + 0x27d4eb2f;
    ids[i] = (h >>> 0) % vocabSize;
  }
  return ids;
}

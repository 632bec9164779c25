/**
 * Chained block hashing: hash(parent hash, the block's token ids). Not cryptographic; two 32-bit
 * murmur-style lanes give a 53-bit value, so accidental collisions are rare, and the prefix index
 * still compares tokens on every hit.
 */
import type { BlockHash } from "./types.ts";

/** Hash function for one block given its parent's hash (null for the first block). Injectable for tests. */
export type BlockHasher = (parent: BlockHash | null, tokens: ArrayLike<number>) => BlockHash;

const TWO_POW_32 = 4294967296;
const HI_MASK = 0x1fffff; // 21 bits: 21 + 32 = 53, exact in a double

function mix(h: number, k: number): number {
  k = Math.imul(k, 0xcc9e2d51);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, 0x1b873593);
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

function finalize(h: number, len: number): number {
  h ^= len;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Default block hasher (deterministic across runtimes and runs). */
export const hashBlock: BlockHasher = (parent, tokens) => {
  const pLo = parent === null ? 0x2545f491 : parent % TWO_POW_32;
  const pHi = parent === null ? 0x5bd1e995 : Math.floor(parent / TWO_POW_32);
  let a = mix(0x9747b28c, pLo);
  a = mix(a, pHi);
  let b = mix(0x01000193, pHi ^ 0x5f356495);
  b = mix(b, pLo);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i] | 0;
    a = mix(a, t);
    b = mix(b, t ^ 0x27d4eb2f);
  }
  const lo = finalize(a, tokens.length);
  const hi = finalize(b, tokens.length + 1) & HI_MASK;
  return hi * TWO_POW_32 + lo;
};

/**
 * Hashes of every full block of a token sequence, in chain order. A trailing partial block is not
 * hashed (only full blocks are cacheable).
 */
export function chainHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  hasher: BlockHasher = hashBlock,
  parent: BlockHash | null = null,
): BlockHash[] {
  const out: BlockHash[] = [];
  const full = Math.floor(tokens.length / blockSize);
  const view = Array.prototype.slice;
  for (let b = 0; b < full; b++) {
    const block = view.call(tokens, b * blockSize, (b + 1) * blockSize) as number[];
    parent = hasher(parent, block);
    out.push(parent);
  }
  return out;
}

/**
 * The root a cache namespace's block chains start from: a hash of `name` (a LoRA adapter's
 * fingerprint, a request's cache salt) chained after `parent` (an enclosing namespace, or null).
 * A prefix's blocks hash differently under every root, so prompts of different namespaces share no
 * KV; within a namespace the prefix index still compares tokens and parent links on every hit.
 */
export function namespaceRoot(name: string, parent: BlockHash | null = null): BlockHash {
  const codes = Array.from(name, (c) => c.codePointAt(0)!);
  // A leading marker keeps a namespace's root from being the hash of a real one-block prompt.
  return hashBlock(parent, [-0x4e53, codes.length, ...codes]);
}

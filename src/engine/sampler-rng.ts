/**
 * A small seeded generator for the `uniform` of each SamplingRow, drawn on the CPU so a seed
 * reproduces the same tokens on every backend. One stream per sequence keeps a sequence's
 * samples independent of what else shares its batch.
 */

/** Deterministic uniform numbers in [0, 1) from a seed. */
export interface UniformSource {
  next(): number;
  /**
   * Takes back the last `count` draws: the next ones repeat them. A speculative step draws one per
   * draft position and returns those past the first rejected one, so a seed gives the same tokens
   * with and without speculation.
   */
  rewind(count: number): void;
}

/** Mulberry32-style mixing of a 32-bit state: tiny, fast, and good enough for sampling. */
function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d);
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b);
  return (x ^ (x >>> 16)) >>> 0;
}

/**
 * A seeded uniform source: counter-based (SplitMix32 over a Weyl sequence), so each stream's
 * numbers depend only on (seed, index). Draws 53-bit doubles from two 32-bit outputs.
 */
export function seededUniforms(seed: number, stream = 0): UniformSource {
  if (!Number.isInteger(seed)) throw new RangeError(`The seed must be an integer, got ${seed}`);
  // The constant keeps seed 0 away from mix32's fixed point at 0.
  const low = mix32((seed | 0) ^ 0x6a09e667);
  const high = mix32(low ^ (Math.floor(seed / 2 ** 32) | 0));
  const base = mix32(high ^ mix32((stream | 0) ^ 0x3c6ef372));
  let counter = 0;
  return {
    next(): number {
      const hi = mix32((base + Math.imul(counter++, 0x9e3779b9)) | 0) >>> 5; // 27 bits
      const lo = mix32((base + Math.imul(counter++, 0x9e3779b9)) | 0) >>> 6; // 26 bits
      return (hi * 67108864 + lo) / 9007199254740992;
    },
    rewind(count: number): void {
      if (!Number.isInteger(count) || count < 0 || 2 * count > counter) throw new RangeError(`Cannot rewind ${count} draws of ${counter / 2}`);
      counter -= 2 * count;
    },
  };
}

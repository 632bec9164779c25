/**
 * A small seeded generator (mulberry32). Pure: the state lives in the returned object, so two
 * generators with the same seed give the same stream on Deno and Node alike.
 */
import type { Rng } from "./types.ts";

/** Seeded random source with a few distributions the planner and simulator need. */
export class SeededRng implements Rng {
  private state: number;

  /** Starts a stream from an integer seed. */
  constructor(seed: number) {
    this.state = (Math.floor(seed) ^ 0x9e3779b9) >>> 0;
  }

  /** Next float in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [lo, hi] inclusive. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** Exponential sample with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.next());
  }

  /** Log-normal sample with the given median and sigma of the underlying normal. */
  logNormal(median: number, sigma: number): number {
    return median * Math.exp(sigma * this.normal());
  }

  /** Standard normal sample (Box–Muller). */
  normal(): number {
    const u = 1 - this.next();
    const v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /** A child stream, so independent parts of a model do not perturb each other's draws. */
  fork(salt: number): SeededRng {
    return new SeededRng(Math.floor(this.next() * 4294967296) ^ Math.imul(salt, 0x85ebca6b));
  }
}

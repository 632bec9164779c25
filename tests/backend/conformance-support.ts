/**
 * Shared pieces of the backend conformance suite: a seeded generator, per-op tolerances, the case
 * shape, output comparison, and poisoning of a backend's recycled buffers.
 */
import type { Backend, KvDType } from "../../src/backend/types.ts";

/** Seeded generator (mulberry32): the same seed gives the same inputs on every backend. */
export class Rng {
  #s: number;
  constructor(seed: number) {
    this.#s = seed >>> 0;
  }
  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Uniform in [lo, hi). */
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }
  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  /** n values uniform in [lo, hi). */
  f32(n: number, lo = -1, hi = 1): Float32Array {
    return Float32Array.from({ length: n }, () => this.uniform(lo, hi));
  }
  /** n integers in [0, max). */
  i32(n: number, max: number): Int32Array {
    return Int32Array.from({ length: n }, () => this.int(max));
  }
  /** A random permutation of 0..n-1. */
  perm(n: number): number[] {
    const a = Array.from({ length: n }, (_, i) => i);
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
}

/** How close a backend's output must be to the reference's: |x - ref| <= atol + rtol·|ref|. */
export interface Tolerance {
  atol: number;
  rtol: number;
}

/** Bit-exact agreement (integer outputs, pure data movement, exactly rounded f32 arithmetic). */
export const EXACT: Tolerance = { atol: 0, rtol: 0 };

/** One output of a case. */
export type Output = Float32Array | Int32Array;

/** One conformance case: builds inputs from the generator, runs ops, downloads outputs. */
export interface Case {
  /** The op under test, e.g. "matmul". */
  op: string;
  /** What distinguishes this case, e.g. "q8_0 n=37 k=96 m=45 +bias". */
  name: string;
  tolerance: Tolerance;
  /**
   * The attention head dimension the case needs: a backend whose `info.maxHeadDim` is smaller skips
   * it (such a backend refuses those models when their KV cache is allocated).
   */
  headDim?: number;
  /** The KV cache dtype the case needs: a backend whose `info.kvDtypes` lacks it skips it. */
  kvDtype?: KvDType;
  /** An optional Backend op the case runs (a fused op): a backend without it skips the case. */
  optionalOp?: "matmulAdd" | "matmulGlu" | "matmulQkv" | "matmulExpertsGlu" | "rotateAndWriteKv" | "penalizeSampled" | "sigmoidMul" | "reluSquared" | "layerNorm" | "gelu" | "causalConv1d" | "shortConv" | "gatedDeltaNet" | "ssmScan";
  run(b: Backend, rng: Rng): Promise<Output[]>;
}

/** Returns a description of the first element outside tolerance, or undefined when all agree. */
export function compareOutputs(got: readonly Output[], want: readonly Output[], tol: Tolerance): string | undefined {
  if (got.length !== want.length) return `${got.length} outputs instead of ${want.length}`;
  for (let o = 0; o < want.length; o++) {
    const g = got[o];
    const w = want[o];
    if (g.length !== w.length) return `output ${o} has ${g.length} elements instead of ${w.length}`;
    if (g.constructor !== w.constructor) return `output ${o} is ${g.constructor.name} instead of ${w.constructor.name}`;
    for (let i = 0; i < w.length; i++) {
      const ok = tol === EXACT ? Object.is(g[i], w[i]) || g[i] === w[i] : Math.abs(g[i] - w[i]) <= tol.atol + tol.rtol * Math.abs(w[i]);
      if (!ok) return `output ${o}[${i}] = ${g[i]}, reference ${w[i]} (atol ${tol.atol}, rtol ${tol.rtol})`;
    }
  }
  return undefined;
}

/** A backend that can fill its recycled buffers with NaN (WebGPU does; others may). */
interface Poisonable {
  poisonFreeBuffers(): void;
}

/** Poisons the backend's recycled buffers when it supports that. */
export function poisonRecycled(b: Backend): void {
  const p = b as Backend & Partial<Poisonable>;
  if (typeof p.poisonFreeBuffers === "function") p.poisonFreeBuffers();
}

/** A stable 32-bit seed from a string and a base seed. */
export function seedFor(text: string, base: number): number {
  let h = base ^ 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

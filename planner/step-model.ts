/**
 * A step-time model learned online from measured steps, no offline profile: a roofline in the
 * quantities a scheduler controls,
 *
 *   t = o + max(c·tokens + a·attn,  w + e·(1 − exp(−tokens/τ)) + k·kvRead) + m·[step mixes prefill and decode]
 *
 * where tokens = prompt tokens + decoding sequences (the matmul work), attn = attention pairs
 * (prefill pairs + decode context: the attention work), kvRead = decode context + prompt tokens
 * (the KV traffic; w is the weight traffic, and the e-term the weight traffic that grows with the
 * batch until it saturates, as an MoE batch touches more experts until it touches them all: with k of
 * E experts per token the touched share is 1 − (1 − k/E)^tokens, so τ ≈ E/k; τ is picked from a grid
 * by least squares, e ≈ 0 for a dense model). The compute side prices chunked prefill with its
 * context, the bandwidth side prices decode with its context — so the planner sees what packing
 * decodes onto fewer workers costs — and `m` is the extra a mixed step pays over the roofline of its
 * work (measured from mixed steps against pure ones of either kind), which a prefill or decode worker
 * would not pay. The fixed overhead `o` is shared by both sides: that is what separates `m` from it
 * when a pool runs only mixed steps (mixed steps with small chunks sit on the bandwidth side next to
 * decode-only ones). Fitted by alternating assignment: each sample to the side that binds, then one
 * least-squares fit of both sides, a few rounds.
 */
import type { StepSample } from "./types.ts";

/** Fitted coefficients (seconds, and seconds per unit). */
export interface StepCoefficients {
  /** Batch scale (tokens) of the saturating weight-traffic term. */
  tau: number;
  o: number;
  c: number;
  a: number;
  w: number;
  e: number;
  k: number;
  m: number;
}

/** A step shape to predict. */
export type StepShape = Omit<StepSample, "seconds" | "count">;

const CAPACITY = 4096;
/** Chunk size from which a step is first assumed compute-bound (refined by the fit). */
const INITIAL_COMPUTE_TOKENS = 2048;
/** Candidate saturation scales τ of the weight-traffic term (MoE: about experts ÷ experts per token). */
const TAUS = [8, 16, 32, 64, 128, 256];
/** Fits between searches of the τ grid (in between, only the last best τ is refitted). */
const TAU_SEARCH_EVERY = 30;

/** Online roofline step model over a ring of recent samples. */
export class OnlineStepModel {
  private readonly ring: StepSample[] = [];
  private next = 0;
  private fitted: StepCoefficients | null = null;
  private fits = 0;

  /** Adds measured samples (the oldest fall out past the ring's capacity). */
  add(samples: readonly StepSample[]): void {
    for (const s of samples) {
      if (!(s.seconds > 0) || s.prefillTokens + s.decodeSeqs <= 0) continue;
      if (this.ring.length < CAPACITY) this.ring.push(s);
      else this.ring[this.next] = s;
      this.next = (this.next + 1) % CAPACITY;
    }
  }

  /** Samples held. */
  get size(): number {
    return this.ring.length;
  }

  /** Current coefficients (null until a fit succeeded). */
  coefficients(): StepCoefficients | null {
    return this.fitted;
  }

  /**
   * Refits on the samples held. Needs decode-only steps (the bandwidth side) and steps carrying a
   * prefill chunk; without both the model keeps its last fit. `m` is identified only when pure and
   * mixed steps of the same side are both present; otherwise it stays 0 (no penalty assumed).
   */
  fit(rounds = 8): StepCoefficients | null {
    const S = this.ring;
    let dec = 0;
    for (const x of S) if (x.prefillTokens === 0) dec++;
    if (dec < 8 || S.length - dec < 8) return this.fitted;
    const taus = this.fitted === null || this.fits++ % TAU_SEARCH_EVERY === 0 ? TAUS : [this.fitted.tau];
    let best: { coef: StepCoefficients; sse: number } | null = null;
    for (const tau of taus) {
      const r = fitWithTau(S, tau, rounds);
      if (r !== null && (best === null || r.sse < best.sse)) best = r;
    }
    if (best !== null) this.fitted = best.coef;
    return this.fitted;
  }

  /** Predicted seconds of one step of `shape` (NaN before the first fit). */
  predict(shape: StepShape): number {
    const c = this.fitted;
    if (c === null) return NaN;
    const [tc, tb] = sides(c, shape);
    // A fit can put small steps slightly below zero (a negative shared overhead): a step takes time.
    return Math.max(1e-4, Math.max(tc, tb) + (shape.prefillTokens > 0 && shape.decodeSeqs > 0 ? c.m : 0));
  }
}

/**
 * The alternating fit for one τ. Decode-only steps stay on the bandwidth side (decode is
 * memory-bound at any batch an engine runs); prefill-carrying ones start on the compute side if their
 * chunk is large (a first guess only) and move to whichever side binds. Returns the squared error.
 */
function fitWithTau(S: readonly StepSample[], tau: number, rounds: number): { coef: StepCoefficients; sse: number } | null {
  const side = new Uint8Array(S.length); // 1 = compute side
  S.forEach((s, i) => (side[i] = s.prefillTokens >= INITIAL_COMPUTE_TOKENS ? 1 : 0));
  let coef: StepCoefficients | null = null;
  for (let r = 0; r < rounds; r++) {
    const next = solve(S, side, tau);
    if (next === null) break;
    coef = next;
    let changed = 0;
    for (let i = 0; i < S.length; i++) {
      if (S[i].prefillTokens === 0) continue;
      const [tc, tb] = sides(coef, S[i]);
      const s = tc >= tb ? 1 : 0;
      if (s !== side[i]) { side[i] = s; changed++; }
    }
    if (changed === 0) break;
  }
  if (coef === null) return null;
  let sse = 0;
  for (const x of S) {
    const [tc, tb] = sides(coef, x);
    const m = x.prefillTokens > 0 && x.decodeSeqs > 0 ? coef.m : 0;
    sse += (Math.max(tc, tb) + m - x.seconds) ** 2;
  }
  return { coef, sse };
}

/** The saturating batch feature of the weight-traffic term. */
const saturation = (tokens: number, tau: number) => 1 - Math.exp(-tokens / tau);

/** The two roofline sides (without the mixed-step term). */
function sides(c: StepCoefficients, s: StepShape): [number, number] {
  const tokens = s.prefillTokens + s.decodeSeqs;
  const attn = s.prefillAttnPairs + s.decodeAttnTokens;
  return [c.o + c.c * tokens + c.a * attn, c.o + c.w + c.e * saturation(tokens, c.tau) + c.k * (s.decodeAttnTokens + s.prefillTokens)];
}

/**
 * Least squares for both sides at once, `o` and `m` shared: unknowns [o, c, a, w, e, k, m]. Columns are
 * scaled to unit size before solving (tokens and pairs differ by orders of magnitude).
 */
function solve(S: readonly StepSample[], side: Uint8Array, tau: number): StepCoefficients | null {
  const n = 7;
  const scale = new Float64Array(n).fill(1e-12);
  const rows: Float64Array[] = [];
  for (let i = 0; i < S.length; i++) {
    const s = S[i];
    const mixed = s.prefillTokens > 0 && s.decodeSeqs > 0 ? 1 : 0;
    const x = side[i] === 1
      ? [1, s.prefillTokens + s.decodeSeqs, s.prefillAttnPairs + s.decodeAttnTokens, 0, 0, 0, mixed]
      : [1, 0, 0, 1, saturation(s.prefillTokens + s.decodeSeqs, tau), s.decodeAttnTokens + s.prefillTokens, mixed];
    const row = Float64Array.from(x);
    for (let j = 0; j < n; j++) scale[j] = Math.max(scale[j], Math.abs(row[j]));
    rows.push(row);
  }
  const A = Array.from({ length: n }, () => new Float64Array(n));
  const b = new Float64Array(n);
  for (let i = 0; i < S.length; i++) {
    const row = rows[i];
    for (let j = 0; j < n; j++) row[j] /= scale[j];
    for (let j = 0; j < n; j++) {
      b[j] += row[j] * S[i].seconds;
      for (let l = 0; l < n; l++) A[j][l] += row[j] * row[l];
    }
  }
  // A small ridge keeps unidentified columns (e.g. no mixed steps at all) at 0 instead of singular.
  for (let j = 0; j < n; j++) A[j][j] += 1e-9 * S.length + (j === 6 ? 1e-6 * S.length : 0);
  let x = gauss(A, b);
  if (x === null) return null;
  if (x[3] < 0) {
    // Weight traffic cannot be negative: fit again with w = 0 (its row and column pinned).
    A[3].fill(0);
    for (let j = 0; j < n; j++) A[j][3] = 0;
    A[3][3] = 1;
    b[3] = 0;
    x = gauss(A, b);
    if (x === null) return null;
  }
  for (let j = 0; j < n; j++) x[j] /= scale[j];
  return { tau, o: x[0], c: Math.max(0, x[1]), a: Math.max(0, x[2]), w: x[3], e: Math.max(0, x[4]), k: Math.max(0, x[5]), m: Math.max(0, x[6]) };
}

/** Solves A·x = b by Gaussian elimination with partial pivoting; null when singular. */
function gauss(A: Float64Array[], b: Float64Array): number[] | null {
  const n = b.length;
  const M = A.map((r, i) => [...r, b[i]]);
  for (let col = 0; col < n; col++) {
    let piv = col;
    for (let r = col + 1; r < n; r++) if (Math.abs(M[r][col]) > Math.abs(M[piv][col])) piv = r;
    if (Math.abs(M[piv][col]) < 1e-15) return null;
    [M[col], M[piv]] = [M[piv], M[col]];
    for (let r = 0; r < n; r++) {
      if (r === col) continue;
      const f = M[r][col] / M[col][col];
      for (let c = col; c <= n; c++) M[r][c] -= f * M[col][c];
    }
  }
  return M.map((r, i) => r[n] / r[i]);
}

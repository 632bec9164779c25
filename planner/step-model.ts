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
import type { StepSample, StepShape } from "./types.ts";
import { isValidStep } from "./snapshot-guard.ts";

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

const CAPACITY = 2048;
/** Chunk size from which a step is first assumed compute-bound (refined by the fit). */
const INITIAL_COMPUTE_TOKENS = 2048;
/** Candidate saturation scales τ of the weight-traffic term (MoE: about experts ÷ experts per token). */
const TAUS = [8, 16, 32, 64, 128, 256];
/** Fits between searches of the τ grid (in between, only the last best τ is refitted). */
const TAU_SEARCH_EVERY = 10;

/** Online roofline step model over a ring of recent samples. */
export class OnlineStepModel {
  private readonly ring: StepSample[] = [];
  private next = 0;
  private fitted: StepCoefficients | null = null;
  private fits = 0;
  // predict()'s last two saturation features (token count → value at τ `memoTau`), the least recently
  // used replaced first: the planner prices thousands of shapes a tick, most with one of a few token
  // counts (a mixed step always carries the chunk budget), and exp is the costliest part of a prediction.
  private readonly memoTokens = [NaN, NaN];
  private readonly memoSat = [0, 0];
  private memoTau = NaN;
  private memoNext = 0;

  /**
   * Adds measured samples (the oldest fall out past the ring's capacity). Samples of no time, no work,
   * or a NaN, infinite or negative field are skipped: one infinite step held in the ring would make
   * every fit implausible until 2048 newer steps pushed it out.
   */
  add(samples: readonly StepSample[]): void {
    for (const s of samples) {
      if (!(s.seconds > 0) || s.prefillTokens + s.decodeSeqs <= 0 || !isValidStep(s)) continue;
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
   * mixed steps of the same side are both present; otherwise it stays 0 (no penalty assumed). A fit
   * with unphysical constant terms ({@link plausible}) is refused, and the last fit kept.
   */
  fit(rounds = 6): StepCoefficients | null {
    const S = this.ring;
    let dec = 0;
    for (const x of S) if (x.prefillTokens === 0) dec++;
    if (dec < 8 || S.length - dec < 8) return this.fitted;
    let longest = 0;
    for (const x of S) longest = Math.max(longest, x.seconds);
    const search = (taus: readonly number[]) => {
      let best: { coef: StepCoefficients; sse: number } | null = null;
      for (const tau of taus) {
        const r = fitWithTau(S, tau, rounds);
        if (r !== null && plausible(r.coef, longest) && (best === null || r.sse < best.sse)) best = r;
      }
      return best;
    };
    const full = this.fitted === null || this.fits++ % TAU_SEARCH_EVERY === 0;
    // A refit at the last τ that comes out implausible gets the rest of the grid before it is given up on.
    const last = this.fitted?.tau;
    const best = full ? search(TAUS) : search([last!]) ?? search(TAUS.filter((t) => t !== last));
    if (best !== null) this.fitted = best.coef;
    return this.fitted;
  }

  /** Predicted seconds of one step of `shape` (NaN before the first fit). */
  predict(shape: StepShape): number {
    const c = this.fitted;
    if (c === null) return NaN;
    // A fit can put small steps slightly below zero (a negative shared overhead): a step takes time.
    const t = Math.max(computeSide(c, shape), bandwidthAt(c, shape, this.saturationAt(shape.prefillTokens + shape.decodeSeqs, c.tau)));
    return Math.max(1e-4, t + (shape.prefillTokens > 0 && shape.decodeSeqs > 0 ? c.m : 0));
  }

  /** {@link saturation}, remembered for the last two token counts. */
  private saturationAt(tokens: number, tau: number): number {
    if (tau !== this.memoTau) {
      this.memoTokens[0] = this.memoTokens[1] = NaN;
      this.memoTau = tau;
    }
    if (tokens === this.memoTokens[0]) { this.memoNext = 1; return this.memoSat[0]; }
    if (tokens === this.memoTokens[1]) { this.memoNext = 0; return this.memoSat[1]; }
    const v = saturation(tokens, tau);
    const i = this.memoNext;
    this.memoTokens[i] = tokens;
    this.memoSat[i] = v;
    this.memoNext = 1 - i;
    return v;
  }
}

/**
 * The alternating fit for one τ. Decode-only steps stay on the bandwidth side (decode is
 * memory-bound at any batch an engine runs); prefill-carrying ones start on the compute side if their
 * chunk is large (a first guess only) and move to whichever side binds. Returns the squared error.
 */
function fitWithTau(S: readonly StepSample[], tau: number, rounds: number): { coef: StepCoefficients; sse: number } | null {
  const side = new Uint8Array(S.length); // 1 = compute side
  for (let i = 0; i < S.length; i++) side[i] = S[i].prefillTokens >= INITIAL_COMPUTE_TOKENS ? 1 : 0;
  const scale = columnScales(S);
  // Each sample's saturation feature, computed once: every round's solve and side test needs it (exp is
  // the costliest part of a fit).
  const sat = new Float64Array(S.length);
  for (let i = 0; i < S.length; i++) sat[i] = saturation(S[i].prefillTokens + S[i].decodeSeqs, tau);
  let coef: StepCoefficients | null = null;
  for (let r = 0; r < rounds; r++) {
    const next = solve(S, side, tau, scale, sat);
    if (next === null) break;
    coef = next;
    let changed = 0;
    for (let i = 0; i < S.length; i++) {
      const x = S[i];
      if (x.prefillTokens === 0) continue;
      const s = computeSide(coef, x) >= bandwidthAt(coef, x, sat[i]) ? 1 : 0;
      if (s !== side[i]) { side[i] = s; changed++; }
    }
    if (changed === 0) break;
  }
  if (coef === null) return null;
  let sse = 0;
  for (let i = 0; i < S.length; i++) {
    const x = S[i];
    const m = x.prefillTokens > 0 && x.decodeSeqs > 0 ? coef.m : 0;
    sse += (Math.max(computeSide(coef, x), bandwidthAt(coef, x, sat[i])) + m - x.seconds) ** 2;
  }
  return { coef, sse };
}

/**
 * Whether a fit's constant terms are physical: the shared overhead, the weight traffic, its saturating
 * part and the mixed-step extra each within the longest step measured. When every sampled step is far
 * past the saturation scale (large decode batches), the overhead, weight and saturation columns are
 * nearly collinear and least squares can cancel a large negative overhead against a large saturation
 * term (seen: o = −30.9 s, e = +30.9 s on steps of 0.02–0.3 s, in a simulated mixed-shift run at load
 * 3). Such a fit still matches the steps it saw, but it prices shapes it never saw — a prefill-only
 * step at about nothing — and it made the planner separate prefill and decode steps for good (28%
 * of goodput lost there).
 */
function plausible(c: StepCoefficients, longestS: number): boolean {
  return Math.abs(c.o) <= longestS && c.w <= longestS && c.e <= longestS && c.m <= longestS;
}

/** The saturating batch feature of the weight-traffic term. */
function saturation(tokens: number, tau: number): number {
  return 1 - Math.exp(-tokens / tau);
}

/** The compute side of the roofline (overhead included, mixed-step term not). */
function computeSide(c: StepCoefficients, s: StepShape): number {
  return c.o + c.c * (s.prefillTokens + s.decodeSeqs) + c.a * (s.prefillAttnPairs + s.decodeAttnTokens);
}

/**
 * The bandwidth side of the roofline (overhead included, mixed-step term not), given the shape's
 * saturation feature at `c.tau` (callers compute or remember it: it is what costs).
 */
function bandwidthAt(c: StepCoefficients, s: StepShape, sat: number): number {
  return c.o + c.w + c.e * sat + c.k * (s.decodeAttnTokens + s.prefillTokens);
}

const N = 7; // unknowns [o, c, a, w, e, k, m]

/** Largest value of each column over the samples, so the normal equations are solved at unit scale. */
function columnScales(S: readonly StepSample[]): Float64Array {
  const scale = new Float64Array(N).fill(1);
  let tok = 1e-12, attn = 1e-12, kv = 1e-12;
  for (const s of S) {
    tok = Math.max(tok, s.prefillTokens + s.decodeSeqs);
    attn = Math.max(attn, s.prefillAttnPairs + s.decodeAttnTokens);
    kv = Math.max(kv, s.decodeAttnTokens + s.prefillTokens);
  }
  scale[1] = tok;
  scale[2] = attn;
  scale[5] = kv;
  return scale;
}

/**
 * Least squares for both sides at once, `o` and `m` shared: unknowns [o, c, a, w, e, k, m], columns
 * at unit scale (tokens and pairs differ by orders of magnitude). Allocation-free over the samples:
 * this runs every few planner ticks on thousands of steps. `sat[i]`: sample i's saturation feature at `tau`.
 */
function solve(S: readonly StepSample[], side: Uint8Array, tau: number, scale: Float64Array, sat: Float64Array): StepCoefficients | null {
  const A = Array.from({ length: N }, () => new Float64Array(N));
  const b = new Float64Array(N);
  const x = new Float64Array(N);
  for (let i = 0; i < S.length; i++) {
    const s = S[i];
    const tokens = s.prefillTokens + s.decodeSeqs;
    x.fill(0);
    x[0] = 1;
    if (side[i] === 1) {
      x[1] = tokens / scale[1];
      x[2] = (s.prefillAttnPairs + s.decodeAttnTokens) / scale[2];
    } else {
      x[3] = 1;
      x[4] = sat[i];
      x[5] = (s.decodeAttnTokens + s.prefillTokens) / scale[5];
    }
    x[6] = s.prefillTokens > 0 && s.decodeSeqs > 0 ? 1 : 0;
    for (let j = 0; j < N; j++) {
      const xj = x[j];
      if (xj === 0) continue;
      b[j] += xj * s.seconds;
      const row = A[j];
      for (let l = j; l < N; l++) row[l] += xj * x[l];
    }
  }
  for (let j = 0; j < N; j++) for (let l = 0; l < j; l++) A[j][l] = A[l][j];
  // A small ridge keeps unidentified columns (e.g. no mixed steps at all) at 0 instead of singular.
  for (let j = 0; j < N; j++) A[j][j] += 1e-9 * S.length + (j === 6 ? 1e-6 * S.length : 0);
  let sol = gauss(A, b);
  if (sol === null) return null;
  if (sol[3] < 0) {
    // Weight traffic cannot be negative: fit again with w = 0 (its row and column pinned).
    A[3].fill(0);
    for (let j = 0; j < N; j++) A[j][3] = 0;
    A[3][3] = 1;
    b[3] = 0;
    sol = gauss(A, b);
    if (sol === null) return null;
  }
  for (let j = 0; j < N; j++) sol[j] /= scale[j];
  return { tau, o: sol[0], c: Math.max(0, sol[1]), a: Math.max(0, sol[2]), w: sol[3], e: Math.max(0, sol[4]), k: Math.max(0, sol[5]), m: Math.max(0, sol[6]) };
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

/**
 * The "cost" draft-length schedule of draft-model speculation: each proposal round drafts the length
 * that makes the most tokens per second, from what it measured — how often each sequence's draft
 * tokens are accepted, what a target step costs per token it feeds, and what a draft forward costs —
 * instead of a fixed length (vLLM) or Hugging Face's acceptance-only heuristic, which keeps drafting
 * where drafts cost more than they save and stops short where the draft model is cheap.
 *
 * The model (Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", 2023): a
 * sequence whose draft tokens are each accepted with probability α (given those before were) yields
 * (1 − α^(k+1)) / (1 − α) tokens from a k-token draft, the accepted prefix and the target's own token.
 * A round of B sequences drafting k costs k chained draft forwards and one target step of B(1 + k)
 * rows: time a + b·B(1 + k) + k·d, with a, b fitted online to the target's decode steps and d the
 * measured draft forward. Drafts are bursty (a run of agreement, then a run of disagreement), so α is
 * a recent average per sequence, pulled toward the engine's own average while a sequence is new. A
 * draft also drifts from the target as it goes, so the i-th token is accepted less often than the
 * first: the engine measures the chance at each depth (given the ones before were accepted) and a
 * sequence's α scales that profile, so E(k) = Σ_{i≤k} Π_{j≤i} α_j.
 *
 * Pure: it takes measured seconds; the engine times the steps.
 */

/**
 * Tokens a k-token draft yields on average when its j-th token is accepted with probability
 * `alpha[j - 1]` once those before it were (past the list, its last): the accepted prefix plus the
 * target's own token. One chance α for every depth gives (1 − α^(k+1)) / (1 − α).
 */
export function expectedDraftTokens(alpha: readonly number[], k: number): number {
  let tokens = 1, reach = 1;
  for (let j = 0; j < k; j++) {
    reach *= alpha[Math.min(j, alpha.length - 1)] ?? 0;
    tokens += reach;
  }
  return tokens;
}

/** Acceptance counts decayed toward recent drafts: accepted tokens and tokens tried (accepted plus the first rejected). */
export interface AcceptanceCounts {
  accepted: number;
  tried: number;
}

/** Options of {@link DraftLengthTuner}. */
export interface DraftLengthTunerOptions {
  /** Longest draft (`num_speculative_tokens`). */
  maxTokens: number;
  /** Every this many rounds, one drafts a length next to the best (1 where the best is none), so costs and acceptance stay measured (default 8). */
  exploreEvery?: number;
  /** Weight of older observations kept per new one (default 0.9: about the last ten). */
  decay?: number;
}

/** Draft tokens' weight of the prior in an acceptance estimate. */
const PRIOR_WEIGHT = 2;

/** Seconds a target decode step takes for n rows, fitted as a + b·n by least squares weighted toward recent steps. */
class StepTimeFit {
  private w = 0;
  private n = 0;
  private nn = 0;
  private t = 0;
  private nt = 0;

  constructor(private readonly decay: number) {}

  add(rows: number, seconds: number): void {
    const k = this.decay;
    this.w = this.w * k + 1;
    this.n = this.n * k + rows;
    this.nn = this.nn * k + rows * rows;
    this.t = this.t * k + seconds;
    this.nt = this.nt * k + rows * seconds;
  }

  get measured(): boolean {
    return this.w > 0;
  }

  /** { a, b } with b ≥ 0 (rows never make a step cheaper); b is 0 until the rows have varied. */
  coefficients(): { a: number; b: number } {
    const meanN = this.n / this.w, meanT = this.t / this.w;
    const varN = this.nn / this.w - meanN * meanN;
    // Rows that barely varied leave the slope unknown; a mean step then stands for every length.
    const b = varN > 1e-6 * Math.max(1, meanN * meanN) ? Math.max(0, (this.nt / this.w - meanN * meanT) / varN) : 0;
    return { a: Math.max(0, meanT - b * meanN), b };
  }
}

/** Picks each round's draft length from measured acceptance and step times (see the module comment). */
export class DraftLengthTuner {
  private readonly target: StepTimeFit;
  private readonly decay: number;
  private readonly exploreEvery: number;
  /** Decayed seconds and forwards of the draft model's proposals. */
  private draftSeconds = 0;
  private draftForwards = 0;
  /** The engine's own acceptance: the prior of a sequence with few drafts of its own. */
  private readonly overall: AcceptanceCounts = { accepted: 0, tried: 0 };
  /** The engine's acceptance at each draft depth, given the tokens before were accepted. */
  private readonly depths: AcceptanceCounts[];
  private round = 0;

  constructor(private readonly o: DraftLengthTunerOptions) {
    if (!Number.isInteger(o.maxTokens) || o.maxTokens < 1) throw new RangeError(`Draft length tuner needs maxTokens of 1 or more, got ${o.maxTokens}`);
    this.decay = o.decay ?? 0.9;
    this.exploreEvery = o.exploreEvery ?? 8;
    this.target = new StepTimeFit(this.decay);
    this.depths = Array.from({ length: o.maxTokens }, () => ({ accepted: 0, tried: 0 }));
  }

  /** A target step of decodes only (draft rows included): `rows` rows in `seconds`. */
  observeTarget(rows: number, seconds: number): void {
    if (rows > 0 && seconds >= 0) this.target.add(rows, seconds);
  }

  /** A proposal round of the draft model: `forwards` drafting forwards in `seconds` (catch-up chunks of a long new prompt not counted). */
  observeDraft(forwards: number, seconds: number): void {
    if (forwards <= 0 || seconds < 0) return;
    this.draftSeconds = this.draftSeconds * this.decay + seconds;
    this.draftForwards = this.draftForwards * this.decay + forwards;
  }

  /**
   * A verified draft: `accepted` of `drafted` tokens. Updates the sequence's own counts (returned;
   * start from undefined) and the engine's.
   */
  observeAcceptance(counts: AcceptanceCounts | undefined, drafted: number, accepted: number): AcceptanceCounts {
    const tried = accepted + (accepted < drafted ? 1 : 0);
    this.overall.accepted = this.overall.accepted * this.decay + accepted;
    this.overall.tried = this.overall.tried * this.decay + tried;
    this.depths.forEach((d, j) => {
      d.accepted = d.accepted * this.decay + (j < accepted ? 1 : 0);
      d.tried = d.tried * this.decay + (j < tried ? 1 : 0);
    });
    const c = counts ?? { accepted: 0, tried: 0 };
    return { accepted: c.accepted * this.decay + accepted, tried: c.tried * this.decay + tried };
  }

  /** A sequence's acceptance probability: its own recent drafts, with two tokens' weight of the engine's average. */
  acceptance(counts: AcceptanceCounts | undefined): number {
    return ((counts?.accepted ?? 0) + PRIOR_WEIGHT * this.average()) / ((counts?.tried ?? 0) + PRIOR_WEIGHT);
  }

  /**
   * A sequence of acceptance `alpha` (its average over depths) at each depth: the engine's profile
   * over depths, each depth's chance with two tokens' weight of the depth before it (so a depth not
   * yet reached takes the last one measured), scaled by `alpha` over the engine's average (at most 1).
   */
  depthAcceptance(alpha: number): number[] {
    const average = this.average();
    const scale = average > 0 ? alpha / average : 1;
    let before = average;
    return this.depths.map((d) => {
      before = (d.accepted + PRIOR_WEIGHT * before) / (d.tried + PRIOR_WEIGHT);
      return Math.min(1, before * scale);
    });
  }

  /** The engine's acceptance over all depths (even odds before any draft). */
  private average(): number {
    return this.overall.tried > 0 ? this.overall.accepted / this.overall.tried : 0.5;
  }

  /**
   * The draft length for a round where sequences of these acceptance probabilities decode together:
   * the most expected tokens per second, or the longest until both step costs are measured; every
   * `exploreEvery` rounds a length next to it.
   */
  length(alphas: readonly number[]): number {
    const round = ++this.round;
    const K = this.o.maxTokens;
    if (alphas.length === 0) return 0;
    if (!this.target.measured || this.draftForwards === 0) return K;
    const best = this.bestLength(alphas);
    if (round % this.exploreEvery !== 0) return best;
    if (best === 0) return 1;
    // Alternately shorter and longer, so the step-time fit sees the rows vary both ways.
    const up = (round / this.exploreEvery) % 2 === 1;
    return up ? (best < K ? best + 1 : best - 1) : best - 1;
  }

  /** The length of most expected tokens per second, by the fitted costs (0: no draft). */
  bestLength(alphas: readonly number[]): number {
    const { a, b } = this.target.coefficients();
    const d = this.draftSeconds / this.draftForwards;
    const B = alphas.length;
    const profiles = alphas.map((alpha) => this.depthAcceptance(alpha));
    let best = 0, bestRate = -1;
    for (let k = 0; k <= this.o.maxTokens; k++) {
      let tokens = 0;
      for (const profile of profiles) tokens += expectedDraftTokens(profile, k);
      const seconds = a + b * B * (1 + k) + k * d;
      const rate = seconds > 0 ? tokens / seconds : tokens;
      // Longer only when strictly better: ties keep the cheaper draft.
      if (rate > bestRate * (1 + 1e-9)) [best, bestRate] = [k, rate];
    }
    return best;
  }
}

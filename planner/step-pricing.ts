/**
 * What the online planner prices splits with once its step model has a fit: the model itself, fed
 * with every worker's sampled steps, and the workload facts its predictions need — the mean context a
 * prompt token attends to, the mean context a decoding sequence reads, and how many sequences a
 * worker's KV memory holds. All measured; nothing comes from an offline profile.
 */
import { OnlineStepModel, type StepCoefficients } from "./step-model.ts";
import type { StepSample, WorkerSnapshot } from "./types.ts";
import { isGauge, isValidStep } from "./snapshot-guard.ts";

/**
 * Workers that run separate prefill and decode steps still mix every this many chunks: a probe that
 * keeps the step model measuring what a mixed step costs (the simulator's and the engine's workers).
 */
export const SPLIT_PROBE_EVERY = 16;

/** Ticks over which the held peaks of the contexts decay by e (10 min at a 1 s tick). */
const PEAK_TICKS = 600;

/**
 * Ticks over which the contexts' trend is read for a lookahead (10 s at a 1 s tick; 30 s lost 7–8% of
 * the goodput 10 s gained on simulated computer-use, docs/results/variants/itl-admission.txt N).
 */
const TREND_TICKS = 10;

/** Contexts to price steps at: attended context per prompt token, and context read per decoding sequence. */
export interface StepContexts {
  prefill: number;
  decode: number;
}

/** Planner ticks between refits of the step model (the hardware does not change between ticks; a fit costs about 10 ms). */
const FIT_EVERY_TICKS = 10;

/** Online step pricing for {@link OnlinePlanner}. */
export class StepPricing {
  private readonly model = new OnlineStepModel();
  private ctxPrefill = 0; // mean attended context per prompt token computed (EWMA)
  private ctxDecode = 0; // mean context read per decoding sequence (EWMA)
  private peakPrefill = 0; // the highest recent ctxPrefill and ctxDecode (held, decaying by e over PEAK_TICKS ticks)
  private peakDecode = 0;
  private memSeqs = 0; // decoding sequences a worker's KV memory holds, from measured usage (EWMA; 0 = unknown)
  private chunk = 0; // prompt tokens per prefill-carrying step (EWMA; 0 = none seen)
  private readonly recent = new Float64Array(2 * (TREND_TICKS + 1)); // the last ticks' [ctxPrefill, ctxDecode], a ring
  private ticksLearned = 0;
  private ticksSinceFit = 0;
  /** Fits made so far (a new fit is what step-mixing decisions wait for). */
  fits = 0;

  /** The model's current fit (null before it has one). */
  coefficients(): StepCoefficients | null {
    return this.model.coefficients();
  }

  /** True once steps can be priced. */
  get ready(): boolean {
    return this.model.coefficients() !== null;
  }

  /** Learns from one tick's live workers. */
  learn(live: readonly WorkerSnapshot[]): void {
    // Sequences per worker at full KV memory, from the workers that decode.
    let held = 0, used = 0;
    for (const w of live) if ((w.role === "decode" || w.role === "mixed") && isGauge(w.decodeBatch) && isGauge(w.kvUsage)) { held += w.decodeBatch; used += w.kvUsage; }
    if (used > 0.5 && held > 0) this.memSeqs = this.memSeqs === 0 ? held / used : 0.9 * this.memSeqs + 0.1 * (held / used);
    this.learnSteps(live.map((w) => w.steps));
  }

  /**
   * Learns from one tick's sampled steps, one list per worker (undefined: that worker reports none).
   * Steps with a NaN, infinite or negative field are left out: the contexts' averages keep a NaN for good.
   */
  learnSteps(perWorker: readonly (readonly StepSample[] | undefined)[]): void {
    let pt = 0, pp = 0, ds = 0, da = 0, chunks = 0;
    for (const steps of perWorker) {
      if (steps === undefined) continue;
      this.model.add(steps);
      for (const x of steps) {
        if (!isValidStep(x)) continue;
        const k = x.count ?? 1;
        pt += x.prefillTokens * k; pp += x.prefillAttnPairs * k; ds += x.decodeSeqs * k; da += x.decodeAttnTokens * k;
        if (x.prefillTokens > 0) chunks += k;
      }
    }
    if (chunks > 0) this.chunk = this.chunk === 0 ? pt / chunks : 0.9 * this.chunk + 0.1 * (pt / chunks);
    if (pt > 0) this.ctxPrefill = this.ctxPrefill === 0 ? pp / pt : 0.9 * this.ctxPrefill + 0.1 * (pp / pt);
    if (ds > 0) this.ctxDecode = this.ctxDecode === 0 ? da / ds : 0.9 * this.ctxDecode + 0.1 * (da / ds);
    const k = Math.exp(-1 / PEAK_TICKS);
    this.peakPrefill = Math.max(this.ctxPrefill, this.peakPrefill * k);
    this.peakDecode = Math.max(this.ctxDecode, this.peakDecode * k);
    const slot = this.ticksLearned++ % (TREND_TICKS + 1);
    this.recent[2 * slot] = this.ctxPrefill;
    this.recent[2 * slot + 1] = this.ctxDecode;
    if (!this.ready || ++this.ticksSinceFit >= FIT_EVERY_TICKS) {
      this.model.fit();
      this.ticksSinceFit = 0;
      this.fits++;
    }
  }

  /**
   * The contexts of now, or (`peak`) the highest of the last minutes (held peaks), or higher still
   * where they are rising: today's carried `aheadTicks` ticks along their trend of the last
   * {@link TREND_TICKS} ticks. Agent sessions' contexts grow with every turn, so a pool of young
   * sessions gets dearer for minutes (the lookahead); a falling trend projects nothing (the peaks hold).
   */
  contexts(peak = false, aheadTicks = 0): StepContexts {
    if (!peak) return { prefill: this.ctxPrefill, decode: this.ctxDecode };
    const held = { prefill: this.peakPrefill, decode: this.peakDecode };
    const span = Math.min(this.ticksLearned, TREND_TICKS + 1) - 1;
    if (!(aheadTicks > 0) || span < 1) return held;
    const newest = (this.ticksLearned - 1) % (TREND_TICKS + 1), oldest = (this.ticksLearned - 1 - span) % (TREND_TICKS + 1);
    const ahead = (i: 0 | 1, today: number) => today + aheadTicks * Math.max(0, (this.recent[2 * newest + i] - this.recent[2 * oldest + i]) / span);
    return { prefill: Math.max(held.prefill, ahead(0, this.ctxPrefill)), decode: Math.max(held.decode, ahead(1, this.ctxDecode)) };
  }

  /**
   * Prompt tokens a prefill-carrying step has run lately (a moving average over ticks; 0 before any).
   * Under a backlog chunks fill the step budget; with short prompts (a tool's result, a user's reply)
   * they are the prompts' size, and a mixed step's own cost weighs more against them.
   */
  get chunkTokens(): number {
    return this.chunk;
  }

  /** The decode batch a worker can hold: `limit`, or fewer when its KV memory fits fewer sequences. */
  batchLimit(limit: number): number {
    return this.memSeqs > 0 ? Math.max(1, Math.min(limit, 0.95 * this.memSeqs)) : limit;
  }

  /** Seconds of a prefill-only step of `n` prompt tokens. */
  prefillStep(n: number, c = this.contexts()): number {
    return this.model.predict({ prefillTokens: n, prefillAttnPairs: n * c.prefill, decodeSeqs: 0, decodeAttnTokens: 0 });
  }

  /** Seconds of a mixed step: a chunk filling `budget` tokens beside `b` decoding sequences. */
  chunkStep(b: number, budget: number, c = this.contexts()): number {
    const n = Math.max(1, budget - b);
    return this.model.predict({ prefillTokens: n, prefillAttnPairs: n * c.prefill, decodeSeqs: b, decodeAttnTokens: b * c.decode });
  }

  /**
   * Seconds between two decode steps of a worker that separates a chunk of `budget` tokens from its
   * `b` decodes: a prefill-only step, then a decode-only one.
   */
  splitChunkStep(b: number, budget: number, c = this.contexts()): number {
    return this.prefillStep(Math.max(1, budget - b), c) + this.decodeStep(b, c);
  }

  /**
   * Whether a worker with `b` sequences decoding should run its prefill chunks (`budget` tokens) as
   * steps of their own instead of mixing them with the decodes: true when the fitted model prices the
   * mixed step above the two separate ones, by 20% to switch away from `current` (hysteresis; the
   * fit moves a little every refit). Mixing reads the weights once for both, so it wins unless mixed
   * steps carry a cost of their own (the model's `m`: no CUDA graph, attention over ragged batches).
   */
  preferSplit(b: number, budget: number, current: boolean): boolean {
    if (!this.ready || b < 1) return current;
    const mixed = this.chunkStep(b, budget), split = this.splitChunkStep(b, budget);
    return current ? mixed > split / 1.2 : mixed > 1.2 * split;
  }

  /** Seconds of a decode-only step of `b` sequences. */
  decodeStep(b: number, c = this.contexts()): number {
    return this.model.predict({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: b, decodeAttnTokens: b * c.decode });
  }
}

/**
 * Mixed or separate prefill and decode steps for a pool, from {@link StepPricing.preferSplit}: what the
 * current fit prefers (`wanted`, which splits are priced with) and what workers run (`split`), which
 * follows `wanted` once two fits in a row (by default) agree — an early fit from a few seconds of steps misprices
 * both (in a simulated math run the first fit separated steps and the next one undid it).
 */
export class StepMixingChoice {
  /** Workers run separate steps. */
  split: boolean;
  /** The current fit prefers separate steps. */
  wanted: boolean;
  private votes = 0;
  private lastFit = -1;
  private fitsSeen = 0;

  /** `split`: workers start with separate steps; `votesNeeded`: fits in a row that must want a switch. */
  constructor(split = false, private readonly votesNeeded = 2) {
    if (!(Number.isInteger(votesNeeded) && votesNeeded >= 1)) throw new RangeError(`Votes needed must be a positive integer, got ${votesNeeded}`);
    this.split = split;
    this.wanted = split;
  }

  /** True until two fits have been seen, and while the fit wants the other mode and a second fit has not confirmed it. */
  get pending(): boolean {
    return this.fitsSeen < 2 || this.wanted !== this.split;
  }

  /**
   * Re-decides for a pool decoding `batch` sequences per worker with `budget`-token chunks; returns the
   * new mode when workers must switch, else null. Votes are counted once per new fit of `p`.
   */
  update(p: StepPricing, batch: number, budget: number): boolean | null {
    this.wanted = p.preferSplit(batch, budget, this.split);
    if (p.fits === this.lastFit) return null;
    this.lastFit = p.fits;
    this.fitsSeen++;
    this.votes = this.wanted === this.split ? 0 : this.votes + 1;
    if (this.votes < this.votesNeeded) return null;
    this.votes = 0;
    this.split = this.wanted;
    return this.split;
  }
}

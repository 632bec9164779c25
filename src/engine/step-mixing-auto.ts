/**
 * `--step-mixing auto`: the engine decides online whether to mix prefill chunks with decodes or run
 * them as separate steps, as the simulator's online planner does for its workers. Its own step
 * records (shape + measured seconds) feed planner/ `StepPricing` (the online roofline step model),
 * one `WorkerSnapshot` per `stepsPerTick` steps; after each new fit the model votes with
 * `preferSplit` (split when it prices a mixed step 20% above a prefill-only step plus a decode-only
 * step, back when 20% below), and the mode changes once `votes` fits in a row want the change.
 * Pure: time comes only from the records (measured on the engine's injected clock).
 */
import { StepPricing } from "../../planner/step-pricing.ts";
import type { StepSample, WorkerSnapshot } from "../../planner/types.ts";
import type { StepMixing } from "./scheduler-types.ts";
import type { StepRecord } from "./step-record.ts";

/** Knobs of {@link AutoStepMixing}. */
export interface AutoStepMixingOptions {
  /**
   * Engine steps per learning tick (default 32). StepPricing refits every tick until it has a fit,
   * then every 10 ticks, so with two votes a switch comes about 10 ticks after the first fit.
   */
  stepsPerTick?: number;
  /** Consecutive fits that must prefer the other mode before it switches (default 2). */
  votes?: number;
}

/** Online choice of step mixing from measured steps. */
export class AutoStepMixing {
  private readonly pricing = new StepPricing();
  private readonly stepsPerTick: number;
  private readonly votesNeeded: number;
  private window: StepSample[] = [];
  private lastFit = 0;
  private votes = 0;
  private current: StepMixing;
  /** Times the mode changed. */
  switches = 0;

  /** `budget`: the scheduler's token budget per step (caps the chunk a mixed step is priced with). */
  constructor(initial: StepMixing, private readonly budget: number, o: AutoStepMixingOptions = {}) {
    this.current = initial;
    this.stepsPerTick = o.stepsPerTick ?? 32;
    this.votesNeeded = o.votes ?? 2;
    if (!(Number.isInteger(this.stepsPerTick) && this.stepsPerTick >= 1)) throw new RangeError(`stepsPerTick must be a positive integer, got ${this.stepsPerTick}`);
    if (!(Number.isInteger(this.votesNeeded) && this.votesNeeded >= 1)) throw new RangeError(`votes must be a positive integer, got ${this.votesNeeded}`);
  }

  /** The mode to run now. */
  get mode(): StepMixing {
    return this.current;
  }

  /** True once the step model has a fit. */
  get ready(): boolean {
    return this.pricing.ready;
  }

  /** Learns from one finished step; returns the mode to run the next steps in. */
  observe(r: StepRecord): StepMixing {
    this.window.push({ prefillTokens: r.prefillTokens, prefillAttnPairs: r.prefillAttnPairs, decodeSeqs: r.decodeSeqs, decodeAttnTokens: r.decodeAttnTokens, seconds: r.seconds });
    if (this.window.length < this.stepsPerTick) return this.current;
    const steps = this.window;
    this.window = [];
    const snap = snapshot(steps);
    this.pricing.learn([snap]);
    if (!this.pricing.ready || this.pricing.fits === this.lastFit) return this.current;
    this.lastFit = this.pricing.fits;
    // Priced at this tick's mean decode batch and mean chunk (what this engine runs), within the budget.
    const chunk = snap.prefillSteps! > 0 ? snap.prefillTokens / snap.prefillSteps! : this.budget;
    const b = snap.meanDecodeBatch;
    const split = this.pricing.preferSplit(b, Math.min(this.budget, b + chunk), this.current === "split");
    this.votes = split === (this.current === "split") ? 0 : this.votes + 1;
    if (this.votes >= this.votesNeeded) {
      this.current = split ? "split" : "mixed";
      this.votes = 0;
      this.switches++;
    }
    return this.current;
  }
}

/** One tick's steps as the snapshot StepPricing learns from (only the step facts are known here). */
function snapshot(steps: StepSample[]): WorkerSnapshot {
  let prefillTokens = 0, prefillBusyS = 0, prefillSteps = 0, decodeTokens = 0, decodeBusyS = 0, decodeSteps = 0, pureS = 0, pure = 0;
  for (const s of steps) {
    if (s.prefillTokens > 0) { prefillTokens += s.prefillTokens; prefillBusyS += s.seconds; prefillSteps++; }
    if (s.decodeSeqs > 0) { decodeTokens += s.decodeSeqs; decodeBusyS += s.seconds; decodeSteps++; }
    if (s.decodeSeqs > 0 && s.prefillTokens === 0) { pureS += s.seconds; pure++; }
  }
  const meanDecodeBatch = decodeSteps > 0 ? decodeTokens / decodeSteps : 0;
  return {
    id: "engine", role: "mixed", state: "serving",
    waitingPrefillTokens: 0, queueDelayS: 0, waitingDecodes: 0, kvUsage: 0,
    decodeBatch: meanDecodeBatch, meanDecodeBatch,
    prefillTokens, prefillBusyS, prefillSteps, decodeTokens, decodeBusyS,
    decodeStepS: pure > 0 ? pureS / pure : decodeSteps > 0 ? decodeBusyS / decodeSteps : 0,
    steps,
  };
}

/**
 * `--step-mixing auto`: the engine decides online whether to mix prefill chunks with decodes or run
 * them as separate steps, as the simulator's online planner does for its workers. Its own step
 * records (shape + measured cycle: the forward and the loop around it) feed planner/ `StepPricing`
 * (the online roofline step model), one tick of `stepsPerTick` steps at a time; after each new fit
 * the model votes with `preferSplit` (split when it prices a mixed step 20% above a prefill-only
 * step plus a decode-only step, back when 20% below), and the mode changes once `votes` fits in a
 * row want the change (planner/ `StepMixingChoice`, as the simulator's planner decides).
 * Pure: time comes only from the records (measured on the engine's injected clock).
 */
import { StepMixingChoice, StepPricing } from "../../planner/step-pricing.ts";
import type { StepSample } from "../../planner/types.ts";
import type { StepMixing } from "./scheduler-types.ts";
import { type StepRecord, stepSeconds } from "./step-record.ts";

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
  private readonly choice: StepMixingChoice;
  private readonly stepsPerTick: number;
  private window: StepSample[] = [];
  /** Times the mode changed. */
  switches = 0;

  /** `budget`: the scheduler's token budget per step (caps the chunk a mixed step is priced with). */
  constructor(initial: StepMixing, private readonly budget: number, o: AutoStepMixingOptions = {}) {
    this.stepsPerTick = o.stepsPerTick ?? 32;
    if (!(Number.isInteger(this.stepsPerTick) && this.stepsPerTick >= 1)) throw new RangeError(`stepsPerTick must be a positive integer, got ${this.stepsPerTick}`);
    this.choice = new StepMixingChoice(initial === "split", o.votes ?? 2);
  }

  /** The mode to run now. */
  get mode(): StepMixing {
    return this.choice.split ? "split" : "mixed";
  }

  /** True once the step model has a fit. */
  get ready(): boolean {
    return this.pricing.ready;
  }

  /** Learns from one finished step; returns the mode to run the next steps in. */
  observe(r: StepRecord): StepMixing {
    this.window.push({ prefillTokens: r.prefillTokens, prefillAttnPairs: r.prefillAttnPairs, decodeSeqs: r.decodeSeqs, decodeAttnTokens: r.decodeAttnTokens, seconds: stepSeconds(r) });
    if (this.window.length < this.stepsPerTick) return this.mode;
    const steps = this.window;
    this.window = [];
    this.pricing.learnSteps([steps]);
    if (!this.pricing.ready) return this.mode;
    // Priced at this tick's mean decode batch and mean chunk (what this engine runs), within the budget.
    let prefillTokens = 0, prefillSteps = 0, decodeSeqs = 0, decodeSteps = 0;
    for (const s of steps) {
      if (s.prefillTokens > 0) { prefillTokens += s.prefillTokens; prefillSteps++; }
      if (s.decodeSeqs > 0) { decodeSeqs += s.decodeSeqs; decodeSteps++; }
    }
    const chunk = prefillSteps > 0 ? prefillTokens / prefillSteps : this.budget;
    const b = decodeSteps > 0 ? decodeSeqs / decodeSteps : 0;
    if (this.choice.update(this.pricing, b, Math.min(this.budget, b + chunk)) !== null) this.switches++;
    return this.mode;
  }
}

/**
 * Step mixing for the scheduler: whether a step that could carry both prefill chunks and decodes
 * runs them together (one mixed step, vLLM's chunked prefill) or as separate steps (SGLang without
 * --enable-mixed-chunk; the simulator's `splitSteps`, src/sim/stepping.ts): a prefill-only step with
 * the full token budget, then a decode-only step, alternating while both kinds of work exist, so
 * decodes advance at least every other step. Every SPLIT_PROBE_EVERY-th chunk still mixes (a probe,
 * also followed by a decode-only step), so an online step model keeps measuring what a mixed step
 * costs. Pure state; the scheduler plans.
 */
import { SPLIT_PROBE_EVERY } from "../../planner/step-pricing.ts";
import { STEP_MIXINGS, type StepMixing, type StepPlan } from "./scheduler-types.ts";

export { SPLIT_PROBE_EVERY };

/** The work one step may take: everything (mixed), prefill chunks and admissions only, or decodes only. */
export type StepWork = "all" | "prefill" | "decode";

/** Picks each step's work under the current step mixing. */
export class StepMixer {
  private current: StepMixing = "mixed";
  /** The next step is the decodes' own (the last one carried a chunk, or only preempted). */
  private decodesTurn = false;
  /** Steps that carried prefill chunks while sequences were decoding under split mixing. */
  private chunks = 0;

  constructor(mixing: StepMixing) {
    this.mode = mixing;
  }

  /** The current step mixing. */
  get mode(): StepMixing {
    return this.current;
  }

  /** Switches mixing from the next step on. */
  set mode(mixing: StepMixing) {
    if (!STEP_MIXINGS.includes(mixing)) throw new RangeError(`Unknown step mixing "${mixing}"; choose ${STEP_MIXINGS.join(" or ")}`);
    this.current = mixing;
  }

  /**
   * The next step's plan. `decoding()`: some running sequence decodes. `plan(work)` builds a plan
   * taking only `work`; one with no entries, preemptions or truncations has changed nothing (beyond
   * admission probes "mixed" would make too), so it may be dropped and another planned. Without
   * decodes, or without prefill work, this plans exactly as "mixed" does.
   */
  next(decoding: () => boolean, plan: (work: StepWork) => StepPlan): StepPlan {
    if (this.current === "mixed" || !decoding()) {
      this.decodesTurn = false;
      return plan("all");
    }
    if (this.decodesTurn) {
      this.decodesTurn = false;
      return plan("decode");
    }
    const probe = (this.chunks + 1) % SPLIT_PROBE_EVERY === 0;
    const p = plan(probe ? "all" : "prefill");
    if (p.numPrefillTokens > 0) this.chunks++;
    if (p.entries.length + p.preempted.length + p.truncated.length === 0) return plan("decode");
    // The decodes' turn comes next unless this was a plain decode step (a probe with nothing to
    // prefill): after a probe's chunk too (it may have taken the budget before them, in running
    // order) and after a plan that only preempted, so no decode waits two plans in a row.
    this.decodesTurn = !(probe && p.numPrefillTokens === 0 && p.numDecodeTokens > 0);
    return p;
  }
}

/**
 * What one engine step computed and how long it took, in the step-log format the cluster simulator
 * calibrates its cost model from (`deno task sim --calibrate FILE`): prompt tokens computed and their
 * attention pairs, decoding sequences and the context they read, and the measured seconds.
 */
import type { StepShape } from "../../planner/types.ts";
import type { StepEntry } from "./scheduler-types.ts";

/** One measured step: its shape (planner/types.ts `StepShape`, the step-log field names) and seconds. */
export interface StepRecord extends StepShape {
  seconds: number;
  /** When the step's forward began, on the engine's clock (s). */
  startS?: number;
  /**
   * The step's share of the worker's time (s): from the end of the previous step's work (or from waking
   * up idle) through planning, the forward, committing and streaming the tokens. Back to back, these
   * tile the worker's busy time; a simulated step stands for this, so calibration prefers it to `seconds`.
   */
  cycleSeconds?: number;
}

/**
 * The seconds a step model should charge for `r`: its cycle when measured (what the worker spent on
 * it, loop included: splitting a mixed step in two pays the loop twice), else its forward.
 */
export function stepSeconds(r: StepRecord): number {
  return r.cycleSeconds ?? r.seconds;
}

/**
 * The shape of a step's entries. The scheduler marks which entries are prefill chunks: a prompt's last
 * chunk can be one token long and is still prefill (counted as a decode, it made a prefill-only step
 * look mixed in the log and to `--step-mixing auto`). A decode verifying a draft counts a decode row per
 * token it feeds.
 */
export function stepShapeOf(entries: readonly Pick<StepEntry, "tokens" | "startPos" | "prefill">[]): StepShape {
  let prefillTokens = 0, prefillAttnPairs = 0, decodeSeqs = 0, decodeAttnTokens = 0;
  for (const e of entries) {
    const n = e.tokens.length;
    if (!e.prefill) {
      // A decode with a speculative draft computes a row per draft token too, each reading one more position.
      decodeSeqs += n;
      decodeAttnTokens += n * e.startPos + (n * (n + 1)) / 2;
    } else {
      prefillTokens += n;
      // Token i of the chunk attends to startPos + i + 1 positions (causal).
      prefillAttnPairs += n * e.startPos + (n * (n + 1)) / 2;
    }
  }
  return { prefillTokens, prefillAttnPairs, decodeSeqs, decodeAttnTokens };
}

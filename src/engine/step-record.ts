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
}

/** The shape of a step's entries (a one-token entry is a decode; longer ones are prefill chunks). */
export function stepShapeOf(entries: readonly StepEntry[]): StepShape {
  let prefillTokens = 0, prefillAttnPairs = 0, decodeSeqs = 0, decodeAttnTokens = 0;
  for (const e of entries) {
    const n = e.tokens.length;
    if (n === 1) {
      decodeSeqs++;
      decodeAttnTokens += e.startPos + 1;
    } else {
      prefillTokens += n;
      // Token i of the chunk attends to startPos + i + 1 positions (causal).
      prefillAttnPairs += n * e.startPos + (n * (n + 1)) / 2;
    }
  }
  return { prefillTokens, prefillAttnPairs, decodeSeqs, decodeAttnTokens };
}

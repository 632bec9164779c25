/**
 * Per-request state inside the simulator, and the outcome it ends with.
 */
import type { SessionPlan } from "./workload-types.ts";

/** One request (one agent turn) in flight or finished. */
export interface ReqState {
  id: number;
  plan: SessionPlan;
  turn: number;
  arrival: number;
  prompt: number;
  output: number;
  reasoning: number;
  /** Content ids of the prompt's full blocks, and their chained hashes. */
  chunks: number[];
  hashes: number[];
  cachedTokens: number;
  firstToken: number;
  finish: number;
  /** Σ of per-token step times after the first token. */
  itlSum: number;
  rejected: string | null;
  prefillWorker: string | null;
  decodeWorker: string | null;
}

/** What a finished or rejected request reports. */
export interface RequestOutcome {
  /** The session's id (its plan's) and the turn's index in it. */
  session: string;
  turn: number;
  ttft: number;
  itl: number;
  e2e: number;
  prompt: number;
  output: number;
  cached: number;
  arrival: number;
  rejected: string | null;
  /** Prefilled on a prefill worker and handed to another worker to decode. */
  remotePrefill: boolean;
}

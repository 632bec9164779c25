/**
 * Values the scheduler hands out: its configuration, one step's plan, and its counters.
 * A plan is plain data the worker loop turns into one ragged forward.
 */

/** What a worker does. A role only limits what the scheduler admits. */
export type WorkerRole = "mixed" | "prefill" | "decode";

/** Scheduler limits. */
export interface SchedulerConfig {
  /** Token budget of one step (prefill chunks plus decode tokens). */
  maxBatchTokens: number;
  /** Sequences in one step at most. */
  maxRunning: number;
  role: WorkerRole;
  /** Decode role only: the most uncached prompt tokens it will prefill locally. */
  localPrefillLimit: number;
  /** Blocks kept free at admission so running sequences can grow without preempting at once. */
  watermarkBlocks: number;
}

/** Defaults close to vLLM's for a small model. */
export const DEFAULT_SCHEDULER_CONFIG: SchedulerConfig = {
  maxBatchTokens: 512,
  maxRunning: 64,
  role: "mixed",
  localPrefillLimit: 0,
  watermarkBlocks: 1,
};

/** One sequence's share of a step: feed `tokens` at positions startPos.. with this block table. */
export interface StepEntry {
  seqId: number;
  tokens: number[];
  startPos: number;
  blockTable: number[];
  /** True when the chunk reaches the sequence's end, so the step samples its next token. */
  sample: boolean;
}

/** One step's work. */
export interface StepPlan {
  step: number;
  entries: StepEntry[];
  numTokens: number;
  numPrefillTokens: number;
  numDecodeTokens: number;
  /** Sequences that lost their KV in this step (they recompute later). */
  preempted: number[];
  /** Sequences ended with "length" because the whole pool cannot hold them (engine reports them). */
  truncated: number[];
}

/** Counters and gauges for metrics. */
export interface SchedulerStats {
  waiting: number;
  running: number;
  kvUsedBlocks: number;
  kvTotalBlocks: number;
  /** Prompt tokens looked up in the prefix cache at admission, and how many hit. */
  prefixQueriedTokens: number;
  prefixHitTokens: number;
  preemptions: number;
  steps: number;
}

/** A request the scheduler can never run (prompt larger than the whole KV pool). */
export class SchedulerCapacityError extends Error {
  override name = "SchedulerCapacityError";
}

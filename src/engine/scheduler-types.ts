/**
 * Values the scheduler hands out: its configuration, one step's plan, and its counters.
 * A plan is plain data the worker loop turns into one ragged forward.
 */
import type { PrefillOrderOptions } from "../../planner/prefill-order.ts";
import type { ReasoningTokens } from "./reasoning-spans.ts";

/** What a worker does. A role only limits what the scheduler admits. */
export type WorkerRole = "mixed" | "prefill" | "decode";

/**
 * What happens to a preempted sequence's KV: dropped and recomputed later (vLLM v1's default), or
 * copied to host memory and written back on readmission ("swap", vLLM v0's option).
 */
export type PreemptionMode = "recompute" | "swap";

/**
 * How a step that could carry both prefill chunks and decodes runs: as one mixed step (vLLM's
 * chunked prefill) or as separate steps (SGLang without --enable-mixed-chunk): a prefill-only step,
 * then a decode-only one, alternating, with every 16th chunk still mixed as a probe.
 */
export type StepMixing = "mixed" | "split";

/**
 * Whether requests may carry priorities (vLLM's `--scheduling-policy`): "priority" (lower first, see
 * `SequenceHints.priority`) or "fcfs" (a server refuses any priority but 0). The scheduler itself
 * always honours them; with every request at 0 the two are the same.
 */
export type SchedulingPolicy = "fcfs" | "priority";

/** The scheduling policies, for flag checks. */
export const SCHEDULING_POLICIES: readonly SchedulingPolicy[] = ["priority", "fcfs"];

/** The step-mixing modes, for flag checks. */
export const STEP_MIXINGS: readonly StepMixing[] = ["mixed", "split"];

/** Scheduler limits. */
export interface SchedulerConfig {
  /** Token budget of one step (prefill chunks plus decode tokens). */
  maxBatchTokens: number;
  /** Sequences in one step at most. */
  maxRunning: number;
  role: WorkerRole;
  /** Decode role only: the most uncached prompt tokens it will prefill locally for a new prompt (one preempted here recomputes what it lost). */
  localPrefillLimit: number;
  /** Blocks kept free at admission so running sequences can grow without preempting at once. */
  watermarkBlocks: number;
  preemption: PreemptionMode;
  /**
   * Swap mode: host blocks for swapped-out KV; a victim that does not fit falls back to recompute.
   * Undefined means as many as the device pool holds.
   */
  swapSpaceBlocks?: number;
  /**
   * Order in which waiting sequences are admitted (planner/prefill-order.ts, shared with the
   * simulator): FCFS when undefined; "short-first" admits the least uncached prompt first (prefix
   * cache hits and swapped KV not counted), aged by the time waited.
   */
  prefillOrder?: PrefillOrderOptions;
  /**
   * The model's `<think>`/`</think>` token ids: sequences then track which generated tokens are
   * reasoning, and committed blocks holding any are typed "reasoning" (evicted first by agent-aware
   * retention once their turn ends). Undefined: generated blocks are typed "output" only.
   */
  reasoningTokens?: ReasoningTokens;
  /** Mixed prefill-and-decode steps ("mixed", the default) or separate ones ("split"); see {@link StepMixing}. */
  stepMixing?: StepMixing;
  /**
   * Prompt tokens of sequences asking for their prompt's log probabilities (`hints.wholePrompt`) fed in
   * one step at most: each is a vocabulary-sized logit row on the device and in its download, so a long
   * prompt is scored in several chunks instead of one that holds the whole budget's rows. Undefined: no
   * limit but `maxBatchTokens`.
   */
  maxPromptLogprobRows?: number;
  /**
   * Tokens one sequence feeds in one step at most (vLLM's `--long-prefill-token-threshold`, which caps
   * every request's new tokens alike): a long prompt is prefilled in chunks of at most this many, the
   * rest of the budget going to other sequences; forced tokens and drafts are held to it too. Where the
   * sliding layers keep only their windows, each running sequence's ring is sized by it (window − 1 plus
   * this, not plus the whole `maxBatchTokens`). Undefined: no limit but `maxBatchTokens`.
   */
  longPrefillTokenThreshold?: number;
  /**
   * Sequences that verify a draft in one step at most (a model with recurrent layers keeps each one's
   * state from before the step in one of this many scratch slots: engine-runner.ts `rollbackState`);
   * the others decode without theirs. Undefined: no limit.
   */
  maxDraftingSequences?: number;
}

/** Defaults close to vLLM's for a small model. */
export const DEFAULT_SCHEDULER_CONFIG: SchedulerConfig = {
  maxBatchTokens: 512,
  maxRunning: 64,
  role: "mixed",
  localPrefillLimit: 0,
  watermarkBlocks: 1,
  preemption: "recompute",
};

/**
 * A KV copy between the device pool and host memory: positions 0..numTokens-1 of a sequence,
 * laid out over `blockTable` (swap out: the blocks just freed; swap in: the blocks just allocated).
 */
export interface SwapOp {
  seqId: number;
  blockTable: number[];
  numTokens: number;
}

/** One sequence's share of a step: feed `tokens` at positions startPos.. with this block table. */
export interface StepEntry {
  seqId: number;
  tokens: number[];
  startPos: number;
  /** Read-only: the scheduler may hand out the same (frozen) table in later steps while it does not change. */
  blockTable: readonly number[];
  /** True when the chunk reaches the sequence's end, so the step samples its next token. */
  sample: boolean;
  /** True when the entry computes prompt tokens (a prefill chunk, even a one-token one), false for a decode. */
  prefill: boolean;
  /**
   * The last this-many of `tokens` are a draft to verify (speculative decoding): a decode entry that
   * feeds its pending token and the draft, and samples after each of them. Absent: no draft.
   */
  draft?: number;
  /**
   * Multi-step decoding (`Scheduler.lookAhead`): after its sample, the entry runs this many more
   * one-token steps, each fed the token the one before sampled without reading it back, and the step
   * gives 1 + lookahead tokens. Absent: none.
   */
  lookahead?: number;
  /**
   * A Gated DeltaNet model's prompt resuming from state checkpoint `restore` (state-checkpoints.ts):
   * its prefix-cache hit ends where the checkpoint's tokens end, at `startPos`.
   */
  restore?: number;
  /**
   * The state after the sequence's first `after` tokens is kept as state checkpoint `id`
   * (state-checkpoints.ts): where a prefill chunk ends at its prompt's last whole block, or where a
   * decode (one of its look-ahead steps included) ends a block.
   */
  checkpoint?: { id: number; after: number };
}

/** One step's work. */
export interface StepPlan {
  step: number;
  entries: StepEntry[];
  numTokens: number;
  numPrefillTokens: number;
  numDecodeTokens: number;
  /** Sequences that lost their device KV in this step (recomputed or swapped in later). */
  preempted: number[];
  /** KV to copy to host before the forward (its blocks are already reused by this step). */
  swapOut: SwapOp[];
  /** KV to write back from host before the forward. */
  swapIn: SwapOp[];
  /** Sequences ended with "length" because the whole pool cannot hold them (engine reports them). */
  truncated: number[];
}

/** What waits and runs on a worker now (`Scheduler.queueState()`), for planner snapshots and routers. */
export interface QueueState {
  /** Uncached tokens still to prefill: waiting sequences probed against the prefix cache, plus running prompts' rest. */
  waitingPrefillTokens: number;
  /** Age (s) of the oldest waiting sequence (0 when none waits). */
  oldestWaitS: number;
  decoding: number;
  prefilling: number;
  /** Preempted sequences waiting to resume decoding. */
  waitingDecodes: number;
  /**
   * `waitingPrefillTokens` split by the sequences' priorities ([priority, tokens], most urgent first),
   * present only when some sequence has a priority other than 0: a router prices a request's wait by
   * the work at its priority or more urgent, which priority scheduling serves first.
   */
  prefillByPriority?: [number, number][];
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
  /** Preemptions of either kind; `swapOuts` of them kept their KV in host memory. */
  preemptions: number;
  /** Of `preemptions`, those that made room for a more urgent waiting sequence (priority), not for KV growth. */
  priorityPreemptions: number;
  swapOuts: number;
  swappedOutBlocks: number;
  swappedInBlocks: number;
  /** Host swap space in use and in all, in blocks. */
  swapUsedBlocks: number;
  swapTotalBlocks: number;
  /** Tokens whose KV was computed again after a recompute preemption (prefix hits excluded). */
  recomputedTokens: number;
  /**
   * Drafts not all taken whose sequence's recurrent state was put back (Scheduler.commit's `rollBack`),
   * and the tokens those sequences feed again in their next step (the step's own and the taken drafts).
   */
  specStateRollbacks: number;
  specRefedTokens: number;
  steps: number;
}

/** A request the scheduler can never run (prompt larger than the whole KV pool). */
export class SchedulerCapacityError extends Error {
  override name = "SchedulerCapacityError";
}

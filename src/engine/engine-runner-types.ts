/**
 * The `StepRunner` seam (engine-runner.ts implements it on a model): what one scheduler step asks of
 * a runner beyond its sampling rows (`StepExtras`), what it answers (`StepOutput`), and the runner's
 * optional KV moves, LoRA slots and greedy drafting.
 */
import type { PromptImage } from "./engine-types.ts";
import type { KvDType, SamplingRow } from "../backend/types.ts";
import type { LoraAdapter } from "../model/lora.ts";
import type { HostKv } from "./kv-copy.ts";
import type { HostState } from "./state-copy.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import type { OutputPenalty } from "./ahead-penalties.ts";
import type { TokenMask } from "./output-constraint.ts";
import type { TokenLogprob } from "./logprobs.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";
import type { StepEntry, SwapOp } from "./scheduler-types.ts";

/** A row that takes the most likely token. */
export const GREEDY_ROW: SamplingRow = { temperature: 0, topK: 0, topP: 1, uniform: 0 };

/** What a step asks beyond its sampling rows, per entry (undefined: nothing for that entry). */
export interface StepExtras {
  /** Added to the entry's own row's logits before sampling (logit biases and penalties; after its draft, if any). */
  additions?: readonly (LogitAdditions | undefined)[];
  /**
   * The tokens the entry's output grammar allows at its own row (after its draft, if any); the
   * others are barred after the additions, whatever their bias.
   */
  masks?: readonly (TokenMask | undefined)[];
  /** Log probability of the sampled token and this many top alternatives (0 to MAX_TOP_LOGPROBS), at each row that samples. */
  logprobs?: readonly (number | undefined)[];
  /** Log probabilities of the prompt tokens the entry's rows predict (prompt_logprobs, echo). */
  promptLogprobs?: readonly (PromptLogprobAsk | undefined)[];
  /**
   * For an entry with a draft (StepEntry.draft = d): the sampling rows of its first d rows, each
   * sampling the token after the one it feeds (the entry's own row samples after the last draft
   * token). They report log probabilities when their entry asks (StepOutput.draftLogprobs).
   */
  drafts?: readonly (readonly SamplingRow[] | undefined)[];
  /**
   * Per draft row of an entry with a draft: added to that row's logits (penalties counting the draft
   * tokens before it as output). Absent, or undefined for a row: nothing is added there.
   */
  draftAdditions?: readonly (readonly (LogitAdditions | undefined)[] | undefined)[];
  /** Per draft row of an entry with a draft: the tokens its grammar allows after the draft tokens before it. */
  draftMasks?: readonly (readonly (TokenMask | undefined)[] | undefined)[];
  /** The entry's own row's repetition penalty (after its draft, if any), applied before the additions. */
  repeats?: readonly (RepeatPenalty | undefined)[];
  /** Per draft row of an entry with a draft: its repetition penalty, counting the draft tokens before it. */
  draftRepeats?: readonly (readonly (RepeatPenalty | undefined)[] | undefined)[];
  /** Entries whose own row's hidden state after the output norm is returned (StepOutput.hidden: embeddings). */
  hidden?: readonly (boolean | undefined)[];
  /** A model with a multi-token-prediction block: what its pass after the step does (mtp-drafts.ts). */
  mtp?: MtpAsk;
  /** Each prompt chunk's images (image-inputs.ts `imagesIn`): their positions take the vision tower's embeddings. */
  images?: readonly (readonly PromptImage[] | undefined)[];
  /** Each entry's LoRA adapter slot ({@link StepRunner.setAdapters}; 0 or undefined: the base model). */
  adapters?: readonly (number | undefined)[];
  /**
   * For a step whose entries look ahead (StepEntry.lookahead = k, the same for all): the sampling rows
   * of each further step, k of them, each one row per entry. Nothing else may be asked of such a step
   * but `adapters`, `logprobs`, `additions` and `repeats` (the host's, applied at every step),
   * `outputPenalties` (those of the tokens the group samples, applied on the device where the runner
   * {@link StepRunner.penalizesAhead}), and masks the host knows for each step (`masks`, `aheadMasks`).
   */
  lookahead?: readonly (readonly SamplingRow[])[];
  /** For a step whose entries look ahead: each entry's presence and frequency penalties, with the output the host counted. */
  outputPenalties?: readonly (OutputPenalty | undefined)[];
  /** For a step whose entries look ahead k steps: each further step's masks, one per entry (`masks` holds the step's own). */
  aheadMasks?: readonly (readonly (TokenMask | undefined)[])[];
  /**
   * Nothing of the step is read (no entry samples, nothing is scored): the runner returns once its
   * work is queued, without waiting for the device (StepOutput.ids then holds nothing), and the next
   * step is planned while it runs. An error of its device work surfaces at a later step's read.
   */
  unread?: boolean;
}

/**
 * An entry's prompt log probabilities: its row j predicts `targets[j]`, the prompt token after the
 * one it feeds (so a chunk that ends the prompt asks for one fewer than it feeds).
 */
export interface PromptLogprobAsk {
  /** Top alternatives per token (0 to MAX_TOP_LOGPROBS). */
  top: number;
  targets: readonly number[];
}

/** A step's output: one sampled token per entry (entries that do not sample get any value). */
export interface StepOutput {
  ids: Int32Array;
  /** For the entries that asked (StepExtras.logprobs), from the raw logits. */
  logprobs?: (TokenLogprob | undefined)[];
  /** For the entries that asked (StepExtras.promptLogprobs): one per target, in order. */
  promptLogprobs?: (TokenLogprob[] | undefined)[];
  /** For the entries with a draft (StepExtras.drafts): the token sampled at each draft row. */
  draftIds?: (Int32Array | undefined)[];
  /** For the entries with a draft that asked (StepExtras.logprobs): each draft row's sampled token's, from the raw logits. */
  draftLogprobs?: (TokenLogprob[] | undefined)[];
  /** For the entries that asked (StepExtras.hidden): their own row's hidden state after the output norm. */
  hidden?: (Float32Array | undefined)[];
  /** For the entries that asked (MtpAsk.draft): the multi-token-prediction block's draft for the sequence's next step. */
  mtpDrafts?: (Int32Array | undefined)[];
  /** For a step whose entries look ahead k steps: each entry's k further tokens, in order (`ids` holds the first). */
  lookaheadIds?: Int32Array[];
  /** For a step whose entries look ahead, those that asked (StepExtras.logprobs): their k further tokens', in order (`logprobs` holds the first's). */
  lookaheadLogprobs?: (TokenLogprob[] | undefined)[];
}

/**
 * The multi-token-prediction block's pass after a step (StepExtras.mtp): it runs over every row of
 * the step, writing its own KV, and drafts for the sequences that ask.
 */
export interface MtpAsk {
  /** Draft tokens per asking sequence: the block's prediction from the step, then `tokens - 1` more, each from the one before. */
  tokens: number;
  /** Per entry: whether its sequence takes a draft from this step (it samples, and drafts). */
  draft: readonly boolean[];
  /** Per entry that does not sample (a prompt chunk before its last): the token after its chunk. */
  next: readonly (number | undefined)[];
}

/** Executes steps. */
export interface StepRunner {
  readonly numBlocks: number;
  readonly blockSize: number;
  /** The KV cache's element type (absent: f32, or a runner without a device cache). */
  readonly kvDtype?: KvDType;
  /** Whether `run` takes steps whose entries look ahead (StepEntry.lookahead, multi-step decoding). */
  readonly runsAhead?: boolean;
  /** Whether the backend makes kernels ready at their first use (BackendInfo.preparesKernelsLazily): the warm-up then runs every shape. */
  readonly preparesKernelsLazily?: boolean;
  /** Whether steps that look ahead take penalties (StepExtras.repeats, outputPenalties): the backend applies those of sampled tokens on the device. */
  readonly penalizesAhead?: boolean;
  run(entries: readonly StepEntry[], rows: readonly SamplingRow[], extras?: StepExtras): Promise<StepOutput>;
  /**
   * Copies KV out to host memory, then back in (swap preemption). Must complete its swap-outs'
   * reads before the next `run` writes the same blocks. Absent: only recompute preemption works.
   */
  swap?(out: readonly SwapOp[], into: readonly SwapOp[]): Promise<void>;
  /** Forgets a sequence's host KV (it ended while swapped out). */
  discardSwap?(seqId: number): void;
  /**
   * Lets go of what the runner holds for a sequence besides its KV blocks (a Gated DeltaNet model's
   * recurrent state slot): it ended, or was preempted and computes again from position 0.
   */
  endSequence?(seqId: number): void;
  /**
   * Puts sequence `seqId`'s recurrent state back to what it was before the last step, whose draft it
   * verified: that step ran the state through every draft token, and some were not taken (the
   * scheduler feeds the taken ones again: Scheduler.commit's `rollBack`). Absent: the runner keeps no
   * state a draft could spoil (none, or sliding windows, whose rejected rows are written over).
   */
  rollbackState?(seqId: number): void;
  /** Sequences the runner holds state for at once (a Gated DeltaNet model's state slots); absent: no such limit. */
  stateSlots?: number;
  /** State checkpoints the runner keeps besides (StepEntry.checkpoint, .restore; state-checkpoints.ts); absent: none. */
  stateCheckpoints?: number;
  /** Scratch states it keeps drafted sequences' states in for their verify step ({@link rollbackState}); absent: none. */
  stateScratch?: number;
  /** Device bytes of the state slots and checkpoints together (recurrent states, the sliding layers' windows). */
  stateBytes?: number;
  /** Values of each sliding layer's ring in a state (HostState.window: keys, then values, per layer); absent where the sliding layers keep paged blocks. */
  windowSizes?: readonly number[];
  /** Reads state checkpoint `id`'s state to the host (moved with a cached prefix to another worker); queued before it returns. */
  readState?(id: number): Promise<HostState>;
  /** Writes `state` into state checkpoint `id` (one moved from another worker); a StateShapeError where it does not fit. */
  writeState?(id: number, state: HostState): void;
  /** Reads whole KV blocks to the host (moving a cached prefix to another worker). */
  readBlocks?(blockIds: readonly number[]): Promise<HostKv>;
  /** Writes `data`, from block `fromBlock` of it on, into whole KV blocks (a prefix from another worker). */
  writeBlocks?(blockIds: readonly number[], data: HostKv, fromBlock: number): void;
  /**
   * Puts these LoRA adapters on the device, adapter i at slot i + 1 (undefined: an empty slot), in
   * place of the set before (steps from the next `run` use it). Absent: the runner serves no adapters.
   */
  setAdapters?(adapters: readonly (LoraAdapter | undefined)[]): void;
  /**
   * Greedy drafting (draft-model.ts): runs `entries` (each sampling its last row), then `steps - 1`
   * one-token steps per entry, each fed the token the step before sampled for it without reading it
   * back, and returns each entry's `steps` tokens (one read at the end). Absent: the proposer runs
   * and reads one step at a time.
   */
  draftGreedy?(entries: readonly StepEntry[], steps: number): Promise<Int32Array[]>;
  /** Releases device memory. */
  close(): void;
}

/**
 * A sequence: one request's tokens and its place in the KV cache, as the scheduler sees it.
 * Plain data plus a few derived numbers; the scheduler owns every transition.
 */
import type { AtomicSpan } from "./atomic-spans.ts";
import { type ReasoningTokens, ReasoningSpans } from "./reasoning-spans.ts";

/** Lifecycle of a sequence inside one worker. */
export type SequenceStatus = "waiting" | "running" | "finished";

/** Why a sequence ended (OpenAI's finish_reason plus our internal ones). */
export type FinishReason = "stop" | "length" | "abort" | "prefill_done";

/** Optional facts the KV layer may use for retention. */
export interface SequenceHints {
  /** prompt_cache_key or user: the session whose next turn will reuse this prefix. */
  sessionId?: string;
  /**
   * The prompt leaves a `<think>` block open (a DeepSeek-R1-style template ends with it), so the
   * output starts as reasoning. Read only when the scheduler knows the reasoning tokens.
   */
  startsInReasoning?: boolean;
  /** End the sequence at its first token (a prefill handed to another worker), whatever the role. */
  prefillOnly?: boolean;
  /**
   * The sequence computes its prompt and nothing after (an embedding): it never needs a slot for a
   * generated token, so its prompt may fill the whole pool (the engine's context limit).
   */
  promptOnly?: boolean;
  /**
   * Compute the whole prompt, taking nothing from the prefix cache (its KV is still cached for
   * others): the logits of every prompt position are needed (prompt log probabilities).
   */
  wholePrompt?: boolean;
  /**
   * Scheduling priority, vLLM's: lower is served first (admitted before, preempted after, and able to
   * preempt running sequences of a higher value when it cannot otherwise get in). Default 0.
   */
  priority?: number;
  /**
   * The prefix-cache namespace the sequence's blocks chain from (kv/ `namespaceRoot`: its LoRA
   * adapter's, its cache salt's): it shares cached KV only with sequences of the same root. Absent: none.
   */
  cacheRoot?: number;
  /** The LoRA adapter slot the sequence runs with (StepLora.slots); absent or 0: the base model. */
  adapterSlot?: number;
  /** Prompt spans a prefill chunk may not cut (atomic-spans.ts: Gemma 3's images), in position order. */
  atomicSpans?: readonly AtomicSpan[];
}

/** Scheduler-side state of one request. */
export class Sequence {
  status: SequenceStatus = "waiting";
  /** Prompt followed by every generated token (what the KV must eventually hold). */
  readonly tokens: number[];
  readonly promptLength: number;
  /** Tokens whose KV is in the cache (from a prefix hit or a finished forward). */
  numComputed = 0;
  /** Prompt tokens served from the prefix cache at the latest admission. */
  numCachedPrompt = 0;
  /**
   * Where this prompt's cached prefix (its prefix-cache hit at admission) ends when no state
   * checkpoint reaches that far (a model whose state is kept apart from its blocks): its prefill keeps
   * a checkpoint there (state-checkpoints.ts `checkpointChunk`). Undefined otherwise.
   */
  branchCheckpoint: number | undefined = undefined;
  /** Block ids, in position order. */
  blockTable: number[] = [];
  /** Leading blocks already registered in the prefix cache. */
  numCommittedBlocks = 0;
  /** Most tokens whose KV was ever computed (so a recompute after preemption can be counted). */
  maxComputed = 0;
  /** Leading tokens whose KV waits in host swap space (0 unless swapped out). */
  numSwapped = 0;
  /** Times this sequence lost its KV to preemption. */
  preemptions = 0;
  /**
   * Admitted with its prompt's KV handed over from a prefill worker, last block included: the last
   * prompt token is computed again as a decode is (for its logits), not as a prefill chunk.
   */
  promptHandedOff = false;
  /**
   * Tokens proposed to follow `tokens` (speculative decoding), not part of them: the next decode step
   * computes them with the pending token and keeps those the model's own samples agree with.
   */
  draft: readonly number[] = [];
  /** Set when an abort arrives while the sequence is part of a step in flight. */
  abortRequested = false;
  finishReason?: FinishReason;
  /** Which generated positions are reasoning; undefined when the model's reasoning tokens are not known. */
  readonly reasoning: ReasoningSpans | undefined;

  constructor(
    readonly id: number,
    prompt: readonly number[],
    /** Arrival order: lower is older and keeps its KV longer under pressure. */
    readonly arrival: number,
    readonly hints: SequenceHints = {},
    reasoningTokens?: ReasoningTokens,
  ) {
    if (prompt.length === 0) throw new RangeError(`Sequence ${id} has an empty prompt`);
    this.tokens = [...prompt];
    this.promptLength = prompt.length;
    this.reasoning = reasoningTokens && new ReasoningSpans(reasoningTokens, hints.startsInReasoning ? prompt.length : undefined);
  }

  /** Appends a generated token (and notes whether it is reasoning). */
  append(token: number): void {
    this.reasoning?.push(token, this.tokens.length);
    this.tokens.push(token);
  }

  /**
   * Drops the tokens after the first `length` (a request that ended partway through the tokens one
   * speculative step accepted: a stop string or EOS among them). Only for a sequence being finished.
   */
  truncate(length: number): void {
    if (length < this.promptLength || length > this.tokens.length) throw new RangeError(`Cannot truncate sequence ${this.id} of ${this.tokens.length} tokens to ${length}`);
    this.tokens.length = length;
  }

  /** The scheduling priority (`hints.priority`, 0 when absent): lower goes first. */
  get priority(): number {
    return this.hints.priority ?? 0;
  }

  /** Generated tokens so far. */
  get outputTokens(): number[] {
    return this.tokens.slice(this.promptLength);
  }

  /** Number of generated tokens. */
  get numOutput(): number {
    return this.tokens.length - this.promptLength;
  }

  /** Tokens whose KV is still to be computed before the next token can be sampled. */
  get numPending(): number {
    return this.tokens.length - this.numComputed;
  }

  /** True while the sequence still works through its prompt (or a recompute after preemption). */
  get inPrefill(): boolean {
    return this.numPending > 1 || (this.numOutput === 0 && !this.promptHandedOff);
  }
}

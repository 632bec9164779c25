/**
 * What callers give the engine and what they get back: request parameters, streamed deltas, the
 * final result, and the typed errors the server maps to HTTP statuses.
 */
import type { KvDType } from "../backend/types.ts";
import type { EngineMetrics } from "./engine-metrics.ts";
import type { SchedulerStats, StepMixing, WorkerRole } from "./scheduler-types.ts";
import type { TokenLogprob } from "./logprobs.ts";
import type { FinishReason } from "./sequence.ts";
import type { FreePrefix, OutputGrammar } from "./grammar.ts";
import type { LoraAdapter } from "../model/lora.ts";

/**
 * An image in a prompt (GenerateRequest.images): its `length` positions take the vision tower's
 * embeddings of `pixels` instead of their tokens' (model/vision/). The prompt's tokens there are
 * drawn from `key` (model/vision/image-tokens.ts), so prefix caching, routing and KV hand-offs,
 * which compare tokens, tell one image from another.
 */
export interface PromptImage {
  /** The prompt position of its first token. */
  start: number;
  /** Positions it takes: the vision tower's tokens per image. */
  length: number;
  /** Preprocessed pixels, channels-first [3, size, size] (model/vision/image-preprocess.ts). */
  pixels: Float32Array;
  /** A digest of the pixels: its embeddings are kept under it. */
  key: string;
}

/** One generation request, already tokenized. */
export interface GenerateRequest {
  prompt: number[];
  /** Images in the prompt, in position order, not overlapping (a model with a vision tower only). */
  images?: readonly PromptImage[];
  /** Output tokens at most; undefined means "until the context is full". */
  maxTokens?: number;
  /** 0 = greedy. */
  temperature?: number;
  topP?: number;
  topK?: number;
  /** min-p: tokens less likely than this fraction of the most likely are not sampled (0 or undefined: off; vLLM's min_p). */
  minP?: number;
  /** Seed of this request's sampling stream; the same seed gives the same tokens. */
  seed?: number;
  /** Generation ends before any of these strings; they are not part of the output. */
  stop?: string[];
  /** Keep going past EOS (vLLM's ignore_eos), for benchmarks. */
  ignoreEos?: boolean;
  /** More tokens that end the output as EOS does, and like it are not part of it (vLLM's stop_token_ids; they end it under ignoreEos too). */
  stopTokenIds?: number[];
  /** No EOS (nor stop token) is sampled before this many output tokens (vLLM's min_tokens). */
  minTokens?: number;
  /** The stop string that ends the output is part of its text (vLLM's include_stop_str_in_output). */
  includeStopString?: boolean;
  /**
   * False: control tokens the model writes (`[TOOL_CALLS]`, `<|python_tag|>`) are part of the output
   * text as their vocabulary strings, and a grammar may place them as such (vLLM's
   * skip_special_tokens); default true: they stream as nothing. EOS ends the output either way.
   */
  skipSpecialTokens?: boolean;
  /**
   * Divides the positive logits of tokens in the prompt or output by this, and multiplies the others
   * (HF's and vLLM's repetition_penalty; 1 or undefined: none).
   */
  repetitionPenalty?: number;
  /** Subtracted from a token's logit once it is in this request's output (OpenAI presence_penalty). */
  presencePenalty?: number;
  /** Subtracted from a token's logit per appearance in this request's output (OpenAI frequency_penalty). */
  frequencyPenalty?: number;
  /** Added to these tokens' logits at every step, as [token id, bias] pairs (OpenAI logit_bias). */
  logitBias?: [number, number][];
  /**
   * Report each generated token's log probability and this many most likely alternatives (0 to
   * MAX_TOP_LOGPROBS; undefined: no log probabilities). From the raw logits (src/engine/logprobs.ts).
   */
  logprobs?: number;
  /**
   * Report each prompt token's log probability given the tokens before it, with this many most
   * likely alternatives (0 to MAX_TOP_LOGPROBS; undefined: none). The prompt is then computed whole,
   * taking nothing from the prefix cache (vLLM does the same for prompt_logprobs).
   */
  promptLogprobs?: number;
  /** What the output must be: JSON following a schema, or tool calls (src/engine/grammar.ts). Undefined: free text. */
  grammar?: OutputGrammar;
  /** Session key (prompt_cache_key / user) passed to KV retention. */
  sessionId?: string;
  /**
   * Whether the request opens a conversation: true when its messages hold no answer of the model yet
   * (no assistant or tool message), so it cannot be a returning agent's turn; false when they do. A
   * cluster's front door counts an opening turn as a new session even when it names none, and never
   * refuses a continuing one, whose session it may not know (a key it has not seen, a keyless turn it
   * did not keep); the router charges a continuing one's pulls as a returning session's. Undefined:
   * not known (a raw completions prompt).
   */
  openingTurn?: boolean;
  /** vLLM's `allowed_token_ids`: only these tokens may be sampled. */
  allowedTokenIds?: number[];
  /** vLLM's `bad_words` as token sequences: the output never completes one. */
  badWords?: number[][];
  /**
   * Generate nothing: compute the prompt and return the hidden state of its last token after the
   * output norm as `GenerateResult.embedding` (last-token pooling, unnormalized; /v1/embeddings).
   */
  embed?: boolean;
  /**
   * Scheduling priority (vLLM's `priority`; an integer, default 0): lower values are admitted first
   * and preempted last, and may preempt running requests of higher values to get in.
   */
  priority?: number;
  /** A LoRA adapter the engine holds (ServingEngine.loadAdapter), by name; absent: the base model. */
  adapter?: string;
  /**
   * vLLM's `cache_salt`: the prompt's KV is shared only with requests of the same salt (and adapter),
   * so a tenant cannot learn from prefix-cache timing what another one sent. Absent: no salt.
   */
  cacheSalt?: string;
  /**
   * The prompt leaves a `<think>` block open (src/serve/reasoning.ts `promptOpensReasoning`): the
   * output starts as reasoning. Used only when the engine knows the reasoning tokens.
   */
  startsInReasoning?: boolean;
  /**
   * The grammar applies only after this free prefix (grammar.ts `FreePrefix`: gpt-oss's analysis
   * before its final message's header). Absent: after `</think>` when `startsInReasoning`, else from the first token.
   */
  grammarAfter?: FreePrefix;
  /**
   * At most this many tokens of reasoning content (vLLM's `thinking_token_budget`): at the budget the
   * reasoning's end token is forced, and once it is spent no other reasoning span may open
   * (reasoning-budget.ts). Needs the engine to know the model's reasoning tokens; undefined: no limit.
   */
  reasoningBudget?: number;
  /**
   * Stop after the first token with finish reason "prefill_done", leaving the prompt's KV cached: a
   * prefill that another worker will continue (src/cluster). Its token and text are not streamed.
   */
  prefillOnly?: boolean;
}

/** A piece of output as it streams. */
export interface StreamDelta {
  text: string;
  tokenIds: number[];
  /** One per token id, when the request asked for log probabilities. */
  logprobs?: TokenLogprob[];
  /** On the first delta of a request that asked for them: its prompt's (see GenerateResult). */
  promptLogprobs?: (TokenLogprob | null)[];
  /** On the first delta: prompt tokens served from the prefix cache (the result's `cachedTokens`, known before the end). */
  cachedTokens?: number;
}

/** The outcome of a request once it has ended. */
export interface GenerateResult {
  text: string;
  tokenIds: number[];
  /** One per token id, when the request asked for log probabilities. */
  logprobs?: TokenLogprob[];
  /**
   * One per prompt token when the request asked (`promptLogprobs`): null for the first, which
   * nothing predicts (and for any the engine did not reach, as when it was cancelled).
   */
  promptLogprobs?: (TokenLogprob | null)[];
  finishReason: FinishReason;
  /** The request's stop string that ended it (finishReason "stop" at a stop string, not at EOS). */
  stopString?: string;
  /** The token that ended it (an EOS or one of the request's stopTokenIds; not in `tokenIds`). */
  endTokenId?: number;
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  /** Generated tokens that were reasoning, tags included; undefined when the engine does not track reasoning. */
  reasoningTokens?: number;
  /** Seconds from submission to the first token and to the last (undefined when none was produced). */
  firstTokenS?: number;
  lastTokenS?: number;
  /**
   * Seconds from submission until the request's first step ran (undefined when none did: cancelled
   * or refused while waiting). After a cluster's hand-off: the wait on the prefill worker.
   */
  queueS?: number;
  /** With `GenerateRequest.embed`: the prompt's last token's hidden state after the output norm ([hidden]). */
  embedding?: number[];
  /** Set when the engine failed while running the request. */
  error?: string;
  /**
   * The typed error below (RequestParamError, ContextLengthError, EngineOverloadedError…) an engine
   * elsewhere refused the request with after its handle was returned (a cluster's worker checks some
   * requests only when they reach it); `error` says the same. The server answers it as it answers
   * those `submit` throws (400, 404, 429, 503), not as an engine failure.
   */
  refused?: Error;
}

/** A submitted request: its stream of deltas, its final result, and a way to cancel it. */
export interface RequestHandle {
  id: number;
  /**
   * The session this request's turn counts in: its own `sessionId`, or under "agent" KV retention
   * the one the engine inferred (see engine-sessions.ts `inferSessionId`). Report tool calls for it.
   */
  sessionId?: string;
  /** Deltas in order; iterating stops at the end. Breaking out of the loop cancels the request. */
  stream: AsyncIterable<StreamDelta>;
  /** Resolves when the request ends (also after cancel, with finishReason "abort"). */
  result: Promise<GenerateResult>;
  cancel(): void;
  /**
   * Set by an engine that takes some refusals only after `submit` returned (a cluster's worker thread
   * or process): resolves once the request was taken (undefined) or refused (the typed error its
   * result carries as `refused`), so that a server can still answer with that error's status before
   * it starts a stream. Absent: `submit` throws every refusal itself.
   */
  refusal?: Promise<Error | undefined>;
}

/** The request cannot fit the model's context (HTTP 400). */
export class ContextLengthError extends RangeError {
  override name = "ContextLengthError";
}

/** Too many requests are waiting (HTTP 429). */
export class EngineOverloadedError extends Error {
  override name = "EngineOverloadedError";
}

/**
 * A cluster's refusal of a new session its planner has no room for (its ITL admission; HTTP 503 with
 * Retry-After), once it has waited at the door to the next tick (the handle's `refusal`). Turns of
 * sessions it already serves are never refused this way.
 */
export class SessionRefusedError extends EngineOverloadedError {
  override name = "SessionRefusedError";
}

/** Thrown by a cluster with no worker that can serve right now (none joined yet, or all gone). */
export class NoWorkerError extends EngineOverloadedError {
  override name = "NoWorkerError";
}

/**
 * A parameter outside what the engine accepts (HTTP 400). `field`: the request field at fault as
 * {@link GenerateRequest} names it (undefined: none in particular); the engine names its own fields
 * only, and a server maps them to its API's (serve/refusals.ts `apiParam`).
 */
export class RequestParamError extends RangeError {
  override name = "RequestParamError";
  constructor(message: string, readonly field?: keyof GenerateRequest) {
    super(message);
  }
}

/**
 * The output budget of `req` (its max tokens, or the rest of the context) after checking it against
 * a context limit. Throws {@link RequestParamError} or {@link ContextLengthError}.
 */
export function outputBudget(req: GenerateRequest, maxModelLen: number): number {
  const n = req.prompt.length;
  if (n === 0) throw new RequestParamError("The prompt is empty", "prompt");
  // An embedding generates nothing: its prompt may fill the whole context (as vLLM pools).
  if (req.embed === true && !req.prefillOnly) {
    if (n > maxModelLen) throw new ContextLengthError(`The prompt has ${n} tokens; this model's maximum context length is ${maxModelLen} tokens`);
    return 1;
  }
  if (n >= maxModelLen) throw new ContextLengthError(`The prompt has ${n} tokens; this model's maximum context length is ${maxModelLen} tokens`);
  const maxTokens = req.maxTokens ?? maxModelLen - n;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new RequestParamError(`max_tokens must be a positive integer, got ${maxTokens}`, "maxTokens");
  if (n + maxTokens > maxModelLen) {
    throw new ContextLengthError(
      `This model's maximum context length is ${maxModelLen} tokens; you requested ${n + maxTokens} (${n} in the prompt, ${maxTokens} for the output)`,
    );
  }
  return maxTokens;
}

/** An engine's gauges and counters: its scheduler's, and its host KV tier's (zeros without one). */
export interface EngineStats extends SchedulerStats {
  kvHostBlocks: number;
  kvHostCapacityBlocks: number;
  /** Bytes the host tier's copies hold (an f16 cache's at 2 a value). */
  kvHostBytes: number;
  kvOffloadedBlocks: number;
  kvRestoredBlocks: number;
  /** Of those, written back ahead of a tool-waiting session's predicted return. */
  kvPrefetchedBlocks: number;
  /**
   * State checkpoints (a model whose state is not in its KV blocks: recurrent layers, windowed sliding
   * layers; zeros for others): held and kept at most on the device, written since start, and prompts
   * that resumed from one.
   */
  stateCheckpoints: number;
  stateCheckpointCapacity: number;
  stateCheckpointsWritten: number;
  stateCheckpointResumes: number;
  /** The host tier of state checkpoints (`hostStateCheckpoints`; zeros without one): held, kept at most, read to the host, written back. */
  hostStateCheckpoints: number;
  hostStateCapacity: number;
  hostStatesOffloaded: number;
  hostStatesRestored: number;
  /** Generated tokens appended by jump-forward decoding, unsampled (EngineOptions.jumpForward). */
  jumpForwardTokens: number;
  /** Forwards run ahead of a read (multi-step decoding, EngineOptions.schedulerSteps): each a read saved. */
  stepsRunAhead: number;
  /** Speculative decoding (EngineOptions.speculative): drafts verified, their tokens, and the tokens accepted. */
  specDrafts: number;
  specDraftTokens: number;
  specAcceptedTokens: number;
  /** Entry i: drafts whose token at position i (0 first) was accepted (vLLM's `spec_decode_num_accepted_tokens_per_pos`). */
  specAcceptedPerPos: number[];
}

/** One worker as the server's metrics show it. */
export interface WorkerStatus {
  id: string;
  role: WorkerRole;
  waiting: number;
  running: number;
  /** Fraction of its KV blocks in use. */
  kvUsage: number;
  /** Sessions its agent-aware retention tracks, by status (absent under LRU). */
  sessions?: Record<string, number>;
  /** Leaving its cluster: no new requests, those in flight finish. */
  draining?: boolean;
  /** Parked by the baseline planner's replica targets: no new requests until a target wants it again. */
  parked?: boolean;
  /** Taken back by a replica target and still in its start-up (`--sla-worker-start-s`): no new requests yet. */
  starting?: boolean;
  /** False once its engine has failed or stopped (a worker process that died); absent: alive. */
  alive?: boolean;
}

/**
 * What the HTTP layer needs from whatever serves requests: one engine (engine.ts) or a cluster of
 * engines behind a router and a role planner (src/cluster).
 */
export interface ServingEngine {
  /** Context limit (prompt + output). */
  readonly maxModelLen: number;
  /** Latency histograms and counters, as the client sees them. */
  readonly metrics: EngineMetrics;
  /** How steps run prefill chunks and decodes now (the first worker's, for a cluster). */
  readonly stepMixing: StepMixing;
  /** The KV cache's element type, where one engine serves (a cluster's workers choose their own). */
  readonly kvCacheDtype?: KvDType;
  /** Requests its queue holds before refusing more (`--max-waiting`), where one engine serves. */
  readonly maxWaiting?: number;
  /** Queues a request. Throws the typed errors above. */
  submit(req: GenerateRequest): RequestHandle;
  /** The session's turn ended in a call to `tool` (agent-aware KV retention). */
  markToolWait(sessionId: string, tool: string): void;
  /** Scheduler and host-tier gauges and counters, summed over workers. */
  stats(): EngineStats;
  /** Sessions the agent-aware retention tracks, by status (undefined under LRU retention). */
  sessionStatusCounts(): Record<string, number> | undefined;
  /** Each worker's role and load. */
  workerStatuses(): WorkerStatus[];
  /** Stops accepting work, cancels what is running, releases the device. */
  stop(): Promise<void>;
  /**
   * Loads a LoRA adapter under `name` for requests to name (GenerateRequest.adapter); a cluster's
   * resolves once every worker has it. Absent: this engine serves none.
   */
  loadAdapter?(name: string, adapter: LoraAdapter): void | Promise<void>;
  /** Unloads the adapter `name` (refused while requests use it). */
  unloadAdapter?(name: string): void | Promise<void>;
  /** Names of the loaded adapters. */
  adapterNames?(): string[];
  /** The adapters of requests now running and waiting (a cluster counts every request in flight as running). */
  adapterRequests?(): { running: string[]; waiting: string[] };
}

/**
 * What callers give the engine and what they get back: request parameters, streamed deltas, the
 * final result, and the typed errors the server maps to HTTP statuses.
 */
import type { FinishReason } from "./sequence.ts";

/** One generation request, already tokenized. */
export interface GenerateRequest {
  prompt: number[];
  /** Output tokens at most; undefined means "until the context is full". */
  maxTokens?: number;
  /** 0 = greedy. */
  temperature?: number;
  topP?: number;
  topK?: number;
  /** Seed of this request's sampling stream; the same seed gives the same tokens. */
  seed?: number;
  /** Generation ends before any of these strings; they are not part of the output. */
  stop?: string[];
  /** Keep going past EOS (vLLM's ignore_eos), for benchmarks. */
  ignoreEos?: boolean;
  /** Session key (prompt_cache_key / user) passed to KV retention. */
  sessionId?: string;
  /**
   * The prompt leaves a `<think>` block open (src/serve/reasoning.ts `promptOpensReasoning`): the
   * output starts as reasoning. Used only when the engine knows the reasoning tokens.
   */
  startsInReasoning?: boolean;
}

/** A piece of output as it streams. */
export interface StreamDelta {
  text: string;
  tokenIds: number[];
}

/** The outcome of a request once it has ended. */
export interface GenerateResult {
  text: string;
  tokenIds: number[];
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  /** Generated tokens that were reasoning, tags included; undefined when the engine does not track reasoning. */
  reasoningTokens?: number;
  /** Set when the engine failed while running the request. */
  error?: string;
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
}

/** The request cannot fit the model's context (HTTP 400). */
export class ContextLengthError extends RangeError {
  override name = "ContextLengthError";
}

/** Too many requests are waiting (HTTP 429). */
export class EngineOverloadedError extends Error {
  override name = "EngineOverloadedError";
}

/** A parameter outside what the engine accepts (HTTP 400). */
export class RequestParamError extends RangeError {
  override name = "RequestParamError";
}

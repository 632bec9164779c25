/**
 * One request inside the engine, from submission to its result: what the worker loop keeps per
 * request, the sampling row a step draws its token with, and the result the request resolves to.
 */
import type { SamplingRow } from "../backend/types.ts";
import type { GenerateRequest, GenerateResult, StreamDelta } from "./engine-types.ts";
import type { OutputText } from "./engine-text.ts";
import type { PromptLogprobAsk, StepExtras } from "./engine-runner.ts";
import type { StepEntry } from "./scheduler-types.ts";
import type { LogitAdditions, LogitAdjuster } from "./logit-adjust.ts";
import type { TokenLogprob } from "./logprobs.ts";
import type { AsyncQueue } from "./events.ts";
import type { OutputConstraint, TokenMask } from "./output-constraint.ts";
import type { UniformSource } from "./sampler-rng.ts";
import type { FinishReason, Sequence } from "./sequence.ts";

/** A request the engine is serving. */
export interface Active {
  seq: Sequence;
  req: GenerateRequest;
  /** The request's session: its own key, or the inferred one ("agent" retention). */
  sessionId: string | undefined;
  maxTokens: number;
  queue: AsyncQueue<StreamDelta>;
  text: OutputText;
  rng: UniformSource;
  /** Logit biases and penalties (undefined: none asked for). */
  adjust: LogitAdjuster | undefined;
  /** The output grammar's constraint (undefined: free text). */
  constraint: OutputConstraint | undefined;
  /** Each sampled token's log probability, EOS included (undefined: not asked for). */
  logprobs: TokenLogprob[] | undefined;
  /** The last step's, until its token is committed. */
  pendingLogprob?: TokenLogprob;
  /**
   * Log probability of each prompt token given those before it (null for the first, and for
   * positions not computed yet); undefined: not asked for.
   */
  promptLogprobs: (TokenLogprob | null)[] | undefined;
  resolve: (r: GenerateResult) => void;
  /** Submission, last token and first token times (ms; tFirst undefined before the first token). */
  t0: number;
  tLast: number;
  tFirst?: number;
  done: boolean;
}

const GREEDY_ROW: SamplingRow = { temperature: 0, topK: 0, topP: 1, uniform: 0 };

/** The request's sampling parameters and next seeded uniform; a row that samples nothing is greedy. */
export function samplingRow(a: Active, sample: boolean): SamplingRow {
  if (!sample) return GREEDY_ROW;
  return { temperature: a.req.temperature ?? 1, topK: a.req.topK ?? 0, topP: a.req.topP ?? 1, uniform: a.rng.next() };
}

/**
 * Whether the request's decode steps may verify drafts (speculative decoding): not under an output
 * grammar (each draft row would need the mask of the state its draft prefix leads to), nor with log
 * probabilities or penalties that change with each token.
 */
export function speculates(a: Active): boolean {
  return !a.constraint && !a.logprobs && !a.adjust?.dependsOnOutput && !a.req.prefillOnly;
}

/** What a step adds to the request's logits before sampling (undefined: nothing, or no token sampled). */
function logitAdditions(a: Active, sample: boolean): LogitAdditions | undefined {
  if (!sample || !a.adjust) return undefined;
  const add = a.adjust.next(a.seq.tokens, a.seq.promptLength);
  return add.size > 0 ? add : undefined;
}

/** The tokens the request's grammar allows next (undefined: free text, or no token sampled). */
function tokenMask(a: Active, sample: boolean): TokenMask | undefined {
  return sample ? a.constraint?.next(a.seq.tokens, a.seq.promptLength) : undefined;
}

/**
 * The prompt tokens an entry's rows predict, for a request asking for its prompt's log
 * probabilities: row j feeds position startPos + j and predicts the token after it, while that is
 * still a prompt token (undefined: not asked, or the entry feeds no prompt row that predicts one).
 */
function promptAsk(a: Active, e: Pick<StepEntry, "startPos" | "tokens">): PromptLogprobAsk | undefined {
  const top = a.req.promptLogprobs;
  const end = Math.min(e.startPos + e.tokens.length + 1, a.seq.promptLength);
  if (top === undefined || e.startPos + 1 >= end) return undefined;
  return { top, targets: a.seq.tokens.slice(e.startPos + 1, end) };
}

/** A step's logit additions and log-probability requests, one per entry (undefined when none asks). */
export function stepExtras(active: readonly Active[], entries: readonly Pick<StepEntry, "sample" | "startPos" | "tokens">[]): StepExtras | undefined {
  const additions = active.map((a, i) => logitAdditions(a, entries[i].sample));
  const logprobs = active.map((a, i) => (entries[i].sample ? a.req.logprobs : undefined));
  const masks = active.map((a, i) => tokenMask(a, entries[i].sample));
  const promptLogprobs = active.map((a, i) => promptAsk(a, entries[i]));
  const any = (xs: readonly unknown[]) => xs.some((x) => x !== undefined);
  if (!any(additions) && !any(masks) && !any(logprobs) && !any(promptLogprobs)) return undefined;
  return { additions, logprobs, ...(any(masks) ? { masks } : {}), ...(any(promptLogprobs) ? { promptLogprobs } : {}) };
}

/** Files a step's prompt log probabilities for an entry that started at `startPos` (see promptAsk). */
export function keepPromptLogprobs(a: Active, startPos: number, lps: readonly TokenLogprob[] | undefined): void {
  if (!a.promptLogprobs || !lps) return;
  lps.forEach((lp, j) => (a.promptLogprobs![startPos + 1 + j] = lp));
}

/** The result a finished request resolves to (an EOS that ended it is not part of the tokens). */
export function resultOf(a: Active, reason: FinishReason, error: string | undefined): GenerateResult {
  const ids = a.seq.outputTokens;
  const eos = reason === "stop" && !a.text.stopped && ids.length > 0;
  return {
    text: a.text.text,
    tokenIds: eos ? ids.slice(0, -1) : ids,
    ...(a.logprobs ? { logprobs: a.logprobs.slice(0, eos ? ids.length - 1 : ids.length) } : {}),
    ...(a.promptLogprobs ? { promptLogprobs: a.promptLogprobs } : {}),
    finishReason: reason,
    promptTokens: a.seq.promptLength,
    completionTokens: ids.length,
    cachedTokens: a.seq.numCachedPrompt,
    reasoningTokens: a.seq.reasoning?.count(a.seq.tokens.length),
    ...(a.tFirst === undefined ? {} : { firstTokenS: (a.tFirst - a.t0) / 1000, lastTokenS: (a.tLast - a.t0) / 1000 }),
    error,
  };
}

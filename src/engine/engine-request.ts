/**
 * One request inside the engine, from submission to its result: what the worker loop keeps per
 * request, the sampling row a step draws its token with, and the result the request resolves to.
 */
import type { SamplingRow } from "../backend/types.ts";
import type { GenerateRequest, GenerateResult, StreamDelta } from "./engine-types.ts";
import type { OutputText } from "./engine-text.ts";
import type { StepExtras } from "./engine-runner.ts";
import type { LogitAdditions, LogitAdjuster } from "./logit-adjust.ts";
import type { TokenLogprob } from "./logprobs.ts";
import type { AsyncQueue } from "./events.ts";
import type { OutputConstraint } from "./output-constraint.ts";
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

/** What a step adds to the request's logits before sampling (undefined: nothing, or no token sampled). */
function logitAdditions(a: Active, sample: boolean): LogitAdditions | undefined {
  if (!sample || (!a.adjust && !a.constraint)) return undefined;
  const add = a.adjust?.next(a.seq.tokens, a.seq.promptLength);
  const barred = a.constraint?.next(a.seq.tokens, a.seq.promptLength);
  // A barred token stays barred whatever its bias.
  const all = !barred ? add! : !add ? barred : new Map([...add, ...barred]);
  return all.size > 0 ? all : undefined;
}

/** A step's logit additions and log-probability requests, one per entry (undefined when none asks). */
export function stepExtras(active: readonly Active[], entries: readonly { sample: boolean }[]): StepExtras | undefined {
  const additions = active.map((a, i) => logitAdditions(a, entries[i].sample));
  const logprobs = active.map((a, i) => (entries[i].sample ? a.req.logprobs : undefined));
  return additions.some((x) => x !== undefined) || logprobs.some((x) => x !== undefined) ? { additions, logprobs } : undefined;
}

/** The result a finished request resolves to (an EOS that ended it is not part of the tokens). */
export function resultOf(a: Active, reason: FinishReason, error: string | undefined): GenerateResult {
  const ids = a.seq.outputTokens;
  const eos = reason === "stop" && !a.text.stopped && ids.length > 0;
  return {
    text: a.text.text,
    tokenIds: eos ? ids.slice(0, -1) : ids,
    ...(a.logprobs ? { logprobs: a.logprobs.slice(0, eos ? ids.length - 1 : ids.length) } : {}),
    finishReason: reason,
    promptTokens: a.seq.promptLength,
    completionTokens: ids.length,
    cachedTokens: a.seq.numCachedPrompt,
    reasoningTokens: a.seq.reasoning?.count(a.seq.tokens.length),
    ...(a.tFirst === undefined ? {} : { firstTokenS: (a.tFirst - a.t0) / 1000, lastTokenS: (a.tLast - a.t0) / 1000 }),
    error,
  };
}

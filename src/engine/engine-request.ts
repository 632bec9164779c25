/**
 * One request inside the engine, from submission to its result: what the worker loop keeps per
 * request, the sampling row a step draws its token with, and the result the request resolves to.
 */
import { imagesIn } from "./image-inputs.ts";
import type { SamplingRow } from "../backend/types.ts";
import type { GenerateRequest, GenerateResult, StreamDelta } from "./engine-types.ts";
import type { OutputText } from "./engine-text.ts";
import { GREEDY_ROW, type PromptLogprobAsk, type StepExtras } from "./engine-runner.ts";
import type { StepEntry } from "./scheduler-types.ts";
import type { LogitAdjuster } from "./logit-adjust.ts";
import { sampledRowAsks } from "./draft-extras.ts";
import type { TokenLogprob } from "./logprobs.ts";
import type { AsyncQueue } from "./events.ts";
import { intersectMasks, type OutputConstraint, type TokenMask } from "./output-constraint.ts";
import type { RepeatTracker } from "./repeat-penalty.ts";
import type { TokenRules } from "./token-rules.ts";
import type { BudgetMasks, TokenBytesOf } from "./reasoning-budget.ts";
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
  /** The tokens that end the output: EOS (unless ignored) and the request's stop token ids. */
  ends: readonly number[];
  /** With min_tokens: the rows before that many output tokens may not sample `ends` (this mask bars them). */
  minTokens?: { readonly count: number; readonly mask: TokenMask };
  /** The request's allowed tokens and bad words (undefined: none asked for). */
  rules?: TokenRules;
  /** The request's repetition penalty's seen tokens (undefined: none asked for). */
  repeats?: RepeatTracker;
  /** The request's reasoning budget in tokens, the engine's masks for it and its tokens' bytes (undefined: no budget). */
  budget?: { readonly limit: number; readonly masks: BudgetMasks; readonly bytesOf?: TokenBytesOf };
  /** Each sampled token's log probability, EOS included (undefined: not asked for). */
  logprobs: TokenLogprob[] | undefined;
  /** The last step's, one per token it gives (more than one when it accepted draft tokens), until they are committed. */
  pendingLogprobs?: readonly TokenLogprob[];
  /**
   * Log probability of each prompt token given those before it (null for the first, and for
   * positions not computed yet); undefined: not asked for.
   */
  promptLogprobs: (TokenLogprob | null)[] | undefined;
  /** With `req.embed`: the hidden state its prompt's last row left (set by the step that computed it). */
  embedding?: Float32Array;
  resolve: (r: GenerateResult) => void;
  /** Submission, last token and first token times (ms; tFirst undefined before the first token). */
  t0: number;
  tLast: number;
  tFirst?: number;
  /** When its first step was planned (ms; undefined while it waits). */
  tScheduled?: number;
  done: boolean;
  /** Why the request failed, when its own work threw (its result's `error`). */
  error?: string;
}

/** The request's sampling parameters and next seeded uniform; a row that samples nothing is greedy. */
export function samplingRow(a: Active, sample: boolean): SamplingRow {
  if (!sample) return GREEDY_ROW;
  const minP = a.req.minP ?? 0;
  return { temperature: a.req.temperature ?? 1, topK: a.req.topK ?? 0, topP: a.req.topP ?? 1, uniform: a.rng.next(), ...(minP > 0 ? { minP } : {}) };
}

/**
 * Whether the request's decode steps may verify drafts (speculative decoding): any but a prefill-only
 * request's. Each draft row takes the penalties and grammar mask of the output its draft prefix makes
 * and reports its token's log probability (draft-extras.ts), so grammars, penalties and log
 * probabilities give what one-token steps give.
 */
export function speculates(a: Active): boolean {
  return !a.req.prefillOnly;
}

/**
 * Whether the request's decode steps may run ahead of their reads (multi-step decoding,
 * EngineOptions.schedulerSteps): nothing its rows take depends on the tokens before them but
 * penalties the runner applies on the device (`penalizes`: repetition, presence and frequency), so
 * no grammar, reasoning budget or bad words of more than one token (a fixed logit bias is added at
 * every step; `allowed_token_ids`, one-token bad words and min_tokens' stop-token bar are masks the
 * host knows for each step ahead, {@link aheadMask}), and it wants nothing of a step but its token
 * and its log probabilities (no embedding, no hand-off).
 */
export function runsAhead(a: Active, penalizes = false): boolean {
  const penalized = a.adjust?.dependsOnOutput || a.repeats !== undefined;
  const rulesFixed = !a.rules || a.rules.lookBack === 0;
  return (penalizes || !penalized) && !a.constraint && !a.budget && rulesFixed && !a.req.embed && !a.req.prefillOnly;
}

/**
 * The mask of the row a request samples `j` steps into a group that runs ahead (0: the step's own):
 * min_tokens' bar on stop tokens while that row's output token is below the count, and its
 * `allowed_token_ids` and one-token bad words (runsAhead takes no other rules). Undefined: none.
 */
export function aheadMask(a: Active, j: number): TokenMask | undefined {
  const held = a.minTokens && a.seq.numOutput + j < a.minTokens.count ? a.minTokens.mask : undefined;
  return a.rules ? intersectMasks(held, a.rules.maskAfter([])) : held;
}

/**
 * What a step that looks ahead `ahead` steps asks beyond the step's own extras: the entries'
 * presence and frequency penalties (StepExtras.outputPenalties) and each further step's masks
 * (StepExtras.aheadMasks), where any entry has them.
 */
export function aheadExtras(active: readonly Active[], ahead: number): Pick<StepExtras, "outputPenalties" | "aheadMasks"> {
  const out = active.map((a) => a.adjust?.outputPenalty());
  const masks = Array.from({ length: ahead }, (_, k) => active.map((a) => aheadMask(a, k + 1)));
  return {
    ...(out.some((p) => p !== undefined) ? { outputPenalties: out } : {}),
    ...(masks.some((step) => step.some((m) => m !== undefined)) ? { aheadMasks: masks } : {}),
  };
}

/**
 * Whether the request's forced text is written by jump-forward (EngineOptions.jumpForward, on unless
 * `false`): it has an output grammar and asks for no log probabilities (forced tokens have none).
 */
export function jumpsForward(a: Active, jumpForward: boolean | undefined): boolean {
  return a.constraint !== undefined && !a.logprobs && jumpForward !== false;
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

/**
 * A step's logit additions, masks and log-probability requests, one per entry (undefined when none
 * asks); an entry verifying a draft has its draft rows' too, and its own row's are those after the
 * whole draft. With `onError`, a request whose asks throw is reported there (by its index) and asks nothing.
 */
export function stepExtras(
  active: readonly Active[], entries: readonly Pick<StepEntry, "sample" | "startPos" | "tokens" | "draft">[], onError?: (i: number, e: unknown) => void,
): StepExtras | undefined {
  const asks = active.map((a, i) => {
    if (!entries[i].sample) return undefined;
    try {
      return sampledRowAsks(a, entries[i].tokens.slice(entries[i].tokens.length - (entries[i].draft ?? 0)));
    } catch (e) {
      // One request's failure (its grammar's): its row samples unmasked and is dropped; the others' stand.
      if (!onError) throw e;
      onError(i, e);
      return undefined;
    }
  });
  const additions = asks.map((r) => r?.additions[r.additions.length - 1]);
  const masks = asks.map((r) => r?.masks[r.masks.length - 1]);
  const draftAdditions = asks.map((r) => someOf(r?.additions.slice(0, -1)));
  const draftMasks = asks.map((r) => someOf(r?.masks.slice(0, -1)));
  const repeats = asks.map((r) => r?.repeats[r.repeats.length - 1]);
  const draftRepeats = asks.map((r) => someOf(r?.repeats.slice(0, -1)));
  const logprobs = active.map((a, i) => (entries[i].sample ? a.req.logprobs : undefined));
  const promptLogprobs = active.map((a, i) => promptAsk(a, entries[i]));
  const hidden = active.map((a, i) => (entries[i].sample && a.req.embed ? true : undefined));
  const adapters = active.map((a) => a.seq.hints.adapterSlot || undefined);
  const images = active.map((a, i) => imagesIn(a.req.images, entries[i]));
  const any = (xs: readonly unknown[]) => xs.some((x) => x !== undefined);
  if (![additions, masks, draftAdditions, draftMasks, repeats, logprobs, promptLogprobs, hidden, adapters, images].some(any)) return undefined;
  return {
    ...(any(hidden) ? { hidden } : {}), ...(any(adapters) ? { adapters } : {}), ...(any(images) ? { images } : {}),
    additions, logprobs, ...(any(masks) ? { masks } : {}), ...(any(promptLogprobs) ? { promptLogprobs } : {}),
    ...(any(draftAdditions) ? { draftAdditions } : {}), ...(any(draftMasks) ? { draftMasks } : {}),
    ...(any(repeats) ? { repeats } : {}), ...(any(draftRepeats) ? { draftRepeats } : {}),
  };
}

/** The rows' values when some row has one (undefined: none has, or no rows). */
function someOf<T>(xs: readonly (T | undefined)[] | undefined): readonly (T | undefined)[] | undefined {
  return xs?.some((x) => x !== undefined) ? xs : undefined;
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
    ...(reason === "stop" && a.text.stopString !== undefined ? { stopString: a.text.stopString } : {}),
    ...(eos ? { endTokenId: ids[ids.length - 1] } : {}),
    promptTokens: a.seq.promptLength,
    completionTokens: ids.length,
    cachedTokens: a.seq.numCachedPrompt,
    reasoningTokens: a.seq.reasoning?.count(a.seq.tokens.length),
    ...(a.tFirst === undefined ? {} : { firstTokenS: (a.tFirst - a.t0) / 1000, lastTokenS: (a.tLast - a.t0) / 1000 }),
    ...(a.tScheduled === undefined ? {} : { queueS: (a.tScheduled - a.t0) / 1000 }),
    ...(a.embedding ? { embedding: Array.from(a.embedding) } : {}),
    error,
  };
}

/**
 * What a step's sampling rows take beyond their sampling parameters when a decode verifies a draft
 * (speculative decoding): row j of the draft samples the token after the committed output and the
 * draft's first j tokens, so its penalties count those tokens as output and its grammar mask is the
 * one of the state they lead to; the entry's own row does the same after the whole draft. Neither
 * the penalties' counts nor the grammar's state move until the step's tokens are committed. Also the
 * log probabilities of the tokens a step keeps, one per token, as one-token steps would report them.
 */
import type { Active } from "./engine-request.ts";
import type { StepOutput } from "./engine-runner.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import type { TokenLogprob } from "./logprobs.ts";
import { intersectMasks, type TokenMask } from "./output-constraint.ts";
import { budgetDraftLength, budgetRules } from "./reasoning-budget.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";

/** An entry's per-row additions, masks and repetition penalties: one per draft row, then its own row's (undefined: none). */
export interface SampledRowAsks {
  additions: (LogitAdditions | undefined)[];
  masks: (TokenMask | undefined)[];
  repeats: (RepeatPenalty | undefined)[];
}

/**
 * The additions and masks of the rows that sample for request `a` in a step verifying `draft`
 * (empty: an ordinary decode or a prefill's last row, which then has one row). A grammar that bars a
 * draft token (its proposal cut the draft there, so none should) gives the rows after it the last
 * mask: the row at the barred token samples another token, so nothing after it is kept.
 */
export function sampledRowAsks(a: Active, draft: readonly number[]): SampledRowAsks {
  // A plain decode (no draft, nothing that adds to or masks its row): nothing to ask, no per-row work.
  if (draft.length === 0 && !a.adjust && !a.constraint && !a.budget && !a.minTokens && !a.rules && !a.repeats) return { additions: [undefined], masks: [undefined], repeats: [undefined] };
  const { tokens, promptLength } = a.seq;
  const rows = draft.length + 1;
  const adds = draft.length === 0 ? [a.adjust?.next(tokens, promptLength)] : a.adjust?.continuation(tokens, promptLength, draft) ?? [];
  const additions = eachRow(rows, (j) => (adds[j] && adds[j].size > 0 ? adds[j] : undefined));
  const found = !a.constraint ? [] : draft.length === 0 ? [a.constraint.next(tokens, promptLength)] : a.constraint.continuation(tokens, promptLength, draft);
  const rules = a.budget && a.seq.reasoning ? budgetRules(a.seq.reasoning, tokens, draft, a.budget.limit, a.budget.bytesOf) : undefined;
  const outputs = tokens.length - promptLength;
  const masks = eachRow(rows, (j) => {
    const grammar = found.length === 0 ? undefined : found[Math.min(j, found.length - 1)];
    const budgeted = rules ? a.budget!.masks.combine(grammar, rules[j]) : grammar;
    // min_tokens: row j samples output token outputs + j.
    const held = a.minTokens && outputs + j < a.minTokens.count ? intersectMasks(budgeted, a.minTokens.mask) : budgeted;
    return a.rules ? intersectMasks(held, a.rules.maskAfter(outputTail(tokens, promptLength, draft, j, a.rules.lookBack))) : held;
  });
  const repeats = a.repeats ? a.repeats.continuation(tokens, draft) : eachRow(rows, () => undefined);
  return { additions, masks, repeats };
}

/** `f` of each row, in order (a plain loop: `Array.from({ length })` costs more at every token). */
function eachRow<T>(rows: number, f: (j: number) => T): T[] {
  const out = new Array<T>(rows);
  for (let j = 0; j < rows; j++) out[j] = f(j);
  return out;
}

/** The last `n` output tokens before row j samples: the output, then the draft's first j tokens. */
function outputTail(tokens: readonly number[], promptLength: number, draft: readonly number[], j: number, n: number): number[] {
  if (n === 0) return [];
  const fromDraft = draft.slice(Math.max(0, j - n), j);
  const rest = n - fromDraft.length;
  return [...tokens.slice(Math.max(promptLength, tokens.length - rest)), ...fromDraft];
}

/**
 * How many leading tokens of `draft` request `a` may verify: all of them without a grammar or a
 * reasoning budget; with a grammar, those it allows, and with `jumpForward` (the engine writes
 * forced text unsampled) only up to where no row would sample forced text
 * (OutputConstraint.draftLength); with a budget, up to the first token its rules refuse.
 */
export function verifiableDraftLength(a: Active, draft: readonly number[], jumpForward: boolean): number {
  if (draft.length === 0) return 0;
  const { tokens, promptLength, reasoning } = a.seq;
  const allowed = a.constraint ? a.constraint.draftLength(tokens, promptLength, draft, jumpForward) : draft.length;
  return a.budget && reasoning ? Math.min(allowed, budgetDraftLength(reasoning, tokens, draft.slice(0, allowed), a.budget.limit, a.budget.bytesOf)) : allowed;
}

/**
 * The log probabilities of the tokens a step gives entry `i` (undefined: none asked): those of the
 * `kept` draft tokens accepted, each from the row that sampled it, then that of the token sampled
 * after them (the first rejected row's sample, or the entry's own row's after the whole draft).
 */
export function stepLogprobs(out: StepOutput, i: number, kept: number): TokenLogprob[] | undefined {
  const last = out.logprobs?.[i];
  const drafted = out.draftLogprobs?.[i];
  if (!drafted) return last ? [last] : undefined;
  const final = kept < drafted.length ? drafted[kept] : last;
  return final ? [...drafted.slice(0, kept), final] : undefined;
}

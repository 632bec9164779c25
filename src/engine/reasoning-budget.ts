/**
 * A reasoning budget (vLLM's `thinking_token_budget`, Anthropic's `thinking.budget_tokens`): at most
 * `budget` tokens of reasoning content in one output. Once a span has that many, its end token
 * (`</think>`; harmony's `<|end|>`) is the only token its next row may sample; once the budget is
 * spent and a span has closed, the token that would open another (`<think>`; after harmony's
 * `<|channel|>`, the name `analysis`) is barred, so the answer that follows is not reasoning again.
 * Content is counted as ReasoningSpans.thought counts it (tags and harmony's header aside).
 *
 * Rules are masks on the sampled rows, like a grammar's (and intersected with one), so the end token
 * is sampled with its log probability, and a speculative draft's rows each take the rule after the
 * draft tokens before them. As llama.cpp's and SGLang's budgets do, the end is forced at the budget
 * whatever the last token was: a reasoning text cut inside a multi-byte character ends with its
 * partial bytes dropped.
 */
import type { ReasoningSpans } from "./reasoning-spans.ts";
import { TokenMask } from "./output-constraint.ts";

/** What a budget asks of the next token: it must be `force`, or must not be `bar` (undefined: nothing). */
export type BudgetRule = { readonly force: number } | { readonly bar: number } | undefined;

/** The rule for the token after `length` tokens whose reasoning `spans` tracks, under `budget`. */
export function budgetRule(spans: ReasoningSpans, length: number, budget: number): BudgetRule {
  const spent = spans.thought(length) >= budget;
  if (!spent) return undefined;
  if (spans.inside) return { force: spans.endToken };
  const opener = spans.opened ? spans.nextOpener : undefined;
  return opener === undefined ? undefined : { bar: opener };
}

/**
 * The rules of a step's sampled rows for a sequence verifying `draft`: row j's after the draft's first
 * j tokens (one row, the sequence's own, without a draft). The spans themselves do not move.
 */
export function budgetRules(spans: ReasoningSpans, length: number, draft: readonly number[], budget: number): BudgetRule[] {
  const rules = [budgetRule(spans, length, budget)];
  if (draft.length === 0) return rules;
  const ahead = spans.clone();
  draft.forEach((token, j) => {
    ahead.push(token, length + j);
    rules.push(budgetRule(ahead, length + j + 1, budget));
  });
  return rules;
}

/** How many leading tokens of `draft` the budget lets a sequence verify: up to the first one a row's rule refuses. */
export function budgetDraftLength(spans: ReasoningSpans, length: number, draft: readonly number[], budget: number): number {
  const rules = budgetRules(spans, length, draft, budget);
  const refused = draft.findIndex((token, j) => !obeys(rules[j], token));
  return refused < 0 ? draft.length : refused;
}

/** Whether `token` keeps `rule`. */
export function obeys(rule: BudgetRule, token: number): boolean {
  if (rule === undefined) return true;
  return "force" in rule ? token === rule.force : token !== rule.bar;
}

/**
 * The masks budget rules become, built once per token and kept (an engine's few: its end token's, and
 * the barred openers'), and their intersection with a grammar's mask.
 */
export class BudgetMasks {
  readonly #forced = new Map<number, TokenMask>();
  readonly #barred = new Map<number, TokenMask>();

  constructor(readonly vocabSize: number) {}

  /** The mask of `rule` (undefined: none). */
  of(rule: BudgetRule): TokenMask | undefined {
    if (rule === undefined) return undefined;
    const forced = "force" in rule;
    const id = forced ? rule.force : rule.bar;
    const kept = (forced ? this.#forced : this.#barred).get(id);
    if (kept) return kept;
    const mask = new TokenMask(this.vocabSize);
    if (forced) mask.set(id);
    else {
      mask.bits.fill(-1);
      for (let t = this.vocabSize; t < mask.bits.length * 32; t++) mask.set(t, false);
      mask.set(id, false);
    }
    (forced ? this.#forced : this.#barred).set(id, mask);
    return mask;
  }

  /**
   * A row's mask under both a grammar's mask and a budget rule: their intersection. Where none of
   * the grammar's tokens keeps the rule, the grammar's alone: the output's form is the request's
   * contract, its reasoning length a limit.
   */
  combine(grammar: TokenMask | undefined, rule: BudgetRule): TokenMask | undefined {
    const budget = this.of(rule);
    if (budget === undefined) return grammar;
    if (grammar === undefined) return budget;
    const both = new TokenMask(this.vocabSize);
    let any = 0;
    for (let w = 0; w < both.bits.length; w++) any |= both.bits[w] = grammar.bits[w] & budget.bits[w];
    return any === 0 ? grammar : both;
  }
}

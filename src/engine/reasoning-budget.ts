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
 * draft tokens before them. As llama.cpp's budget does, the end waits while the reasoning ends inside
 * a UTF-8 character spelled over several tokens (byte-level vocabularies spell rare characters so:
 * CJK reasoning meets it often), for at most `MAX_CHAR_WAIT` more tokens, so the reasoning text keeps
 * its last character whole.
 */
import type { ReasoningSpans } from "./reasoning-spans.ts";
import { intersectMasks, TokenMask } from "./output-constraint.ts";
import { isCharPrefix } from "./utf8-pieces.ts";

/** Tokens past the budget the end may wait for a character to finish (a character has at most 3 bytes after its first). */
export const MAX_CHAR_WAIT = 3;

/** A token's bytes in the output (Tokenizer.tokenBytes; undefined where unknown). */
export type TokenBytesOf = (id: number) => Uint8Array | undefined;

/** Whether tokens `tail` (the last few before a row) end inside a UTF-8 character, by their bytes (false where one's are unknown). */
export function endsMidChar(tail: readonly number[], bytesOf: TokenBytesOf): boolean {
  const bytes: number[] = [];
  for (const id of tail) {
    const b = bytesOf(id);
    if (b === undefined) return false;
    bytes.push(...b);
  }
  // The last character's first byte is within the last four bytes, before any continuation bytes.
  for (let k = 1; k <= Math.min(4, bytes.length); k++) {
    if ((bytes[bytes.length - k] & 0xc0) !== 0x80) return isCharPrefix(bytes.slice(bytes.length - k));
  }
  return false;
}

/** What a budget asks of the next token: it must be `force`, or must not be `bar` (undefined: nothing). */
export type BudgetRule = { readonly force: number } | { readonly bar: number } | undefined;

/**
 * The rule for the token after `length` tokens whose reasoning `spans` tracks, under `budget`;
 * `midChar`: those tokens end inside a UTF-8 character (the end then waits, MAX_CHAR_WAIT at most).
 */
export function budgetRule(spans: ReasoningSpans, length: number, budget: number, midChar = false): BudgetRule {
  const thought = spans.thought(length);
  if (thought < budget) return undefined;
  if (spans.inside) return midChar && thought < budget + MAX_CHAR_WAIT ? undefined : { force: spans.endToken };
  const opener = spans.opened ? spans.nextOpener : undefined;
  return opener === undefined ? undefined : { bar: opener };
}

/**
 * The rules of a step's sampled rows for a sequence of `tokens` verifying `draft`: row j's after the
 * draft's first j tokens (one row, the sequence's own, without a draft). The spans themselves do not
 * move. `bytesOf` finds characters spelled over several tokens (without it, the end never waits).
 */
export function budgetRules(spans: ReasoningSpans, tokens: readonly number[], draft: readonly number[], budget: number, bytesOf?: TokenBytesOf): BudgetRule[] {
  const midChar = (j: number) => bytesOf !== undefined && endsMidChar([...tokens.slice(-4), ...draft.slice(0, j)].slice(-4), bytesOf);
  const rules = [budgetRule(spans, tokens.length, budget, midChar(0))];
  if (draft.length === 0) return rules;
  const ahead = spans.clone();
  draft.forEach((token, j) => {
    ahead.push(token, tokens.length + j);
    rules.push(budgetRule(ahead, tokens.length + j + 1, budget, midChar(j + 1)));
  });
  return rules;
}

/** How many leading tokens of `draft` the budget lets a sequence verify: up to the first one a row's rule refuses. */
export function budgetDraftLength(spans: ReasoningSpans, tokens: readonly number[], draft: readonly number[], budget: number, bytesOf?: TokenBytesOf): number {
  const rules = budgetRules(spans, tokens, draft, budget, bytesOf);
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
    const mask = forced ? new TokenMask(this.vocabSize) : TokenMask.allBut(this.vocabSize, [id]);
    if (forced) mask.set(id);
    (forced ? this.#forced : this.#barred).set(id, mask);
    return mask;
  }

  /**
   * A row's mask under both a grammar's mask and a budget rule: their intersection. Where none of
   * the grammar's tokens keeps the rule, the grammar's alone: the output's form is the request's
   * contract, its reasoning length a limit.
   */
  combine(grammar: TokenMask | undefined, rule: BudgetRule): TokenMask | undefined {
    return intersectMasks(grammar, this.of(rule));
  }
}

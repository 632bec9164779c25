/**
 * OpenAI's `logit_bias`, `presence_penalty` and `frequency_penalty` as sparse additions to a row of
 * logits before sampling (`Backend.scatterAdd`): a token's logit gains its bias, loses the presence
 * penalty once the token has appeared in this request's output and the frequency penalty per
 * appearance (OpenAI's formula; vLLM counts output tokens too, not the prompt's).
 */
import type { OutputPenalty } from "./ahead-penalties.ts";
import { type GenerateRequest, RequestParamError } from "./engine-types.ts";
import { MAX_TOP_LOGPROBS } from "./logprobs.ts";

/** Token id → what to add to its logit at one step. */
export type LogitAdditions = ReadonlyMap<number, number>;

/**
 * Refuses adjustments the model cannot apply (token ids outside its vocabulary, non-finite numbers),
 * log-probability requests out of range, a min_tokens above max_tokens and a priority that is not a
 * whole number.
 */
export function checkSamplingRequest(req: GenerateRequest, vocabSize: number): void {
  for (const [what, lp, field] of [["", req.logprobs, "logprobs"], ["prompt ", req.promptLogprobs, "promptLogprobs"]] as const) {
    if (lp !== undefined && !(Number.isInteger(lp) && lp >= 0 && lp <= MAX_TOP_LOGPROBS)) {
      throw new RequestParamError(`The number of top ${what}log probabilities must be an integer from 0 to ${MAX_TOP_LOGPROBS}, got ${lp}`, field);
    }
  }
  const lists = [["allowed_token_ids", req.allowedTokenIds ?? [], "allowedTokenIds"], ["bad_words", (req.badWords ?? []).flat(), "badWords"]] as const;
  for (const [name, ids, field] of lists) {
    for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw new RequestParamError(`Token ${id} in ${name} is outside this model's vocabulary of ${vocabSize} tokens`, field);
  }
  if (req.allowedTokenIds !== undefined && req.allowedTokenIds.length === 0) throw new RequestParamError("The allowed_token_ids list is empty: name at least one token", "allowedTokenIds");
  for (const id of req.stopTokenIds ?? []) {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw new RequestParamError(`Token ${id} in stop_token_ids is outside this model's vocabulary of ${vocabSize} tokens`, "stopTokenIds");
  }
  if (req.minTokens !== undefined && !(Number.isInteger(req.minTokens) && req.minTokens >= 0)) throw new RequestParamError(`The min_tokens must be a whole number, 0 or more, got ${req.minTokens}`, "minTokens");
  // vLLM refuses it too (SamplingParams._verify_args): the output could never reach min_tokens.
  if (req.minTokens !== undefined && req.maxTokens !== undefined && req.minTokens > req.maxTokens) {
    throw new RequestParamError(`The min_tokens must be at most max_tokens (${req.maxTokens}), got min_tokens = ${req.minTokens}`, "minTokens");
  }
  if (req.priority !== undefined && !Number.isSafeInteger(req.priority)) throw new RequestParamError(`The priority must be a whole number, got ${req.priority}`, "priority");
  if (req.minP !== undefined && !(req.minP >= 0 && req.minP <= 1)) throw new RequestParamError(`The min_p must be a number from 0 to 1, got ${req.minP}`, "minP");
  // As the backends hold it (a 32-bit float): 5e-324 is 0 there, and 1e39 Infinity.
  const penalty = req.repetitionPenalty === undefined ? undefined : Math.fround(req.repetitionPenalty);
  if (penalty !== undefined && !(penalty > 0 && Number.isFinite(penalty))) {
    const held = !Object.is(penalty, req.repetitionPenalty) ? `, which is ${penalty} as a 32-bit float` : "";
    throw new RequestParamError(`The repetition_penalty must be a positive number, got ${req.repetitionPenalty}${held}`, "repetitionPenalty");
  }
  for (const [name, v, field] of [["presence_penalty", req.presencePenalty, "presencePenalty"], ["frequency_penalty", req.frequencyPenalty, "frequencyPenalty"]] as const) {
    if (v !== undefined && !Number.isFinite(v)) throw new RequestParamError(`The ${name} must be a finite number, got ${v}`, field);
  }
  for (const [token, bias] of req.logitBias ?? []) {
    if (!Number.isInteger(token) || token < 0 || token >= vocabSize) {
      throw new RequestParamError(`Token ${token} in logit_bias is outside this model's vocabulary of ${vocabSize} tokens`, "logitBias");
    }
    if (!Number.isFinite(bias)) throw new RequestParamError(`The logit_bias of token ${token} must be a finite number, got ${bias}`, "logitBias");
  }
}

/** One request's adjustments; counts its output incrementally, so a step costs its new tokens only. */
export class LogitAdjuster {
  readonly #bias: ReadonlyMap<number, number>;
  readonly #presence: number;
  readonly #frequency: number;
  readonly #counts = new Map<number, number>();
  #counted = 0;

  private constructor(bias: ReadonlyMap<number, number>, presence: number, frequency: number) {
    this.#bias = bias;
    this.#presence = presence;
    this.#frequency = frequency;
  }

  /** The request's adjuster, or undefined when it asks for none (every bias and penalty zero). */
  static of(req: GenerateRequest): LogitAdjuster | undefined {
    const bias = new Map<number, number>();
    // A token named twice keeps its last bias, as a JSON object with a repeated key would.
    for (const [token, b] of req.logitBias ?? []) bias.set(token, b);
    for (const [token, b] of bias) if (b === 0) bias.delete(token);
    const presence = req.presencePenalty ?? 0, frequency = req.frequencyPenalty ?? 0;
    return bias.size === 0 && presence === 0 && frequency === 0 ? undefined : new LogitAdjuster(bias, presence, frequency);
  }

  /** True when the additions change with the output (a presence or frequency penalty), not a fixed bias only. */
  get dependsOnOutput(): boolean {
    return this.#presence !== 0 || this.#frequency !== 0;
  }

  /**
   * The presence and frequency penalties with the distinct output tokens counted so far (by the last
   * {@link next}), for the tokens a multi-step group samples on the device; undefined without them.
   */
  outputPenalty(): OutputPenalty | undefined {
    if (!this.dependsOnOutput) return undefined;
    return { presence: this.#presence, frequency: this.#frequency, present: [...this.#counts.keys()] };
  }

  /**
   * The additions for the next token, the output so far being `tokens` from `outputStart` on (a
   * sequence's tokens after its prompt; it only grows, and tokens already counted are not read
   * again). Entries that add nothing are left out.
   */
  next(tokens: readonly number[], outputStart: number): LogitAdditions {
    this.#count(tokens, outputStart);
    return this.#additions(this.#counts);
  }

  /**
   * The additions of the rows that verify `draft` (speculative decoding), the output so far being
   * `tokens` from `outputStart` on: element j is {@link next}'s additions after the output and
   * draft[0..j-1], counted without counting the draft into the committed output.
   */
  continuation(tokens: readonly number[], outputStart: number, draft: readonly number[]): LogitAdditions[] {
    this.#count(tokens, outputStart);
    if (!this.dependsOnOutput) return Array.from({ length: draft.length + 1 }, () => this.#bias);
    const counts = new Map(this.#counts);
    const out = [this.#additions(counts)];
    for (const t of draft) {
      counts.set(t, (counts.get(t) ?? 0) + 1);
      out.push(this.#additions(counts));
    }
    return out;
  }

  /** Counts the output tokens not counted yet (a sequence's tokens after its prompt only grow). */
  #count(tokens: readonly number[], outputStart: number): void {
    for (; outputStart + this.#counted < tokens.length; this.#counted++) {
      const t = tokens[outputStart + this.#counted];
      this.#counts.set(t, (this.#counts.get(t) ?? 0) + 1);
    }
  }

  /** The bias and the penalties of output tokens counted `counts`. */
  #additions(counts: ReadonlyMap<number, number>): LogitAdditions {
    if (this.#presence === 0 && this.#frequency === 0) return this.#bias;
    const out = new Map(this.#bias);
    for (const [token, n] of counts) {
      const v = (out.get(token) ?? 0) - this.#presence - this.#frequency * n;
      if (v === 0) out.delete(token);
      else out.set(token, v);
    }
    return out;
  }
}

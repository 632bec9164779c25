/**
 * The completions endpoint, request side: prompts (texts or token ids, one or many) tokenized and
 * cut, `echo`, `max_tokens` 0 and `best_of` checked against each other, one engine request per
 * generation of each prompt.
 */
import { ApiError } from "./errors.ts";
import { completionGrammar } from "./output-grammar.ts";
import type { CompletionRequest } from "./schemas.ts";
import { checkUnsupported, engineRequest, MAX_CHOICES, paramNames, submit, withPromptLogprobs } from "./generation-request.ts";
import { checkTextLength, encodeToTruncate, truncatedPrompt } from "./prompt-length.ts";
import type { EchoedPrompt, ServeContext, Submitted } from "./serve-context.ts";

/** The prompts of a completion body, tokenized (text) or checked (token ids), cut to `truncate_prompt_tokens`. */
function completionPrompts(ctx: ServeContext, p: CompletionRequest["prompt"], truncate: number | null | undefined, room: number): EchoedPrompt[] {
  const list: (string | number[])[] = typeof p === "string" ? [p] : typeof p[0] === "number" ? [p as number[]] : (p as (string | number[])[]);
  return list.map((one, i) => {
    const param = list.length > 1 ? `prompt[${i}]` : "prompt";
    if (typeof one === "string") {
      if (truncate === undefined || truncate === null) checkTextLength(ctx, one, param);
      const all = encodeToTruncate(ctx, one, truncate, room, ctx.config.addBos);
      if (all.length === 0) throw new ApiError(400, "The prompt is empty", param, "invalid_value");
      const ids = truncatedPrompt(ctx, all, truncate, room);
      // Echo returns what was computed: the kept tail.
      return { ids, text: ids === all ? one : ctx.tokenizer.decode(ids) };
    }
    const bad = one.find((id) => id >= ctx.config.vocabSize);
    if (bad !== undefined) throw new ApiError(400, `Token id ${bad} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, param, "invalid_value");
    const ids = truncatedPrompt(ctx, one, truncate, room);
    return { ids, text: ctx.tokenizer.decode(ids) };
  });
}

/**
 * Checks `echo`, `max_tokens` 0 and `best_of` against each other; returns the generations per
 * prompt (`best_of` when given, else `n`).
 */
function checkCompletionShape(body: CompletionRequest, prompts: number): number {
  const n = body.n ?? 1;
  if (body.max_tokens === 0 && !body.echo) {
    throw new ApiError(400, "A max_tokens of 0 generates nothing; it is only allowed with echo = true (to score the prompt)", "max_tokens", "invalid_value");
  }
  const bestOf = body.best_of ?? n;
  if (bestOf < n) throw new ApiError(400, `The best_of must be at least n, got best_of = ${bestOf} and n = ${n}`, "best_of", "invalid_value");
  if (bestOf > MAX_CHOICES) throw new ApiError(400, `The best_of must be from 1 to ${MAX_CHOICES}, got best_of = ${bestOf}`, "best_of", "invalid_value");
  if (bestOf > n && body.stream) {
    throw new ApiError(400, `A best_of of ${bestOf} cannot be streamed: the best ${n} are known only at the end; use stream = false or best_of = n`, "best_of", "invalid_value");
  }
  if (prompts * bestOf > MAX_COMPLETION_GENERATIONS) {
    throw new ApiError(400, `A request may ask for at most ${MAX_COMPLETION_GENERATIONS} generations, got ${prompts} prompts × ${bestOf} each`, "prompt", "invalid_value");
  }
  return bestOf;
}

/**
 * Refuses a `max_tokens` the context has no room for beside a prompt that fits, naming max_tokens (a
 * prompt that does not fit is the engine's to refuse, naming the prompt).
 */
function checkRoom(ctx: ServeContext, maxTokens: number | null | undefined, promptTokens: number, promptParam: string): void {
  const limit = ctx.engine.maxModelLen;
  if (!maxTokens || promptTokens >= limit || promptTokens + maxTokens <= limit) return;
  throw new ApiError(
    400,
    `This model's maximum context length is ${limit} tokens; you requested ${promptTokens + maxTokens} (${promptTokens} in ${promptParam}, ${maxTokens} for the output): max_tokens can be at most ${limit - promptTokens}, got max_tokens = ${maxTokens}`,
    "max_tokens",
    "context_length_exceeded",
  );
}

/** The max_tokens of a completion request that leaves it out (OpenAI's and vLLM's default). */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

/** The most generations (prompts × best_of or n) one completion request may ask for. */
export const MAX_COMPLETION_GENERATIONS = 256;

/** Tokenizes (or checks the token ids of) a completion request's prompts and submits them. */
export function submitCompletion(ctx: ServeContext, body: CompletionRequest): Submitted {
  const grammar = completionGrammar(body, ctx.jsonWhitespace);
  checkUnsupported(body, "completion", ctx);
  // Scoring only (max_tokens 0) still samples one token.
  const prompts = completionPrompts(ctx, body.prompt, body.truncate_prompt_tokens, body.max_tokens || 1);
  const perPrompt = checkCompletionShape(body, prompts.length);
  const n = body.n ?? 1;
  const echo = body.echo === true;
  const scoreOnly = echo && body.max_tokens === 0;
  const logprobs = typeof body.logprobs === "number" ? body.logprobs : null;
  const reqs = prompts.map((p, i) => {
    checkRoom(ctx, body.max_tokens, p.ids.length, prompts.length > 1 ? `prompt[${i}]` : "prompt");
    // Scoring only still samples one token (the engine always does); it is not returned.
    const req = engineRequest(body, ctx, p.ids, scoreOnly ? 1 : body.max_tokens, false, grammar);
    // Left out, a completion's max_tokens is 16 (OpenAI's and vLLM's CompletionRequest default), within
    // the model's default and what the context leaves; chat's runs to those.
    if (body.max_tokens === undefined || body.max_tokens === null) {
      req.maxTokens = Math.max(1, Math.min(COMPLETION_DEFAULT_MAX_TOKENS, req.maxTokens ?? Infinity, ctx.engine.maxModelLen - p.ids.length));
    }
    // best_of ranks by log probability per token, so it asks for them whatever the client asked.
    if (perPrompt > n) req.logprobs ??= 0;
    // Echo's prompt log probabilities and prompt_logprobs share one ask: the larger count, each cut to its own.
    if (echo && logprobs !== null) req.promptLogprobs = Math.max(logprobs, req.promptLogprobs ?? 0);
    return req;
  });
  // Streamed, each choice echoes its prompt with its own request's log probabilities.
  const params = paramNames(body, "completion");
  const handles = submit(ctx, reqs, perPrompt, "prompt", !body.stream, params);
  return withPromptLogprobs({ kind: "completion", handles, params, perPrompt, n, output: null, completion: { prompts, echo, scoreOnly, logprobs } }, body, ctx);
}

/**
 * A prompt against the context: a text too long refused before it is tokenized, and vLLM's
 * `truncate_prompt_tokens` (the last tokens kept, only the text's end tokenized when that is enough).
 */
import { ApiError } from "./errors.ts";
import type { ServeContext } from "./serve-context.ts";

/**
 * Refuses at once a prompt text too long for the context, before tokenizing it (megabytes of text
 * take seconds, blocking the server): it has at least `text.length / maxCharsPerToken` tokens.
 */
export function checkTextLength(ctx: ServeContext, text: string, param: string): void {
  const perToken = ctx.tokenizer.maxCharsPerToken?.();
  if (perToken === undefined) return;
  const atLeast = Math.ceil(text.length / perToken);
  const limit = ctx.engine.maxModelLen;
  if (atLeast >= limit) {
    throw new ApiError(400, `The prompt has at least ${atLeast} tokens (${text.length} characters); this model's maximum context length is ${limit} tokens`, param, "context_length_exceeded");
  }
}

/**
 * `text` tokenized for {@link truncatedPrompt} to keep its last tokens: only its end when it is far
 * longer than they can span (a megabyte prompt took seconds of event-loop time to tokenize whole, to
 * keep a few hundred tokens). That end, twice as many characters as the kept tokens' longest pieces
 * span, holds more tokens than are kept, and the cut's effect on tokenizing stays far from them.
 */
export function encodeToTruncate(ctx: ServeContext, text: string, keep: number | null | undefined, room: number, addBos: boolean): number[] {
  const perToken = ctx.tokenizer.maxCharsPerToken?.();
  if (keep === undefined || keep === null || perToken === undefined) return ctx.tokenizer.encode(text, { addBos });
  const kept = Math.min(keptTokens(ctx.engine.maxModelLen, keep, room), ctx.engine.maxModelLen);
  const tail = 2 * kept * perToken + 64;
  if (text.length <= tail) return ctx.tokenizer.encode(text, { addBos });
  return ctx.tokenizer.encode(text.slice(text.length - tail), { addBos: false });
}

/**
 * vLLM's `truncate_prompt_tokens`: the last `keep` tokens of a prompt (-1: as many as the context
 * holds beside the `room` tokens of output the request asks for: at least one, none for an embedding), the prompt itself
 * when it is no longer or no truncation is asked. A 400 past the context.
 */
export function truncatedPrompt(ctx: Pick<ServeContext, "engine">, ids: number[], keep: number | null | undefined, room = 1): number[] {
  if (keep === undefined || keep === null) return ids;
  const limit = ctx.engine.maxModelLen;
  if (keep > limit) throw new ApiError(400, `A truncate_prompt_tokens of ${keep} is more than this model's maximum context length of ${limit} tokens`, "truncate_prompt_tokens", "invalid_value");
  // The engine refuses a prompt that leaves no room for its output (an embedding's `room` is 0: it
  // generates nothing); an output larger than the context is left for it to refuse, naming both lengths.
  const n = keptTokens(limit, keep, room);
  return ids.length > n ? ids.slice(ids.length - n) : ids;
}

/** The prompt tokens `truncate_prompt_tokens` keeps: `keep`, or for -1 what the context leaves beside `room` (at least one). */
function keptTokens(limit: number, keep: number, room: number): number {
  return keep === -1 ? Math.max(1, limit - Math.max(0, room)) : keep;
}

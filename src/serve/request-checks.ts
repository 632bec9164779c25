/**
 * Request fields the chat and completions schemas pass through unparsed, and the parameters this
 * server knows but cannot honour: a 400 that names each rather than an answer that silently
 * ignores it (openai.ts's checkUnsupported calls these). Also vLLM's chat `echo` and `bad_words`.
 */
import { messageText } from "./chat-template.ts";
import { ApiError, describe } from "./errors.ts";
import type { Tokenizer } from "../model/config.ts";
import type { ChatRequest } from "./schemas.ts";

/** A 400 for a known OpenAI parameter this server parses but cannot honour. */
export function unsupported(message: string, param: string): ApiError {
  return new ApiError(400, message, param, "unsupported_parameter");
}

/**
 * vLLM's request fields this server does not implement, with when a value asks for something: a 400
 * then, rather than an answer that silently ignores it (without beam search, say). Their default values pass.
 */
export const UNIMPLEMENTED_VLLM_FIELDS: readonly (readonly [string, (v: unknown) => boolean])[] = [
  ["use_beam_search", (v) => v === true],
  ["return_tokens_as_token_ids", (v) => v === true],
  ["logprob_token_ids", (v) => Array.isArray(v) && v.length > 0],
  // vLLM's prompt_token_ids and per-choice token_ids on the answer: asked for, their absence would pass for none.
  ["return_token_ids", (v) => v === true],
];

/**
 * Chat fields the schema passes through unparsed: vLLM's `echo` must be a boolean; OpenAI's legacy
 * `functions` and `function_call` (replaced by `tools`, `tool_choice`), audio output and web search
 * are refused when they ask for something: ignored, the answer would silently lack what was asked.
 */
export function checkChatOnly(body: ChatRequest): void {
  if (body.echo !== undefined && body.echo !== null && typeof body.echo !== "boolean") {
    throw new ApiError(400, `The echo field must be a boolean, got echo = ${describe(body.echo)}`, "echo", "invalid_value");
  }
  if (Array.isArray(body.functions) && body.functions.length > 0) {
    throw unsupported(`The legacy functions parameter is not supported; send them as tools ({"type": "function", "function": ...}), got functions = ${describe(body.functions)}`, "functions");
  }
  const call = body.function_call;
  if (call !== undefined && call !== null && call !== "none" && call !== "auto") {
    throw unsupported(`The legacy function_call parameter is not supported; send tools and use tool_choice, got function_call = ${describe(call)}`, "function_call");
  }
  // The models write text only, and search nothing: an answer without the audio or the search asked for would pass for one.
  const modalities = body.modalities;
  if (Array.isArray(modalities) && modalities.some((m) => m !== "text")) {
    throw unsupported(`This server answers in text only, got modalities = ${describe(modalities)}`, "modalities");
  }
  for (const name of ["audio", "web_search_options"] as const) {
    if (body[name] !== undefined && body[name] !== null) throw unsupported(`The ${name} parameter is not supported by this server, got ${name} = ${describe(body[name])}`, name);
  }
}

/**
 * vLLM's chat `echo`: the last message's text when it is the answering role's (the assistant's, or
 * the last message's own when the prompt ends without a generation prompt); undefined otherwise.
 */
export function chatEcho(body: ChatRequest): string | undefined {
  if (body.echo !== true) return undefined;
  const last = body.messages[body.messages.length - 1];
  const generationPrompt = body.add_generation_prompt !== false && body.continue_final_message !== true;
  if (generationPrompt && last.role !== "assistant") return undefined;
  return messageText(last.content) || undefined;
}

/**
 * Characters `bad_words` may hold together: each is tokenized twice on the event loop, and a
 * megabyte-long word took seconds (vLLM sets no limit; a bad word is a word or a phrase).
 */
export const MAX_BAD_WORDS_CHARS = 16_384;

/**
 * vLLM's `bad_words` as token sequences: each word as written and after a space (its start-of-word
 * tokens differ), without BOS, as vLLM tokenizes them. More than MAX_BAD_WORDS_CHARS characters in
 * all is a 400, refused before any is tokenized.
 */
export function badWordIds(ctx: { tokenizer: Tokenizer }, words: readonly string[]): number[][] {
  const chars = words.reduce((n, w) => n + w.length, 0);
  if (chars > MAX_BAD_WORDS_CHARS) {
    throw new ApiError(400, `The bad_words may hold at most ${MAX_BAD_WORDS_CHARS} characters together, got ${chars} in ${words.length} word(s)`, "bad_words", "invalid_value");
  }
  const seen = new Set<string>();
  const out: number[][] = [];
  for (const word of words) {
    for (const text of [word, ` ${word.trimStart()}`]) {
      const ids = ctx.tokenizer.encode(text, { addBos: false });
      const key = ids.join(",");
      if (ids.length > 0 && !seen.has(key)) seen.add(key), out.push(ids);
    }
  }
  return out;
}

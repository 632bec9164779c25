/**
 * The two generation endpoints, request side: request bodies → engine requests (one per choice
 * with `n`). The responses are built in respond.ts.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import { ContextLengthError, EngineOverloadedError, type GenerateRequest, NoWorkerError, type RequestHandle, RequestParamError, SessionRefusedError } from "../engine/engine-types.ts";
import type { OutputGrammar } from "../engine/grammar.ts";
import type { ModelConfig, Tokenizer } from "../model/config.ts";
import type { ChatOutputOptions } from "./chat-output.ts";
import type { ChatRenderer } from "./chat-template.ts";
import { ApiError, describe } from "./errors.ts";
import { chatGrammar } from "./output-grammar.ts";
import { promptOpensReasoning, type ReasoningParserName } from "./reasoning.ts";
import type { ChatRequest, CompletionRequest } from "./schemas.ts";

/** What the handlers need from the server. */
export interface ServeContext {
  engine: ServingEngine;
  tokenizer: Tokenizer;
  config: ModelConfig;
  modelName: string;
  chat: ChatRenderer;
  /** "think": `<think>` text of chat answers goes to `reasoning_content` (`--reasoning-parser`). */
  reasoningParser: ReasoningParserName;
}

/** Which endpoint a request came through. */
export type Kind = "chat" | "completion";

/** The most choices one request may ask for (`n`): each is a whole generation. */
export const MAX_CHOICES = 16;

/** A submitted request and what answering it needs to know. */
export interface Submitted {
  kind: Kind;
  /** One per choice (`n`), in choice order. */
  handles: RequestHandle[];
  /** How to split a chat answer (reasoning, tool calls); null for completions, whose text is returned as generated. */
  output: ChatOutputOptions | null;
}

/** A 400 for a known OpenAI parameter this server parses but cannot honour. */
function unsupported(message: string, param: string): ApiError {
  return new ApiError(400, message, param, "unsupported_parameter");
}

/**
 * Refuses the OpenAI parameters we cannot honour when set to anything but their no-op value, and
 * logit biases for tokens the model lacks. (response_format and tool_choice: output-grammar.ts.)
 */
function checkUnsupported(body: ChatRequest | CompletionRequest, kind: Kind, vocabSize: number): void {
  if (body.n !== undefined && body.n !== null && !(body.n >= 1 && body.n <= MAX_CHOICES)) {
    throw new ApiError(400, `The number of choices n must be from 1 to ${MAX_CHOICES}, got n = ${body.n}`, "n", "invalid_value");
  }
  if (kind === "chat" && (body as ChatRequest).top_logprobs && !body.logprobs) {
    throw new ApiError(400, `Asking for top_logprobs needs logprobs = true, got top_logprobs = ${(body as ChatRequest).top_logprobs}`, "top_logprobs", "invalid_value");
  }
  for (const key of Object.keys(body.logit_bias ?? {})) {
    if (Number(key) >= vocabSize) {
      throw new ApiError(400, `Token ${key} in logit_bias is outside this model's vocabulary of ${vocabSize} tokens`, "logit_bias", "invalid_value");
    }
  }
  if ("best_of" in body && body.best_of !== undefined && body.best_of !== null && body.best_of !== 1) {
    throw unsupported(`Only best_of = 1 is supported, got best_of = ${body.best_of}`, "best_of");
  }
  if ("suffix" in body && body.suffix) throw unsupported(`A suffix is not supported (no fill-in-the-middle), got suffix = ${describe(body.suffix)}`, "suffix");
}

/** How many top alternatives per token the request asks for (undefined: no log probabilities). */
function logprobsCount(body: ChatRequest | CompletionRequest): number | undefined {
  if (typeof body.logprobs === "number") return body.logprobs; // completions: the count itself
  return body.logprobs === true ? ((body as ChatRequest).top_logprobs ?? 0) : undefined;
}

/** Builds the engine request (after {@link checkUnsupported}). */
function engineRequest(body: ChatRequest | CompletionRequest, prompt: number[], maxTokens: number | null | undefined, startsInReasoning = false, grammar?: OutputGrammar): GenerateRequest {
  const stop = body.stop === null || body.stop === undefined ? [] : typeof body.stop === "string" ? [body.stop] : body.stop;
  return {
    prompt,
    maxTokens: maxTokens ?? undefined,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    topK: body.top_k && body.top_k > 0 ? body.top_k : 0,
    seed: body.seed ?? undefined,
    stop: stop.filter((s) => s.length > 0),
    ignoreEos: body.ignore_eos ?? false,
    logprobs: logprobsCount(body),
    ...(grammar ? { grammar } : {}),
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: body.logit_bias ? Object.entries(body.logit_bias).map(([token, bias]): [number, number] => [Number(token), bias]) : undefined,
    // An empty key names no session (and would collide with the retention policy's no-session group).
    sessionId: body.prompt_cache_key || body.user || undefined,
    ...(startsInReasoning ? { startsInReasoning } : {}),
  };
}

/**
 * Submits one engine request per choice. Choice i samples with seed + i when the body gives a seed
 * (so choices differ, reproducibly). If one is refused, those already queued are cancelled.
 */
function submit(ctx: ServeContext, req: GenerateRequest, n: number, promptParam: string): RequestHandle[] {
  const handles: RequestHandle[] = [];
  try {
    for (let i = 0; i < n; i++) handles.push(ctx.engine.submit(req.seed === undefined ? req : { ...req, seed: (req.seed + i) >>> 0 }));
    return handles;
  } catch (e) {
    for (const h of handles) h.cancel();
    if (e instanceof ContextLengthError) throw new ApiError(400, e.message, promptParam, "context_length_exceeded");
    if (e instanceof NoWorkerError) throw new ApiError(503, `No worker can serve this request yet: ${e.message}. Retry later.`, null, "no_worker");
    if (e instanceof SessionRefusedError) throw new ApiError(503, `${e.message}. Retry later.`, null, "overloaded");
    if (e instanceof EngineOverloadedError) throw new ApiError(429, `The server is busy: ${e.message}. Retry later.`, null, "queue_full");
    if (e instanceof RequestParamError) throw new ApiError(400, e.message, null, "invalid_value");
    throw e;
  }
}

/**
 * Refuses at once a prompt text too long for the context, before tokenizing it (megabytes of text
 * take seconds, blocking the server): it has at least `text.length / maxCharsPerToken` tokens.
 */
function checkTextLength(ctx: ServeContext, text: string, param: string): void {
  const perToken = ctx.tokenizer.maxCharsPerToken?.();
  if (perToken === undefined) return;
  const atLeast = Math.ceil(text.length / perToken);
  const limit = ctx.engine.maxModelLen;
  if (atLeast >= limit) {
    throw new ApiError(400, `The prompt has at least ${atLeast} tokens (${text.length} characters); this model's maximum context length is ${limit} tokens`, param, "context_length_exceeded");
  }
}

/** Tokenizes a chat request and submits it. */
export function submitChat(ctx: ServeContext, body: ChatRequest): Submitted {
  const choice = body.tool_choice ?? "auto";
  const { grammar, parallelToolCalls } = chatGrammar(body);
  checkUnsupported(body, "chat", ctx.config.vocabSize);
  const tools = choice === "none" ? undefined : body.tools ?? undefined;
  const { text, startsWithBos } = ctx.chat.render(body.messages, tools);
  // The rendered text holds every message (templates add text, never remove it).
  checkTextLength(ctx, text, "messages");
  const prompt = ctx.tokenizer.encode(text, { addBos: ctx.config.addBos && !startsWithBos });
  if (prompt.length === 0) throw new ApiError(400, "The messages render to an empty prompt", "messages", "invalid_value");
  const reasoning = ctx.reasoningParser === "think";
  const startsInReasoning = reasoning && promptOpensReasoning(text);
  const request = engineRequest(body, prompt, body.max_completion_tokens ?? body.max_tokens, startsInReasoning, grammar);
  const handles = submit(ctx, request, body.n ?? 1, "messages");
  const toolCalls = (tools?.length ?? 0) > 0;
  return { kind: "chat", handles, output: { reasoning, startsInReasoning, toolCalls, parallelToolCalls } };
}

/** Tokenizes (or checks the token ids of) a completion request and submits it. */
export function submitCompletion(ctx: ServeContext, body: CompletionRequest): Submitted {
  if (body.echo) throw unsupported("Echoing the prompt is not supported, got echo = true", "echo");
  checkUnsupported(body, "completion", ctx.config.vocabSize);
  const p = body.prompt;
  let prompt: number[];
  if (typeof p === "string" || typeof p[0] === "string") {
    const text = typeof p === "string" ? p : (p[0] as string);
    checkTextLength(ctx, text, "prompt");
    prompt = ctx.tokenizer.encode(text, { addBos: ctx.config.addBos });
    if (prompt.length === 0) throw new ApiError(400, "The prompt is empty", "prompt", "invalid_value");
  } else {
    prompt = (Array.isArray(p[0]) ? p[0] : p) as number[];
    const bad = prompt.find((id) => id >= ctx.config.vocabSize);
    if (bad !== undefined) throw new ApiError(400, `Token id ${bad} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, "prompt", "invalid_value");
  }
  const handles = submit(ctx, engineRequest(body, prompt, body.max_tokens), body.n ?? 1, "prompt");
  return { kind: "completion", handles, output: null };
}

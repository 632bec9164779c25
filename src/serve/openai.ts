/**
 * The two generation endpoints: request bodies → engine requests, engine results → OpenAI
 * responses, as one JSON object or as SSE chunks ending in `data: [DONE]`.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import { ContextLengthError, EngineOverloadedError, type GenerateRequest, NoWorkerError, type RequestHandle, RequestParamError, SessionRefusedError } from "../engine/engine-types.ts";
import type { ModelConfig, Tokenizer } from "../model/config.ts";
import { type ChatOutputOptions, ChatOutputStream, type ChatPart, parseChatOutput } from "./chat-output.ts";
import type { ChatRenderer } from "./chat-template.ts";
import { ApiError, describe } from "./errors.ts";
import { promptOpensReasoning, type ReasoningParserName } from "./reasoning.ts";
import type { ChatRequest, CompletionRequest } from "./schemas.ts";
import type { ParsedToolCall } from "./tool-calls.ts";
import type { TokenLogprob } from "../engine/logprobs.ts";
import { chatLogprobs, completionLogprobs } from "./logprobs-json.ts";

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

type Kind = "chat" | "completion";

/** A submitted request and what answering it needs to know. */
export interface Submitted {
  kind: Kind;
  handle: RequestHandle;
  /** How to split a chat answer (reasoning, tool calls); null for completions, whose text is returned as generated. */
  output: ChatOutputOptions | null;
}

/** A 400 for a known OpenAI parameter this server parses but cannot honour. */
function unsupported(message: string, param: string): ApiError {
  return new ApiError(400, message, param, "unsupported_parameter");
}

/**
 * Refuses the OpenAI parameters we cannot honour when set to anything but their no-op value (there
 * is no constrained decoding for response_format), and logit biases for tokens the model lacks.
 */
function checkUnsupported(body: ChatRequest | CompletionRequest, kind: Kind, vocabSize: number): void {
  if (body.n !== undefined && body.n !== null && body.n !== 1) throw new ApiError(400, `Only n = 1 is supported, got n = ${body.n}`, "n", "invalid_value");
  if (kind === "chat" && (body as ChatRequest).top_logprobs && !body.logprobs) {
    throw new ApiError(400, `Asking for top_logprobs needs logprobs = true, got top_logprobs = ${(body as ChatRequest).top_logprobs}`, "top_logprobs", "invalid_value");
  }
  for (const key of Object.keys(body.logit_bias ?? {})) {
    if (Number(key) >= vocabSize) {
      throw new ApiError(400, `Token ${key} in logit_bias is outside this model's vocabulary of ${vocabSize} tokens`, "logit_bias", "invalid_value");
    }
  }
  // Completions have no response_format (an unknown field there is ignored).
  const format = kind === "chat" ? (body as ChatRequest).response_format : undefined;
  if (format && format.type !== "text") {
    throw unsupported(
      `Only response_format {"type": "text"} is supported: this server has no constrained decoding, got ${describe(format)}`,
      "response_format",
    );
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
function engineRequest(body: ChatRequest | CompletionRequest, prompt: number[], maxTokens: number | null | undefined, startsInReasoning = false): GenerateRequest {
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
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: body.logit_bias ? Object.entries(body.logit_bias).map(([token, bias]): [number, number] => [Number(token), bias]) : undefined,
    // An empty key names no session (and would collide with the retention policy's no-session group).
    sessionId: body.prompt_cache_key || body.user || undefined,
    ...(startsInReasoning ? { startsInReasoning } : {}),
  };
}

function submit(ctx: ServeContext, req: GenerateRequest, promptParam: string): RequestHandle {
  try {
    return ctx.engine.submit(req);
  } catch (e) {
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
  if (typeof choice !== "string") {
    const name = choice.function.name;
    if (!(body.tools ?? []).some((t) => t.function.name === name)) {
      throw new ApiError(400, `The function ${JSON.stringify(name)} named by tool_choice is not among the request's tools`, "tool_choice", "invalid_value");
    }
  }
  if (choice !== "none" && choice !== "auto") {
    const shown = typeof choice === "string" ? `"${choice}"` : `naming the function ${JSON.stringify(choice.function.name)}`;
    throw unsupported(`Forcing tool calls with tool_choice ${shown} is not supported: tool calls are parsed from what the model writes; use "auto" or "none"`, "tool_choice");
  }
  checkUnsupported(body, "chat", ctx.config.vocabSize);
  const tools = choice === "none" ? undefined : body.tools ?? undefined;
  const { text, startsWithBos } = ctx.chat.render(body.messages, tools);
  // The rendered text holds every message (templates add text, never remove it).
  checkTextLength(ctx, text, "messages");
  const prompt = ctx.tokenizer.encode(text, { addBos: ctx.config.addBos && !startsWithBos });
  if (prompt.length === 0) throw new ApiError(400, "The messages render to an empty prompt", "messages", "invalid_value");
  const reasoning = ctx.reasoningParser === "think";
  const startsInReasoning = reasoning && promptOpensReasoning(text);
  const handle = submit(ctx, engineRequest(body, prompt, body.max_completion_tokens ?? body.max_tokens, startsInReasoning), "messages");
  const toolCalls = (tools?.length ?? 0) > 0;
  return { kind: "chat", handle, output: { reasoning, startsInReasoning, toolCalls, parallelToolCalls: body.parallel_tool_calls ?? true } };
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
  const handle = submit(ctx, engineRequest(body, prompt, body.max_tokens), "prompt");
  return { kind: "completion", handle, output: null };
}

function usage(r: { promptTokens: number; completionTokens: number; cachedTokens: number; reasoningTokens?: number }) {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
    prompt_tokens_details: { cached_tokens: r.cachedTokens },
    // Counted by the engine when it knows the reasoning tokens (`--reasoning-parser think`).
    ...(r.reasoningTokens !== undefined ? { completion_tokens_details: { reasoning_tokens: r.reasoningTokens } } : {}),
  };
}

function finishReason(reason: string, calledTools = false): string {
  return reason === "length" ? "length" : reason === "abort" ? "abort" : calledTools ? "tool_calls" : "stop";
}

/** OpenAI's wire form of a parsed call. */
function toolCallJson(c: ParsedToolCall) {
  return { id: `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`, type: "function", function: { name: c.name, arguments: c.arguments } };
}

/** A turn that ended in tool calls leaves its session waiting on the first tool: its KV is kept for the return. */
function noteToolWait(ctx: ServeContext, s: Submitted, calls: readonly ParsedToolCall[]): void {
  // The handle carries the request's session: its own key, or the one the engine inferred.
  const sid = s.handle.sessionId;
  if (sid !== undefined && calls.length > 0) ctx.engine.markToolWait(sid, calls[0].name);
}

/** The non-streaming response body. */
export async function completeJson(ctx: ServeContext, s: Submitted): Promise<Record<string, unknown>> {
  const { kind, handle } = s;
  const r = await handle.result;
  if (r.error) throw new ApiError(500, `Generation failed: ${r.error}`, null, "engine_error");
  const created = Math.floor(Date.now() / 1000);
  const base = { id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`, created, model: ctx.modelName };
  if (kind === "chat" && s.output) {
    const { reasoning, content, calls } = parseChatOutput(r.text, s.output);
    noteToolWait(ctx, s, calls);
    const message = {
      role: "assistant", content,
      ...(s.output.reasoning ? { reasoning_content: reasoning } : {}),
      ...(calls.length > 0 ? { tool_calls: calls.map(toolCallJson) } : {}),
    };
    const fr = finishReason(r.finishReason, calls.length > 0);
    const logprobs = r.logprobs ? chatLogprobs(ctx.tokenizer, r.logprobs) : null;
    return { ...base, object: "chat.completion", choices: [{ index: 0, message, logprobs, finish_reason: fr }], usage: usage(r) };
  }
  const fr = finishReason(r.finishReason);
  const logprobs = r.logprobs ? completionLogprobs(ctx.tokenizer, r.logprobs) : null;
  return { ...base, object: "text_completion", choices: [{ index: 0, text: r.text, logprobs, finish_reason: fr }], usage: usage(r) };
}

/**
 * The streaming response body: one SSE event per text delta, a final chunk with finish_reason,
 * a usage chunk when asked, then `data: [DONE]`. A request the engine failed ends instead with an
 * event in OpenAI's error shape (`data: {"error": {...}}`), then `data: [DONE]`. Cancelling the
 * stream (the client hanging up) cancels the request and sends nothing more.
 */
export function completeStream(ctx: ServeContext, s: Submitted, includeUsage: boolean): ReadableStream<Uint8Array> {
  const { kind, handle } = s;
  const enc = new TextEncoder();
  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const chunk = (choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => {
    const choices = choice ? [{ index: 0, logprobs: null, finish_reason: null, ...choice }] : [];
    const body = { id, object, created, model: ctx.modelName, choices, ...(includeUsage ? { usage: null } : {}), ...extra };
    return enc.encode(`data: ${JSON.stringify(body)}\n\n`);
  };
  // Log probabilities of tokens not yet sent go with the next chunk (the chat parser may hold text back).
  let pending: TokenLogprob[] = [];
  let offset = 0;
  const withLogprobs = (choice: Record<string, unknown>): Record<string, unknown> => {
    if (pending.length === 0) return choice;
    const logprobs = kind === "chat" ? chatLogprobs(ctx.tokenizer, pending) : completionLogprobs(ctx.tokenizer, pending, offset);
    if (kind !== "chat") offset += (logprobs as { tokens: string[] }).tokens.reduce((n, t) => n + t.length, 0);
    pending = [];
    return { ...choice, logprobs };
  };
  const piece = (text: string) => withLogprobs(kind === "chat" ? { delta: { content: text } } : { text });
  const answer = s.output ? new ChatOutputStream(s.output) : null;
  const calls: ParsedToolCall[] = [];
  const emit = (controller: ReadableStreamDefaultController<Uint8Array>, parts: ChatPart[]) => {
    for (const p of parts) {
      if (p.kind === "content") controller.enqueue(chunk(piece(p.text)));
      else if (p.kind === "reasoning") controller.enqueue(chunk(withLogprobs({ delta: { reasoning_content: p.text } })));
      else controller.enqueue(chunk(withLogprobs({ delta: { tool_calls: [{ index: calls.push(p.call) - 1, ...toolCallJson(p.call) }] } })));
    }
  };
  let clientGone = false;
  return new ReadableStream<Uint8Array>({
    async start(controller) {
      try {
        if (kind === "chat") controller.enqueue(chunk({ delta: { role: "assistant", content: "" } }));
        for await (const d of handle.stream) {
          if (d.logprobs) pending.push(...d.logprobs);
          if (!d.text) continue;
          if (answer) emit(controller, answer.push(d.text));
          else controller.enqueue(chunk(piece(d.text)));
        }
        const r = await handle.result;
        // The client hung up (cancel() below): nobody is left to tell.
        if (clientGone) return;
        if (r.error) {
          // The engine (or the worker serving the request) failed: say so in OpenAI's error shape, then end the stream.
          const err = new ApiError(500, `Generation failed: ${r.error}`, null, "engine_error");
          controller.enqueue(enc.encode(`data: ${JSON.stringify(err.body())}\n\n`));
        } else {
          if (answer) emit(controller, answer.end());
          noteToolWait(ctx, s, calls);
          // "abort" here is the server's own cancel (shutdown); the client is still listening.
          const fr = finishReason(r.finishReason, calls.length > 0);
          controller.enqueue(chunk(withLogprobs(kind === "chat" ? { delta: {}, finish_reason: fr } : { text: "", finish_reason: fr })));
          if (includeUsage) controller.enqueue(chunk(null, { usage: usage(r) }));
        }
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
        controller.close();
      } catch {
        // The client went away mid-write: stop generating for it.
        handle.cancel();
      }
    },
    cancel() {
      clientGone = true;
      handle.cancel();
    },
  });
}

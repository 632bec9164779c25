/**
 * The two generation endpoints: request bodies → engine requests, engine results → OpenAI
 * responses, as one JSON object or as SSE chunks ending in `data: [DONE]`.
 */
import type { Engine } from "../engine/engine.ts";
import { ContextLengthError, EngineOverloadedError, type GenerateRequest, type RequestHandle, RequestParamError } from "../engine/engine-types.ts";
import type { ModelConfig, Tokenizer } from "../model/config.ts";
import type { ChatRenderer } from "./chat-template.ts";
import { ApiError } from "./errors.ts";
import type { ChatRequest, CompletionRequest } from "./schemas.ts";

/** What the handlers need from the server. */
export interface ServeContext {
  engine: Engine;
  tokenizer: Tokenizer;
  config: ModelConfig;
  modelName: string;
  chat: ChatRenderer;
}

type Kind = "chat" | "completion";

/** Checks the fields we parse but do not support, and builds the engine request. */
function engineRequest(body: ChatRequest | CompletionRequest, prompt: number[], maxTokens: number | null | undefined): GenerateRequest {
  if (body.n !== undefined && body.n !== null && body.n !== 1) throw new ApiError(400, `Only n = 1 is supported, got n = ${body.n}`, "n", "invalid_value");
  if (body.logprobs) throw new ApiError(400, `logprobs are not supported, got ${JSON.stringify(body.logprobs)}`, "logprobs", "unsupported_parameter");
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
    sessionId: body.prompt_cache_key ?? body.user ?? undefined,
  };
}

function submit(ctx: ServeContext, req: GenerateRequest, promptParam: string): RequestHandle {
  try {
    return ctx.engine.submit(req);
  } catch (e) {
    if (e instanceof ContextLengthError) throw new ApiError(400, e.message, promptParam, "context_length_exceeded");
    if (e instanceof EngineOverloadedError) throw new ApiError(429, `The server is busy: ${e.message}. Retry later.`, null, "queue_full");
    if (e instanceof RequestParamError) throw new ApiError(400, e.message, null, "invalid_value");
    throw e;
  }
}

/** Tokenizes a chat request and submits it. */
export function submitChat(ctx: ServeContext, body: ChatRequest): RequestHandle {
  const { text, startsWithBos } = ctx.chat.render(body.messages);
  const prompt = ctx.tokenizer.encode(text, { addBos: ctx.config.addBos && !startsWithBos });
  if (prompt.length === 0) throw new ApiError(400, "The messages render to an empty prompt", "messages", "invalid_value");
  return submit(ctx, engineRequest(body, prompt, body.max_completion_tokens ?? body.max_tokens), "messages");
}

/** Tokenizes (or checks the token ids of) a completion request and submits it. */
export function submitCompletion(ctx: ServeContext, body: CompletionRequest): RequestHandle {
  if (body.echo) throw new ApiError(400, "echo is not supported, got true", "echo", "unsupported_parameter");
  const p = body.prompt;
  let prompt: number[];
  if (typeof p === "string" || typeof p[0] === "string") {
    const text = typeof p === "string" ? p : (p[0] as string);
    prompt = ctx.tokenizer.encode(text, { addBos: ctx.config.addBos });
    if (prompt.length === 0) throw new ApiError(400, "The prompt is empty", "prompt", "invalid_value");
  } else {
    prompt = (Array.isArray(p[0]) ? p[0] : p) as number[];
    const bad = prompt.find((id) => id >= ctx.config.vocabSize);
    if (bad !== undefined) throw new ApiError(400, `Token id ${bad} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, "prompt", "invalid_value");
  }
  return submit(ctx, engineRequest(body, prompt, body.max_tokens), "prompt");
}

function usage(r: { promptTokens: number; completionTokens: number; cachedTokens: number }) {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
    prompt_tokens_details: { cached_tokens: r.cachedTokens },
  };
}

function finishReason(reason: string): string {
  return reason === "length" ? "length" : reason === "abort" ? "abort" : "stop";
}

/** The non-streaming response body. */
export async function completeJson(ctx: ServeContext, kind: Kind, handle: RequestHandle): Promise<Record<string, unknown>> {
  const r = await handle.result;
  if (r.error) throw new ApiError(500, `Generation failed: ${r.error}`, null, "engine_error");
  const created = Math.floor(Date.now() / 1000);
  const base = { id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`, created, model: ctx.modelName };
  const fr = finishReason(r.finishReason);
  if (kind === "chat") {
    return { ...base, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: r.text }, logprobs: null, finish_reason: fr }], usage: usage(r) };
  }
  return { ...base, object: "text_completion", choices: [{ index: 0, text: r.text, logprobs: null, finish_reason: fr }], usage: usage(r) };
}

/**
 * The streaming response body: one SSE event per text delta, a final chunk with finish_reason,
 * a usage chunk when asked, then `data: [DONE]`. Cancelling the stream cancels the request.
 */
export function completeStream(ctx: ServeContext, kind: Kind, handle: RequestHandle, includeUsage: boolean): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const chunk = (choice: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => {
    const choices = choice ? [{ index: 0, logprobs: null, finish_reason: null, ...choice }] : [];
    const body = { id, object, created, model: ctx.modelName, choices, ...(includeUsage ? { usage: null } : {}), ...extra };
    return enc.encode(`data: ${JSON.stringify(body)}\n\n`);
  };
  const piece = (text: string) => (kind === "chat" ? { delta: { content: text } } : { text });
  return new ReadableStream<Uint8Array>({
    async start(controller) {
      try {
        if (kind === "chat") controller.enqueue(chunk({ delta: { role: "assistant", content: "" } }));
        for await (const d of handle.stream) if (d.text) controller.enqueue(chunk(piece(d.text)));
        const r = await handle.result;
        if (r.finishReason === "abort") return;
        const fr = r.error ? "error" : finishReason(r.finishReason);
        controller.enqueue(chunk(kind === "chat" ? { delta: {}, finish_reason: fr } : { text: "", finish_reason: fr }));
        if (includeUsage) controller.enqueue(chunk(null, { usage: usage(r) }));
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
        controller.close();
      } catch {
        // The client went away mid-write: stop generating for it.
        handle.cancel();
      }
    },
    cancel() {
      handle.cancel();
    },
  });
}

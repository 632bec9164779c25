/**
 * The two generation endpoints, response side: engine results → OpenAI responses, as one JSON
 * object or as SSE chunks ending in `data: [DONE]`, with one choice per engine request (`n`).
 */
import type { GenerateResult, StreamDelta } from "../engine/engine-types.ts";
import type { TokenLogprob } from "../engine/logprobs.ts";
import { ChatOutputStream, type ChatPart, parseChatOutput } from "./chat-output.ts";
import { ApiError } from "./errors.ts";
import { chatLogprobs, completionLogprobs } from "./logprobs-json.ts";
import type { Kind, ServeContext, Submitted } from "./openai.ts";
import type { ParsedToolCall } from "./tool-calls.ts";

type Json = Record<string, unknown>;

/** Usage over every choice: the prompt counted once (as OpenAI does), the completions summed. */
function usage(results: readonly GenerateResult[]) {
  const first = results[0];
  const completion = results.reduce((n, r) => n + r.completionTokens, 0);
  const reasoning = results.some((r) => r.reasoningTokens !== undefined) ? results.reduce((n, r) => n + (r.reasoningTokens ?? 0), 0) : undefined;
  return {
    prompt_tokens: first.promptTokens,
    completion_tokens: completion,
    total_tokens: first.promptTokens + completion,
    prompt_tokens_details: { cached_tokens: first.cachedTokens },
    // Counted by the engine when it knows the reasoning tokens (`--reasoning-parser think`).
    ...(reasoning !== undefined ? { completion_tokens_details: { reasoning_tokens: reasoning } } : {}),
  };
}

function finishReason(reason: string, calledTools = false): string {
  return reason === "length" ? "length" : reason === "abort" ? "abort" : calledTools ? "tool_calls" : "stop";
}

/** OpenAI's wire form of a parsed call. */
function toolCallJson(c: ParsedToolCall) {
  return { id: `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`, type: "function", function: { name: c.name, arguments: c.arguments } };
}

/**
 * A turn that ended in tool calls leaves its session waiting on the first tool: its KV is kept for
 * the return. With several choices, the first choice's calls count (the agent continues one).
 */
function noteToolWait(ctx: ServeContext, s: Submitted, calls: readonly ParsedToolCall[]): void {
  // The handle carries the request's session: its own key, or the one the engine inferred.
  const sid = s.handles[0].sessionId;
  if (sid !== undefined && calls.length > 0) ctx.engine.markToolWait(sid, calls[0].name);
}

/** The failure of the first choice that failed, as the 500 the client gets. */
function failure(results: readonly GenerateResult[]): ApiError | undefined {
  const failed = results.find((r) => r.error);
  return failed && new ApiError(500, `Generation failed: ${failed.error}`, null, "engine_error");
}

/** One choice of the non-streaming body. */
function choiceJson(ctx: ServeContext, s: Submitted, r: GenerateResult, index: number): Json {
  if (s.kind === "chat" && s.output) {
    const { reasoning, content, calls } = parseChatOutput(r.text, s.output);
    if (index === 0) noteToolWait(ctx, s, calls);
    const message = {
      role: "assistant", content,
      ...(s.output.reasoning ? { reasoning_content: reasoning } : {}),
      ...(calls.length > 0 ? { tool_calls: calls.map(toolCallJson) } : {}),
    };
    const logprobs = r.logprobs ? chatLogprobs(ctx.tokenizer, r.logprobs) : null;
    return { index, message, logprobs, finish_reason: finishReason(r.finishReason, calls.length > 0) };
  }
  const logprobs = r.logprobs ? completionLogprobs(ctx.tokenizer, r.logprobs) : null;
  return { index, text: r.text, logprobs, finish_reason: finishReason(r.finishReason) };
}

/** The non-streaming response body. */
export async function completeJson(ctx: ServeContext, s: Submitted): Promise<Json> {
  const results = await Promise.all(s.handles.map((h) => h.result));
  const err = failure(results);
  if (err) throw err;
  const base = { id: `${s.kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`, created: Math.floor(Date.now() / 1000), model: ctx.modelName };
  const choices = results.map((r, i) => choiceJson(ctx, s, r, i));
  return { ...base, object: s.kind === "chat" ? "chat.completion" : "text_completion", choices, usage: usage(results) };
}

/** One choice of a stream: its chat parser, tool calls, and log probabilities not yet sent. */
class ChoiceStream {
  readonly calls: ParsedToolCall[] = [];
  private readonly answer: ChatOutputStream | null;
  // Log probabilities of tokens not yet sent go with the next chunk (the chat parser may hold text back).
  private pending: TokenLogprob[] = [];
  private offset = 0;

  private readonly kind: Kind;

  constructor(private readonly ctx: ServeContext, s: Submitted, readonly index: number) {
    this.kind = s.kind;
    this.answer = s.output ? new ChatOutputStream(s.output) : null;
  }

  /** The choices (one each) of the chunks a delta makes. */
  delta(d: StreamDelta): Json[] {
    if (d.logprobs) this.pending.push(...d.logprobs);
    if (!d.text) return [];
    if (this.answer) return this.parts(this.answer.push(d.text));
    return [this.withLogprobs({ text: d.text })];
  }

  /** The choices of the chunks that end this choice, given its result. */
  end(r: GenerateResult): Json[] {
    const rest = this.answer ? this.parts(this.answer.end()) : [];
    const fr = finishReason(r.finishReason, this.calls.length > 0);
    return [...rest, this.withLogprobs(this.kind === "chat" ? { delta: {}, finish_reason: fr } : { text: "", finish_reason: fr })];
  }

  private parts(parts: ChatPart[]): Json[] {
    return parts.map((p) => {
      if (p.kind === "content") return this.withLogprobs({ delta: { content: p.text } });
      if (p.kind === "reasoning") return this.withLogprobs({ delta: { reasoning_content: p.text } });
      return this.withLogprobs({ delta: { tool_calls: [{ index: this.calls.push(p.call) - 1, ...toolCallJson(p.call) }] } });
    });
  }

  private withLogprobs(choice: Json): Json {
    const base = { index: this.index, logprobs: null, finish_reason: null, ...choice };
    if (this.pending.length === 0) return base;
    const logprobs = this.kind === "chat" ? chatLogprobs(this.ctx.tokenizer, this.pending) : completionLogprobs(this.ctx.tokenizer, this.pending, this.offset);
    if (this.kind !== "chat") this.offset += (logprobs as { tokens: string[] }).tokens.reduce((n, t) => n + t.length, 0);
    this.pending = [];
    return { ...base, logprobs };
  }
}

/**
 * The streaming response body: one SSE event per text delta of each choice (choices interleave as
 * they are generated, each chunk naming its index), a final chunk per choice with finish_reason, a
 * usage chunk when asked, then `data: [DONE]`. A request the engine failed ends instead with an
 * event in OpenAI's error shape (`data: {"error": {...}}`), then `data: [DONE]`. Cancelling the
 * stream (the client hanging up) cancels every choice and sends nothing more.
 */
export function completeStream(ctx: ServeContext, s: Submitted, includeUsage: boolean): ReadableStream<Uint8Array> {
  const { kind, handles } = s;
  const enc = new TextEncoder();
  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const chunk = (choice: Json | null, extra: Json = {}) => {
    const body = { id, object, created, model: ctx.modelName, choices: choice ? [choice] : [], ...(includeUsage ? { usage: null } : {}), ...extra };
    return enc.encode(`data: ${JSON.stringify(body)}\n\n`);
  };
  const cancelAll = () => handles.forEach((h) => h.cancel());
  let clientGone = false;
  return new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (choices: Json[]) => choices.forEach((c) => controller.enqueue(chunk(c)));
      try {
        const choices = handles.map((_, i) => new ChoiceStream(ctx, s, i));
        if (kind === "chat") choices.forEach((c) => send([{ index: c.index, logprobs: null, finish_reason: null, delta: { role: "assistant", content: "" } }]));
        // Each choice streams as it is generated; its end waits for all of them to be known good.
        const results = await Promise.all(handles.map(async (h, i) => {
          for await (const d of h.stream) send(choices[i].delta(d));
          return await h.result;
        }));
        // The client hung up (cancel() below): nobody is left to tell.
        if (clientGone) return;
        const err = failure(results);
        if (err) {
          // The engine (or the worker serving the request) failed: say so in OpenAI's error shape, then end the stream.
          cancelAll();
          controller.enqueue(enc.encode(`data: ${JSON.stringify(err.body())}\n\n`));
        } else {
          results.forEach((r, i) => send(choices[i].end(r)));
          noteToolWait(ctx, s, choices[0].calls);
          if (includeUsage) controller.enqueue(chunk(null, { usage: usage(results) }));
        }
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
        controller.close();
      } catch {
        // The client went away mid-write: stop generating for it.
        cancelAll();
      }
    },
    cancel() {
      clientGone = true;
      cancelAll();
    },
  });
}

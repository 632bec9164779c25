/**
 * The two generation endpoints, response side: engine results → OpenAI responses, as one JSON
 * object or as SSE chunks ending in `data: [DONE]`, with one choice per engine request (`n`).
 */
import type { GenerateResult, StreamDelta } from "../engine/engine-types.ts";
import type { TokenLogprob } from "../engine/logprobs.ts";
import { ChatOutputStream, type ChatPart, parseChatOutput } from "./chat-output.ts";
import { ApiError } from "./errors.ts";
import { type ParamNames, refusalError } from "./refusals.ts";
import { bestOf, completionChoice, echoLogprobs } from "./completion-output.ts";
import { chatLogprobs, completionLogprobs, promptLogprobsJson, TextOffsets } from "./logprobs-json.ts";
import type { CompletionShape, EchoedPrompt, Kind, ServeContext, Submitted } from "./openai.ts";
import type { ParsedToolCall } from "./tool-calls.ts";

type Json = Record<string, unknown>;

/**
 * Usage over every generation: each prompt counted once (as OpenAI does), the completions summed
 * (every `best_of` generation included; none when the prompt is only scored).
 */
function usage(s: Submitted, results: readonly GenerateResult[]) {
  const firsts = results.filter((_, i) => i % s.perPrompt === 0);
  const prompt = firsts.reduce((n, r) => n + r.promptTokens, 0);
  const completion = s.completion?.scoreOnly ? 0 : results.reduce((n, r) => n + r.completionTokens, 0);
  const reasoning = results.some((r) => r.reasoningTokens !== undefined) ? results.reduce((n, r) => n + (r.reasoningTokens ?? 0), 0) : undefined;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: firsts.reduce((n, r) => n + r.cachedTokens, 0) },
    // Counted by the engine when it knows the reasoning tokens (`--reasoning-parser think`).
    ...(reasoning !== undefined ? { completion_tokens_details: { reasoning_tokens: reasoning } } : {}),
  };
}

function finishReason(reason: string, calledTools = false): string {
  return reason === "length" ? "length" : reason === "abort" ? "abort" : calledTools ? "tool_calls" : "stop";
}

/**
 * vLLM's `stop_reason`: the stop string or stop token (one of stop_token_ids, not EOS) that ended the
 * choice; null when it ended at EOS, at max_tokens or otherwise.
 */
function stopReason(ctx: ServeContext, r: GenerateResult): string | number | null {
  if (r.finishReason !== "stop") return null;
  if (r.stopString !== undefined) return r.stopString;
  const end = r.endTokenId;
  return end !== undefined && !ctx.config.eosTokenIds.includes(end) ? end : null;
}

/** OpenAI's wire form of a parsed call. */
function toolCallJson(c: ParsedToolCall) {
  return { id: c.id ?? `call_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`, type: "function", function: { name: c.name, arguments: c.arguments } };
}

/**
 * A turn that ended in tool calls leaves its session waiting on the first tool: its KV is kept for
 * the return. With several choices, the first choice's calls count (the agent continues one).
 */
export function noteToolWait(ctx: ServeContext, s: Submitted, calls: readonly ParsedToolCall[]): void {
  // The handle carries the request's session: its own key, or the one the engine inferred.
  const sid = s.handles[0].sessionId;
  if (sid !== undefined && calls.length > 0) ctx.engine.markToolWait(sid, calls[0].name);
}

/**
 * The failure the client gets: the first choice an engine refused, as its typed refusal's status (the
 * client's mistake or a full queue, refusals.ts), else the first that failed, as a 500.
 */
export function failure(results: readonly GenerateResult[], names: ParamNames = {}): ApiError | undefined {
  const refused = results.find((r) => r.refused !== undefined)?.refused;
  const mapped = refused && refusalError(refused, names);
  if (mapped) return mapped;
  const failed = results.find((r) => r.error);
  return failed && new ApiError(500, `Generation failed: ${failed.error}`, null, "engine_error");
}

/**
 * One choice of the non-streaming body; `prompt`: which of a completion's prompts it answers;
 * `scores`: that prompt's log probabilities (asked by its first generation only, openai.ts `submit`).
 */
function choiceJson(ctx: ServeContext, s: Submitted, r: GenerateResult, index: number, prompt: number, scores: GenerateResult["promptLogprobs"]): Json {
  if (s.kind === "chat" && s.output) {
    const { reasoning, content, calls } = parseChatOutput(r.text, s.output);
    if (index === 0) noteToolWait(ctx, s, calls);
    // vLLM's echo goes first, whether or not the answer has text of its own.
    const message = {
      role: "assistant", content: s.echo === undefined ? content : s.echo + (content ?? ""),
      ...(s.output.reasoning ? { reasoning_content: reasoning } : {}),
      ...(calls.length > 0 ? { tool_calls: calls.map(toolCallJson) } : {}),
    };
    const logprobs = r.logprobs ? chatLogprobs(ctx.tokenizer, r.logprobs) : null;
    return { index, message, logprobs, finish_reason: finishReason(r.finishReason, calls.length > 0), stop_reason: stopReason(ctx, r) };
  }
  // A completion's Submitted always has its shape (submitCompletion).
  const shape = s.completion!;
  const { text, logprobs } = completionChoice(ctx.tokenizer, shape, prompt, r, scores);
  const scored = s.promptLogprobs === undefined ? {} : { prompt_logprobs: promptLogprobsJson(ctx.tokenizer, scores ?? [], s.promptLogprobs) };
  return { index, text, logprobs, finish_reason: shape.scoreOnly ? "length" : finishReason(r.finishReason), stop_reason: shape.scoreOnly ? null : stopReason(ctx, r), ...scored };
}

/** The non-streaming response body. */
export async function completeJson(ctx: ServeContext, s: Submitted): Promise<Json> {
  const results = await Promise.all(s.handles.map((h) => h.result));
  const err = failure(results, s.params);
  if (err) throw err;
  const base = { id: `${s.kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`, created: Math.floor(Date.now() / 1000), model: ctx.modelName };
  // Each prompt's generations in turn; `best_of` keeps the likeliest n of each.
  const choices: Json[] = [];
  for (let p = 0; p * s.perPrompt < results.length; p++) {
    const group = results.slice(p * s.perPrompt, (p + 1) * s.perPrompt);
    const keep = s.perPrompt > s.n ? bestOf(group, s.n) : group.map((_, i) => i);
    keep.forEach((g, j) => choices.push(choiceJson(ctx, s, group[g], p * s.n + j, p, group[0].promptLogprobs)));
  }
  // vLLM puts a chat prompt's log probabilities beside the choices (one prompt for all of them).
  const scored = s.kind === "chat" && s.promptLogprobs !== undefined ? { prompt_logprobs: promptLogprobsJson(ctx.tokenizer, results[0].promptLogprobs ?? [], s.promptLogprobs) } : {};
  return { ...base, object: s.kind === "chat" ? "chat.completion" : "text_completion", choices, usage: usage(s, results), ...scored, ...tierJson(s) };
}

/** One choice of a stream: its chat parser, tool calls, and log probabilities not yet sent. */
class ChoiceStream {
  readonly calls: ParsedToolCall[] = [];
  private readonly answer: ChatOutputStream | null;
  // Log probabilities of tokens not yet sent go with the next chunk (the chat parser may hold text back).
  private pending: TokenLogprob[] = [];
  /** Completions: where the next token's text starts (after the echoed prompt, if any). */
  private offsets: TextOffsets | undefined;

  private readonly kind: Kind;
  private readonly shape: CompletionShape | undefined;
  /** The prompt still to be echoed (undefined: none, or sent). */
  private echo: EchoedPrompt | undefined;

  /** `prompt`: which of a completion's prompts the choice answers. */
  constructor(private readonly ctx: ServeContext, s: Submitted, readonly index: number, prompt: number) {
    this.kind = s.kind;
    this.answer = s.output ? new ChatOutputStream(s.output) : null;
    this.shape = s.completion;
    this.echo = s.completion?.echo ? s.completion.prompts[prompt] : undefined;
  }

  /** The choices of the chunks sent before any generation: the echoed prompt, unless it waits for its log probabilities. */
  start(): Json[] {
    return this.echo && this.shape!.logprobs === null ? this.echoed(undefined) : [];
  }

  /** The choices (one each) of the chunks a delta makes. */
  delta(d: StreamDelta): Json[] {
    const head = this.echo ? this.echoed(d.promptLogprobs) : [];
    if (this.shape?.scoreOnly) return head;
    if (d.logprobs) this.pending.push(...d.logprobs);
    if (!d.text) return head;
    if (this.answer) return [...head, ...this.parts(this.answer.push(d.text))];
    return [...head, this.withLogprobs({ text: d.text })];
  }

  /** The choices of the chunks that end this choice, given its result. */
  end(r: GenerateResult): Json[] {
    const head = this.echo ? this.echoed(r.promptLogprobs) : [];
    const rest = this.answer ? this.parts(this.answer.end()) : [];
    if (this.shape?.scoreOnly) return [...head, { index: this.index, logprobs: null, finish_reason: "length", text: "" }];
    const fr = finishReason(r.finishReason, this.calls.length > 0);
    const stop_reason = stopReason(this.ctx, r);
    return [...head, ...rest, this.withLogprobs(this.kind === "chat" ? { delta: {}, finish_reason: fr, stop_reason } : { text: "", finish_reason: fr, stop_reason })];
  }

  /** The echoed prompt's chunk (with its log probabilities when asked); later text offsets follow it. */
  private echoed(lps: readonly (TokenLogprob | null)[] | undefined): Json[] {
    const p = this.echo!;
    this.echo = undefined;
    this.offsets = new TextOffsets(this.ctx.tokenizer, p.text.length);
    const logprobs = this.shape!.logprobs !== null ? echoLogprobs(this.ctx.tokenizer, p, lps ?? [], this.shape!.logprobs) : null;
    return [{ index: this.index, logprobs, finish_reason: null, text: p.text }];
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
    const logprobs = this.kind === "chat" ? chatLogprobs(this.ctx.tokenizer, this.pending) : completionLogprobs(this.ctx.tokenizer, this.pending, this.offsets ??= new TextOffsets(this.ctx.tokenizer));
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
export function completeStream(ctx: ServeContext, s: Submitted, includeUsage: boolean, continuousUsage = false): ReadableStream<Uint8Array> {
  const { kind, handles } = s;
  const enc = new TextEncoder();
  const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  // vLLM's continuous usage counts per choice: the prompt its choice answers, that choice's tokens so
  // far (0 before any); the final usage chunk sums them all.
  const streamed = handles.map(() => 0);
  const promptOf = (i: number) => s.promptTokens ?? s.completion?.prompts[Math.floor(i / s.perPrompt)]?.ids.length ?? 0;
  const running = (choice: Json | null) => {
    if (!includeUsage || !continuousUsage || !choice) return {};
    const i = choice.index as number;
    return { usage: { prompt_tokens: promptOf(i), completion_tokens: streamed[i], total_tokens: promptOf(i) + streamed[i] } };
  };
  const chunk = (choice: Json | null, extra: Json = {}) => {
    const body = { id, object, created, model: ctx.modelName, choices: choice ? [choice] : [], ...(includeUsage ? { usage: null } : {}), ...running(choice), ...tierJson(s), ...extra };
    return enc.encode(`data: ${JSON.stringify(body)}\n\n`);
  };
  const cancelAll = () => handles.forEach((h) => h.cancel());
  let clientGone = false;
  return new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (choices: Json[]) => choices.forEach((c) => controller.enqueue(chunk(c)));
      try {
        // A stream carries every generation (best_of above n is refused with stream): handle i answers prompt ⌊i / perPrompt⌋.
        const choices = handles.map((_, i) => new ChoiceStream(ctx, s, i, Math.floor(i / s.perPrompt)));
        choices.forEach((c) => send(c.start()));
        if (kind === "chat") {
          choices.forEach((c) => send([{ index: c.index, logprobs: null, finish_reason: null, delta: { role: "assistant", content: "" } }]));
          // vLLM's echo: the echoed message's text, before anything generated.
          if (s.echo !== undefined) choices.forEach((c) => send([{ index: c.index, logprobs: null, finish_reason: null, delta: { content: s.echo } }]));
        }
        // Each choice streams as it is generated; its end waits for all of them to be known good.
        const results = await Promise.all(handles.map(async (h, i) => {
          for await (const d of h.stream) {
            streamed[i] += d.tokenIds.length;
            send(choices[i].delta(d));
          }
          return await h.result;
        }));
        // The client hung up (cancel() below): nobody is left to tell.
        if (clientGone) return;
        const err = failure(results, s.params);
        if (err) {
          // The engine (or the worker serving the request) failed: say so in OpenAI's error shape, then end the stream.
          cancelAll();
          controller.enqueue(enc.encode(`data: ${JSON.stringify(err.body())}\n\n`));
        } else {
          results.forEach((r, i) => send(choices[i].end(r)));
          noteToolWait(ctx, s, choices[0].calls);
          if (includeUsage) controller.enqueue(chunk(null, { usage: usage(s, results) }));
        }
        controller.enqueue(enc.encode("data: [DONE]\n\n"));
        controller.close();
      } catch (e) {
        // The client went away mid-write: stop generating for it.
        cancelAll();
        if (clientGone) return;
        // Anything else (a bug while writing the answer) ends the stream with an error event, which
        // would otherwise stay open with nothing more to come.
        const message = e instanceof Error ? e.message : String(e);
        console.error(`Completion stream failed: ${message}`);
        try {
          const error = { message: `The server failed while streaming the answer: ${message}`, type: "server_error", param: null, code: null };
          controller.enqueue(enc.encode(`data: ${JSON.stringify({ error })}\n\n`));
          controller.enqueue(enc.encode("data: [DONE]\n\n"));
          controller.close();
        } catch {
          // The stream was closed meanwhile: nothing more can be said.
        }
      }
    },
    cancel() {
      clientGone = true;
      cancelAll();
    },
  });
}

/** `service_tier` as OpenAI returns it, when the request named one. */
function tierJson(s: Submitted): Json {
  return s.serviceTier ? { service_tier: s.serviceTier } : {};
}

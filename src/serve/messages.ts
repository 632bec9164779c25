/**
 * The Anthropic Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): what Claude Code
 * and the `@anthropic-ai/sdk` client speak. A request becomes a chat request (system prompt, turns,
 * tool results as tool messages, earlier tool_use blocks as tool calls, thinking as reasoning) and is
 * answered by the chat path, so the model's template, tool-call parser and reasoning parser apply as
 * for `/v1/chat/completions`. `metadata.user_id` names the engine session (Claude Code sends one per
 * conversation), so agent-aware KV retention and the router follow it. A final assistant message is
 * a prefilled answer, which the model continues (the chat path's `continue_final_message`).
 */
import type { GenerateResult } from "../engine/engine-types.ts";
import { ChatOutputStream } from "./chat-output.ts";
import { ApiError, describe } from "./errors.ts";
import { namedEventStream } from "./event-stream.ts";
import { anthropicId, type MessageEvent, MessageOutput } from "./messages-output.ts";
import type { ContentBlockIn, MessagesPrompt, MessagesRequest } from "./messages-schema.ts";
import { chatPrompt, type ServeContext, type Submitted, submitChat } from "./openai.ts";
import { failure, noteToolWait } from "./respond.ts";
import type { ChatMessageIn, ChatRequest } from "./schemas.ts";

type Json = Record<string, unknown>;

/** A submitted Messages request. */
export interface MessagesTurn {
  id: string;
  submitted: Submitted;
  /** The stop sequences asked (to report which one ended the message). */
  stopSequences: readonly string[];
}

const textOf = (blocks: string | readonly { text?: string }[] | undefined) => (typeof blocks === "string" ? blocks : (blocks ?? []).map((b) => b.text ?? "").join(""));

/** The request's messages as chat messages (after the system prompt). */
function chatMessages(body: MessagesPrompt): ChatMessageIn[] {
  const out: ChatMessageIn[] = [];
  if (body.system !== undefined && textOf(body.system) !== "") out.push({ role: "system", content: textOf(body.system) });
  // A tool result names its function (some templates print it): the name of the tool_use it answers.
  const names = new Map<string, string>();
  for (const m of body.messages) {
    if (typeof m.content === "string") {
      out.push({ role: m.role, content: m.content });
      continue;
    }
    const blocks = m.content as ContentBlockIn[];
    if (m.role === "system") {
      out.push({ role: "system", content: textOf(blocks) });
      continue;
    }
    if (m.role === "assistant") {
      const reasoning = blocks.filter((b) => b.type === "thinking").map((b) => b.thinking ?? "").join("");
      const calls = blocks.filter((b) => b.type === "tool_use").map((b) => {
        names.set(b.id!, b.name!);
        return { id: b.id!, type: "function", function: { name: b.name!, arguments: JSON.stringify(b.input ?? {}) } };
      });
      const text = blocks.filter((b) => b.type === "text").map((b) => b.text ?? "").join("");
      out.push({
        role: "assistant", content: calls.length > 0 && text === "" ? null : text,
        ...(reasoning !== "" ? { reasoning_content: reasoning } : {}), ...(calls.length > 0 ? { tool_calls: calls } : {}),
      } as ChatMessageIn);
      continue;
    }
    // A user turn: its tool results (Anthropic puts them first) as tool messages, then its text.
    let text = "";
    for (const b of blocks) {
      if (b.type === "tool_result") {
        const name = names.get(b.tool_use_id!);
        const content = textOf(b.content);
        out.push({ role: "tool", tool_call_id: b.tool_use_id!, content: b.is_error ? `Error: ${content}` : content, ...(name ? { name } : {}) } as ChatMessageIn);
      } else if (b.type === "text") text += b.text ?? "";
    }
    if (text !== "" || !blocks.some((b) => b.type === "tool_result")) out.push({ role: "user", content: text });
  }
  return out;
}

/**
 * The chat request a Messages request is answered as; `thinking.budget_tokens` becomes its
 * `thinking_token_budget` when `tracksReasoning` (the engine knows the model's reasoning tokens).
 */
export function chatRequestOfMessages(body: MessagesPrompt & Partial<Pick<MessagesRequest, "max_tokens" | "temperature" | "top_p" | "top_k" | "stop_sequences">>, tracksReasoning = false): ChatRequest {
  const choice = body.tool_choice;
  const toolChoice = choice === undefined ? undefined
    : choice.type === "auto" ? "auto" : choice.type === "any" ? "required" : choice.type === "none" ? "none"
    : { type: "function", function: { name: (choice as { name: string }).name } };
  const parallel = choice !== undefined && "disable_parallel_tool_use" in choice && choice.disable_parallel_tool_use === true ? false : undefined;
  const tools = body.tools?.map((t) => ({ type: "function" as const, function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema } }));
  const messages = chatMessages(body);
  const last = messages[messages.length - 1];
  // A final assistant message without calls is a prefilled answer: the model continues it (an empty
  // one, which Anthropic's API also takes, prefills nothing).
  const finalAssistant = last?.role === "assistant" && !(last as { tool_calls?: unknown }).tool_calls;
  if (finalAssistant && typeof last.content === "string" && last.content === "" && !(last as { reasoning_content?: unknown }).reasoning_content) messages.pop();
  const prefilled = finalAssistant && messages[messages.length - 1] === last;
  return {
    model: body.model,
    messages,
    ...(prefilled ? { continue_final_message: true } : {}),
    ...(body.max_tokens !== undefined ? { max_tokens: body.max_tokens } : {}),
    ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
    ...(body.top_p !== undefined ? { top_p: body.top_p } : {}),
    ...(body.top_k !== undefined ? { top_k: body.top_k } : {}),
    ...(body.stop_sequences?.length ? { stop: body.stop_sequences } : {}),
    ...(tools?.length ? { tools } : {}),
    // The chat path refuses a forced choice without tools, or naming a tool not given (output-grammar.ts).
    ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
    ...(parallel === false ? { parallel_tool_calls: false } : {}),
    ...(body.metadata?.user_id ? { user: body.metadata.user_id } : {}),
    // Templates that can switch thinking (Qwen3's enable_thinking) follow the request; others ignore it.
    ...(body.thinking ? { chat_template_kwargs: { enable_thinking: body.thinking.type !== "disabled" } } : {}),
    // Kept where the engine tracks the model's reasoning tokens; elsewhere the model has no thinking it could stop.
    ...(body.thinking?.type === "enabled" && body.thinking.budget_tokens !== undefined && tracksReasoning ? { thinking_token_budget: body.thinking.budget_tokens } : {}),
  } as ChatRequest;
}

/** Checks what the chat path cannot take from a Messages request and submits it. */
export function submitMessages(ctx: ServeContext, body: MessagesRequest): MessagesTurn {
  const names = new Set(body.tools?.map((t) => t.name));
  if (names.size !== (body.tools?.length ?? 0)) throw new ApiError(400, "Tool names must be unique", "tools", "invalid_value");
  // (Checked here so that the message quotes tool_choice as this API writes it, not as the chat API does.)
  if ((body.tool_choice?.type === "any" || body.tool_choice?.type === "tool") && names.size === 0) {
    throw new ApiError(400, `Forcing a tool call with tool_choice ${describe(body.tool_choice)} needs at least one function in tools`, "tool_choice", "invalid_value");
  }
  return { id: anthropicId("msg"), submitted: submitChat(ctx, chatRequestOfMessages(body, ctx.tracksReasoning)), stopSequences: body.stop_sequences ?? [] };
}

/** `/v1/messages/count_tokens`: the prompt's token count as the model would see it. */
export function countMessageTokens(ctx: ServeContext, body: MessagesPrompt): Json {
  return { input_tokens: chatPrompt(ctx, chatRequestOfMessages(body)).prompt.length };
}

/** Anthropic's usage: input tokens counted apart from those read from the prefix cache. */
function usageOf(r: GenerateResult): Json {
  return { input_tokens: r.promptTokens - r.cachedTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: r.cachedTokens, output_tokens: r.completionTokens };
}

/** Why the message stopped, and the stop sequence that ended it (when one did). */
function stopOf(t: MessagesTurn, out: MessageOutput, r: GenerateResult): { stop_reason: string; stop_sequence: string | null } {
  if (out.calledTools) return { stop_reason: "tool_use", stop_sequence: null };
  if (r.finishReason === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  const seq = r.finishReason === "stop" && r.stopString !== undefined && t.stopSequences.includes(r.stopString) ? r.stopString : null;
  return { stop_reason: seq !== null ? "stop_sequence" : "end_turn", stop_sequence: seq };
}

/** The message object before its content (what `message_start` carries). */
function shell(ctx: ServeContext, t: MessagesTurn): Json {
  return { id: t.id, type: "message", role: "assistant", model: ctx.modelName, content: [], stop_reason: null, stop_sequence: null };
}

/** Runs the generation through the chat parser into `out`, handing each batch of events to `send`. */
async function generate(t: MessagesTurn, out: MessageOutput, send: (events: readonly MessageEvent[]) => void): Promise<GenerateResult> {
  const handle = t.submitted.handles[0];
  const chat = new ChatOutputStream(t.submitted.output!);
  for await (const d of handle.stream) if (d.text) send(out.push(chat.push(d.text)));
  const r = await handle.result;
  if (r.error) return r;
  send([...out.push(chat.end()), ...out.finish()]);
  return r;
}

/** The whole message, built from the same deltas and by the same code as a stream. */
export async function respondMessageJson(ctx: ServeContext, t: MessagesTurn): Promise<Json> {
  const out = new MessageOutput();
  const r = await generate(t, out, () => {});
  const err = failure([r]);
  if (err) throw err;
  noteToolWait(ctx, t.submitted, out.calls);
  return { ...shell(ctx, t), content: out.content, ...stopOf(t, out, r), usage: usageOf(r) };
}

/**
 * The streamed message: `message_start`, the events that build each content block as the text comes,
 * `message_delta` (stop reason and usage) and `message_stop`; an `error` event when the engine
 * failed. Each SSE event is named by its type. The client hanging up cancels the generation.
 */
export function respondMessageStream(ctx: ServeContext, t: MessagesTurn): ReadableStream<Uint8Array> {
  const out = new MessageOutput();
  return namedEventStream<MessageEvent>(t.submitted.handles[0], async (send, gone) => {
    const prompt = t.submitted.promptTokens ?? 0;
    send([{ type: "message_start", message: { ...shell(ctx, t), usage: { input_tokens: prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 } } }]);
    const r = await generate(t, out, send);
    if (gone()) return;
    const err = failure([r]);
    if (err) send([{ type: "error", error: { type: "api_error", message: err.message } }]);
    else {
      noteToolWait(ctx, t.submitted, out.calls);
      send([{ type: "message_delta", delta: stopOf(t, out, r), usage: usageOf(r) }, { type: "message_stop" }]);
    }
  });
}

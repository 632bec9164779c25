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
import { checkThinkingBudget, omitsThinking, thinkingOf } from "./messages-thinking.ts";
import { chatPrompt, type ServeContext, type Submitted, submitChat } from "./openai.ts";
import { checkSchema } from "./output-grammar.ts";
import { anthropicEffort } from "./reasoning-effort.ts";
import { failure, noteToolWait } from "./respond.ts";
import type { ChatMessageIn, ChatRequest } from "./schemas.ts";

type Json = Record<string, unknown>;

/** A submitted Messages request. */
export interface MessagesTurn {
  id: string;
  submitted: Submitted;
  /** The stop sequences asked (to report which one ended the message). */
  stopSequences: readonly string[];
  /** `thinking.display: "omitted"`: thinking blocks come back without their text (messages-thinking.ts). */
  omitThinking: boolean;
}

type TextBlocks = string | readonly { text?: string }[] | undefined;

/**
 * Blocks' text, each block's apart by `sep`: separate blocks of a user message or a tool result are
 * separate texts (vLLM joins their parts by a newline too), while the system prompt's blocks are
 * pieces of one text (Claude Code starts each with the newline it wants; vLLM joins them as they are).
 */
const textOf = (blocks: TextBlocks, sep = "") => (typeof blocks === "string" ? blocks : (blocks ?? []).map((b) => b.text ?? "").join(sep));

/**
 * What Claude Code puts first in its system prompt: a billing header whose nonce (`cch=…`) changes
 * with every request. Read by Anthropic's API alone and meaningless to a model, it is dropped (as
 * vLLM and SGLang do): at the prompt's very start, it would keep the prefix cache from answering any
 * turn of the conversation.
 */
const BILLING_HEADER = "x-anthropic-billing-header:";

/** System text as the model reads it: without the billing header (a block, or the first line of a string). */
function systemText(system: TextBlocks): string {
  if (typeof system === "string") return system.startsWith(BILLING_HEADER) ? system.replace(/^[^\n]*\n?/, "") : system;
  return textOf((system ?? []).filter((b) => !(b.text ?? "").startsWith(BILLING_HEADER)));
}

/** The request's messages as chat messages (after the system prompt). */
function chatMessages(body: MessagesPrompt): ChatMessageIn[] {
  const out: ChatMessageIn[] = [];
  const system = systemText(body.system);
  if (system !== "") out.push({ role: "system", content: system });
  // A tool result names its function (some templates print it): the name of the tool_use it answers.
  const names = new Map<string, string>();
  for (const m of body.messages) {
    if (m.role === "system") {
      out.push({ role: "system", content: systemText(m.content as TextBlocks) });
      continue;
    }
    if (typeof m.content === "string") {
      out.push({ role: m.role, content: m.content });
      continue;
    }
    const blocks = m.content as ContentBlockIn[];
    if (m.role === "assistant") {
      const reasoning = blocks.filter((b) => b.type === "thinking").map(thinkingOf).join("");
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
    // A user turn: its tool results (Anthropic puts them first) as tool messages, then its text and images.
    const parts: ChatPart[] = [];
    for (const b of blocks) {
      if (b.type === "tool_result") {
        const name = names.get(b.tool_use_id!);
        out.push({ role: "tool", tool_call_id: b.tool_use_id!, content: toolResultContent(b), ...(name ? { name } : {}) } as ChatMessageIn);
      } else if (b.type === "text" && b.text) parts.push({ type: "text", text: b.text });
      else if (b.type === "image") parts.push(imagePart(b.source!));
    }
    if (parts.length > 0 || !blocks.some((b) => b.type === "tool_result")) out.push({ role: "user", content: joinedParts(parts) });
  }
  return out;
}

type ChatPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

/** An image block's source as a chat image part: base64 data as a data URL, a URL as it is (serve/prompt-images.ts reads or refuses it). */
function imagePart(source: NonNullable<ContentBlockIn["source"]>): ChatPart {
  const url = source.type === "base64" ? `data:${source.media_type};base64,${source.data}` : source.url!;
  return { type: "image_url", image_url: { url } };
}

/** Parts as a chat message's content: text joined by newlines where there are no images, else the parts. */
function joinedParts(parts: readonly ChatPart[]): ChatMessageIn["content"] {
  if (parts.every((p) => p.type === "text")) return parts.map((p) => (p as { text: string }).text).join("\n");
  return [...parts];
}

/** A tool_result's content for its tool message: its text (an error's marked), and its images (a computer-use agent's screenshots). */
function toolResultContent(b: ContentBlockIn): ChatMessageIn["content"] {
  const blocks = typeof b.content === "string" || b.content === undefined ? [{ type: "text" as const, text: b.content ?? "" }] : b.content;
  const parts: ChatPart[] = blocks.map((c) => (c.type === "image" ? imagePart(c.source) : { type: "text", text: c.text }));
  if (b.is_error) parts.unshift({ type: "text", text: "Error: " });
  const joined = joinedParts(parts);
  // An error's text reads as before: "Error: " and the text in one piece.
  return b.is_error && typeof joined === "string" ? joined.replace(/^Error: \n/, "Error: ") : joined;
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
  // A strict tool's input is held to its input_schema, as a strict chat function's arguments are (output-grammar.ts).
  const tools = body.tools?.map((t) => ({ type: "function" as const, function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema, ...(t.strict === true ? { strict: true } : {}) } }));
  const messages = chatMessages(body);
  const last = messages[messages.length - 1];
  // A final assistant message without calls is a prefilled answer: the model continues it (an empty
  // one, which Anthropic's API also takes, prefills nothing).
  const finalAssistant = last?.role === "assistant" && !(last as { tool_calls?: unknown }).tool_calls;
  if (finalAssistant && typeof last.content === "string" && last.content === "" && !(last as { reasoning_content?: unknown }).reasoning_content) messages.pop();
  const prefilled = finalAssistant && messages[messages.length - 1] === last;
  const format = outputFormat(body)?.format;
  const effort = anthropicEffort(body.output_config?.effort);
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
    ...(format ? { response_format: { type: "json_schema", json_schema: { name: "output", schema: format.schema } } } : {}),
    ...(effort ? { reasoning_effort: effort } : {}),
  } as ChatRequest;
}

/** The structured output asked (`output_config.format`, or the beta's `output_format`), and where. */
function outputFormat(body: MessagesPrompt): { format: { schema: Record<string, unknown> }; param: string } | undefined {
  if (body.output_config?.format) return { format: body.output_config.format, param: "output_config.format" };
  return body.output_format ? { format: body.output_format, param: "output_format" } : undefined;
}

/** Checks what the chat path cannot take from a Messages request and submits it. */
export function submitMessages(ctx: ServeContext, body: MessagesRequest, betas: readonly string[] = []): MessagesTurn {
  const names = new Set(body.tools?.map((t) => t.name));
  if (names.size !== (body.tools?.length ?? 0)) throw new ApiError(400, "Tool names must be unique", "tools", "invalid_value");
  // (Checked here so that the message quotes tool_choice as this API writes it, not as the chat API does.)
  if ((body.tool_choice?.type === "any" || body.tool_choice?.type === "tool") && names.size === 0) {
    throw new ApiError(400, `Forcing a tool call with tool_choice ${describe(body.tool_choice)} needs at least one function in tools`, "tool_choice", "invalid_value");
  }
  checkOutputFormat(body, names.size > 0 && ctx.toolCallParser === "harmony");
  checkThinkingBudget(body, betas.some((b) => b.startsWith("interleaved-thinking-")));
  const submitted = submitChat(ctx, chatRequestOfMessages(body, ctx.tracksReasoning));
  return { id: anthropicId("msg"), submitted, stopSequences: body.stop_sequences ?? [], omitThinking: omitsThinking(body) };
}

/**
 * A structured output's schema must be one the decoder can follow. Beside tools the model may choose
 * to call (tool_choice auto, the default) the answer is calls or text that follows it (output-grammar.ts
 * `callsOrAnswer`), but in harmony (gpt-oss), whose calls begin in a message header, the schema would
 * hold the whole answer: `harmonyTools` there is a 400 rather than calls that could never come. A
 * forced call has no text, so its format is moot.
 */
function checkOutputFormat(body: MessagesRequest, harmonyTools: boolean): void {
  const asked = outputFormat(body);
  if (!asked) return;
  const { format, param } = asked;
  checkSchema(format.schema, param, `The ${param} schema`);
  const choice = body.tool_choice?.type ?? "auto";
  if (harmonyTools && choice === "auto") {
    throw new ApiError(400, `Structured output (${param}) with tools the model may call (tool_choice ${describe(body.tool_choice ?? { type: "auto" })}) is not supported in the harmony format: text held to the schema cannot also call a tool; set tool_choice to {"type":"none"}, or force a tool call`, param, "unsupported_parameter");
  }
}

/** `/v1/messages/count_tokens`: the prompt's token count as the model would see it. */
export function countMessageTokens(ctx: ServeContext, body: MessagesPrompt): Json {
  checkThinkingBudget(body);
  return { input_tokens: chatPrompt(ctx, chatRequestOfMessages(body)).prompt.length };
}

/** Anthropic's usage: input tokens counted apart from those read from the prefix cache. */
function usageOf(r: GenerateResult): Json {
  return { input_tokens: r.promptTokens - r.cachedTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: r.cachedTokens, output_tokens: r.completionTokens };
}

/** Why the message stopped, and the stop sequence that ended it (when one did). */
function stopOf(t: MessagesTurn, out: MessageOutput, r: GenerateResult): { stop_reason: string; stop_sequence: string | null } {
  // The budget ending the message is said first, as Anthropic does, even after complete calls (the
  // SDK's tool runner then stops rather than running them).
  if (r.finishReason === "length") return { stop_reason: "max_tokens", stop_sequence: null };
  if (out.calledTools) return { stop_reason: "tool_use", stop_sequence: null };
  const seq = r.finishReason === "stop" && r.stopString !== undefined && t.stopSequences.includes(r.stopString) ? r.stopString : null;
  return { stop_reason: seq !== null ? "stop_sequence" : "end_turn", stop_sequence: seq };
}

/** The message object before its content (what `message_start` carries). */
function shell(ctx: ServeContext, t: MessagesTurn): Json {
  return { id: t.id, type: "message", role: "assistant", model: ctx.modelName, content: [], stop_reason: null, stop_sequence: null };
}

/** Runs the generation through the chat parser into `out`, handing each batch of events to `send`. */
async function generate(
  t: MessagesTurn, out: MessageOutput, send: (events: readonly MessageEvent[]) => void, start: (cachedTokens: number | undefined) => void = () => {},
): Promise<GenerateResult> {
  const handle = t.submitted.handles[0];
  const chat = new ChatOutputStream(t.submitted.output!);
  let started = false;
  for await (const d of handle.stream) {
    if (!started) start(d.cachedTokens);
    started = true;
    if (d.text) send(out.push(chat.push(d.text)));
  }
  const r = await handle.result;
  if (!started) start(r.error ? undefined : r.cachedTokens);
  if (r.error) return r;
  // What the parsers held back to the end is, when max_tokens cut the answer with tools to call, the
  // start of a call the budget cut short: neither a call nor the model's text, it is dropped (as
  // Anthropic never shows a call as text) rather than returned as its markup.
  const held = chat.end();
  const cut = r.finishReason === "length" && t.submitted.output?.toolCalls === true;
  send([...out.push(cut ? held.filter((p) => p.kind !== "content") : held), ...out.finish()]);
  return r;
}

/** The whole message, built from the same deltas and by the same code as a stream. */
export async function respondMessageJson(ctx: ServeContext, t: MessagesTurn): Promise<Json> {
  const out = new MessageOutput(t.omitThinking);
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
  const out = new MessageOutput(t.omitThinking);
  return namedEventStream<MessageEvent>(t.submitted.handles[0], async (send, gone) => {
    const prompt = t.submitted.promptTokens ?? 0;
    // Sent with the first delta, which knows the prompt's cache hit: input usage here splits as the
    // final message_delta's does (Anthropic's input_tokens leaves out the tokens read from the cache).
    const start = (cached: number | undefined) => {
      const read = Math.min(cached ?? 0, prompt);
      send([{ type: "message_start", message: { ...shell(ctx, t), usage: { input_tokens: prompt - read, cache_creation_input_tokens: 0, cache_read_input_tokens: read, output_tokens: 0 } } }]);
    };
    const r = await generate(t, out, send, start);
    if (gone()) return;
    const err = failure([r]);
    if (err) send([{ type: "error", error: { type: "api_error", message: err.message } }]);
    else {
      noteToolWait(ctx, t.submitted, out.calls);
      send([{ type: "message_delta", delta: stopOf(t, out, r), usage: usageOf(r) }, { type: "message_stop" }]);
    }
  });
}

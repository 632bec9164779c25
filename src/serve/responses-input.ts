/**
 * The input side of the Responses API: a request's input items (after the stored conversation it
 * continues) become chat messages, and the request the chat path answers. A turn's reasoning, text
 * and calls in a row are one assistant message, as the chat API writes them; a call's output names
 * its function (looked up by `call_id`), which some chat templates print.
 */
import { thinkingOf } from "./messages-thinking.ts";
import type { ChatMessageIn, ChatRequest, ToolDef } from "./schemas.ts";
import type { ToolCallSyntax } from "../engine/grammar.ts";
import { toolCallGroup } from "../engine/grammar-tool-calls.ts";
import { type JsonSchema, nestsTooDeeply, SchemaError } from "../engine/json-schema.ts";
import { ApiError } from "./errors.ts";
import type { FunctionCallOutputItemIn, FunctionToolIn, InputItem, ResponsesRequest, TextPartIn } from "./responses-schema.ts";
import { itemIdPrefix, newId } from "./responses-output.ts";

type Json = Record<string, unknown>;

/** The text of a content field: a string, or its parts' texts joined. */
function textOf(content: string | TextPartIn[]): string {
  return typeof content === "string" ? content : content.map((p) => (p.type === "refusal" ? p.refusal ?? "" : p.text ?? "")).join("");
}

/**
 * A content field as a chat message's content: its text, or where it holds images, its parts in
 * order (images as chat image parts: a tool's screenshot reaches the model as a user's image does).
 */
function contentOf(content: string | TextPartIn[]): ChatMessageIn["content"] {
  if (typeof content === "string" || !content.some((p) => p.type === "input_image")) return textOf(content);
  return content.map((p) => (p.type === "input_image" ? { type: "image_url" as const, image_url: { url: p.image_url! } } : { type: "text" as const, text: textOf([p]) }));
}

interface AssistantDraft {
  role: "assistant";
  content: string | null;
  reasoning_content?: string;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
}

/** The function name of every call in `messages` by call id. */
function callNames(messages: readonly ChatMessageIn[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of messages) {
    const calls = (m as { tool_calls?: { id?: string; function?: { name?: string } }[] }).tool_calls ?? [];
    for (const c of calls) if (c.id && c.function?.name) names.set(c.id, c.function.name);
  }
  return names;
}

/** Input items (checked by the schema) as chat messages; `before`: the conversation they follow. */
export function itemsToMessages(items: readonly InputItem[], before: readonly ChatMessageIn[] = []): ChatMessageIn[] {
  const names = callNames(before);
  const out: ChatMessageIn[] = [];
  let turn: AssistantDraft | null = null;
  const flush = () => {
    if (turn) out.push({ ...turn, content: turn.content ?? (turn.tool_calls ? null : "") } as ChatMessageIn);
    turn = null;
  };
  // The assistant turn an item adds to; a new one when the current already has text or calls.
  const assistant = (fresh: boolean): AssistantDraft => {
    if (turn && fresh && (turn.content !== null || turn.tool_calls)) flush();
    return (turn ??= { role: "assistant", content: null });
  };
  for (const item of items) {
    switch (item.type ?? "message") {
      case "reasoning": {
        const r = item as Extract<InputItem, { type: "reasoning" }>;
        const parts = r.content?.length ? r.content : r.summary ?? [];
        let text = parts.map((p) => p.text).join("");
        // A stateless client (store: false) sends the item back with its encrypted_content only.
        if (text === "" && typeof r.encrypted_content === "string") text = thinkingOf({ signature: r.encrypted_content });
        const a = assistant(true);
        a.reasoning_content = (a.reasoning_content ?? "") + text;
        break;
      }
      case "function_call": {
        const c = item as Extract<InputItem, { type: "function_call" }>;
        names.set(c.call_id, c.name);
        const a = assistant(false);
        (a.tool_calls ??= []).push({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } });
        break;
      }
      case "function_call_output": {
        const o = item as Extract<InputItem, { type: "function_call_output" }>;
        flush();
        const name = names.get(o.call_id);
        out.push({ role: "tool", tool_call_id: o.call_id, content: contentOf(o.output), ...(name ? { name } : {}) } as ChatMessageIn);
        break;
      }
      default: {
        const m = item as Extract<InputItem, { role: string }>;
        if (m.role === "assistant") {
          if (typeof m.content !== "string" && m.content.some((p) => p.type === "input_image")) {
            throw new ApiError(400, "An assistant message cannot hold an input_image part: images go in user messages and function_call_output items", "input", "invalid_value");
          }
          const a = assistant(true);
          a.content = (a.content ?? "") + textOf(m.content);
        } else {
          flush();
          out.push({ role: m.role, content: contentOf(m.content) });
        }
      }
    }
  }
  flush();
  return out;
}

/**
 * The index of the first function_call_output in `items` that answers no call made before it (in
 * `before`, the conversation the items follow, or earlier in `items`); -1 when every output has its
 * call. OpenAI refuses such an output: chat templates would show the model a tool result out of nowhere.
 */
function orphanOutput(items: readonly InputItem[], before: readonly ChatMessageIn[]): number {
  const calls = new Set(callNames(before).keys());
  for (const [i, item] of items.entries()) {
    if (item.type === "function_call") calls.add(item.call_id);
    else if (item.type === "function_call_output" && !calls.has(item.call_id)) return i;
  }
  return -1;
}

/**
 * A turn's input, its item references replaced by `resolve`. Input may be left out when the turn
 * answers a conversation (`conversationId`) or stored response whose `history` is not empty; a
 * function_call_output must follow its call. A 400 otherwise.
 */
export function turnInput(input: ResponsesRequest["input"], history: readonly ChatMessageIn[], conversationId: string | null, resolve: (items: readonly unknown[]) => unknown[]): string | InputItem[] {
  if (typeof input === "string") return input;
  if ((input === undefined || input === null) && history.length === 0) {
    const what = conversationId ? `conversation '${conversationId}' holds no items` : "no conversation or previous_response_id is given";
    throw new ApiError(400, `input is required (a string, or an array of input items): ${what}`, "input", "missing_required_parameter");
  }
  const items = resolve(input ?? []) as InputItem[];
  const orphan = orphanOutput(items, history);
  if (orphan >= 0) {
    const callId = (items[orphan] as FunctionCallOutputItemIn).call_id;
    throw new ApiError(400, `No tool call found for the function_call_output with call_id '${callId}' (input[${orphan}]): send the function_call item before it, or continue the response or conversation that made the call`, `input[${orphan}].call_id`, "invalid_value");
  }
  return items;
}

/** The request's input as a list of items in their full form (`type` given, string contents as text parts); ids as given. */
export function normalizedItems(input: ResponsesRequest["input"] | readonly InputItem[]): Json[] {
  const items: Json[] = typeof input === "string" ? [{ type: "message", role: "user", content: [{ type: "input_text", text: input }] }] : (input as Json[]);
  return items.map((it) => {
    const type = (it.type as string | undefined) ?? "message";
    const content = type === "message" && typeof it.content === "string" ? [{ type: it.role === "assistant" ? "output_text" : "input_text", text: it.content }] : it.content;
    return { ...it, type, ...(content === undefined ? {} : { content }) };
  });
}

/** The request's input as a list of items, each with an id (what `GET /v1/responses/{id}/input_items` lists). */
export function inputItemsOf(input: ResponsesRequest["input"]): Json[] {
  return normalizedItems(input).map((it) => ({ ...it, id: typeof it.id === "string" && it.id ? it.id : newId(itemIdPrefix(it.type)) }));
}

/** The assistant message a finished turn adds to the conversation (for the next turn's prompt). */
export function outputMessage(reasoning: string | null, text: string, calls: readonly { call_id: string; name: string; arguments: string }[]): ChatMessageIn {
  return {
    role: "assistant",
    content: calls.length > 0 && text.trim() === "" ? null : text,
    ...(reasoning !== null ? { reasoning_content: reasoning } : {}),
    ...(calls.length > 0 ? { tool_calls: calls.map((c) => ({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } })) } : {}),
  } as ChatMessageIn;
}

/**
 * The function tools the model is shown, in the chat shape: top-level ones and those of each
 * namespace (by their own names), hosted tools left out (this server runs none); `namespaceOf` names
 * the namespace of each namespaced function, for its calls' items. A name given twice is a 400.
 * A tool's `strict` omitted (or null) is strict where its parameters can be held in `format`, as
 * OpenAI's Responses API defaults it; `strict: false` opts out ({@link strictIfPossible}).
 * `strictOf` names the `strict` applied to each function (what the response echoes in `tools`).
 */
export function functionTools(tools: ResponsesRequest["tools"], format: ToolCallSyntax = "hermes"): { tools: ToolDef[]; namespaceOf: Map<string, string>; strictOf: Map<string, boolean> } {
  const out: ToolDef[] = [];
  const namespaceOf = new Map<string, string>();
  const strictOf = new Map<string, boolean>();
  const add = (t: FunctionToolIn, namespace?: string) => {
    if (strictOf.has(t.name)) throw new ApiError(400, `The tool name '${t.name}' is given twice${namespace ? ` (again in namespace '${namespace}')` : ""}; the model calls tools by name`, "tools", "invalid_value");
    if (namespace !== undefined) namespaceOf.set(t.name, namespace);
    // `strict: true` holds the tool's calls to its parameters, as in chat (output-grammar.ts).
    const strict = t.strict ?? strictIfPossible(t.parameters ?? undefined, format);
    strictOf.set(t.name, strict);
    out.push({ type: "function", function: { name: t.name, ...(t.description ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}), ...(strict ? { strict: true } : {}) } });
  };
  for (const t of tools ?? []) {
    if (t.type === "function") add(t as FunctionToolIn);
    else if (t.type === "namespace") for (const inner of (t as { tools: FunctionToolIn[] }).tools) add(inner, (t as { name: string }).name);
  }
  return { tools: out, namespaceOf, strictOf };
}

/**
 * The request's `tools` as the response echoes them: each function (a namespace's too) with the
 * `strict` applied to it (`strictOf`, from {@link functionTools}), true or false, never omitted, as OpenAI's response does.
 */
export function echoedTools(tools: ResponsesRequest["tools"], strictOf: ReadonlyMap<string, boolean>): Json[] {
  const withStrict = (t: FunctionToolIn) => ({ ...t, strict: strictOf.get(t.name) ?? t.strict ?? false });
  return (tools ?? []).map((t) => {
    if (t.type === "function") return withStrict(t as FunctionToolIn) as Json;
    if (t.type === "namespace") return { ...t, tools: (t as { tools: FunctionToolIn[] }).tools.map(withStrict) } as Json;
    return t as Json;
  });
}

/**
 * Whether a function whose `strict` is omitted is strict: OpenAI's Responses API makes it strict
 * (its schema normalized into strict mode), and where the schema cannot be, best effort, as with
 * `strict: false` (no 400: only an explicit `strict: true` is refused for a schema strict mode cannot
 * follow). Here: whether the output grammar can hold the parameters in the model's tool-call `format`.
 */
function strictIfPossible(parameters: Record<string, unknown> | undefined, format: ToolCallSyntax): boolean {
  try {
    toolCallGroup({ tools: [{ name: "f", ...(parameters === undefined ? {} : { parameters: parameters as JsonSchema }) }], parallel: false, format });
    return true;
  } catch (e) {
    if (e instanceof SchemaError || nestsTooDeeply(e)) return false;
    throw e;
  }
}

/**
 * The chat request that answers a Responses request: `instructions` as the system message, then the
 * stored conversation, then this turn's input; `tools` (from {@link functionTools}); `text.format`
 * as `response_format`; `reasoning.effort` as chat's `reasoning_effort` (reasoning-effort.ts maps both alike).
 */
export function chatRequestOf(body: ResponsesRequest, history: readonly ChatMessageIn[], input: readonly ChatMessageIn[], sessionId: string | undefined, tools: readonly ToolDef[]): ChatRequest {
  const choice = body.tool_choice;
  const format = body.text?.format;
  const responseFormat = !format ? undefined : format.type === "json_schema"
    ? { type: "json_schema", json_schema: { name: (format as { name?: string | null }).name ?? "response", schema: (format as { schema: Json }).schema, strict: (format as { strict?: boolean | null }).strict ?? false } }
    : { type: format.type };
  const effort = body.reasoning?.effort;
  return {
    model: body.model,
    messages: [...(body.instructions ? [{ role: "system" as const, content: body.instructions }] : []), ...history, ...input],
    ...(tools.length > 0 ? { tools } : {}),
    ...(choice ? { tool_choice: chatToolChoice(choice) } : {}),
    ...(body.parallel_tool_calls !== undefined && body.parallel_tool_calls !== null ? { parallel_tool_calls: body.parallel_tool_calls } : {}),
    ...(responseFormat ? { response_format: responseFormat } : {}),
    max_completion_tokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    top_k: body.top_k ?? undefined,
    seed: body.seed ?? undefined,
    ...(body.priority ? { priority: body.priority } : {}),
    ...(body.cache_salt ? { cache_salt: body.cache_salt } : {}),
    ...(body.service_tier ? { service_tier: body.service_tier } : {}),
    stream: body.stream ?? false,
    ...(sessionId !== undefined ? { prompt_cache_key: sessionId } : {}),
    ...(effort ? { reasoning_effort: effort } : {}),
  } as ChatRequest;
}

/** A Responses `tool_choice` in chat's shape (functions and allowed tools named under `function`). */
function chatToolChoice(choice: NonNullable<ResponsesRequest["tool_choice"]>): NonNullable<ChatRequest["tool_choice"]> {
  if (typeof choice === "string") return choice;
  if (choice.type === "function") return { type: "function", function: { name: choice.name } };
  return { type: "allowed_tools", allowed_tools: { mode: choice.mode, tools: choice.tools.map((t) => ({ type: "function" as const, function: { name: t.name } })) } };
}

/**
 * OpenAI's Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`,
 * `GET /v1/responses/{id}/input_items`) over the chat path: a request becomes a chat request
 * (responses-input.ts), is answered as chat answers are (templates, tool-call and reasoning parsers,
 * grammars), and its answer becomes output items (responses-output.ts). `previous_response_id`
 * continues a stored conversation, `conversation` a Conversations API one (conversations.ts), and
 * `truncation: "auto"` drops its oldest items when it is too long (responses-truncation.ts). A
 * conversation is one engine session (its first response's id or the conversation's, unless the client names one with
 * `prompt_cache_key` or `user`), so a turn that ends in function calls leaves its KV kept for the
 * tools' return under agent retention, with no extra field.
 */
import { resolveItemReferences } from "./item-references.ts";
import { ChatOutputStream } from "./chat-output.ts";
import type { Conversation, ConversationStore } from "./conversation-store.ts";
import { checkRoom, unknownConversation } from "./conversations.ts";
import { ApiError, describe } from "./errors.ts";
import { appliedTier, type ServeContext, type Submitted, submitChat } from "./openai.ts";
import { chatLogprobs } from "./logprobs-json.ts";
import { failure, noteToolWait } from "./respond.ts";
import { namedEventStream } from "./event-stream.ts";
import { type ResponseStore, type StoredResponse, UnknownResponseError } from "./response-store.ts";
import { chatRequestOf, echoedTools, functionTools, inputItemsOf, itemsToMessages, outputMessage, turnInput } from "./responses-input.ts";
import { newId, ResponseOutput, type ResponseEvent } from "./responses-output.ts";
import { truncated } from "./responses-truncation.ts";
import type { InputItem, ResponsesRequest } from "./responses-schema.ts";
import type { ChatMessageIn, ChatRequest } from "./schemas.ts";
import type { GenerateResult } from "../engine/engine-types.ts";
import type { BackgroundRuns } from "./responses-background.ts";

type Json = Record<string, unknown>;

/** What the Responses routes keep between requests. */
export interface ResponsesState {
  responses: ResponseStore;
  conversations: ConversationStore;
  /** Background responses still running, and the events of the last ones finished. */
  background: BackgroundRuns;
}

/** A submitted Responses request and what answering (and storing) it needs. */
export interface ResponseTurn {
  id: string;
  submitted: Submitted;
  /** The response object's fields that echo the request. */
  shell: Json;
  /** Whether the finished response is kept (`store`, and a store with room). */
  store: boolean;
  inputItems: Json[];
  /** This turn's input as chat messages. */
  input: ChatMessageIn[];
  previousId: string | null;
  /** The conversation the turn continues and extends (`conversation`), if any. */
  conversation: Conversation | null;
  sessionId: string | undefined;
  maxToolCalls: number;
  /** The namespace of each namespaced function tool. */
  namespaceOf: ReadonlyMap<string, string>;
  /** `include` asked for `reasoning.encrypted_content`: reasoning items carry their text there too. */
  sealReasoning?: boolean;
  /** Whether the output text carries its tokens' log probabilities. */
  logprobs: boolean;
}

/** Where the chat path's parameter names differ from the Responses API's. */
const PARAM_NAMES: [string, string][] = [["messages", "input"], ["response_format", "text.format"], ["max_completion_tokens", "max_output_tokens"], ["chat_template_kwargs", "reasoning"], ["reasoning_effort", "reasoning.effort"]];

/** A chat-path parameter (or path into one) as the Responses API names it. */
function renamedParam(param: string): string {
  const hit = PARAM_NAMES.find(([chat]) => param === chat || param.startsWith(`${chat}.`) || param.startsWith(`${chat}[`));
  return hit ? hit[1] + param.slice(hit[0].length) : param;
}

/** A chat-path error as the Responses API names its parameters. */
function renamed(e: ApiError): ApiError {
  const param = e.param === null ? null : renamedParam(e.param);
  const message = e.message.replaceAll("response_format", "text.format").replaceAll("max_completion_tokens", "max_output_tokens");
  return new ApiError(e.status, message, param, e.code, e.type);
}

function unsupported(message: string, param: string): ApiError {
  return new ApiError(400, message, param, "unsupported_parameter");
}

/** Refuses what the request asks that this server cannot do, naming it. */
function checkSupported(body: ResponsesRequest): void {
  if (body.background && body.store === false) {
    throw new ApiError(400, "A background response must be stored to be read back: send store = true (the default) with background = true", "store", "invalid_value");
  }
  if (body.prompt !== undefined && body.prompt !== null) throw unsupported(`Stored prompt templates are not supported, got prompt = ${describe(body.prompt)}; send the instructions and input themselves`, "prompt");
  const at = (body.include ?? []).findIndex((x) => !INCLUDABLE.includes(x));
  if (at >= 0) {
    throw new ApiError(400, `Invalid value for 'include[${at}]': must be one of ${INCLUDABLE.map((x) => JSON.stringify(x)).join(", ")}, got ${JSON.stringify(body.include![at])}`, `include[${at}]`, "invalid_value");
  }
}

/**
 * OpenAI's `include` values (`ResponseIncludable`), all accepted as vLLM accepts them. The output
 * text's log probabilities are returned; the rest are no-ops here: reasoning always comes back as
 * text (never encrypted), and the hosted tools (web and file search, code interpreter, computer use)
 * are accepted but never run, nor are input images taken, so there is nothing of theirs to include.
 */
const INCLUDABLE = [
  "message.output_text.logprobs", "reasoning.encrypted_content", "web_search_call.action.sources", "web_search_call.results",
  "file_search_call.results", "code_interpreter_call.outputs", "computer_call_output.output.image_url", "message.input_image.image_url",
];

/** Whether the request asks for the output text's log probabilities, and how many alternatives per token. */
function logprobsAsked(body: ResponsesRequest): number | undefined {
  const asked = (body.include ?? []).includes("message.output_text.logprobs") || (body.top_logprobs ?? 0) > 0;
  return asked ? body.top_logprobs ?? 0 : undefined;
}

/** The conversation a turn continues: the stored chain's or conversation's messages, and its session. */
function continued(state: ResponsesState, body: ResponsesRequest): { history: ChatMessageIn[]; session?: string; conversation: Conversation | null } {
  const previousId = body.previous_response_id ?? null;
  const conversationId = typeof body.conversation === "string" ? body.conversation : body.conversation?.id ?? null;
  if (previousId !== null && conversationId !== null) {
    throw new ApiError(400, "previous_response_id and conversation cannot both be given: a turn continues either a stored response or a conversation", "conversation", "invalid_value");
  }
  if (conversationId !== null) {
    const conversation = state.conversations.get(conversationId);
    if (!conversation) throw unknownConversation(state.conversations, conversationId, "conversation");
    // Its items passed the input items' checks when they were added, or are this server's output.
    return { history: itemsToMessages(conversation.items as unknown as InputItem[]), session: conversation.id, conversation };
  }
  if (previousId === null) return { history: [], conversation: null };
  if (state.background.running(previousId)) {
    throw new ApiError(400, `Previous response with id '${previousId}' is still in progress; continue it once it has completed`, "previous_response_id", "invalid_value");
  }
  try {
    const { messages, sessionId } = state.responses.conversation(previousId);
    return { history: messages, session: sessionId, conversation: null };
  } catch (e) {
    if (!(e instanceof UnknownResponseError)) throw e;
    const which = e.id === previousId ? "" : ` (it continues '${e.id}', which is gone)`;
    throw new ApiError(400, `Previous response with id '${previousId}' not found${which}; responses are kept only with store = true, and the server keeps the ${state.responses.capacity} most recently used`, "previous_response_id", "previous_response_not_found");
  }
}

/**
 * Submits a turn's chat request, dropping its oldest items first if it is too long and `truncation`
 * is "auto". Its refusals found later (a worker's, the engine's) name the Responses API's fields too.
 */
function submitTurn(ctx: ServeContext, chat: ChatRequest, truncation: ResponsesRequest["truncation"]): Submitted {
  const named = (s: Submitted): Submitted => ({
    ...s, params: { prompt: "input", ...Object.fromEntries(Object.entries(s.params ?? {}).map(([field, param]) => [field, renamedParam(param)])) },
  });
  try {
    try {
      return named(submitChat(ctx, chat));
    } catch (e) {
      if (truncation !== "auto" || !(e instanceof ApiError) || e.code !== "context_length_exceeded") throw e;
      return named(submitChat(ctx, truncated(ctx, chat)));
    }
  } catch (e) {
    throw e instanceof ApiError ? renamed(e) : e;
  }
}

/** Checks, converts and submits a Responses request. */
export function submitResponse(ctx: ServeContext, state: ResponsesState, body: ResponsesRequest): ResponseTurn {
  checkSupported(body);
  if (body.background && state.responses.capacity === 0) {
    throw new ApiError(400, "A background response must be stored to be read back, and this server keeps no responses (it was started with --max-stored-responses 0); send the request without background = true", "background", "unsupported_parameter");
  }
  const previousId = body.previous_response_id ?? null;
  const { history, session, conversation } = continued(state, body);
  const id = newId("resp");
  const stored = (body.store ?? true) && state.responses.capacity > 0;
  // A conversation is one session: the client's key, else the chain's or conversation's, else this response's own.
  const sessionId = body.prompt_cache_key || body.user || session || (stored ? id : undefined);
  const given = turnInput(body.input, history, conversation?.id ?? null, (items) => resolveItemReferences(items, state.responses, conversation));
  const input = itemsToMessages(typeof given === "string" ? [{ role: "user", content: given }] : given, history);
  const topLogprobs = logprobsAsked(body);
  const { tools, namespaceOf, strictOf } = functionTools(body.tools, ctx.toolCallParser);
  // (Checked here so that the message quotes tool_choice as this API writes it, not as the chat API does.)
  if (body.tool_choice && body.tool_choice !== "auto" && body.tool_choice !== "none" && tools.length === 0) {
    const what = typeof body.tool_choice === "object" && body.tool_choice.type === "allowed_tools" ? "Allowing tool calls" : "Forcing a tool call";
    throw new ApiError(400, `${what} with tool_choice ${describe(body.tool_choice)} needs at least one function in tools`, "tool_choice", "invalid_value");
  }
  const chat = { ...chatRequestOf(body, history, input, sessionId, tools), ...(topLogprobs !== undefined ? { logprobs: true, top_logprobs: topLogprobs } : {}) };
  const inputItems = inputItemsOf(given as ResponsesRequest["input"]);
  if (conversation) checkRoom(state.conversations, conversation, inputItems, "input");
  const submitted = submitTurn(ctx, chat, body.truncation);
  const parallel = body.parallel_tool_calls ?? true;
  const shell: Json = {
    id, object: "response", created_at: Math.floor(Date.now() / 1000), model: ctx.modelName,
    background: body.background === true, conversation: conversation ? { id: conversation.id } : null, error: null, incomplete_details: null,
    instructions: body.instructions ?? null, max_output_tokens: body.max_output_tokens ?? null, max_tool_calls: body.max_tool_calls ?? null,
    metadata: body.metadata ?? {}, parallel_tool_calls: parallel, previous_response_id: previousId, prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: null }, store: stored, service_tier: appliedTier(ctx, body.service_tier),
    temperature: body.temperature ?? 1, text: { format: body.text?.format ?? { type: "text" } }, tool_choice: body.tool_choice ?? "auto",
    tools: echoedTools(body.tools, strictOf), top_logprobs: body.top_logprobs ?? 0, top_p: body.top_p ?? 1, truncation: body.truncation ?? "disabled", user: body.user ?? null,
  };
  return {
    id, submitted, shell, store: stored, inputItems, input, previousId, conversation, sessionId,
    maxToolCalls: Math.min(body.max_tool_calls ?? Infinity, parallel ? Infinity : 1), logprobs: topLogprobs !== undefined,
    namespaceOf, sealReasoning: (body.include ?? []).includes("reasoning.encrypted_content"),
  };
}

/** The response object at a point of its life. */
export function responseJson(t: ResponseTurn, out: ResponseOutput | null, r: GenerateResult | null, failed?: ApiError): Json {
  if (failed) return { ...t.shell, status: "failed", error: { code: "server_error", message: failed.message }, output: out?.items ?? [], usage: null };
  if (!r || !out) return { ...t.shell, status: "in_progress", output: [], usage: null };
  const cut = r.finishReason === "length" || r.finishReason === "abort";
  const usage = {
    input_tokens: r.promptTokens, input_tokens_details: { cached_tokens: r.cachedTokens },
    output_tokens: r.completionTokens, output_tokens_details: { reasoning_tokens: r.reasoningTokens ?? 0 },
    total_tokens: r.promptTokens + r.completionTokens,
  };
  return {
    ...t.shell, status: cut ? "incomplete" : "completed",
    incomplete_details: cut ? { reason: r.finishReason === "length" ? "max_output_tokens" : "cancelled" } : null,
    output: out.items, usage,
  };
}

/**
 * Keeps a finished turn (when stored), extends its conversation (if it still exists) with its input
 * and output items, and marks its session as waiting on its first call.
 */
export function settle(ctx: ServeContext, state: ResponsesState, t: ResponseTurn, out: ResponseOutput, response: Json): void {
  noteToolWait(ctx, t.submitted, out.calls);
  const conversation = t.conversation && state.conversations.get(t.conversation.id);
  if (conversation) state.conversations.append(conversation, [...t.inputItems, ...out.items]);
  if (!t.store) return;
  const calls = out.items.filter((it) => it.type === "function_call") as { call_id: string; name: string; arguments: string }[];
  const entry: StoredResponse = {
    id: t.id, response, inputItems: t.inputItems, input: t.input,
    output: [outputMessage(out.reasoningText, out.outputText, calls)],
    previousId: t.previousId, sessionId: t.sessionId ?? t.id,
  };
  state.responses.put(entry);
}

/** The builder of a turn's output items. */
export function outputOf(ctx: ServeContext, t: ResponseTurn): ResponseOutput {
  return new ResponseOutput(t.maxToolCalls, t.logprobs ? (lps) => chatLogprobs(ctx.tokenizer, lps).content : undefined, t.namespaceOf, t.sealReasoning ?? false);
}

/**
 * Runs a turn's generation through the chat parser into `out`, handing each batch of events to
 * `send`; resolves with the result (and the closing events sent) unless the engine failed.
 */
export async function generate(t: ResponseTurn, out: ResponseOutput, send: (events: readonly ResponseEvent[]) => void): Promise<GenerateResult> {
  const handle = t.submitted.handles[0];
  const chat = new ChatOutputStream(t.submitted.output!);
  for await (const d of handle.stream) if (d.text || d.logprobs) send(out.push(chat.push(d.text), d.logprobs));
  const r = await handle.result;
  if (r.error) return r;
  send(out.push(chat.end()));
  // Cut by the token limit or cancelled, the open message is incomplete.
  send(out.finish(r.finishReason !== "length" && r.finishReason !== "abort"));
  return r;
}

/** The whole answer, built from the same deltas and by the same code as a stream. */
export async function respondJson(ctx: ServeContext, state: ResponsesState, t: ResponseTurn): Promise<Json> {
  const out = outputOf(ctx, t);
  const r = await generate(t, out, () => {});
  const err = failure([r], t.submitted.params);
  if (err) throw err;
  const response = responseJson(t, out, r);
  // Aborted, the client hung up (app.ts `whole`): as for a stream, nothing is kept and no conversation extended.
  if (r.finishReason !== "abort") settle(ctx, state, t, out, response);
  return response;
}

/**
 * The streamed answer: `response.created` and `response.in_progress`, the events that build each
 * output item as the text comes, then `response.completed` (or `response.incomplete` when cut by
 * `max_output_tokens`; `response.failed` when the engine failed). Each SSE event is named by its type.
 * Cancelling the stream (the client hanging up) cancels the generation; nothing is stored then.
 */
export function respondStream(ctx: ServeContext, state: ResponsesState, t: ResponseTurn): ReadableStream<Uint8Array> {
  const out = outputOf(ctx, t);
  return namedEventStream<ResponseEvent>(t.submitted.handles[0], async (send, gone) => {
    send([out.event("response.created", { response: responseJson(t, null, null) }), out.event("response.in_progress", { response: responseJson(t, null, null) })]);
    const r = await generate(t, out, send);
    if (gone()) return;
    const err = failure([r], t.submitted.params);
    if (err) {
      send([out.event("response.failed", { response: responseJson(t, out, r, err) })]);
    } else {
      const response = responseJson(t, out, r);
      settle(ctx, state, t, out, response);
      send([out.event(response.status === "completed" ? "response.completed" : "response.incomplete", { response })]);
    }
  });
}

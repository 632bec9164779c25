/**
 * The two generation endpoints, request side: request bodies → engine requests (one per choice
 * with `n`). The responses are built in respond.ts.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import type { GenerateRequest, RequestHandle } from "../engine/engine-types.ts";
import type { JsonWhitespace, OutputGrammar, ToolCallSyntax } from "../engine/grammar.ts";
import type { ModelConfig, SamplingDefaults, Tokenizer } from "../model/config.ts";
import type { ChatOutputOptions } from "./chat-output.ts";
import { type ChatRenderer, type TurnOptions } from "./chat-template.ts";
import { ApiError, describe } from "./errors.ts";
import { badWordIds, chatEcho, checkChatOnly, unsupported, UNIMPLEMENTED_VLLM_FIELDS } from "./request-checks.ts";
import { chatGrammar, completionGrammar } from "./output-grammar.ts";
import { effortVariables } from "./reasoning-effort.ts";
import { refusalError } from "./refusals.ts";
import { promptOpensReasoning, type ReasoningParserName, reasoningTags as reasoningTagsOf, THINK_TAGS } from "./reasoning.ts";
import type { ChatRequest, CompletionRequest, ToolDef } from "./schemas.ts";
import type { ToolSpec } from "./tool-calls-pairs.ts";
import { mistralMessageIds } from "./tool-calls-mistral.ts";
import { startsInAnalysis } from "./harmony.ts";
import { checkHarmonyGrammar, harmonyGrammarPrefix, harmonyMessages, harmonyStart, harmonyTools } from "./harmony-prompt.ts";

/** What the handlers need from the server. */
export interface ServeContext {
  engine: ServingEngine;
  tokenizer: Tokenizer;
  config: ModelConfig;
  modelName: string;
  chat: ChatRenderer;
  /** "think": `<think>` text of chat answers goes to `reasoning_content` (`--reasoning-parser`). */
  reasoningParser: ReasoningParserName;
  /** The engine knows the model's reasoning tokens (harmony-prompt.ts `reasoningTokensOf`): reasoning budgets can be kept. */
  tracksReasoning: boolean;
  /** How JSON output grammars may be spaced unless a request says (`--json-whitespace`). */
  jsonWhitespace: JsonWhitespace;
  /**
   * How the model writes tool calls (`--tool-call-parser`, with "mistral" resolved by the tokenizer's
   * version: tool-calls-mistral.ts `toolCallSyntax`): what is parsed, and what a forced call writes.
   */
  toolCallParser: ToolCallSyntax;
  /** What a request that leaves out temperature, top_p, top_k, min_p, repetition_penalty or max_tokens gets (`--generation-config`). */
  samplingDefaults: SamplingDefaults;
  /** Requests may set `priority` (`--scheduling-policy priority`, the default); false: any but 0 is refused (fcfs). */
  priorityScheduling: boolean;
}

/** Which endpoint a request came through. */
export type Kind = "chat" | "completion";

/** The most choices one request may ask for (`n`): each is a whole generation. */
export const MAX_CHOICES = 16;

/** One prompt of a completion request, as `echo` returns it. */
export interface EchoedPrompt {
  ids: number[];
  /** The prompt text as sent (decoded when it came as token ids). */
  text: string;
}

/** What a completion request asks beyond its text: its prompts' echo and `best_of`. */
export interface CompletionShape {
  /** One per prompt, in order. */
  prompts: EchoedPrompt[];
  /** Return each prompt before its completion (`echo`). */
  echo: boolean;
  /** `max_tokens` 0 with `echo`: the prompt is scored, nothing generated is returned. */
  scoreOnly: boolean;
  /** Alternatives per token the client asked for (`logprobs`; null: none). `best_of` asks the engine for log probabilities regardless. */
  logprobs: number | null;
}

/** A submitted request and what answering it needs to know. */
export interface Submitted {
  kind: Kind;
  /**
   * One per generation: `perPrompt` for each prompt in turn (`n`, or `best_of` when larger), so
   * handles[p * perPrompt + j] is prompt p's j-th.
   */
  handles: RequestHandle[];
  perPrompt: number;
  /** Choices returned per prompt (`n`): the likeliest `n` of `perPrompt` when `best_of` is larger. */
  n: number;
  /** How to split a chat answer (reasoning, tool calls); null for completions, whose text is returned as generated. */
  output: ChatOutputOptions | null;
  /** Completions only. */
  completion?: CompletionShape;
  /** vLLM's `prompt_logprobs`: alternatives per prompt token (undefined: not asked). */
  promptLogprobs?: number;
  /** Chat only: the prompt's length in tokens (known before the first token; the result says it again). */
  promptTokens?: number;
  /** The processing tier applied, when the request named one (`service_tier`, returned as OpenAI does). */
  serviceTier?: AppliedTier;
  /** Chat only: vLLM's `echo`, the last message's text that each choice's content starts with. */
  echo?: string;
}

/** The tiers a request is served in: `service_tier` "priority" and "flex" as priorities -1 and 1, the rest as 0. */
export type AppliedTier = "default" | "priority" | "flex";

/** The tier `service_tier` gets here: "priority" and "flex" under priority scheduling, else "default". */
export function appliedTier(ctx: Pick<ServeContext, "priorityScheduling">, tier: string | null | undefined): AppliedTier {
  return ctx.priorityScheduling && (tier === "priority" || tier === "flex") ? tier : "default";
}

/** The scheduling priority of a tier: "priority" before the rest, "flex" after (an explicit `priority` wins). */
function tierPriority(tier: AppliedTier): number {
  return tier === "priority" ? -1 : tier === "flex" ? 1 : 0;
}

/**
 * Refuses the OpenAI parameters we cannot honour when set to anything but their no-op value, and
 * logit biases for tokens the model lacks. (response_format and tool_choice: output-grammar.ts.)
 */
function checkUnsupported(body: ChatRequest | CompletionRequest, kind: Kind, ctx: Pick<ServeContext, "config" | "priorityScheduling">): void {
  const vocabSize = ctx.config.vocabSize;
  checkPriority(ctx, body.priority);
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
  // The engine refuses them too, but naming no field.
  for (const name of ["stop_token_ids", "allowed_token_ids"] as const) {
    const bad = body[name]?.find((id) => id >= vocabSize);
    if (bad !== undefined) throw new ApiError(400, `Token ${bad} in ${name} is outside this model's vocabulary of ${vocabSize} tokens`, name, "invalid_value");
  }
  // OpenAI and vLLM refuse them unstreamed rather than drop the usage the client asked for (an empty
  // object asks nothing: vLLM passes it).
  if (body.stream_options && Object.keys(body.stream_options).length > 0 && body.stream !== true) {
    throw new ApiError(400, `The stream_options are only allowed with stream = true, got stream_options = ${describe(body.stream_options)} with stream = ${body.stream ?? false}`, "stream_options", "invalid_value");
  }
  if (kind === "chat") checkChatOnly(body as ChatRequest);
  if (promptLogprobsOf(body) !== undefined && body.stream) {
    throw new ApiError(400, `Prompt log probabilities cannot be streamed, got prompt_logprobs = ${body.prompt_logprobs} with stream = true`, "prompt_logprobs", "invalid_value");
  }
  if ("suffix" in body && body.suffix) throw unsupported(`A suffix is not supported (no fill-in-the-middle), got suffix = ${describe(body.suffix)}`, "suffix");
  for (const [name, isSet] of UNIMPLEMENTED_VLLM_FIELDS) {
    const value = (body as Record<string, unknown>)[name];
    if (isSet(value)) throw unsupported(`The vLLM parameter ${name} is not supported by this server, got ${name} = ${describe(value)}`, name);
  }
}

/** Refuses a priority other than 0 under `--scheduling-policy fcfs`, as vLLM does. */
export function checkPriority(ctx: Pick<ServeContext, "priorityScheduling">, priority: number | null | undefined): void {
  if (priority && !ctx.priorityScheduling) {
    throw new ApiError(400, `Request priorities need --scheduling-policy priority; this server schedules fcfs, got priority = ${priority}`, "priority", "invalid_value");
  }
}

/** How many top alternatives per token the request asks for (undefined: no log probabilities). */
function logprobsCount(body: ChatRequest | CompletionRequest): number | undefined {
  if (typeof body.logprobs === "number") return body.logprobs; // completions: the count itself
  return body.logprobs === true ? ((body as ChatRequest).top_logprobs ?? 0) : undefined;
}

/** Builds the engine request (after {@link checkUnsupported}). */
function engineRequest(
  body: ChatRequest | CompletionRequest, ctx: Pick<ServeContext, "samplingDefaults" | "engine" | "priorityScheduling" | "tokenizer">, prompt: number[], maxTokens: number | null | undefined, startsInReasoning = false, grammar?: OutputGrammar, skipSpecialTokens = true,
): GenerateRequest {
  const stop = body.stop === null || body.stop === undefined ? [] : typeof body.stop === "string" ? [body.stop] : body.stop;
  const defaults = ctx.samplingDefaults;
  // The model's max_new_tokens, as vLLM takes it: no more than the context leaves.
  const defaultMax = defaults.maxTokens === undefined ? undefined : Math.max(1, Math.min(defaults.maxTokens, ctx.engine.maxModelLen - prompt.length));
  // top_k: -1 and 0 turn it off, as in vLLM; left out, the model's default.
  const topK = body.top_k ?? defaults.topK ?? 0;
  const priority = body.priority ?? tierPriority(appliedTier(ctx, body.service_tier));
  return {
    prompt,
    maxTokens: maxTokens ?? defaultMax,
    temperature: body.temperature ?? defaults.temperature ?? 1,
    topP: body.top_p ?? defaults.topP ?? 1,
    topK: topK > 0 ? topK : 0,
    ...((body.min_p ?? defaults.minP ?? 0) > 0 ? { minP: body.min_p ?? defaults.minP } : {}),
    ...((body.repetition_penalty ?? defaults.repetitionPenalty ?? 1) !== 1 ? { repetitionPenalty: body.repetition_penalty ?? defaults.repetitionPenalty } : {}),
    seed: body.seed ?? undefined,
    stop: stop.filter((s) => s.length > 0),
    ignoreEos: body.ignore_eos ?? false,
    ...(body.stop_token_ids?.length ? { stopTokenIds: body.stop_token_ids } : {}),
    ...(body.min_tokens ? { minTokens: body.min_tokens } : {}),
    ...(body.include_stop_str_in_output ? { includeStopString: true } : {}),
    ...(body.allowed_token_ids ? { allowedTokenIds: body.allowed_token_ids } : {}),
    ...(body.bad_words?.length ? { badWords: badWordIds(ctx, body.bad_words) } : {}),
    ...((body.skip_special_tokens ?? skipSpecialTokens) ? {} : { skipSpecialTokens: false }),
    logprobs: logprobsCount(body),
    ...(grammar ? { grammar } : {}),
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: body.logit_bias ? Object.entries(body.logit_bias).map(([token, bias]): [number, number] => [Number(token), bias]) : undefined,
    // An empty key names no session (and would collide with the retention policy's no-session group).
    sessionId: body.prompt_cache_key || body.user || undefined,
    ...(priority ? { priority } : {}),
    ...(body.cache_salt ? { cacheSalt: body.cache_salt } : {}),
    ...(startsInReasoning ? { startsInReasoning } : {}),
    ...(promptLogprobsOf(body) !== undefined ? { promptLogprobs: promptLogprobsOf(body) } : {}),
  };
}

/** vLLM's `prompt_logprobs` count, when the body asks for one. */
function promptLogprobsOf(body: ChatRequest | CompletionRequest): number | undefined {
  return body.prompt_logprobs ?? undefined;
}

/** `s` with vLLM's `prompt_logprobs` count when the body asked for it. */
function withPromptLogprobs(s: Submitted, body: ChatRequest | CompletionRequest, ctx: Pick<ServeContext, "priorityScheduling">): Submitted {
  const promptLogprobs = promptLogprobsOf(body);
  const tier = body.service_tier ? { serviceTier: appliedTier(ctx, body.service_tier) } : {};
  return { ...s, ...tier, ...(promptLogprobs === undefined ? {} : { promptLogprobs }) };
}

/**
 * Submits `n` engine requests for each of `reqs`. The i-th of each samples with seed + i when the
 * body gives a seed (so choices differ, reproducibly). With `scoreOnce` only the first of each asks
 * for its prompt's log probabilities (the same for all; a scored prompt is computed whole, past the
 * prefix cache), and the response shares them (respond.ts). If one is refused, those already queued
 * are cancelled.
 */
export function submit(ctx: ServeContext, reqs: readonly GenerateRequest[], n: number, param: string, scoreOnce: boolean): RequestHandle[] {
  const handles: RequestHandle[] = [];
  // The prompt a refusal is about: named by its index when the request has several.
  let promptParam = param;
  try {
    for (const [i, req] of reqs.entries()) {
      if (reqs.length > 1) promptParam = `${param}[${i}]`;
      // The engine refuses it too, but naming no field.
      if (req.minTokens !== undefined && req.maxTokens !== undefined && req.minTokens > req.maxTokens) {
        throw new ApiError(400, `The min_tokens must be at most max_tokens (${req.maxTokens}), got min_tokens = ${req.minTokens}`, "min_tokens", "invalid_value");
      }
      for (let i = 0; i < n; i++) {
        // The whole seed: cut to 32 bits, seeds 2^32 apart would sample alike (seededUniforms takes 53).
        const one: GenerateRequest = req.seed === undefined ? { ...req } : { ...req, seed: req.seed + i };
        if (i > 0 && scoreOnce) delete one.promptLogprobs;
        handles.push(ctx.engine.submit(one));
      }
    }
    return handles;
  } catch (e) {
    for (const h of handles) h.cancel();
    throw refusalError(e, promptParam) ?? e;
  }
}

/**
 * Refuses at once a prompt text too long for the context, before tokenizing it (megabytes of text
 * take seconds, blocking the server): it has at least `text.length / maxCharsPerToken` tokens.
 */
export function checkTextLength(ctx: ServeContext, text: string, param: string): void {
  const perToken = ctx.tokenizer.maxCharsPerToken?.();
  if (perToken === undefined) return;
  const atLeast = Math.ceil(text.length / perToken);
  const limit = ctx.engine.maxModelLen;
  if (atLeast >= limit) {
    throw new ApiError(400, `The prompt has at least ${atLeast} tokens (${text.length} characters); this model's maximum context length is ${limit} tokens`, param, "context_length_exceeded");
  }
}

/** The name and parameters of each function tool (what a tool-call parser reads argument types from). */
function toolSpecs(tools: readonly ToolDef[] | undefined): ToolSpec[] {
  return (tools ?? []).map((t) => ({ name: t.function.name, ...(t.function.parameters === undefined ? {} : { parameters: t.function.parameters }) }));
}

/**
 * A chat body's prompt: its messages rendered by the chat template, with the tools it may call, and
 * tokenized (what {@link submitChat} submits; the Responses API's `truncation` measures with it).
 */
export function chatPrompt(ctx: ServeContext, body: ChatRequest): { text: string; prompt: number[]; tools: ToolDef[] | undefined } {
  // tool_choice "none" reads no calls, but the template still lists the tools (vLLM's default,
  // exclude_tools_when_tool_choice_none false): an agent's last turn without tools keeps the prefix
  // its earlier turns cached.
  const tools = (body.tool_choice ?? "auto") === "none" ? undefined : body.tools ?? undefined;
  const mistral = ctx.toolCallParser === "mistral" || ctx.toolCallParser === "mistral_pre_v11";
  const messages = mistral ? mistralMessageIds(body.messages) : isHarmony(ctx) ? harmonyMessages(body.messages) : body.messages;
  // reasoning_effort reaches the template as its variables (reasoning-effort.ts); chat_template_kwargs say last.
  const variables = effortVariables(body.reasoning_effort, body.chat_template_kwargs);
  const rendered = isHarmony(ctx) ? harmonyTools(body.tools ?? undefined) : body.tools ?? undefined;
  const { text, startsWithBos } = ctx.chat.render(messages, rendered, variables, turnOptions(ctx, body));
  // The rendered text holds every message (templates add text, never remove it). Truncated, it may be longer.
  if (body.truncate_prompt_tokens === undefined || body.truncate_prompt_tokens === null) checkTextLength(ctx, text, "messages");
  const room = body.max_completion_tokens ?? body.max_tokens ?? 1;
  const prompt = encodeToTruncate(ctx, text, body.truncate_prompt_tokens, room, ctx.config.addBos && !startsWithBos);
  if (prompt.length === 0) throw new ApiError(400, "The messages render to an empty prompt", "messages", "invalid_value");
  return { text, prompt, tools };
}

/** How a chat request's prompt ends (vLLM's add_generation_prompt, continue_final_message); their conflicts are 400s. */
function turnOptions(ctx: ServeContext, body: ChatRequest): TurnOptions {
  const continueFinal = body.continue_final_message === true;
  const addGenerationPrompt = body.add_generation_prompt ?? undefined;
  if (!continueFinal) return addGenerationPrompt === false ? { addGenerationPrompt } : {};
  if (addGenerationPrompt === true) {
    throw new ApiError(400, "continue_final_message and add_generation_prompt cannot both be true: the answer either continues the final message or starts a new one", "continue_final_message", "invalid_value");
  }
  if (body.messages[body.messages.length - 1].role !== "assistant") {
    throw new ApiError(400, `continue_final_message needs the final message to be the assistant's, got role '${body.messages[body.messages.length - 1].role}'`, "continue_final_message", "invalid_value");
  }
  if (isHarmony(ctx)) throw new ApiError(400, "continue_final_message is not supported with gpt-oss's harmony format", "continue_final_message", "unsupported_parameter");
  return { continueFinal };
}

const isHarmony = (ctx: ServeContext) => ctx.reasoningParser === "harmony" || ctx.toolCallParser === "harmony";

/** Tokenizes a chat request and submits it. */
export function submitChat(ctx: ServeContext, body: ChatRequest): Submitted {
  const chosen = chatGrammar(body, ctx.jsonWhitespace, ctx.toolCallParser);
  const { parallelToolCalls } = chosen;
  checkUnsupported(body, "chat", ctx);
  const harmony = isHarmony(ctx);
  const rendered = chatPrompt(ctx, body);
  const { text, tools } = rendered;
  const prompt = truncatedPrompt(ctx, rendered.prompt, body.truncate_prompt_tokens, body.max_completion_tokens ?? body.max_tokens ?? 1);
  const reasoningTags = reasoningTagsOf(ctx.reasoningParser);
  const reasoning = reasoningTags !== undefined;
  const start = harmony ? harmonyStart(text) : undefined;
  const startsInReasoning = reasoning && (start ? startsInAnalysis(start) : promptOpensReasoning(text, reasoningTags));
  // Strict tools' calls amid free text (output-grammar.ts `strictCalls`) are held where a grammar can
  // follow the answer; in harmony, or after a prompt that opens reasoning other than <think>, the
  // answer goes free as before rather than being refused.
  const grammar = chosen.strictOnly && (harmony || (startsInReasoning && reasoningTags !== THINK_TAGS)) ? undefined : chosen.grammar;
  // Harmony constrains only the final message (harmony-prompt.ts).
  const grammarAfter = start ? harmonyGrammarPrefix(start, grammar) : undefined;
  if (startsInReasoning && grammar && reasoningTags !== THINK_TAGS && !grammarAfter) {
    // The grammar waits for `</think>` after an open prompt (src/engine/grammar.ts).
    throw new ApiError(400, `Structured output after a prompt that opens ${reasoningTags.open} is not supported`, "messages", "unsupported_parameter");
  }
  if (start) checkHarmonyGrammar(start, grammar, text);
  // With tools the answer keeps control tokens' text unless the request says otherwise: a model whose
  // call tags are control tokens (Mistral's [TOOL_CALLS], Llama 3's <|python_tag|>) shows its calls
  // to the tool-call parser only so (vLLM's parsers set skip_special_tokens false likewise). The
  // same holds for reasoning tags that are control tokens (Magistral's [THINK]).
  // Harmony's tags are control tokens too, and without them its answer could not be told from its
  // reasoning: its answers always keep them (the parser consumes them), whatever skip_special_tokens says.
  // So do answers that may call tools: skipped, the calls could not be read (vLLM's parsers force it too).
  const toolCalls = (tools?.length ?? 0) > 0;
  const skipSpecial = !toolCalls && ctx.reasoningParser !== "mistral";
  const budget = body.thinking_token_budget ?? undefined;
  if (budget !== undefined && !ctx.tracksReasoning) {
    throw new ApiError(400, `A thinking_token_budget needs a reasoning parser whose tags are single tokens of this model, got thinking_token_budget = ${budget} with --reasoning-parser ${ctx.reasoningParser}`, "thinking_token_budget", "unsupported_parameter");
  }
  const request = {
    ...engineRequest(harmony || toolCalls ? { ...body, skip_special_tokens: false } : body, ctx, prompt, body.max_completion_tokens ?? body.max_tokens, startsInReasoning, grammar, skipSpecial),
    ...(grammarAfter ? { grammarAfter } : {}),
    ...(budget !== undefined ? { reasoningBudget: budget } : {}),
  };
  const n = body.n ?? 1;
  // Chat's prompt log probabilities are returned once, beside the choices.
  const handles = submit(ctx, [request], n, "messages", true);
  const echo = chatEcho(body);
  return withPromptLogprobs({ kind: "chat", handles, perPrompt: n, n, promptTokens: prompt.length, ...(echo === undefined ? {} : { echo }), output: { reasoning, reasoningTags, startsInReasoning, ...(start ? { harmony: start } : {}), toolCalls, parallelToolCalls, toolCallFormat: ctx.toolCallParser, tools: toolSpecs(tools), ...(grammar?.kind === "union" ? { callsOrAnswer: true } : {}) } }, body, ctx);
}

/** The prompts of a completion body, tokenized (text) or checked (token ids), cut to `truncate_prompt_tokens`. */
function completionPrompts(ctx: ServeContext, p: CompletionRequest["prompt"], truncate: number | null | undefined, room: number): EchoedPrompt[] {
  const list: (string | number[])[] = typeof p === "string" ? [p] : typeof p[0] === "number" ? [p as number[]] : (p as (string | number[])[]);
  return list.map((one, i) => {
    const param = list.length > 1 ? `prompt[${i}]` : "prompt";
    if (typeof one === "string") {
      if (truncate === undefined || truncate === null) checkTextLength(ctx, one, param);
      const all = encodeToTruncate(ctx, one, truncate, room, ctx.config.addBos);
      if (all.length === 0) throw new ApiError(400, "The prompt is empty", param, "invalid_value");
      const ids = truncatedPrompt(ctx, all, truncate, room);
      // Echo returns what was computed: the kept tail.
      return { ids, text: ids === all ? one : ctx.tokenizer.decode(ids) };
    }
    const bad = one.find((id) => id >= ctx.config.vocabSize);
    if (bad !== undefined) throw new ApiError(400, `Token id ${bad} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, param, "invalid_value");
    const ids = truncatedPrompt(ctx, one, truncate, room);
    return { ids, text: ctx.tokenizer.decode(ids) };
  });
}

/**
 * `text` tokenized for {@link truncatedPrompt} to keep its last tokens: only its end when it is far
 * longer than they can span (a megabyte prompt took seconds of event-loop time to tokenize whole, to
 * keep a few hundred tokens). That end, twice as many characters as the kept tokens' longest pieces
 * span, holds more tokens than are kept, and the cut's effect on tokenizing stays far from them.
 */
function encodeToTruncate(ctx: ServeContext, text: string, keep: number | null | undefined, room: number, addBos: boolean): number[] {
  const perToken = ctx.tokenizer.maxCharsPerToken?.();
  if (keep === undefined || keep === null || perToken === undefined) return ctx.tokenizer.encode(text, { addBos });
  const kept = Math.min(keptTokens(ctx.engine.maxModelLen, keep, room), ctx.engine.maxModelLen);
  const tail = 2 * kept * perToken + 64;
  if (text.length <= tail) return ctx.tokenizer.encode(text, { addBos });
  return ctx.tokenizer.encode(text.slice(text.length - tail), { addBos: false });
}

/**
 * vLLM's `truncate_prompt_tokens`: the last `keep` tokens of a prompt (-1: as many as the context
 * holds beside the `room` tokens of output the request asks for: at least one, none for an embedding), the prompt itself
 * when it is no longer or no truncation is asked. A 400 past the context.
 */
export function truncatedPrompt(ctx: Pick<ServeContext, "engine">, ids: number[], keep: number | null | undefined, room = 1): number[] {
  if (keep === undefined || keep === null) return ids;
  const limit = ctx.engine.maxModelLen;
  if (keep > limit) throw new ApiError(400, `A truncate_prompt_tokens of ${keep} is more than this model's maximum context length of ${limit} tokens`, "truncate_prompt_tokens", "invalid_value");
  // The engine refuses a prompt that leaves no room for its output (an embedding's `room` is 0: it
  // generates nothing); an output larger than the context is left for it to refuse, naming both lengths.
  const n = keptTokens(limit, keep, room);
  return ids.length > n ? ids.slice(ids.length - n) : ids;
}

/** The prompt tokens `truncate_prompt_tokens` keeps: `keep`, or for -1 what the context leaves beside `room` (at least one). */
function keptTokens(limit: number, keep: number, room: number): number {
  return keep === -1 ? Math.max(1, limit - Math.max(0, room)) : keep;
}

/**
 * Checks `echo`, `max_tokens` 0 and `best_of` against each other; returns the generations per
 * prompt (`best_of` when given, else `n`).
 */
function checkCompletionShape(body: CompletionRequest, prompts: number): number {
  const n = body.n ?? 1;
  if (body.max_tokens === 0 && !body.echo) {
    throw new ApiError(400, "A max_tokens of 0 generates nothing; it is only allowed with echo = true (to score the prompt)", "max_tokens", "invalid_value");
  }
  const bestOf = body.best_of ?? n;
  if (bestOf < n) throw new ApiError(400, `The best_of must be at least n, got best_of = ${bestOf} and n = ${n}`, "best_of", "invalid_value");
  if (bestOf > MAX_CHOICES) throw new ApiError(400, `The best_of must be from 1 to ${MAX_CHOICES}, got best_of = ${bestOf}`, "best_of", "invalid_value");
  if (bestOf > n && body.stream) {
    throw new ApiError(400, `A best_of of ${bestOf} cannot be streamed: the best ${n} are known only at the end; use stream = false or best_of = n`, "best_of", "invalid_value");
  }
  if (prompts * bestOf > MAX_COMPLETION_GENERATIONS) {
    throw new ApiError(400, `A request may ask for at most ${MAX_COMPLETION_GENERATIONS} generations, got ${prompts} prompts × ${bestOf} each`, "prompt", "invalid_value");
  }
  return bestOf;
}

/**
 * Refuses a `max_tokens` the context has no room for beside a prompt that fits, naming max_tokens (a
 * prompt that does not fit is the engine's to refuse, naming the prompt).
 */
function checkRoom(ctx: ServeContext, maxTokens: number | null | undefined, promptTokens: number, promptParam: string): void {
  const limit = ctx.engine.maxModelLen;
  if (!maxTokens || promptTokens >= limit || promptTokens + maxTokens <= limit) return;
  throw new ApiError(
    400,
    `This model's maximum context length is ${limit} tokens; you requested ${promptTokens + maxTokens} (${promptTokens} in ${promptParam}, ${maxTokens} for the output): max_tokens can be at most ${limit - promptTokens}, got max_tokens = ${maxTokens}`,
    "max_tokens",
    "context_length_exceeded",
  );
}

/** The max_tokens of a completion request that leaves it out (OpenAI's and vLLM's default). */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

/** The most generations (prompts × best_of or n) one completion request may ask for. */
export const MAX_COMPLETION_GENERATIONS = 256;

/** Tokenizes (or checks the token ids of) a completion request's prompts and submits them. */
export function submitCompletion(ctx: ServeContext, body: CompletionRequest): Submitted {
  const grammar = completionGrammar(body, ctx.jsonWhitespace);
  checkUnsupported(body, "completion", ctx);
  // Scoring only (max_tokens 0) still samples one token.
  const prompts = completionPrompts(ctx, body.prompt, body.truncate_prompt_tokens, body.max_tokens || 1);
  const perPrompt = checkCompletionShape(body, prompts.length);
  const n = body.n ?? 1;
  const echo = body.echo === true;
  const scoreOnly = echo && body.max_tokens === 0;
  const logprobs = typeof body.logprobs === "number" ? body.logprobs : null;
  const reqs = prompts.map((p, i) => {
    checkRoom(ctx, body.max_tokens, p.ids.length, prompts.length > 1 ? `prompt[${i}]` : "prompt");
    // Scoring only still samples one token (the engine always does); it is not returned.
    const req = engineRequest(body, ctx, p.ids, scoreOnly ? 1 : body.max_tokens, false, grammar);
    // Left out, a completion's max_tokens is 16 (OpenAI's and vLLM's CompletionRequest default), within
    // the model's default and what the context leaves; chat's runs to those.
    if (body.max_tokens === undefined || body.max_tokens === null) {
      req.maxTokens = Math.max(1, Math.min(COMPLETION_DEFAULT_MAX_TOKENS, req.maxTokens ?? Infinity, ctx.engine.maxModelLen - p.ids.length));
    }
    // best_of ranks by log probability per token, so it asks for them whatever the client asked.
    if (perPrompt > n) req.logprobs ??= 0;
    // Echo's prompt log probabilities and prompt_logprobs share one ask: the larger count, each cut to its own.
    if (echo && logprobs !== null) req.promptLogprobs = Math.max(logprobs, req.promptLogprobs ?? 0);
    return req;
  });
  // Streamed, each choice echoes its prompt with its own request's log probabilities.
  const handles = submit(ctx, reqs, perPrompt, "prompt", !body.stream);
  return withPromptLogprobs({ kind: "completion", handles, perPrompt, n, output: null, completion: { prompts, echo, scoreOnly, logprobs } }, body, ctx);
}

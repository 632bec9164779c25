/**
 * A chat or completion body as engine requests: the checks both endpoints share (parameters it cannot
 * honour refused by name), its sampling fields as a `GenerateRequest`, and submission of `n` per
 * prompt (seed + i for choice i), all cancelled if one is refused.
 */
import type { GenerateRequest, RequestHandle } from "../engine/engine-types.ts";
import type { OutputGrammar } from "../engine/grammar.ts";
import { ApiError, describe } from "./errors.ts";
import { badWordIds, checkChatOnly, unsupported, UNIMPLEMENTED_VLLM_FIELDS } from "./request-checks.ts";
import { type ParamNames, refusalError } from "./refusals.ts";
import type { ChatRequest, CompletionRequest } from "./schemas.ts";
import { type AppliedTier, appliedTier, type Kind, type ServeContext, type Submitted } from "./serve-context.ts";

/** The most choices one request may ask for (`n`): each is a whole generation. */
export const MAX_CHOICES = 16;

/** The scheduling priority of a tier: "priority" before the rest, "flex" after (an explicit `priority` wins). */
function tierPriority(tier: AppliedTier): number {
  return tier === "priority" ? -1 : tier === "flex" ? 1 : 0;
}

/**
 * Refuses the OpenAI parameters we cannot honour when set to anything but their no-op value.
 * (response_format and tool_choice: output-grammar.ts; token ids the model lacks in logit_bias,
 * stop_token_ids and allowed_token_ids, and a min_tokens above max_tokens: the engine, at submit,
 * naming the field, as {@link paramNames} maps it.)
 */
export function checkUnsupported(body: ChatRequest | CompletionRequest, kind: Kind, ctx: Pick<ServeContext, "config" | "priorityScheduling">): void {
  checkPriority(ctx, body.priority);
  if (body.n !== undefined && body.n !== null && !(body.n >= 1 && body.n <= MAX_CHOICES)) {
    throw new ApiError(400, `The number of choices n must be from 1 to ${MAX_CHOICES}, got n = ${body.n}`, "n", "invalid_value");
  }
  if (kind === "chat" && (body as ChatRequest).top_logprobs && !body.logprobs) {
    throw new ApiError(400, `Asking for top_logprobs needs logprobs = true, got top_logprobs = ${(body as ChatRequest).top_logprobs}`, "top_logprobs", "invalid_value");
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
export function engineRequest(
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
export function withPromptLogprobs(s: Submitted, body: ChatRequest | CompletionRequest, ctx: Pick<ServeContext, "priorityScheduling">): Submitted {
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
export function submit(ctx: ServeContext, reqs: readonly GenerateRequest[], n: number, param: string, scoreOnce: boolean, names: ParamNames = {}): RequestHandle[] {
  const handles: RequestHandle[] = [];
  // The prompt a refusal is about: named by its index when the request has several.
  let promptParam = param;
  try {
    for (const [i, req] of reqs.entries()) {
      if (reqs.length > 1) promptParam = `${param}[${i}]`;
      for (let i = 0; i < n; i++) {
        // The whole seed: cut to 32 bits, seeds 2^32 apart would sample alike (seededUniforms takes 53).
        const one: GenerateRequest = req.seed === undefined ? { ...req } : { ...req, seed: req.seed + i };
        if (i > 0 && scoreOnce) delete one.promptLogprobs;
        // The n choices of one opening turn open one conversation: a cluster's front door counts it
        // once, by the first; the others go as that conversation's.
        if (i > 0 && one.openingTurn) one.openingTurn = false;
        handles.push(ctx.engine.submit(one));
      }
    }
    return handles;
  } catch (e) {
    for (const h of handles) h.cancel();
    throw refusalError(e, { ...names, prompt: promptParam }) ?? e;
  }
}

/** vLLM's structured-output fields that give a grammar, in the order output-grammar.ts reads them after response_format. */
const GRAMMAR_PARAMS = ["structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"] as const;

/**
 * What a chat or completion body calls the engine request's fields where the API's default names
 * (refusals.ts) do not say: chat's prompt is its `messages`, its output budget `max_completion_tokens`
 * when given, its log-probability count `top_logprobs`; a grammar is the field it came from.
 */
export function paramNames(body: ChatRequest | CompletionRequest, kind: Kind): ParamNames {
  const grammar = grammarParam(body);
  const chat = kind === "chat" ? {
    prompt: "messages", logprobs: "top_logprobs",
    ...((body as ChatRequest).max_completion_tokens !== undefined && (body as ChatRequest).max_completion_tokens !== null ? { maxTokens: "max_completion_tokens" } : {}),
  } : {};
  return { ...chat, ...(grammar === undefined ? {} : { grammar }) };
}

/** The body's field an output grammar came from: a forced tool call, response_format, structured outputs, or strict tools. */
function grammarParam(body: ChatRequest | CompletionRequest): string | undefined {
  const choice = "tool_choice" in body ? body.tool_choice : undefined;
  if (choice === "required" || (typeof choice === "object" && choice !== null)) return "tool_choice";
  if (body.response_format && body.response_format.type !== "text") return "response_format";
  const given = GRAMMAR_PARAMS.find((p) => body[p] !== undefined && body[p] !== null);
  return given ?? ((body as ChatRequest).tools?.length ? "tools" : undefined);
}

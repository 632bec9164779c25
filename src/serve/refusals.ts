/**
 * An engine's typed refusals as HTTP errors: what `submit` throws (openai.ts `submit`), and what an
 * engine elsewhere (a cluster's worker thread or process) refuses after `submit` returned its handle
 * (RequestHandle.refusal, GenerateResult.refused). Either way the client gets the same status and
 * body: a 400 for its mistake, 404 for an adapter that is not loaded, 429 or 503 for a full server.
 */
import { LoraAdapterError } from "../engine/engine-adapters.ts";
import {
  ContextLengthError, EngineOverloadedError, type GenerateRequest, NoWorkerError, type RequestHandle, RequestParamError, SessionRefusedError,
} from "../engine/engine-types.ts";
import { ApiError } from "./errors.ts";

/**
 * What an endpoint calls the engine request's fields, where its body names them otherwise than
 * {@link API_PARAMS} (chat's `messages` and `top_logprobs`, the field a grammar came from…).
 */
export type ParamNames = Partial<Record<keyof GenerateRequest, string>>;

/**
 * The OpenAI/vLLM request field of each engine request field the engine may refuse (the engine
 * names its own fields, engine-types.ts `RequestParamError.field`; the API's names live here). A
 * grammar's field depends on the body (`response_format`, `structured_outputs`, `tool_choice`…): the
 * endpoint names it.
 */
const API_PARAMS: ParamNames = {
  prompt: "prompt", maxTokens: "max_tokens", logprobs: "logprobs", promptLogprobs: "prompt_logprobs",
  allowedTokenIds: "allowed_token_ids", badWords: "bad_words", stopTokenIds: "stop_token_ids", minTokens: "min_tokens",
  priority: "priority", minP: "min_p", repetitionPenalty: "repetition_penalty", presencePenalty: "presence_penalty",
  frequencyPenalty: "frequency_penalty", logitBias: "logit_bias", reasoningBudget: "thinking_token_budget",
  // A LoRA adapter is asked for by its name in `model` (LoraAdapterError's field).
  adapter: "model",
};

/** The API's `param` for a parameter refusal: its engine field as `names` (else {@link API_PARAMS}) calls it; null when unnamed. */
export function apiParam(e: RequestParamError, names: ParamNames = {}): string | null {
  return e.field === undefined ? null : names[e.field] ?? API_PARAMS[e.field] ?? null;
}

/**
 * The ApiError for an engine's refusal `e` (undefined when `e` is none of the typed refusals, a fault
 * the caller reports as it would any other). `names`: what the endpoint calls the request's fields;
 * its `prompt` is also the prompt a context-length refusal is about.
 */
export function refusalError(e: unknown, names: ParamNames = {}): ApiError | undefined {
  if (e instanceof ContextLengthError) return new ApiError(400, e.message, names.prompt ?? null, "context_length_exceeded");
  if (e instanceof NoWorkerError) return new ApiError(503, `No worker can serve this request yet: ${e.message}. Retry later.`, null, "no_worker");
  if (e instanceof SessionRefusedError) return new ApiError(503, `${e.message}. Retry later.`, null, "overloaded");
  if (e instanceof EngineOverloadedError) return new ApiError(429, `The server is busy: ${e.message}. Retry later.`, null, "queue_full");
  // The adapter a model name asks for is gone (unloaded meanwhile, or missing on a worker): as an unknown model.
  if (e instanceof LoraAdapterError && e.notFound) return new ApiError(404, e.message, apiParam(e, names), "model_not_found");
  if (e instanceof RequestParamError) return new ApiError(400, e.message, apiParam(e, names), "invalid_value");
  return undefined;
}

/**
 * Waits until the engine has taken or refused each of `handles` (at once for an engine that refuses
 * only at submit); a refusal cancels them all and is thrown as its ApiError. A server calls it before
 * it answers 200: a stream's headers, once sent, can no longer say 400 or 429. `names`: as {@link refusalError}'s.
 */
export async function awaitTaken(handles: readonly RequestHandle[], names: ParamNames = {}): Promise<void> {
  const refusals = await Promise.all(handles.map((h) => h.refusal));
  const refused = refusals.find((e) => e !== undefined);
  if (refused === undefined) return;
  for (const h of handles) h.cancel();
  throw refusalError(refused, names) ?? new ApiError(500, `Generation failed: ${refused.name}: ${refused.message}`, null, "engine_error");
}

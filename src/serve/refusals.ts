/**
 * An engine's typed refusals as HTTP errors: what `submit` throws (openai.ts `submit`), and what an
 * engine elsewhere (a cluster's worker thread or process) refuses after `submit` returned its handle
 * (RequestHandle.refusal, GenerateResult.refused). Either way the client gets the same status and
 * body: a 400 for its mistake, 404 for an adapter that is not loaded, 429 or 503 for a full server.
 */
import { LoraAdapterError } from "../engine/engine-adapters.ts";
import { ContextLengthError, EngineOverloadedError, NoWorkerError, type RequestHandle, RequestParamError, SessionRefusedError } from "../engine/engine-types.ts";
import { ApiError } from "./errors.ts";

/**
 * The ApiError for an engine's refusal `e` (undefined when `e` is none of the typed refusals, a fault
 * the caller reports as it would any other). `promptParam`: the prompt a context-length refusal is about.
 */
export function refusalError(e: unknown, promptParam: string | null = null): ApiError | undefined {
  if (e instanceof ContextLengthError) return new ApiError(400, e.message, promptParam, "context_length_exceeded");
  if (e instanceof NoWorkerError) return new ApiError(503, `No worker can serve this request yet: ${e.message}. Retry later.`, null, "no_worker");
  if (e instanceof SessionRefusedError) return new ApiError(503, `${e.message}. Retry later.`, null, "overloaded");
  if (e instanceof EngineOverloadedError) return new ApiError(429, `The server is busy: ${e.message}. Retry later.`, null, "queue_full");
  // The adapter a model name asks for is gone (unloaded meanwhile, or missing on a worker): as an unknown model.
  if (e instanceof LoraAdapterError && e.notFound) return new ApiError(404, e.message, "model", "model_not_found");
  if (e instanceof RequestParamError) return new ApiError(400, e.message, null, "invalid_value");
  return undefined;
}

/**
 * Waits until the engine has taken or refused each of `handles` (at once for an engine that refuses
 * only at submit); a refusal cancels them all and is thrown as its ApiError. A server calls it before
 * it answers 200: a stream's headers, once sent, can no longer say 400 or 429.
 */
export async function awaitTaken(handles: readonly RequestHandle[]): Promise<void> {
  const refusals = await Promise.all(handles.map((h) => h.refusal));
  const refused = refusals.find((e) => e !== undefined);
  if (refused === undefined) return;
  for (const h of handles) h.cancel();
  throw refusalError(refused) ?? new ApiError(500, `Generation failed: ${refused.name}: ${refused.message}`, null, "engine_error");
}

/**
 * What the app's route groups share, built once per app from its options and passed to each: the
 * error answer, request bodies read and checked, the model (or LoRA adapter) a request is served for,
 * and answers whole or streamed, counted in flight and cancelled when the client hangs up.
 */
import type { Context } from "hono";
import type { UnofficialStatusCode } from "hono/utils/http-status";
import type { ZodType } from "zod";
import type { RequestHandle } from "../engine/engine-types.ts";
import { nestsTooDeeply } from "../engine/json-schema.ts";
import type { AppOptions } from "./app-options.ts";
import { anthropicErrorBody, anthropicStatus, ApiError, schemaError } from "./errors.ts";
import type { ServerLifecycle } from "./lifecycle.ts";
import { fetchImageUrls } from "./image-fetch.ts";
import type { PreparedImage } from "./image-prep.ts";
import { withAdapter } from "./lora.ts";
import { awaitTaken, type ParamNames } from "./refusals.ts";
import { completeJson, completeStream } from "./respond.ts";
import { type BackgroundRuns, followStream } from "./responses-background.ts";
import type { ServeContext, Submitted } from "./serve-context.ts";

/** The headers of a server-sent event stream. */
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" };

/** What a chat or completion body says about streaming its answer. */
export interface StreamChoice {
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null; continuous_usage_stats?: boolean | null } | null;
}

/** The helpers every route group is built with (see {@link routeKit}). */
export interface RouteKit {
  /** The error answer: OpenAI's body, or Anthropic's (and its statuses) on /v1/messages; `Retry-After` with 429 and 503. */
  fail(c: Context, e: ApiError): Response;
  /** The request body as JSON, checked by `schema` (a 400 naming the problem otherwise). */
  readBody<T>(c: Context, schema: ZodType<T>): Promise<T>;
  /** The names of the LoRA adapters the engine holds now. */
  adapters(): string[];
  /**
   * The context a request for `model` is served in: the base model's, or with a LoRA adapter's name,
   * one whose engine runs every request with that adapter and whose answers name it. 404 for others.
   */
  ctxFor(model: string | null | undefined): ServeContext;
  /**
   * Reads the image URLs under `body[field]` that the server may read (image-fetch.ts) and puts them
   * back as data URLs, where the model reads images (a text-only model's requests are refused later, by
   * name), and prepares its images off the server's thread (image-prep.ts): what it returns, by data URL.
   */
  readImages(body: object, field: string): Promise<Map<string, PreparedImage>>;
  /** A generation request's body, checked (its image URLs read: `messages`, `input`), and the context of the model (or adapter) it asks for. */
  parse<T extends { model: string }>(c: Context, schema: ZodType<T>): Promise<[T, ServeContext]>;
  /** A whole (non-streamed) answer; a client that hangs up before it is ready cancels the request. */
  whole(c: Context, submitted: Submitted, end: () => void, answer: () => Promise<Record<string, unknown>>): Promise<Response>;
  /** A background response's events as SSE (a client hanging up stops only its copy). */
  followSse(follow: NonNullable<ReturnType<BackgroundRuns["follow"]>>): Response;
  /**
   * A stream of `handles`, begun once the engine has taken them: a cluster's worker refuses some
   * requests after `submit` returned, and the answer is then that refusal's status, not 200. A client
   * that hangs up meanwhile cancels them (a hand-off is taken only once its prefill has moved).
   */
  /** `params`: what the body calls the engine request's fields, for a refusal's `param` (refusals.ts). */
  sseOnceTaken(c: Context, handles: readonly RequestHandle[], stream: () => ReadableStream<Uint8Array>, end: () => void, params?: ParamNames): Promise<Response>;
  /** A chat or completion answer, streamed or whole as its body asks. */
  respond(c: Context, ctx: ServeContext, body: StreamChoice, submitted: Submitted, end: () => void): Promise<Response>;
  /** Runs a generation route, counted in flight from once its body has arrived (body-read.ts) until its answer is written. */
  generation(handle: (end: () => void) => Promise<Response>): Promise<Response>;
}

/** The request body as JSON, checked by `schema`: 400 when it is not JSON, breaks the schema, or nests too deeply to check. */
export async function readJsonBody<T>(c: Context, schema: ZodType<T>): Promise<T> {
  let raw: unknown;
  try {
    raw = JSON.parse(await c.req.text());
  } catch {
    throw new ApiError(400, "The request body is not valid JSON", null, "invalid_json");
  }
  let refused: ApiError;
  try {
    const r = schema.safeParse(raw);
    if (r.success) return r.data;
    refused = schemaError(r.error, raw);
  } catch (e) {
    // A check (or its message, which zod writes when the error is read) that walks or quotes a value
    // thousands of levels deep overflows the stack (Node's first): the client's doing, not a 500.
    if (nestsTooDeeply(e)) throw new ApiError(400, "The request body nests too deeply to be checked; send values nested at most a few hundred levels", null, "invalid_value");
    throw e;
  }
  throw refused;
}

/**
 * Runs `work` with a client hang-up cancelling `handles`; the listener goes away afterwards (Deno
 * aborts request.signal after successful responses too).
 */
async function cancelOnHangUp<T>(c: Context, handles: readonly RequestHandle[], work: () => Promise<T>): Promise<T> {
  const signal = c.req.raw.signal;
  const onAbort = () => handles.forEach((h) => h.cancel());
  signal?.addEventListener("abort", onAbort);
  try {
    return await work();
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/** The route helpers of one app: `ctx` is the base model's context, `life` counts its responses in flight. */
export function routeKit(o: AppOptions, ctx: ServeContext, life: ServerLifecycle): RouteKit {
  const fail = (c: Context, e: ApiError): Response => {
    if (e.status === 429 || e.status === 503) c.header("Retry-After", String(o.retryAfterS ?? 1));
    // Anthropic's clients read their own error shape (and 529 for overloaded).
    if (c.req.path.startsWith("/v1/messages")) return c.json(anthropicErrorBody(e), anthropicStatus(e) as UnofficialStatusCode);
    return c.json(e.body(), e.status);
  };
  const adapters = () => o.engine.adapterNames?.() ?? [];
  const served = () => {
    const names = adapters();
    return names.length === 0 ? `'${o.modelName}'` : `'${o.modelName}' and its LoRA adapters ${names.map((n) => `'${n}'`).join(", ")}`;
  };
  const ctxFor = (model: string | null | undefined): ServeContext => {
    if (model === undefined || model === null || model === o.modelName) return ctx;
    if (!adapters().includes(model)) throw new ApiError(404, `The model '${model}' does not exist; this server serves ${served()}`, "model", "model_not_found");
    return { ...ctx, modelName: model, engine: withAdapter(o.engine, model) };
  };
  const readImages = async (body: object, field: string): Promise<Map<string, PreparedImage>> => {
    if (!ctx.imagePrep) return new Map();
    const urls = await fetchImageUrls(ctx.imageFetch, body as Record<string, unknown>, field, ctx.maxImages);
    // More than the limit: nothing is prepared, the prompt refuses them by name.
    return urls.length > ctx.maxImages ? new Map() : ctx.imagePrep.prepare(urls);
  };
  const parse = async <T extends { model: string }>(c: Context, schema: ZodType<T>): Promise<[T, ServeContext]> => {
    const body = await readJsonBody(c, schema);
    const served = ctxFor(body.model);
    if (!ctx.imagePrep) return [body, served];
    const preparedImages = new Map([...await readImages(body, "messages"), ...await readImages(body, "input")]);
    return [body, preparedImages.size > 0 ? { ...served, preparedImages } : served];
  };
  const whole = async (c: Context, submitted: Submitted, end: () => void, answer: () => Promise<Record<string, unknown>>): Promise<Response> => {
    try {
      return await cancelOnHangUp(c, submitted.handles, async () => {
        // A refusal by a cluster's worker cancels the other choices now, not once they are generated.
        await awaitTaken(submitted.handles, submitted.params);
        return c.json(await answer());
      });
    } finally {
      end();
    }
  };
  const followSse = (follow: NonNullable<ReturnType<BackgroundRuns["follow"]>>) =>
    new Response(followStream(follow), { headers: SSE_HEADERS });
  // Streams are cancelled through the body stream's cancel(), which both runtimes call on disconnect.
  const sse = (stream: ReadableStream<Uint8Array>, end: () => void) =>
    new Response(life.track(stream, end), { headers: SSE_HEADERS });
  const sseOnceTaken = async (c: Context, handles: readonly RequestHandle[], stream: () => ReadableStream<Uint8Array>, end: () => void, params?: ParamNames) => {
    await cancelOnHangUp(c, handles, () => awaitTaken(handles, params));
    return sse(stream(), end);
  };
  const respond = (c: Context, ctx: ServeContext, body: StreamChoice, submitted: Submitted, end: () => void) =>
    body.stream
      ? sseOnceTaken(c, submitted.handles, () => completeStream(ctx, submitted, body.stream_options?.include_usage === true, body.stream_options?.continuous_usage_stats === true), end, submitted.params)
      : whole(c, submitted, end, () => completeJson(ctx, submitted));
  const generation = async (handle: (end: () => void) => Promise<Response>) => {
    if (life.draining) throw new ApiError(503, "The server is shutting down; send the request to another replica, or retry once it is back", null, "shutting_down");
    const end = life.begin();
    try {
      return await handle(end);
    } catch (e) {
      end();
      throw e;
    }
  };
  return { fail, readBody: readJsonBody, adapters, ctxFor, readImages, parse, whole, followSse, sseOnceTaken, respond, generation };
}

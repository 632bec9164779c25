/**
 * The Hono app: OpenAI-compatible routes, CORS (any origin, vLLM's default), Bearer auth (constant-time compare), body limit, health, version and Prometheus
 * metrics; a known path with another method gets 405 with an `Allow` header. Runtime-neutral: `listen.ts` serves it under Deno.serve or @hono/node-server, tests
 * call `app.request()` in-process.
 */
import { Hono, type Context } from "hono";
import { cors } from "hono/cors";
import type { UnofficialStatusCode } from "hono/utils/http-status";
import { createHash, timingSafeEqual } from "node:crypto";
import type { ZodType } from "zod";
import type { RequestHandle, ServingEngine } from "../engine/engine-types.ts";
import type { SchedulingPolicy } from "../engine/scheduler-types.ts";
import type { JsonWhitespace, ToolCallFormat } from "../engine/grammar.ts";
import type { LoadedModel, SamplingDefaults } from "../model/config.ts";
import { nestsTooDeeply } from "../engine/json-schema.ts";
import { modelChatRenderer } from "./chat-template.ts";
import { reasoningTokensOf } from "./harmony-prompt.ts";
import { DEFAULT_BODY_TIMEOUT_MS, readBodyFirst } from "./body-read.ts";
import { anthropicErrorBody, anthropicStatus, ApiError, schemaError } from "./errors.ts";
import { renderMetrics } from "./metrics.ts";
import type { ReasoningParserName } from "./reasoning.ts";
import { type ServeContext, type Submitted, submitChat, submitCompletion } from "./openai.ts";
import { completeJson, completeStream } from "./respond.ts";
import { awaitTaken } from "./refusals.ts";
import { ServerLifecycle } from "./lifecycle.ts";
import { toolCallSyntax } from "./tool-calls-mistral.ts";
import { ChatRequestSchema, CompletionRequestSchema } from "./schemas.ts";
import { ConversationStore } from "./conversation-store.ts";
import { addConversationRoutes } from "./conversations.ts";
import { itemsPage } from "./item-list.ts";
import { ResponseStore } from "./response-store.ts";
import { respondJson, respondStream, type ResponsesState, submitResponse } from "./responses.ts";
import { ResponsesRequestSchema } from "./responses-schema.ts";
import { BackgroundRuns, followStream } from "./responses-background.ts";
import { countMessageTokens, respondMessageJson, respondMessageStream, submitMessages } from "./messages.ts";
import { CountTokensRequestSchema, MessagesRequestSchema } from "./messages-schema.ts";
import { detokenize, DetokenizeRequestSchema, tokenize, TokenizeRequestSchema } from "./tokenize.ts";
import { embeddingsJson, EmbeddingsRequestSchema, submitEmbeddings } from "./embeddings.ts";
import { rerankJson, RerankRequestSchema, scoreJson, ScoreRequestSchema, submitRerank, submitScore } from "./score.ts";
import { addLoraRoutes, withAdapter } from "./lora.ts";

/** Server settings. */
export interface AppOptions {
  engine: ServingEngine;
  model: LoadedModel;
  /** Name served at /v1/models and expected in requests. */
  modelName: string;
  /** When set, /v1/* requires `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Origins browsers may call from (CORS; `--allowed-origins`); default any ("*"), as vLLM's. */
  allowedOrigins?: readonly string[];
  /** Largest request body accepted (413 above). */
  maxBodyBytes?: number;
  /** Longest wait for the next bytes of a request body, in ms (408 after; default 30 s). */
  bodyTimeoutMs?: number;
  /** Seconds clients are told to wait after a 429. */
  retryAfterS?: number;
  /** "think": chat answers' `<think>` text is returned as `reasoning_content` ("mistral": `[THINK]`, "harmony": gpt-oss's analysis channel; default "none"). */
  reasoningParser?: ReasoningParserName;
  /** How JSON output grammars may be spaced unless a request says (default "any"; grammar.ts JsonWhitespace). */
  jsonWhitespace?: JsonWhitespace;
  /** How the model writes tool calls (default "hermes"; grammar.ts ToolCallFormat). */
  toolCallParser?: ToolCallFormat;
  /** "auto" (default): requests default to the model's generation_config.json sampling; "vllm": to OpenAI's. */
  generationConfig?: GenerationConfigChoice;
  /** "priority" (default): requests may set `priority`; "fcfs": any but 0 is refused, as vLLM's default. */
  schedulingPolicy?: SchedulingPolicy;
  /** Counts generation responses in flight and says when the server drains (new ones get a 503). */
  lifecycle?: ServerLifecycle;
  /** The most Responses API responses kept for `previous_response_id` and `GET /v1/responses/{id}` (default 4096; 0 keeps none). */
  maxStoredResponses?: number;
  /** The most conversations (`/v1/conversations`) kept (default 1024; 0 keeps none). */
  maxConversations?: number;
  /** The most MiB of JSON text each of the two stores (responses, conversations) keeps (default 512). */
  maxStoredMiB?: number;
  /** Where each LoRA adapter the engine holds was read from, by name (`--lora-modules`; `/v1/models`' `root`). */
  loraSources?: Map<string, string>;
  /** `--allow-runtime-lora-updating`: `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` work. */
  allowRuntimeLora?: boolean;
}

/** Where a request's left-out sampling parameters come from (`--generation-config`). */
export type GenerationConfigChoice = "auto" | "vllm";

/** The sampling defaults requests get where they leave parameters out: the model's (auto), or none (vllm: OpenAI's). */
export function samplingDefaultsOf(model: LoadedModel, choice: GenerationConfigChoice = "auto"): SamplingDefaults {
  return choice === "vllm" ? {} : model.config.samplingDefaults ?? {};
}

/** The headers of a server-sent event stream. */
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" };

/** This server's version, as `GET /version` reports it (package.json's; a test keeps them equal). */
export const SERVER_VERSION = "0.1.0";

/** Whether `given` is `key`, in time that does not depend on where they differ (both are hashed to equal lengths first). */
function sameKey(given: string, key: string): boolean {
  const digest = (v: string) => createHash("sha256").update(v).digest();
  return timingSafeEqual(digest(given), digest(key));
}

/** Responses kept by default (`--max-stored-responses`). */
export const DEFAULT_STORED_RESPONSES = 4096;
/** Conversations kept by default (`--max-conversations`). */
export const DEFAULT_CONVERSATIONS = 1024;
/** MiB of JSON text each store keeps by default (`--max-stored-mib`). */
export const DEFAULT_STORED_MIB = 512;

/** Builds the app. */
export function createApp(o: AppOptions): Hono {
  const ctx: ServeContext = {
    engine: o.engine,
    tokenizer: o.model.tokenizer,
    config: o.model.config,
    modelName: o.modelName,
    chat: modelChatRenderer(o.model),
    reasoningParser: o.reasoningParser ?? "none",
    tracksReasoning: reasoningTokensOf(o.reasoningParser ?? "none", o.model.tokenizer) !== undefined,
    jsonWhitespace: o.jsonWhitespace ?? "any",
    toolCallParser: toolCallSyntax(o.toolCallParser ?? "hermes", o.model.tokenizer),
    samplingDefaults: samplingDefaultsOf(o.model, o.generationConfig),
    priorityScheduling: (o.schedulingPolicy ?? "priority") === "priority",
  };
  const life = o.lifecycle ?? new ServerLifecycle();
  // Not strict: `/v1/models/` is `/v1/models`, as FastAPI's redirect_slashes makes it on vLLM.
  const app = new Hono({ strict: false });
  const fail = (c: Context, e: ApiError) => {
    if (e.status === 429 || e.status === 503) c.header("Retry-After", String(o.retryAfterS ?? 1));
    // Anthropic's clients read their own error shape (and 529 for overloaded).
    if (c.req.path.startsWith("/v1/messages")) return c.json(anthropicErrorBody(e), anthropicStatus(e) as UnofficialStatusCode);
    return c.json(e.body(), e.status);
  };
  app.onError((err, c) => {
    if (err instanceof ApiError) return fail(c, err);
    console.error(`Internal error on ${c.req.method} ${c.req.path}: ${err instanceof Error ? err.message : String(err)}`);
    return fail(c, new ApiError(500, "Internal server error", null, "internal_error"));
  });
  app.notFound((c) => fail(c, new ApiError(404, `No route for ${c.req.method} ${c.req.path}`, null, "not_found")));

  // As vLLM's default: any origin may call (browser clients; --allowed-origins narrows it), and a preflight is answered before the key is asked for.
  const origins = o.allowedOrigins ?? ["*"];
  app.use("*", cors({ origin: origins.includes("*") ? "*" : [...origins] }));
  const checkKey = (c: Context, next: () => Promise<void>): Promise<Response | void> => {
    if (o.apiKey === undefined) return next();
    const auth = c.req.header("authorization") ?? "";
    // The scheme is case-insensitive (RFC 9110); the key is compared in constant time.
    const bearer = /^bearer +(.*)$/i.exec(auth)?.[1];
    // Anthropic's clients send the key as `x-api-key` (Claude Code's ANTHROPIC_AUTH_TOKEN as a Bearer token).
    const apiKey = c.req.header("x-api-key");
    const bearerOk = bearer !== undefined && sameKey(bearer, o.apiKey);
    const headerOk = apiKey !== undefined && sameKey(apiKey, o.apiKey);
    if (!bearerOk && !headerOk) {
      const given = auth !== "" || apiKey !== undefined;
      return Promise.resolve(fail(c, new ApiError(401, given ? "Incorrect API key provided" : "Missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')", null, "invalid_api_key")));
    }
    return next();
  };
  // The API routes, and vLLM's tokenizer routes beside them: the key and the body limit apply to all.
  const guarded = ["/v1/*", "/v2/*", "/tokenize", "/detokenize", "/score", "/rerank"];
  for (const path of guarded) app.use(path, checkKey);
  const limit = o.maxBodyBytes ?? 2 * 1024 * 1024;
  const bodies = readBodyFirst({ maxBytes: limit, idleMs: o.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS, fail });
  for (const path of guarded) app.use(path, bodies);

  async function readBody<T>(c: Context, schema: ZodType<T>): Promise<T> {
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
  const adapters = () => o.engine.adapterNames?.() ?? [];
  const served = () => {
    const names = adapters();
    return names.length === 0 ? `'${o.modelName}'` : `'${o.modelName}' and its LoRA adapters ${names.map((n) => `'${n}'`).join(", ")}`;
  };
  /**
   * The context a request for `model` is served in: the base model's, or with a LoRA adapter's name,
   * one whose engine runs every request with that adapter and whose answers name it. 404 for others.
   */
  const ctxFor = (model: string | null | undefined): ServeContext => {
    if (model === undefined || model === null || model === o.modelName) return ctx;
    if (!adapters().includes(model)) throw new ApiError(404, `The model '${model}' does not exist; this server serves ${served()}`, "model", "model_not_found");
    return { ...ctx, modelName: model, engine: withAdapter(o.engine, model) };
  };
  /** A generation request's body, checked, and the context of the model (or adapter) it asks for. */
  async function parse<T extends { model: string }>(c: Context, schema: ZodType<T>): Promise<[T, ServeContext]> {
    const body = await readBody(c, schema);
    return [body, ctxFor(body.model)];
  }

  const storedChars = (o.maxStoredMiB ?? DEFAULT_STORED_MIB) * 2 ** 20;
  const state: ResponsesState = {
    responses: new ResponseStore(o.maxStoredResponses ?? DEFAULT_STORED_RESPONSES, storedChars),
    conversations: new ConversationStore(o.maxConversations ?? DEFAULT_CONVERSATIONS, storedChars),
    background: new BackgroundRuns(),
  };
  const store = state.responses;
  /** A whole (non-streamed) answer; a client that hangs up before it is ready cancels the request. */
  /**
   * Runs `work` with a client hang-up cancelling `handles`; the listener goes away afterwards (Deno
   * aborts request.signal after successful responses too).
   */
  const cancelOnHangUp = async <T>(c: Context, handles: readonly RequestHandle[], work: () => Promise<T>): Promise<T> => {
    const signal = c.req.raw.signal;
    const onAbort = () => handles.forEach((h) => h.cancel());
    signal?.addEventListener("abort", onAbort);
    try {
      return await work();
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  };
  const whole = async (c: Context, submitted: Submitted, end: () => void, answer: () => Promise<Record<string, unknown>>) => {
    try {
      return await cancelOnHangUp(c, submitted.handles, async () => {
        // A refusal by a cluster's worker cancels the other choices now, not once they are generated.
        await awaitTaken(submitted.handles);
        return c.json(await answer());
      });
    } finally {
      end();
    }
  };
  /** A background response's events as SSE (a client hanging up stops only its copy). */
  const followSse = (follow: NonNullable<ReturnType<BackgroundRuns["follow"]>>) =>
    new Response(followStream(follow), { headers: SSE_HEADERS });
  // Streams are cancelled through the body stream's cancel(), which both runtimes call on disconnect.
  const sse = (stream: ReadableStream<Uint8Array>, end: () => void) =>
    new Response(life.track(stream, end), { headers: SSE_HEADERS });
  /**
   * A stream of `handles`, begun once the engine has taken them: a cluster's worker refuses some
   * requests after `submit` returned, and the answer is then that refusal's status, not 200. A client
   * that hangs up meanwhile cancels them (a hand-off is taken only once its prefill has moved).
   */
  const sseOnceTaken = async (c: Context, handles: readonly RequestHandle[], stream: () => ReadableStream<Uint8Array>, end: () => void) => {
    await cancelOnHangUp(c, handles, () => awaitTaken(handles));
    return sse(stream(), end);
  };
  const respond = (c: Context, ctx: ServeContext, body: { stream?: boolean | null; stream_options?: { include_usage?: boolean | null; continuous_usage_stats?: boolean | null } | null }, submitted: Submitted, end: () => void) =>
    body.stream
      ? sseOnceTaken(c, submitted.handles, () => completeStream(ctx, submitted, body.stream_options?.include_usage === true, body.stream_options?.continuous_usage_stats === true), end)
      : whole(c, submitted, end, () => completeJson(ctx, submitted));
  /** Runs a generation route, counted in flight from once its body has arrived (body-read.ts) until its answer is written. */
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
  app.post("/v1/chat/completions", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, ChatRequestSchema);
    return respond(c, ctx, body, submitChat(ctx, body), end);
  }));
  app.post("/v1/completions", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, CompletionRequestSchema);
    return respond(c, ctx, body, submitCompletion(ctx, body), end);
  }));
  app.post("/v1/responses", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, ResponsesRequestSchema);
    const turn = submitResponse(ctx, state, body);
    if (body.background) {
      // Counted in flight until it finishes, whoever is listening.
      const queued = state.background.start(ctx, state, turn, end);
      return body.stream ? followSse(state.background.follow(turn.id, -1)!) : c.json(queued);
    }
    return body.stream ? sseOnceTaken(c, turn.submitted.handles, () => respondStream(ctx, state, turn), end) : whole(c, turn.submitted, end, () => respondJson(ctx, state, turn));
  }));
  app.post("/v1/messages", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, MessagesRequestSchema);
    const turn = submitMessages(ctx, body);
    return body.stream ? sseOnceTaken(c, turn.submitted.handles, () => respondMessageStream(ctx, turn), end) : whole(c, turn.submitted, end, () => respondMessageJson(ctx, turn));
  }));
  app.post("/v1/embeddings", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, EmbeddingsRequestSchema);
    const handles = submitEmbeddings(ctx, body);
    return whole(c, { kind: "completion", handles, perPrompt: 1, n: 1, output: null }, end, () => embeddingsJson(ctx, body, handles));
  }));
  // vLLM's score and rerank routes, with and without the version prefix.
  const scoring = (handles: RequestHandle[]): Submitted => ({ kind: "completion", handles, perPrompt: 1, n: 1, output: null });
  for (const path of ["/score", "/v1/score"]) {
    app.post(path, (c) => generation(async (end) => {
      const body = await readBody(c, ScoreRequestSchema);
      const ctx = ctxFor(body.model);
      const s = submitScore(ctx, body);
      return whole(c, scoring(s.handles), end, () => scoreJson(ctx, s));
    }));
  }
  for (const path of ["/rerank", "/v1/rerank", "/v2/rerank"]) {
    app.post(path, (c) => generation(async (end) => {
      const body = await readBody(c, RerankRequestSchema);
      const ctx = ctxFor(body.model);
      const s = submitRerank(ctx, body);
      return whole(c, scoring(s.handles), end, () => rerankJson(ctx, body, s));
    }));
  }
  app.post("/tokenize", async (c) => {
    const body = await readBody(c, TokenizeRequestSchema);
    return c.json(tokenize(ctxFor(body.model), body));
  });
  app.post("/detokenize", async (c) => {
    const body = await readBody(c, DetokenizeRequestSchema);
    return c.json(detokenize(ctxFor(body.model), body));
  });
  app.post("/v1/messages/count_tokens", async (c) => {
    const [body, ctx] = await parse(c, CountTokensRequestSchema);
    return c.json(countMessageTokens(ctx, body));
  });
  const stored = (id: string) => {
    const entry = store.get(id);
    if (!entry) throw new ApiError(404, `Response with id '${id}' not found; responses are kept only with store = true, and the server keeps the ${store.capacity} most recently used`, "response_id", "not_found");
    return entry;
  };
  app.get("/v1/responses/:id/input_items", (c) => {
    const id = c.req.param("id");
    const items = state.background.inputItems(id) ?? stored(id).inputItems;
    return c.json(itemsPage(items, c.req.query(), `response '${id}'`));
  });
  app.get("/v1/responses/:id", (c) => {
    const id = c.req.param("id");
    const q = c.req.query();
    if (q.stream === "true") {
      const after = q.starting_after === undefined ? -1 : Number(q.starting_after);
      if (!Number.isInteger(after) || after < -1) throw new ApiError(400, `starting_after must be an event's sequence number, got ${JSON.stringify(q.starting_after)}`, "starting_after", "invalid_value");
      const follow = state.background.follow(id, after);
      if (!follow) {
        stored(id);
        throw new ApiError(400, `Response '${id}' has no events to stream: only a background response's are kept, until ${state.background.keptLogs} more have finished; read it without stream`, "stream", "invalid_value");
      }
      return followSse(follow);
    }
    return c.json(state.background.current(id) ?? stored(id).response);
  });
  app.post("/v1/responses/:id/cancel", async (c) => {
    const id = c.req.param("id");
    const cancelled = state.background.cancel(id);
    if (cancelled) return c.json(await cancelled);
    const entry = stored(id);
    // Cancelling a finished background response returns it as it is.
    if (entry.response.background !== true) throw new ApiError(400, `Response '${id}' was not created with background = true; only background responses can be cancelled`, "response_id", "invalid_value");
    return c.json(entry.response);
  });
  app.delete("/v1/responses/:id", async (c) => {
    const id = c.req.param("id");
    const cancelled = state.background.cancel(id);
    if (cancelled) await cancelled;
    stored(id);
    store.delete(id);
    return c.json({ id, object: "response", deleted: true });
  });
  addConversationRoutes(app, state.conversations, readBody);
  const loraSources = o.loraSources ?? new Map<string, string>();
  // vLLM's cards: an adapter's root is where it was read from and its parent the base model.
  // vLLM's cards carry a Unix time; ours is when the server started.
  const created = Math.floor(Date.now() / 1000);
  const modelCard = (id = o.modelName) => ({
    id, object: "model", created, owned_by: "evolving-infra", root: id === o.modelName ? o.modelName : loraSources.get(id) ?? null,
    parent: id === o.modelName ? null : o.modelName, max_model_len: o.engine.maxModelLen,
  });
  app.get("/v1/models", (c) => c.json({ object: "list", data: [modelCard(), ...adapters().map((n) => modelCard(n))] }));
  // Served names may hold slashes ("Qwen/Qwen3-0.6B"), as OpenAI's fine-tuned model ids hold colons.
  app.get("/v1/models/:id{.+}", (c) => {
    const id = c.req.param("id");
    ctxFor(id);
    return c.json(modelCard(id));
  });
  addLoraRoutes(app, { engine: o.engine, model: o.model, modelName: o.modelName, sources: loraSources, allowRuntime: o.allowRuntimeLora ?? false, readBody });
  // A draining server says so, and so does one with no worker left to serve (every worker process
  // gone, or none joined yet): a load balancer stops sending it work until one is.
  app.get("/health", (c) => {
    if (life.draining) return c.json({ status: "draining" }, 503);
    return o.engine.workerStatuses().some((w) => w.alive !== false) ? c.json({ status: "ok" }) : c.json({ status: "no_worker" }, 503);
  });
  app.get("/version", (c) => c.json({ version: SERVER_VERSION }));
  app.get("/metrics", (c) => c.text(renderMetrics(o.engine, o.modelName), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }));
  // A known path with the wrong method is a 405 that says which method it takes, not a 404.
  const allow = (path: string, method: "GET" | "POST" | "GET, DELETE" | "GET, POST" | "GET, POST, DELETE") =>
    app.all(path, (c) => {
      c.header("Allow", method.startsWith("GET") ? method.replace("GET", "GET, HEAD") : method);
      return fail(c, new ApiError(405, `${c.req.method} is not allowed on ${c.req.path}; use ${method.replace(/, (?=[A-Z]+$)/, " or ")}`, null, "method_not_allowed"));
    });
  allow("/v1/chat/completions", "POST");
  allow("/v1/completions", "POST");
  allow("/v1/responses", "POST");
  allow("/v1/messages", "POST");
  allow("/v1/messages/count_tokens", "POST");
  allow("/v1/embeddings", "POST");
  for (const path of ["/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"]) allow(path, "POST");
  allow("/tokenize", "POST");
  allow("/detokenize", "POST");
  allow("/v1/responses/:id/input_items", "GET");
  allow("/v1/responses/:id", "GET, DELETE");
  allow("/v1/responses/:id/cancel", "POST");
  allow("/v1/conversations", "POST");
  allow("/v1/conversations/:id", "GET, POST, DELETE");
  allow("/v1/conversations/:id/items", "GET, POST");
  allow("/v1/conversations/:id/items/:item_id", "GET, DELETE");
  allow("/v1/models", "GET");
  allow("/v1/models/:id{.+}", "GET");
  allow("/health", "GET");
  allow("/metrics", "GET");
  allow("/version", "GET");
  return app;
}

/**
 * The Hono app: OpenAI-compatible routes, CORS (any origin, vLLM's default), Bearer auth (constant-time compare), body limit, health, version and Prometheus
 * metrics; a known path with another method gets 405 with an `Allow` header. Runtime-neutral: `listen.ts` serves it under Deno.serve or @hono/node-server, tests
 * call `app.request()` in-process. The routes are grouped in app-*-routes.ts, their shared helpers in app-kit.ts, the settings in app-options.ts.
 */
import { type Context, Hono } from "hono";
import { createHash, timingSafeEqual } from "node:crypto";
import { DEFAULT_BODY_TIMEOUT_MS, readBodyFirst } from "./body-read.ts";
import { corsHeaders } from "./cors.ts";
import { ApiError } from "./errors.ts";
import { ServerLifecycle } from "./lifecycle.ts";
import { ConversationStore } from "./conversation-store.ts";
import { ResponseStore } from "./response-store.ts";
import type { ResponsesState } from "./responses.ts";
import { BackgroundRuns } from "./responses-background.ts";
import { routeKit } from "./app-kit.ts";
import { type AppOptions, DEFAULT_CONVERSATIONS, DEFAULT_STORED_MIB, DEFAULT_STORED_RESPONSES, serveContextOf } from "./app-options.ts";
import { addGenerationRoutes } from "./app-generation-routes.ts";
import { addTokenRoutes } from "./app-token-routes.ts";
import { addStoredResponseRoutes } from "./app-response-routes.ts";
import { addMethodNotAllowed, addServiceRoutes } from "./app-service-routes.ts";

export {
  type AppOptions,
  DEFAULT_CONVERSATIONS,
  DEFAULT_STORED_MIB,
  DEFAULT_STORED_RESPONSES,
  type GenerationConfigChoice,
  samplingDefaultsOf,
  SERVER_VERSION,
} from "./app-options.ts";

/** Whether `given` is `key`, in time that does not depend on where they differ (both are hashed to equal lengths first). */
function sameKey(given: string, key: string): boolean {
  const digest = (v: string) => createHash("sha256").update(v).digest();
  return timingSafeEqual(digest(given), digest(key));
}

/** The largest request body by default (`--max-body-bytes`). */
export const DEFAULT_BODY_BYTES = 2 * 1024 * 1024;
/** The largest request body by default where the model reads images (`--mmproj`). */
export const DEFAULT_IMAGE_BODY_BYTES = 64 * 1024 * 1024;

/** Builds the app. */
export function createApp(o: AppOptions): Hono {
  const ctx = serveContextOf(o);
  const life = o.lifecycle ?? new ServerLifecycle();
  // Not strict: `/v1/models/` is `/v1/models`, as FastAPI's redirect_slashes makes it on vLLM.
  const app = new Hono({ strict: false });
  const kit = routeKit(o, ctx, life);
  const { fail } = kit;
  app.onError((err, c) => {
    if (err instanceof ApiError) return fail(c, err);
    console.error(`Internal error on ${c.req.method} ${c.req.path}: ${err instanceof Error ? err.message : String(err)}`);
    return fail(c, new ApiError(500, "Internal server error", null, "internal_error"));
  });
  app.notFound((c) => fail(c, new ApiError(404, `No route for ${c.req.method} ${c.req.path}`, null, "not_found")));

  // As vLLM's default: any origin may call (browser clients; --allowed-origins narrows it), and a preflight is answered before the key is asked for.
  const origins = o.allowedOrigins ?? ["*"];
  app.use("*", corsHeaders(origins));
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
  // A model that reads images takes their bytes inline: an agent's conversation resends every screenshot
  // (OpenAI takes 50 MB of images a request); text alone stays within 2 MiB.
  const limit = o.maxBodyBytes ?? (o.model.config.vision ? DEFAULT_IMAGE_BODY_BYTES : DEFAULT_BODY_BYTES);
  const bodies = readBodyFirst({ maxBytes: limit, idleMs: o.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS, fail });
  for (const path of guarded) app.use(path, bodies);

  const storedChars = (o.maxStoredMiB ?? DEFAULT_STORED_MIB) * 2 ** 20;
  const state: ResponsesState = {
    responses: new ResponseStore(o.maxStoredResponses ?? DEFAULT_STORED_RESPONSES, storedChars),
    conversations: new ConversationStore(o.maxConversations ?? DEFAULT_CONVERSATIONS, storedChars),
    background: new BackgroundRuns(),
  };
  // Added in this order: each known path's 405 comes after all the routes.
  addGenerationRoutes(app, kit, state);
  addTokenRoutes(app, kit);
  addStoredResponseRoutes(app, kit, state);
  addServiceRoutes(app, kit, o, life);
  addMethodNotAllowed(app, fail);
  return app;
}

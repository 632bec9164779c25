/**
 * The app's service routes: the served models (`/v1/models`, adapters with their parent), LoRA
 * loading (lora.ts), `/health`, `/version` and `/metrics`; and the 405 (with `Allow`) for a known
 * path asked with another method, added after every route.
 */
import type { Hono } from "hono";
import type { RouteKit } from "./app-kit.ts";
import { type AppOptions, SERVER_VERSION } from "./app-options.ts";
import { ApiError } from "./errors.ts";
import type { ServerLifecycle } from "./lifecycle.ts";
import { addLoraRoutes } from "./lora.ts";
import { renderMetrics } from "./metrics.ts";

/** Adds the model, LoRA, health, version and metrics routes to `app`; `life` says whether the server drains. */
export function addServiceRoutes(app: Hono, kit: RouteKit, o: AppOptions, life: ServerLifecycle): void {
  const { adapters, ctxFor, readBody } = kit;
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
}

/** Answers each known path's other methods with a 405 naming the ones it takes (added last: the routes come first). */
export function addMethodNotAllowed(app: Hono, fail: RouteKit["fail"]): void {
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
}

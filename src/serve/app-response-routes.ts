/**
 * The app's routes over stored responses (read, replayed as events, cancelled, deleted, their input
 * items listed) and the Conversations API (conversations.ts).
 */
import type { Hono } from "hono";
import type { RouteKit } from "./app-kit.ts";
import { addConversationRoutes } from "./conversations.ts";
import { ApiError } from "./errors.ts";
import { itemsPage } from "./item-list.ts";
import type { ResponsesState } from "./responses.ts";

/** Adds the stored-response and conversation routes to `app`, over `state`'s stores and background runs. */
export function addStoredResponseRoutes(app: Hono, kit: RouteKit, state: ResponsesState): void {
  const { followSse, readBody, readImages } = kit;
  const store = state.responses;
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
  // A conversation's items are stored with their image URLs read, as a response's input is.
  addConversationRoutes(app, state.conversations, async (c, schema) => {
    const body = await readBody(c, schema);
    if (body !== null && typeof body === "object") await readImages(body, "items");
    return body;
  });
}

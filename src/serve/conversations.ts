/**
 * OpenAI's Conversations API over a {@link ConversationStore}: `POST /v1/conversations`,
 * `GET`/`POST`/`DELETE /v1/conversations/{id}`, `GET`/`POST /v1/conversations/{id}/items` and
 * `GET`/`DELETE /v1/conversations/{id}/items/{item_id}`. A Responses request that names a
 * conversation (`conversation`) answers after its items and appends its input and output to it
 * (responses.ts), and the conversation is one engine session, so its KV is kept across turns as a
 * `previous_response_id` chain's is. The OpenAI Agents SDK's `OpenAIConversationsSession` and its
 * runs with a `conversationId` speak this API.
 */
import type { Context, Hono } from "hono";
import { z, type ZodType } from "zod";
import { type Conversation, type ConversationStore, conversationJson } from "./conversation-store.ts";
import { ApiError } from "./errors.ts";
import { itemList, Metadata } from "./responses-schema.ts";
import { normalizedItems } from "./responses-input.ts";
import { itemsPage } from "./item-list.ts";

const maybe = <T extends z.ZodType>(t: T) => t.nullable().optional();

/** POST /v1/conversations */
export const ConversationCreateSchema = z.looseObject({ items: maybe(itemList(0)), metadata: maybe(Metadata) });
/** POST /v1/conversations/{id} */
export const ConversationUpdateSchema = z.looseObject({ metadata: Metadata });
/** POST /v1/conversations/{id}/items */
export const ConversationItemsSchema = z.looseObject({ items: itemList(1) });

/** Reads a request's JSON body through a schema (a 400 naming what is wrong otherwise). */
export type ReadBody = <T>(c: Context, schema: ZodType<T>) => Promise<T>;

/** The 404 for a conversation the store does not hold. */
export function unknownConversation(store: ConversationStore, id: string, param: string): ApiError {
  return new ApiError(404, `Conversation with id '${id}' not found; the server keeps the ${store.capacity} most recently used conversations (--max-conversations), within --max-stored-mib, in memory`, param, "not_found");
}

/** Refuses items that would make a conversation larger than the store keeps (a 400 naming `param`). */
export function checkRoom(store: ConversationStore, conv: Conversation | null, items: readonly Record<string, unknown>[], param: string): void {
  if (store.fits(conv, items)) return;
  const what = conv ? `Conversation '${conv.id}' with these items` : "The conversation";
  throw new ApiError(400, `${what} would be larger than the ${store.maxSize} bytes of JSON the server keeps for all conversations (--max-stored-mib); start a new conversation`, param, "conversation_too_large");
}

/** Adds the Conversations API's routes to `app`. */
export function addConversationRoutes(app: Hono, store: ConversationStore, readBody: ReadBody): void {
  const held = (c: Context): Conversation => {
    const id = c.req.param("id")!;
    const conv = store.get(id);
    if (!conv) throw unknownConversation(store, id, "conversation_id");
    return conv;
  };
  app.post("/v1/conversations", async (c) => {
    const body = await readBody(c, ConversationCreateSchema);
    if (store.capacity === 0) throw new ApiError(400, "This server keeps no conversations (it was started with --max-conversations 0); send the whole conversation as input, or chain turns with previous_response_id", null, "unsupported_parameter");
    const items = normalizedItems(body.items ?? []);
    checkRoom(store, null, items, "items");
    return c.json(conversationJson(store.create(items, body.metadata ?? {}, Math.floor(Date.now() / 1000))));
  });
  app.get("/v1/conversations/:id", (c) => c.json(conversationJson(held(c))));
  app.post("/v1/conversations/:id", async (c) => {
    const conv = held(c);
    conv.metadata = { ...(await readBody(c, ConversationUpdateSchema)).metadata };
    return c.json(conversationJson(conv));
  });
  app.delete("/v1/conversations/:id", (c) => {
    const conv = held(c);
    store.delete(conv.id);
    return c.json({ id: conv.id, object: "conversation.deleted", deleted: true });
  });
  app.get("/v1/conversations/:id/items", (c) => {
    const conv = held(c);
    return c.json(itemsPage(conv.items, c.req.query(), `conversation '${conv.id}'`));
  });
  app.post("/v1/conversations/:id/items", async (c) => {
    const conv = held(c);
    const body = await readBody(c, ConversationItemsSchema);
    const items = normalizedItems(body.items);
    checkRoom(store, conv, items, "items");
    const data = store.append(conv, items);
    return c.json({ object: "list", data, first_id: data[0].id, last_id: data[data.length - 1].id, has_more: false });
  });
  const item = (c: Context, conv: Conversation): number => {
    const itemId = c.req.param("item_id")!;
    const i = conv.items.findIndex((it) => it.id === itemId);
    if (i < 0) throw new ApiError(404, `Conversation '${conv.id}' has no item with the id '${itemId}'`, "item_id", "not_found");
    return i;
  };
  app.get("/v1/conversations/:id/items/:item_id", (c) => {
    const conv = held(c);
    return c.json(conv.items[item(c, conv)]);
  });
  app.delete("/v1/conversations/:id/items/:item_id", (c) => {
    const conv = held(c);
    store.removeItem(conv, item(c, conv));
    return c.json(conversationJson(conv));
  });
}

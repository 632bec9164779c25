/** OpenAI's paged item lists (`GET /v1/responses/{id}/input_items`, `GET /v1/conversations/{id}/items`). */
import { ApiError } from "./errors.ts";

type Json = Record<string, unknown>;

/** The position of the item with id `id` in `listed`; a 400 naming `param` when there is none. */
function cursor(listed: readonly Json[], id: string, param: "after" | "before", owner: string): number {
  const i = listed.findIndex((it) => it.id === id);
  if (i < 0) throw new ApiError(400, `No item of ${owner} has the id '${id}' (the ${param} cursor)`, param, "invalid_value");
  return i;
}

/**
 * A page of `items` (each with an `id`) in OpenAI's list shape: `limit` 1–100 (default 20), `order`
 * "asc" or "desc" (default, newest first), `after` an item id (the page starts past it), `before` an
 * item id (the page is the `limit` items just before it, so that a client can page back). `owner`
 * names the list in errors ("response 'resp_…'").
 */
export function itemsPage(items: readonly Json[], q: { limit?: string; order?: string; after?: string; before?: string }, owner: string): Json {
  const limit = q.limit === undefined ? 20 : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError(400, `The limit must be an integer from 1 to 100, got ${JSON.stringify(q.limit)}`, "limit", "invalid_value");
  const order = q.order ?? "desc";
  if (order !== "asc" && order !== "desc") throw new ApiError(400, `The order must be "asc" or "desc", got ${JSON.stringify(order)}`, "order", "invalid_value");
  let listed = order === "asc" ? items : [...items].reverse();
  // Both cursors are found in the whole list, so that a window between them is the items in between.
  const start = q.after === undefined ? 0 : cursor(listed, q.after, "after", owner) + 1;
  const end = q.before === undefined ? listed.length : cursor(listed, q.before, "before", owner);
  listed = listed.slice(start, Math.max(start, end));
  // Paging back (before alone) takes the items nearest the cursor; otherwise the page starts at the front.
  const back = q.before !== undefined && q.after === undefined;
  const data = back ? listed.slice(Math.max(0, listed.length - limit)) : listed.slice(0, limit);
  return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: listed.length > limit };
}

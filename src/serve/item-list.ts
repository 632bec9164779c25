/** OpenAI's paged item lists (`GET /v1/responses/{id}/input_items`, `GET /v1/conversations/{id}/items`). */
import { ApiError } from "./errors.ts";

type Json = Record<string, unknown>;

/**
 * A page of `items` (each with an `id`) in OpenAI's list shape: `limit` 1–100 (default 20), `order`
 * "asc" or "desc" (default, newest first), `after` an item id. `owner` names the list in errors
 * ("response 'resp_…'").
 */
export function itemsPage(items: readonly Json[], q: { limit?: string; order?: string; after?: string }, owner: string): Json {
  const limit = q.limit === undefined ? 20 : Number(q.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError(400, `The limit must be an integer from 1 to 100, got ${JSON.stringify(q.limit)}`, "limit", "invalid_value");
  const order = q.order ?? "desc";
  if (order !== "asc" && order !== "desc") throw new ApiError(400, `The order must be "asc" or "desc", got ${JSON.stringify(order)}`, "order", "invalid_value");
  let listed = order === "asc" ? items : [...items].reverse();
  if (q.after !== undefined) {
    const i = listed.findIndex((it) => it.id === q.after);
    if (i < 0) throw new ApiError(400, `No item of ${owner} has the id '${q.after}'`, "after", "invalid_value");
    listed = listed.slice(i + 1);
  }
  const data = listed.slice(0, limit);
  return { object: "list", data, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null, has_more: listed.length > limit };
}

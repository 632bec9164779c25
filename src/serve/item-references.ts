/**
 * The Responses API's `item_reference` input items ({"type": "item_reference", "id": "..."}): each is
 * replaced by the item with that id that this server keeps, an input or output item of a stored
 * response or an item of the conversation the turn continues, so a client can resend earlier items
 * by id instead of whole.
 */
import { ApiError } from "./errors.ts";
import type { Conversation } from "./conversation-store.ts";
import type { ResponseStore } from "./response-store.ts";

type Json = Record<string, unknown>;

/** Whether `input` holds any item_reference (the common case, none, costs one scan). */
function hasReferences(input: readonly unknown[]): boolean {
  return input.some((it) => typeof it === "object" && it !== null && (it as Json).type === "item_reference");
}

/**
 * `input` with every item_reference replaced by the item it names (a copy; `input` itself when it has
 * none). Looked up in the conversation first, then in the stored responses (their input items and
 * output), newest first. A 400 naming the position and id for one that names nothing kept.
 */
export function resolveItemReferences(input: readonly unknown[], responses: ResponseStore, conversation: Conversation | null): unknown[] {
  if (!hasReferences(input)) return input as unknown[];
  let index: Map<string, Json> | undefined;
  const find = (id: string): Json | undefined => {
    const inConversation = conversation?.items.find((it) => it.id === id);
    if (inConversation) return inConversation;
    index ??= responses.itemsById();
    return index.get(id);
  };
  return input.map((it, i) => {
    const item = it as Json;
    if (item.type !== "item_reference") return it;
    const found = find(item.id as string);
    if (!found) {
      throw new ApiError(400, `input[${i}] references item '${item.id}', which no stored response or conversation holds; items are kept only with store = true, while their response is kept`, `input[${i}].id`, "invalid_value");
    }
    // A copy without its id: this turn's input gets ids of its own (two lists never share one).
    const { id: _, ...copy } = found;
    return copy;
  });
}

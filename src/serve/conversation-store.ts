/**
 * Conversations (OpenAI's Conversations API): a conversation is an ordered list of items — messages,
 * function calls, their outputs, reasoning — that a client creates, reads and edits, and that a
 * Responses request naming it (`conversation`) continues and then extends with its own input and
 * output. Kept in process, bounded by count and by size (the UTF-8 bytes of its items' JSON), least
 * recently used first (a conversation is used when it is read, extended or answered in).
 */
import { itemsSize } from "./response-store.ts";
import { itemIdPrefix, newId } from "./responses-output.ts";

type Json = Record<string, unknown>;

/** One conversation. */
export interface Conversation {
  id: string;
  /** Unix seconds. */
  createdAt: number;
  metadata: Record<string, string>;
  /** Its items, oldest first, each with an `id`. */
  items: Json[];
  /** The UTF-8 bytes of its items' JSON. */
  size: number;
}

/** The conversation object the API returns. */
export function conversationJson(c: Conversation): Json {
  return { id: c.id, object: "conversation", created_at: c.createdAt, metadata: c.metadata };
}

/** What an id adds to an item's JSON, at most (`,"id":"fco_` and 32 hex digits and a quote; ASCII, so bytes). */
const ID_CHARS = 48;

/** An LRU map of conversations. */
export class ConversationStore {
  private readonly entries = new Map<string, Conversation>();
  private total = 0;

  /**
   * `capacity`: the most conversations kept (0 keeps none, and creating one is refused by the API);
   * `maxSize`: the most UTF-8 bytes of item JSON kept, in all.
   */
  constructor(readonly capacity: number, readonly maxSize = Infinity) {
    if (!Number.isSafeInteger(capacity) || capacity < 0) throw new RangeError(`The conversation store capacity must be a non-negative integer, got ${capacity}`);
    if (!(maxSize > 0)) throw new RangeError(`The conversation store size bound must be positive, got ${maxSize}`);
  }

  /** The UTF-8 bytes of item JSON held. */
  get heldSize(): number {
    return this.total;
  }

  /** Whether `c` with `items` added (ids given where missing) would still fit the size bound by itself. */
  fits(c: Conversation | null, items: readonly Json[]): boolean {
    const ids = items.filter((it) => typeof it.id !== "string" || it.id === "").length * ID_CHARS;
    return (c?.size ?? 0) + itemsSize(items) + ids <= this.maxSize;
  }

  /** How many conversations are held. */
  get size(): number {
    return this.entries.size;
  }

  /** A new conversation holding `items` (ids given where missing), evicting the least recently used past the capacity. */
  create(items: readonly Json[], metadata: Record<string, string>, now: number): Conversation {
    const c: Conversation = { id: newId("conv"), createdAt: now, metadata: { ...metadata }, items: [], size: 0 };
    if (this.capacity === 0) return c;
    this.entries.set(c.id, c);
    while (this.entries.size > this.capacity) this.delete(this.entries.keys().next().value!);
    this.append(c, items);
    return c;
  }

  /** The conversation with this id (marked as used), or undefined. */
  get(id: string): Conversation | undefined {
    const c = this.entries.get(id);
    if (c) {
      this.entries.delete(id);
      this.entries.set(id, c);
    }
    return c;
  }

  /** Forgets a conversation; true when it was held. */
  delete(id: string): boolean {
    const c = this.entries.get(id);
    if (c) this.total -= c.size;
    return this.entries.delete(id);
  }

  /**
   * Adds `items` at the end of `c` and returns them as stored: an item keeps its id unless another
   * item of the conversation has it already (then, as one without, it gets a fresh one). Past the
   * size bound the least recently used conversations are forgotten, `c` last (when it alone is over).
   */
  append(c: Conversation, items: readonly Json[]): Json[] {
    const taken = new Set(c.items.map((it) => it.id as string));
    const added = items.map((it) => {
      const given = typeof it.id === "string" && it.id !== "" && !taken.has(it.id) ? it.id : undefined;
      const id = given ?? newId(itemIdPrefix(it.type));
      taken.add(id);
      return { ...it, id };
    });
    c.items.push(...added);
    const size = itemsSize(added);
    c.size += size;
    if (this.entries.get(c.id) === c) {
      this.total += size;
      this.shrink(c);
    }
    return added;
  }

  /** Removes the item at `index` of `c`. */
  removeItem(c: Conversation, index: number): void {
    const [removed] = c.items.splice(index, 1);
    const size = itemsSize([removed]);
    c.size -= size;
    if (this.entries.get(c.id) === c) this.total -= size;
  }

  /** Forgets conversations, least recently used first and `keep` last, until the size bound holds. */
  private shrink(keep: Conversation): void {
    for (const id of [...this.entries.keys()]) {
      if (this.total <= this.maxSize) return;
      if (id !== keep.id) this.delete(id);
    }
    if (this.total > this.maxSize) this.delete(keep.id);
  }
}

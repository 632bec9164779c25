/**
 * Conversations (OpenAI's Conversations API): a conversation is an ordered list of items — messages,
 * function calls, their outputs, reasoning — that a client creates, reads and edits, and that a
 * Responses request naming it (`conversation`) continues and then extends with its own input and
 * output. Kept in process, bounded by count, least recently used first (a conversation is used when
 * it is read, extended or answered in).
 */
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
}

/** The conversation object the API returns. */
export function conversationJson(c: Conversation): Json {
  return { id: c.id, object: "conversation", created_at: c.createdAt, metadata: c.metadata };
}

/** An LRU map of conversations. */
export class ConversationStore {
  private readonly entries = new Map<string, Conversation>();

  /** `capacity`: the most conversations kept (0 keeps none, and creating one is refused by the API). */
  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 0) throw new RangeError(`The conversation store capacity must be a non-negative integer, got ${capacity}`);
  }

  /** How many conversations are held. */
  get size(): number {
    return this.entries.size;
  }

  /** A new conversation holding `items` (ids given where missing), evicting the least recently used past the capacity. */
  create(items: readonly Json[], metadata: Record<string, string>, now: number): Conversation {
    const c: Conversation = { id: newId("conv"), createdAt: now, metadata: { ...metadata }, items: [] };
    this.append(c, items);
    if (this.capacity === 0) return c;
    this.entries.set(c.id, c);
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
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
    return this.entries.delete(id);
  }

  /**
   * Adds `items` at the end of `c` and returns them as stored: an item keeps its id unless another
   * item of the conversation has it already (then, as one without, it gets a fresh one).
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
    return added;
  }
}

/**
 * Stored responses (`store`, on by default in OpenAI's Responses API), so that a turn can continue
 * another with `previous_response_id` and a client can read one back. Each entry keeps its own turn
 * (the input it was given and the assistant message it answered) and a link to the turn before: a
 * chain is rebuilt by walking the links, so a long conversation costs memory linear in its length.
 * Bounded by count, least recently used first; walking a chain marks every turn on it as used, so
 * a live conversation's early turns are not the ones evicted.
 */
import type { ChatMessageIn } from "./schemas.ts";

/** One stored turn. */
export interface StoredResponse {
  id: string;
  /** The response object as `GET /v1/responses/{id}` returns it. */
  response: Record<string, unknown>;
  /** The turn's input items as given, each with an id (`GET /v1/responses/{id}/input_items`). */
  inputItems: Record<string, unknown>[];
  /** This turn's input as chat messages (instructions excluded: they do not carry over). */
  input: ChatMessageIn[];
  /** The assistant message the turn answered with (none when it produced nothing). */
  output: ChatMessageIn[];
  /** The turn before, or null for a conversation's first. */
  previousId: string | null;
  /** The session the conversation's KV is kept under (the engine's session id). */
  sessionId: string;
}

/** Thrown when `previous_response_id` names a response the store does not hold. */
export class UnknownResponseError extends Error {
  override name = "UnknownResponseError";
  constructor(readonly id: string) {
    super(`No stored response has the id '${id}'`);
  }
}

/** An LRU map of stored turns. */
export class ResponseStore {
  private readonly entries = new Map<string, StoredResponse>();

  /** `capacity`: the most turns kept (0 keeps none). */
  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 0) throw new RangeError(`The response store capacity must be a non-negative integer, got ${capacity}`);
  }

  /** How many turns are held. */
  get size(): number {
    return this.entries.size;
  }

  /** Keeps `r`, evicting the least recently used turns past the capacity. */
  put(r: StoredResponse): void {
    if (this.capacity === 0) return;
    this.entries.delete(r.id);
    this.entries.set(r.id, r);
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
  }

  /** The turn with this id (marked as used), or undefined. */
  get(id: string): StoredResponse | undefined {
    const r = this.entries.get(id);
    if (r) this.touch(r);
    return r;
  }

  /** Forgets a turn; true when it was held. Later turns that continue it can no longer be continued. */
  delete(id: string): boolean {
    return this.entries.delete(id);
  }

  /**
   * The conversation up to and including turn `id`, oldest first, as chat messages, and its session.
   * Throws {@link UnknownResponseError} naming the first missing turn on the chain.
   */
  conversation(id: string): { messages: ChatMessageIn[]; sessionId: string } {
    const turns: StoredResponse[] = [];
    const seen = new Set<string>();
    for (let at: string | null = id; at !== null; ) {
      const r = this.entries.get(at);
      if (!r || seen.has(at)) throw new UnknownResponseError(at);
      seen.add(at);
      turns.push(r);
      at = r.previousId;
    }
    turns.reverse();
    // Oldest first, so the newest turn ends up the most recently used.
    turns.forEach((r) => this.touch(r));
    return { messages: turns.flatMap((r) => [...r.input, ...r.output]), sessionId: turns[turns.length - 1].sessionId };
  }

  private touch(r: StoredResponse): void {
    this.entries.delete(r.id);
    this.entries.set(r.id, r);
  }
}

/**
 * Stored responses (`store`, on by default in OpenAI's Responses API), so that a turn can continue
 * another with `previous_response_id` and a client can read one back. Each entry keeps its own turn
 * (the input it was given and the assistant message it answered) and a link to the turn before: a
 * chain is rebuilt by walking the links, so a long conversation costs memory linear in its length.
 * Bounded by count and by size (the UTF-8 bytes of its turns' JSON), least recently used first;
 * walking a chain marks every turn on it as used, so a live conversation's early turns are not the
 * ones evicted. A turn larger than the size bound by itself is not kept.
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

/**
 * The size a stored value is counted at: the UTF-8 bytes of its JSON (what `--max-stored-mib` bounds),
 * 0 for a value JSON cannot write.
 */
export function jsonSize(value: unknown): number {
  return utf8Length(JSON.stringify(value) ?? "");
}

/** The UTF-8 bytes of `s`, counted without encoding it (JSON.stringify escapes lone surrogates). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a pair: 2 code units, 4 bytes
      i++;
    } else n += 2;
  }
  return n;
}

/** The size of a list of items, counted one by one (so that the sizes of parts add up). */
export function itemsSize(items: readonly unknown[]): number {
  return items.reduce((n: number, it) => n + jsonSize(it), 0);
}

/** An LRU map of stored turns. */
export class ResponseStore {
  private readonly entries = new Map<string, StoredResponse>();
  private readonly sizes = new Map<string, number>();
  private total = 0;

  /** `capacity`: the most turns kept (0 keeps none); `maxSize`: the most UTF-8 bytes of JSON kept. */
  constructor(readonly capacity: number, readonly maxSize = Infinity) {
    if (!Number.isSafeInteger(capacity) || capacity < 0) throw new RangeError(`The response store capacity must be a non-negative integer, got ${capacity}`);
    if (!(maxSize > 0)) throw new RangeError(`The response store size bound must be positive, got ${maxSize}`);
  }

  /** The UTF-8 bytes of JSON held. */
  get heldSize(): number {
    return this.total;
  }

  /** How many turns are held. */
  get size(): number {
    return this.entries.size;
  }

  /** Keeps `r`, evicting the least recently used turns past the capacity. */
  put(r: StoredResponse): void {
    this.delete(r.id);
    const size = jsonSize(r);
    if (this.capacity === 0 || size > this.maxSize) return;
    this.entries.set(r.id, r);
    this.sizes.set(r.id, size);
    this.total += size;
    while (this.entries.size > this.capacity || this.total > this.maxSize) this.delete(this.entries.keys().next().value!);
  }

  /** The turn with this id (marked as used), or undefined. */
  get(id: string): StoredResponse | undefined {
    const r = this.entries.get(id);
    if (r) this.touch(r);
    return r;
  }

  /** Whether the turn with this id is held (not marked as used). */
  has(id: string): boolean {
    return this.entries.has(id);
  }

  /** Forgets a turn; true when it was held. Later turns that continue it can no longer be continued. */
  delete(id: string): boolean {
    this.total -= this.sizes.get(id) ?? 0;
    this.sizes.delete(id);
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

  /**
   * Every input and output item of the stored turns by id (the newest turn's where two share one),
   * for item_reference (item-references.ts). Nothing is marked as used.
   */
  itemsById(): Map<string, Record<string, unknown>> {
    const out = new Map<string, Record<string, unknown>>();
    for (const r of this.entries.values()) {
      const output = Array.isArray(r.response.output) ? r.response.output as Record<string, unknown>[] : [];
      for (const it of [...r.inputItems, ...output]) if (typeof it.id === "string") out.set(it.id, it);
    }
    return out;
  }

  private touch(r: StoredResponse): void {
    this.entries.delete(r.id);
    this.entries.set(r.id, r);
  }
}

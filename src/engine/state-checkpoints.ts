/**
 * Prefix reuse for models with Gated DeltaNet layers. Their state after a prefix is not in the
 * prefix's KV blocks, so a prefix-cache hit alone cannot resume a prompt. The scheduler keeps a
 * checkpoint of the state where a prompt's last whole block ends (its prefill chunk stops there: see
 * {@link checkpointChunk}), and a later prompt that begins with those tokens — an agent's next turn,
 * whose prompt holds the last one's — takes the prefix-cache hit up to the longest such checkpoint
 * and starts from a copy of it (StepEntry.restore), computing only what follows. Checkpoints are
 * matched by their tokens, compared whole. The one a new checkpoint replaces is the least worth keeping:
 * by default the least recently used; under agent-aware retention the one whose session is least
 * likely to send its next turn soon (a session waiting on a tool call keeps its checkpoint over one
 * that gave its final answer), then the least recently used. Pure CPU bookkeeping (the worth is
 * injected); the runner copies the states (state-slots.ts).
 */

/** One checkpoint: the tokens its state follows, and whether its state has been written yet. */
interface Checkpoint {
  tokens: readonly number[];
  /** The session whose prompt it follows (SequenceHints.sessionId), if any. */
  sessionId: string | undefined;
  lastUse: number;
  /** Reserved in a step whose forward has not run yet: not to be restored from until it has. */
  pending: boolean;
}

/** The checkpoints of one engine: `capacity` of them, ids 0..capacity-1. */
export class StateCheckpoints {
  readonly #entries: (Checkpoint | undefined)[];
  #tick = 0;
  /** Checkpoints restored from and taken, for stats. */
  restores = 0;
  taken = 0;

  /**
   * `worth`: how much a checkpoint of a session is worth keeping (higher is kept; absent: all alike, so
   * the least recently used goes), e.g. the probability that the session returns soon.
   */
  constructor(readonly capacity: number, readonly blockSize: number, private readonly worth?: (sessionId: string | undefined) => number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`Invalid state checkpoint count ${capacity}`);
    this.#entries = new Array<Checkpoint | undefined>(capacity).fill(undefined);
  }

  /** Checkpoints held (written or pending). */
  get size(): number {
    return this.#entries.filter((e) => e !== undefined).length;
  }

  /**
   * The longest written checkpoint whose tokens begin `tokens` and number at most `maxTokens` (a
   * prefix-cache hit's length), or undefined.
   */
  longest(tokens: readonly number[], maxTokens: number): { id: number; length: number } | undefined {
    let best: { id: number; length: number } | undefined;
    this.#entries.forEach((e, id) => {
      if (!e || e.pending || e.tokens.length > maxTokens || e.tokens.length > tokens.length || (best && e.tokens.length <= best.length)) return;
      for (let i = e.tokens.length - 1; i >= 0; i--) if (e.tokens[i] !== tokens[i]) return;
      best = { id, length: e.tokens.length };
    });
    return best;
  }

  /** Marks checkpoint `id` used now (a restore), so it is evicted last. */
  touch(id: number): void {
    const e = this.#entries[id];
    if (e) e.lastUse = ++this.#tick;
    this.restores++;
  }

  /**
   * A checkpoint id for the state after `tokens` (block-aligned), to be written after this step's
   * forward (pending until {@link settle}): a free one, else the least recently used; undefined when
   * one already holds exactly these tokens.
   */
  reserve(tokens: readonly number[], sessionId?: string): number | undefined {
    if (tokens.length === 0 || tokens.length % this.blockSize !== 0) throw new RangeError(`A state checkpoint needs whole blocks of ${this.blockSize} tokens, got ${tokens.length}`);
    const same = this.#entries.findIndex((e) => e !== undefined && e.tokens.length === tokens.length && e.tokens.every((t, i) => t === tokens[i]));
    if (same >= 0) {
      this.#entries[same]!.lastUse = ++this.#tick;
      return undefined;
    }
    let id = this.#entries.indexOf(undefined);
    if (id < 0) id = this.#victim();
    this.#entries[id] = { tokens: tokens.slice(), sessionId, lastUse: ++this.#tick, pending: true };
    this.taken++;
    return id;
  }

  /** The checkpoint least worth keeping (written ones before pending ones), then least recently used. */
  #victim(): number {
    const key = (e: Checkpoint) => [e.pending ? 1 : 0, this.worth?.(e.sessionId) ?? 0, e.lastUse];
    let best = 0;
    let bestKey = key(this.#entries[0]!);
    this.#entries.forEach((e, i) => {
      const k = key(e!);
      if (k[0] < bestKey[0] || (k[0] === bestKey[0] && (k[1] < bestKey[1] || (k[1] === bestKey[1] && k[2] < bestKey[2])))) {
        best = i;
        bestKey = k;
      }
    });
    return best;
  }

  /** The step that wrote checkpoint `id` has run: it may be restored from. */
  settle(id: number): void {
    const e = this.#entries[id];
    if (e) e.pending = false;
  }

  /** Forgets checkpoint `id` (its write failed). */
  drop(id: number): void {
    this.#entries[id] = undefined;
  }
}

/**
 * A prefill chunk's length with a checkpoint in mind: a chunk from `start` that would pass the prompt's
 * last whole-block boundary stops there, and the entry reaching it carries `checkpoint`. `n` as it is
 * where there is nothing to stop at (a prompt shorter than a block, or already past its boundary).
 */
export function checkpointChunk(promptLength: number, start: number, n: number, blockSize: number): { n: number; atBoundary: boolean } {
  const boundary = Math.floor(promptLength / blockSize) * blockSize;
  if (boundary === 0 || start >= boundary || start + n < boundary) return { n, atBoundary: false };
  return { n: boundary - start, atBoundary: true };
}

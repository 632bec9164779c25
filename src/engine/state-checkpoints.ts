/**
 * Prefix reuse for models with Gated DeltaNet layers. Their state after a prefix is not in the
 * prefix's KV blocks, so a prefix-cache hit alone cannot resume a prompt. The scheduler keeps a
 * checkpoint of the state where a prompt's last whole block ends (its prefill chunk stops there: see
 * {@link checkpointChunk}), and one where a decoding sequence's last whole block ends (each sequence
 * keeps one such, moved on a block at a time: when it ends, the state after its answer but the last
 * block's tokens). A later prompt that begins with a checkpoint's tokens — an agent's next turn,
 * whose prompt holds the last prompt and answer — takes the prefix-cache hit up to the longest such
 * checkpoint and starts from a copy of it (StepEntry.restore), computing only what follows. Checkpoints are
 * matched by their tokens, compared whole, within their cache namespace (SequenceHints.cacheRoot: the
 * adapter and cache salt, whose state differs, or must not be shared). The one a new checkpoint replaces is the least worth keeping:
 * by default the least recently used; under agent-aware retention the one whose session is least
 * likely to send its next turn soon (a session waiting on a tool call keeps its checkpoint over one
 * that gave its final answer), then the least recently used; one held (a waiting sequence would resume
 * from it) goes only where every written one is. Pure CPU bookkeeping (the worth is injected); the runner copies the
 * states (state-copy.ts), and a checkpoint moves between workers with its prefix (state-import.ts).
 */

import { type BlockHash, hashBlock, type KvEventSink } from "../../kv/index.ts";

/** One checkpoint: the tokens its state follows, and whether its state has been written yet. */
interface Checkpoint {
  /** The tokens its state follows; a decoding sequence's pending one learns them when it settles. */
  tokens: readonly number[];
  /** A decoding sequence's own checkpoint (see {@link StateCheckpoints.reserveDecode}): the sequence's id. */
  owner?: number;
  /** The cache namespace of the sequence it follows (SequenceHints.cacheRoot; null: none). */
  root: number | null;
  /** The session whose prompt it follows (SequenceHints.sessionId), if any. */
  sessionId: string | undefined;
  lastUse: number;
  /** Reserved in a step whose forward has not run yet: not to be restored from until it has. */
  pending: boolean;
  /** Holders keeping it (see {@link StateCheckpoints.hold}): waiting sequences that would resume from it, a batch of moved states being written. */
  holds?: number;
  /** The last block hash of `tokens` in namespace `root`, once written (kept only where changes are told: see `onChange`). */
  hash?: BlockHash;
  /** A decoding sequence's checkpoint: its previous one's length and hash, which its tokens extend (hashing only the blocks after). */
  from?: { length: number; hash: BlockHash };
}

/** A written checkpoint taken for another: what its state follows. */
export interface EvictedCheckpoint {
  tokens: readonly number[];
  root: number | null;
  sessionId: string | undefined;
}

/** The checkpoints of one engine: `capacity` of them, ids 0..capacity-1. */
export class StateCheckpoints {
  readonly #entries: (Checkpoint | undefined)[];
  #tick = 0;
  /** Checkpoints restored from and taken, for stats. */
  restores = 0;
  taken = 0;

  /**
   * Told of a written checkpoint taken for another (not one a sequence moves on from, nor one dropped),
   * while its state is still in place: a host tier copies it out then (state-offload.ts).
   */
  onEvict?: (id: number, evicted: EvictedCheckpoint) => void;

  /**
   * `worth`: how much a checkpoint of a session is worth keeping (higher is kept; absent: all alike, so
   * the least recently used goes), e.g. the probability that the session returns soon. `onChange`: told
   * when a written checkpoint is there to restore from (`kept` true) and when it goes, by the last block
   * hash of its tokens in its namespace (kv/hash.ts `chainHashes`, as routers hash prompts), so a router
   * can count this engine's prefix hits only as far as its checkpoints reach (engine.ts publishes
   * KvStateEvents).
   */
  constructor(
    readonly capacity: number, readonly blockSize: number, private readonly worth?: (sessionId: string | undefined) => number,
    private readonly onChange?: (hash: BlockHash, kept: boolean) => void,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`Invalid state checkpoint count ${capacity}`);
    this.#entries = new Array<Checkpoint | undefined>(capacity).fill(undefined);
  }

  /** Checkpoints held (written or pending). */
  get size(): number {
    return this.#entries.filter((e) => e !== undefined).length;
  }

  /**
   * The longest written checkpoint of namespace `root` whose tokens begin `tokens` and number at most
   * `maxTokens` (a prefix-cache hit's length), or undefined.
   */
  longest(tokens: readonly number[], maxTokens: number, root: number | null = null): { id: number; length: number } | undefined {
    let best: { id: number; length: number } | undefined;
    this.#entries.forEach((e, id) => {
      if (!e || e.pending || e.root !== root || e.tokens.length > maxTokens || e.tokens.length > tokens.length || (best && e.tokens.length <= best.length)) return;
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
   * Keeps checkpoint `id` from being taken for another while a waiting sequence would resume from it
   * (else the step admitting the sequences before it could take it for theirs), unless every written
   * one is held; returns what lets go of it, once.
   */
  hold(id: number): () => void {
    const e = this.#entries[id];
    if (!e) return () => {};
    e.holds = (e.holds ?? 0) + 1;
    let held = true;
    return () => {
      if (held) e.holds!--;
      held = false;
    };
  }

  /**
   * A checkpoint id for the state after `tokens` (block-aligned), to be written after this step's
   * forward (pending until {@link settle}): a free one, else the one least worth keeping (never one of
   * `avoid`: checkpoints entries of the step being planned restore from, where the new one is written
   * before they are read); undefined when one already holds exactly these tokens, or when every one is
   * pending or avoided.
   */
  reserve(tokens: readonly number[], sessionId?: string, root: number | null = null, avoid?: ReadonlySet<number>): number | undefined {
    if (tokens.length === 0 || tokens.length % this.blockSize !== 0) throw new RangeError(`A state checkpoint needs whole blocks of ${this.blockSize} tokens, got ${tokens.length}`);
    const same = this.#entries.findIndex((e) => e !== undefined && e.root === root && e.tokens.length === tokens.length && e.tokens.every((t, i) => t === tokens[i]));
    if (same >= 0) {
      this.#entries[same]!.lastUse = ++this.#tick;
      return undefined;
    }
    const id = this.#free() ?? this.#evict(this.#victim(avoid));
    if (id === undefined) return undefined;
    this.#gone(id);
    this.#entries[id] = { tokens: tokens.slice(), root, sessionId, lastUse: ++this.#tick, pending: true };
    this.taken++;
    return id;
  }

  /**
   * The written checkpoint least worth keeping, then least recently used, a held one only where all
   * written ones are; undefined when all are pending (each is some entry's of the step being planned,
   * which will write it).
   */
  #victim(avoid?: ReadonlySet<number>): number | undefined {
    let best: number | undefined;
    let bestKey: [number, number, number] = [Infinity, Infinity, Infinity];
    this.#entries.forEach((e, i) => {
      if (!e || e.pending || avoid?.has(i)) return;
      const key: [number, number, number] = [(e.holds ?? 0) > 0 ? 1 : 0, this.worth?.(e.sessionId) ?? 0, e.lastUse];
      if (key[0] < bestKey[0] || (key[0] === bestKey[0] && (key[1] < bestKey[1] || (key[1] === bestKey[1] && key[2] < bestKey[2])))) {
        best = i;
        bestKey = key;
      }
    });
    return best;
  }

  /**
   * A checkpoint id for decoding sequence `seqId`'s state after its first `length` tokens (block-aligned;
   * some of them may be sampled in the step that writes it, so the tokens come with {@link settle}).
   * Each sequence keeps one such: its earlier one is replaced in place, else a free id or the one least
   * worth keeping is taken.
   */
  reserveDecode(seqId: number, length: number, sessionId?: string, root: number | null = null): number | undefined {
    if (length <= 0 || length % this.blockSize !== 0) throw new RangeError(`A state checkpoint needs whole blocks of ${this.blockSize} tokens, got ${length}`);
    const own = this.#entries.findIndex((e) => e?.owner === seqId);
    const id = own >= 0 ? own : this.#free() ?? this.#evict(this.#victim());
    if (id === undefined) return undefined;
    const old = this.#entries[id];
    // The sequence's tokens only grow: its next checkpoint's hash chains on from its last one's.
    const from = own < 0 || !old ? undefined : old.hash !== undefined ? { length: old.tokens.length, hash: old.hash } : old.from;
    this.#gone(id);
    this.#entries[id] = { tokens: [], owner: seqId, root, sessionId, lastUse: ++this.#tick, pending: true, ...(from ? { from } : {}) };
    this.taken++;
    return id;
  }

  /** `id` (a victim, written), after telling `onEvict` it is taken. */
  #evict(id: number | undefined): number | undefined {
    const e = id === undefined ? undefined : this.#entries[id];
    if (e && !e.pending && this.onEvict) this.onEvict(id!, { tokens: e.tokens, root: e.root, sessionId: e.sessionId });
    return id;
  }

  /** Tells `onChange` that checkpoint `id`, if written, is going. */
  #gone(id: number): void {
    const e = this.#entries[id];
    if (e?.hash !== undefined) this.onChange?.(e.hash, false);
  }

  /** The last block hash of `e`'s tokens, from its previous checkpoint's where it has one: O(blocks since). */
  #hashOf(e: Checkpoint): BlockHash {
    const bs = this.blockSize;
    const from = e.from && e.from.length <= e.tokens.length ? e.from : undefined;
    let h: BlockHash | null = from ? from.hash : e.root;
    for (let b = from ? from.length : 0; b < e.tokens.length; b += bs) h = hashBlock(h, e.tokens.slice(b, b + bs));
    return h!;
  }

  #free(): number | undefined {
    const id = this.#entries.indexOf(undefined);
    return id < 0 ? undefined : id;
  }

  /** Sequence `seqId` has ended: its decode checkpoint stays, but is its own no more. */
  disown(seqId: number): void {
    const e = this.#entries.find((x) => x?.owner === seqId);
    if (e) e.owner = undefined;
  }

  /**
   * The step that wrote checkpoint `id` has run: it may be restored from. `tokens`: those its state
   * follows, for a decode checkpoint (one already holding exactly them makes it go).
   */
  settle(id: number, tokens?: readonly number[]): void {
    const e = this.#entries[id];
    if (!e) return;
    if (tokens) {
      const same = this.#entries.some((x, i) => i !== id && x !== undefined && !x.pending && x.root === e.root && x.tokens.length === tokens.length && x.tokens.every((t, j) => t === tokens[j]));
      if (same) {
        this.#entries[id] = undefined;
        return;
      }
      e.tokens = tokens.slice();
    }
    e.pending = false;
    e.from = undefined;
    if (!this.onChange) return;
    e.hash = this.#hashOf(e);
    this.onChange(e.hash, true);
  }

  /** Forgets checkpoint `id` (its write failed). */
  drop(id: number): void {
    this.#gone(id);
    this.#entries[id] = undefined;
  }
}

/**
 * A prefill chunk's length with a checkpoint in mind: a chunk from `start` that would pass the prompt's
 * last whole-block boundary stops there, and the entry reaching it carries `checkpoint`. `n` as it is
 * where there is nothing to stop at (a prompt shorter than a block, or already past its boundary).
 * `branch` (block-aligned; Sequence.branchCheckpoint) is a boundary before that one to stop at too: where
 * the prompt leaves a cached prefix that no checkpoint reaches (a system prompt other sessions share),
 * so the prompts after it that share the prefix resume there.
 */
export function checkpointChunk(promptLength: number, start: number, n: number, blockSize: number, branch?: number): { n: number; atBoundary: boolean } {
  const boundary = Math.floor(promptLength / blockSize) * blockSize;
  if (branch !== undefined && branch > start && branch < boundary && start + n >= branch) return { n: branch - start, atBoundary: true };
  if (boundary === 0 || start >= boundary || start + n < boundary) return { n, atBoundary: false };
  return { n: boundary - start, atBoundary: true };
}

/**
 * How far into its prompt a sequence's prompt checkpoint may reach: the whole prompt, or all but its
 * last token for a prompt prefilled to be handed off (the decoding worker computes that token again
 * for its logits, so it can resume only from a checkpoint before it).
 */
export function checkpointLimit(seq: { promptLength: number; hints: { prefillOnly?: boolean } }): number {
  return seq.hints.prefillOnly ? seq.promptLength - 1 : seq.promptLength;
}

/** A {@link StateCheckpoints} `onChange` that publishes each change as a KvStateEvent of `workerId`. */
export function publishStateChanges(sink: KvEventSink, workerId: string, clock: () => number): (hash: BlockHash, kept: boolean) => void {
  return (hash, kept) => sink({ kind: "state", workerId, time: clock(), hash, kept });
}

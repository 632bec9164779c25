/**
 * A prompt's last block in a prefill/decode hand-off. The prefix cache holds full blocks only, so
 * without this the decoding worker would compute a handed-off prompt's last block again (1 to a
 * block of tokens, in a step that then mixes prefill with its decodes). Instead the prefill worker
 * keeps the block its prompt ended in when the prefill finishes, sends it with the full blocks, and
 * the decoding worker holds it for the request with exactly that prompt, which then starts with
 * every prompt token but the last computed: the last is computed again in the first decode step, its
 * logits giving the first token (vLLM's disaggregated decode does the same). Both ends keep the
 * blocks here, each with one reference, until they are taken, grow stale or crowd the pool.
 */
import { hashBlock } from "../../kv/index.ts";

/** Options of a {@link HandoffTails} store. */
export interface HandoffTailOptions {
  /** Most blocks held at once; the oldest goes first beyond it. */
  maxBlocks: number;
  /** Seconds a block is held before it is let go untaken. */
  ttlS: number;
}

interface Held {
  tokens: readonly number[];
  /** The prompt's cache namespace (SequenceHints.cacheRoot; null: none): a block serves only its own. */
  root: number | null;
  blockId: number;
  at: number;
}

/** Blocks holding the ends of prompts, each kept for the request whose prompt is exactly its tokens. */
export class HandoffTails {
  private readonly held = new Map<number, Held[]>();
  private count = 0;
  private changes = 0;
  /** A lower bound on when the oldest held block was kept (undefined: unknown), so prune() can skip the scan. */
  private oldest: number | undefined;

  /** `release` drops the store's reference on blocks it lets go; `clock` is in seconds. */
  constructor(private readonly release: (blockIds: number[]) => void, private readonly clock: () => number, private readonly o: HandoffTailOptions) {
    if (!(o.maxBlocks >= 0) || !(o.ttlS > 0)) throw new RangeError(`Hand-off tails need maxBlocks ≥ 0 and ttlS > 0, got ${o.maxBlocks} and ${o.ttlS}`);
  }

  /** Changes whenever a block is kept, taken or let go (so a probe of {@link has} can be reused until then). */
  get version(): number {
    return this.changes;
  }

  /** Blocks held now. */
  get size(): number {
    return this.count;
  }

  /**
   * Holds `blockId` (whose reference passes to the store) as the last block of `prompt`; with no room
   * at all the block is let go at once. Each hand-off keeps one block and takes one, so identical
   * prompts handed off together (a request's `n` choices, agents sending the same turn) each find a
   * block: a second block for the same prompt is held beside the first, not instead of it.
   */
  keep(prompt: readonly number[], blockId: number, root?: number): void {
    this.prune();
    if (this.o.maxBlocks === 0) return this.release([blockId]);
    while (this.count >= this.o.maxBlocks) this.dropOldest();
    const key = keyOf(prompt, root);
    const list = this.held.get(key) ?? [];
    const at = this.clock();
    list.push({ tokens: [...prompt], root: root ?? null, blockId, at });
    this.oldest = this.oldest === undefined ? at : Math.min(this.oldest, at);
    this.held.set(key, list);
    this.count++;
    this.changes++;
  }

  /** Takes the block held for exactly `prompt` in namespace `root` (its reference passes to the caller), or null. */
  take(prompt: readonly number[], root?: number): number | null {
    this.prune();
    return this.remove(prompt, root);
  }

  /** Takes the block held for exactly `prompt` in `root` out of the store (its reference passes on), or null. */
  private remove(prompt: readonly number[], root: number | undefined): number | null {
    const key = keyOf(prompt, root);
    const list = this.held.get(key);
    const i = list?.findIndex((h) => matches(h, prompt, root)) ?? -1;
    if (i < 0) return null;
    const [h] = list!.splice(i, 1);
    if (list!.length === 0) this.held.delete(key);
    this.count--;
    this.changes++;
    return h.blockId;
  }

  /** True when a block is held for exactly `prompt` in namespace `root` (tokens compared, not only hashes). */
  has(prompt: readonly number[], root?: number): boolean {
    if (this.count === 0) return false;
    return this.held.get(keyOf(prompt, root))?.some((h) => matches(h, prompt, root) && this.clock() - h.at <= this.o.ttlS) ?? false;
  }

  /** Lets go of every block held (a stopping engine). */
  clear(): void {
    const ids = [...this.held.values()].flat().map((h) => h.blockId);
    this.held.clear();
    this.count = 0;
    this.oldest = undefined;
    if (ids.length > 0) {
      this.changes++;
      this.release(ids);
    }
  }

  /**
   * Seconds until the oldest held block outlives the TTL (0 when one already has), undefined when
   * none is held: an idle engine wakes then to let it go.
   */
  secondsToExpiry(): number | undefined {
    const oldest = this.oldestAt();
    return oldest === undefined ? undefined : Math.max(0, oldest + this.o.ttlS - this.clock());
  }

  /** When the oldest held block was kept (undefined when none is held). */
  private oldestAt(): number | undefined {
    let oldest: number | undefined;
    for (const list of this.held.values()) for (const h of list) if (oldest === undefined || h.at < oldest) oldest = h.at;
    return oldest;
  }

  /**
   * Lets go of blocks held longer than the TTL (kept, taken, idle engines and every admission's count
   * of available blocks call it, so a busy engine lets them go too). Cheap while none has expired.
   */
  prune(): void {
    if (this.count === 0) return;
    const now = this.clock();
    if (this.oldest !== undefined && now - this.oldest <= this.o.ttlS) return;
    this.oldest = undefined;
    for (const [key, list] of this.held) {
      const stale = list.filter((h) => now - h.at > this.o.ttlS);
      if (stale.length === 0) continue;
      const kept = list.filter((h) => now - h.at <= this.o.ttlS);
      if (kept.length === 0) this.held.delete(key);
      else this.held.set(key, kept);
      this.count -= stale.length;
      this.changes++;
      this.release(stale.map((h) => h.blockId));
    }
    this.oldest = this.oldestAt();
  }

  private dropOldest(): void {
    let oldest: { key: number; i: number; at: number } | undefined;
    for (const [key, list] of this.held) {
      list.forEach((h, i) => {
        if (oldest === undefined || h.at < oldest.at) oldest = { key, i, at: h.at };
      });
    }
    if (oldest === undefined) return;
    const list = this.held.get(oldest.key)!;
    const [h] = list.splice(oldest.i, 1);
    if (list.length === 0) this.held.delete(oldest.key);
    this.count--;
    this.changes++;
    this.release([h.blockId]);
  }
}

/** Index of the block a prompt of `promptLength` tokens ends in (every block before it is full). */
export function tailBlockIndex(promptLength: number, blockSize: number): number {
  return Math.ceil(promptLength / blockSize) - 1;
}

function keyOf(tokens: readonly number[], root: number | undefined): number {
  return hashBlock(root ?? null, tokens);
}

/** `h` is the block of exactly `prompt` in namespace `root`. */
function matches(h: Held, prompt: readonly number[], root: number | undefined): boolean {
  return h.root === (root ?? null) && sameTokens(h.tokens, prompt);
}

function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

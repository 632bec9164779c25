/**
 * Where conversations that name no session (no `prompt_cache_key`, `user` or session header) ended
 * their last turn, so the router can tell a keyless request that continues one from one that opens a
 * conversation, before any worker sees it. A continuation goes to its conversation's worker and its
 * pulls are charged as a move; an opening turn that merely shares a prefix (a common system prompt)
 * pulls it uncharged, as a keyed new session does, instead of piling onto the one worker holding it.
 *
 * A next turn's prompt is the last turn's whole prompt and more (the answer as the template renders
 * it back, the tool's result, the next message). Each finished turn is kept under the chain hash of
 * its prompt's last full block with the prompt's tokens after that block; a request continues the
 * turn whose kept tokens its prompt repeats at that block and goes on past (tokens compared, not only
 * hashes). A retry of the same prompt goes no further, and a new question after a shared system
 * prompt repeats no earlier prompt whole, so each opens a conversation. The engine's test is the
 * same (engine-sessions.ts `EngineSessions.infer`), which also prefers, of turns of the same prompt,
 * the one whose answer's first token follows; here the latest is taken (their worker is what counts).
 * The answer's first token is not required: a template that drops the reasoning an answer began with
 * renders that token otherwise, and every turn of such a conversation would look new.
 */
import type { BlockHash } from "../../kv/index.ts";

/** Turn ends kept per anchor block (the most recent first). */
const ENDS_PER_ANCHOR = 8;
/** Anchor blocks kept at most by default (the oldest forgotten first). */
const MAX_ANCHORS = 65536;

/** The conversation a keyless request continues. */
export interface KeylessTurn {
  /** The worker whose cache holds the turn's KV (where its answer was decoded). */
  workerId: string;
  /** The session the worker inferred for it (agent-aware retention), if it reported one. */
  sessionId?: string;
}

interface TurnEnd extends KeylessTurn {
  /** The prompt's tokens after its last full block. */
  tail: readonly number[];
}

/** Recent keyless turn ends, by anchor block. */
export class KeylessTurns {
  /** By the chain hash of the prompt's last full block. */
  private readonly byBlock = new Map<BlockHash, TurnEnd[]>();
  /** Prompts shorter than a block, by cache namespace (a LoRA adapter's or a salt's root; none: -1). */
  private readonly byRoot = new Map<number, TurnEnd[]>();

  constructor(private readonly blockSize: number, private readonly maxAnchors = MAX_ANCHORS) {
    if (!(Number.isInteger(blockSize) && blockSize >= 1)) throw new RangeError(`Block size must be a positive integer, got ${blockSize}`);
    if (!(Number.isInteger(maxAnchors) && maxAnchors >= 1)) throw new RangeError(`Anchor cap must be a positive integer, got ${maxAnchors}`);
  }

  /**
   * The conversation whose last turn `prompt` continues, if one is kept: `hashes` are the chain
   * hashes of the prompt's full blocks in namespace `root`. The deepest anchor first (the latest turn).
   */
  find(prompt: readonly number[], hashes: readonly BlockHash[], root: number | undefined): KeylessTurn | undefined {
    for (let k = hashes.length; k >= 0; k--) {
      const ends = k === 0 ? this.byRoot.get(root ?? -1) : this.byBlock.get(hashes[k - 1]);
      if (ends === undefined) continue;
      const at = k * this.blockSize;
      for (const e of ends) {
        if (at + e.tail.length < prompt.length && e.tail.every((t, i) => prompt[at + i] === t)) {
          return e.sessionId === undefined ? { workerId: e.workerId } : { workerId: e.workerId, sessionId: e.sessionId };
        }
      }
    }
    return undefined;
  }

  /** A keyless turn ended: `prompt` (with full-block chain `hashes` in namespace `root`) was answered on `turn.workerId`. */
  remember(prompt: readonly number[], hashes: readonly BlockHash[], root: number | undefined, turn: KeylessTurn): void {
    const full = Math.floor(prompt.length / this.blockSize);
    // The hashes may stop short of the prompt's full blocks (none were computed): keep nothing then.
    if (full > hashes.length) return;
    const end: TurnEnd = { ...turn, tail: prompt.slice(full * this.blockSize) };
    const map: Map<number, TurnEnd[]> = full === 0 ? this.byRoot : this.byBlock;
    const key = full === 0 ? root ?? -1 : hashes[full - 1];
    // An older turn of the same prompt (a retry, or a conversation's other branch) gives way to this one.
    const list = [end, ...(map.get(key) ?? []).filter((e) => !sameTail(e.tail, end.tail))].slice(0, ENDS_PER_ANCHOR);
    map.delete(key);
    map.set(key, list);
    while (this.byBlock.size + this.byRoot.size > this.maxAnchors) {
      const from = this.byBlock.size > 0 ? this.byBlock : this.byRoot;
      from.delete(from.keys().next().value!);
    }
  }

  /** Anchor blocks kept now (for tests and gauges). */
  get size(): number {
    return this.byBlock.size + this.byRoot.size;
  }
}

function sameTail(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => b[i] === t);
}

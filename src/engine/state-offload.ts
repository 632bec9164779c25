/**
 * Host-memory tier under a worker's state checkpoints (state-checkpoints.ts), for models whose state is
 * not in their KV blocks (recurrent layers, sliding layers keeping their windows): a written checkpoint
 * taken for another is read to host memory instead of being lost, and a prompt admitted with cached
 * blocks reaching past every device checkpoint within them gets the longest such state written back
 * into a checkpoint as the scheduler admits it (scheduler-queue.ts `StateRestore`: written before the
 * step's forward, never over a checkpoint another of the step's prompts restores from), so an agent's
 * session that waited on a tool while others took its checkpoint still resumes where its last answer
 * ended. (Restoring for every waiting prompt before planning, as first written, let prompts take each
 * other's restored checkpoint when they outnumbered the device's: states copied back, no hit.) The
 * tier keeps `capacity` states, making room as the device does: one whose read failed first, then the
 * one least worth keeping (its session least likely to return soon), then the least recently used.
 */
import type { StepRunner } from "./engine-runner-types.ts";
import type { Sequence } from "./sequence.ts";
import type { HostState } from "./state-copy.ts";
import type { EvictedCheckpoint, StateCheckpoints } from "./state-checkpoints.ts";

/** One state held on the host: what it follows, and its values once the read has arrived. */
interface HostCheckpoint {
  tokens: readonly number[];
  root: number | null;
  sessionId: string | undefined;
  values: HostState | undefined;
  /** Its read failed: never restored, and the first to go. */
  failed: boolean;
  lastUse: number;
}

/** Counters of a host state tier. */
export interface HostStateStats {
  held: number;
  capacity: number;
  /** States read to the host, and written back to a device checkpoint, since start. */
  offloaded: number;
  restored: number;
}

/** A worker's host tier of state checkpoints. */
export class HostStateTier {
  readonly #entries: HostCheckpoint[] = [];
  #tick = 0;
  #offloaded = 0;
  #restored = 0;

  /** `worth`: as StateCheckpoints' (a session's chance of returning soon; absent: all alike). */
  constructor(readonly capacity: number, private readonly runner: Pick<StepRunner, "readState">, private readonly worth?: (sessionId: string | undefined) => number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`Invalid host state checkpoint count ${capacity}`);
  }

  /** StateCheckpoints.onEvict: reads checkpoint `id`'s state to the host (queued now, before any write over it). */
  evicted(id: number, cp: EvictedCheckpoint): void {
    if (!this.runner.readState) return;
    const same = this.#find(cp.tokens, cp.root);
    if (same) {
      same.lastUse = ++this.#tick;
      return;
    }
    const entry: HostCheckpoint = { tokens: cp.tokens.slice(), root: cp.root, sessionId: cp.sessionId, values: undefined, failed: false, lastUse: ++this.#tick };
    this.runner.readState(id).then((v) => (entry.values = v), () => (entry.failed = true));
    this.#entries.push(entry);
    this.#offloaded++;
    while (this.#entries.length > this.capacity) this.#entries.splice(this.#victim(), 1);
  }

  /**
   * The longest held state (values arrived) whose tokens begin `tokens`, number at most `limit` and more
   * than `beyond` (a device checkpoint's length), for a prefix moving to another worker; undefined without one.
   */
  held(tokens: readonly number[], limit: number, root: number | null, beyond: number): { tokens: number; values: HostState } | undefined {
    const e = this.#longest(tokens, limit, root, beyond);
    if (!e) return undefined;
    e.lastUse = ++this.#tick;
    return { tokens: e.tokens.length, values: e.values! };
  }

  /**
   * Writes the longest held state for `seq` (as {@link held}) into a device checkpoint reserved from
   * `checkpoints` (none of `avoid`) by `write` (StepRunner.writeState), settled at once: its id and
   * length, or undefined (none held, every checkpoint pending or avoided, or the write refused).
   */
  restore(
    seq: Sequence, limit: number, beyond: number, avoid: ReadonlySet<number>, checkpoints: StateCheckpoints, write: (id: number, values: HostState) => void,
  ): { id: number; length: number } | undefined {
    const root = seq.hints.cacheRoot ?? null;
    const held = this.held(seq.tokens, limit, root, beyond);
    if (!held) return undefined;
    const id = checkpoints.reserve(seq.tokens.slice(0, held.tokens), seq.hints.sessionId, root, avoid);
    if (id === undefined) return undefined;
    try {
      write(id, held.values);
    } catch {
      checkpoints.drop(id);
      return undefined;
    }
    checkpoints.settle(id);
    this.#restored++;
    return { id, length: held.tokens };
  }

  stats(): HostStateStats {
    return { held: this.#entries.length, capacity: this.capacity, offloaded: this.#offloaded, restored: this.#restored };
  }

  /** The longest held state with values whose tokens begin `tokens`, number at most `limit` and more than `beyond`. */
  #longest(tokens: readonly number[], limit: number, root: number | null, beyond: number): HostCheckpoint | undefined {
    let best: HostCheckpoint | undefined;
    for (const e of this.#entries) {
      const len = e.tokens.length;
      if (!e.values || e.root !== root || len > limit || len <= beyond || (best && len <= best.tokens.length)) continue;
      let i = len - 1;
      while (i >= 0 && e.tokens[i] === tokens[i]) i--;
      if (i < 0) best = e;
    }
    return best;
  }

  #find(tokens: readonly number[], root: number | null): HostCheckpoint | undefined {
    return this.#entries.find((e) => e.root === root && e.tokens.length === tokens.length && e.tokens.every((t, i) => t === tokens[i]));
  }

  /** The entry to let go: one whose read failed first, then the least worth keeping, then the least recently used. */
  #victim(): number {
    let best = 0;
    let bestKey: [number, number, number] = [Infinity, Infinity, Infinity];
    this.#entries.forEach((e, i) => {
      const key: [number, number, number] = [e.failed ? 0 : 1, this.worth?.(e.sessionId) ?? 0, e.lastUse];
      if (key[0] < bestKey[0] || (key[0] === bestKey[0] && (key[1] < bestKey[1] || (key[1] === bestKey[1] && key[2] < bestKey[2])))) {
        best = i;
        bestKey = key;
      }
    });
    return best;
  }
}

/**
 * New sessions waiting at the cluster's front door, as the simulator's door holds them (src/sim/
 * admission.ts): a new session the planner's budget has no room for waits, oldest first, until a tick
 * finds room, or until it has waited the longest the planner's admission action holds one
 * (`maxHoldS`; 0 for ITL admission: to the next tick), when it is turned away (`rejectAfterHold`) or
 * let in. A client sees one answer: its request is taken after the wait, or refused with 503.
 */
import type { RequestHandle } from "../engine/engine-types.ts";

interface Held {
  /** When it arrived (the cluster's clock, ms). */
  at: number;
  /** The session it opens, when named. */
  key?: string;
  /** Requests of the same session sent meanwhile (the other choices of an `n` > 1 request): they go with it. */
  followers: Held[];
  /** What the client gets if it is turned away. */
  refusal: Error;
  /** Routes and queues it (the cluster's dispatch past the door); throws what a submit throws. */
  enter: () => RequestHandle;
  resolve: (h: RequestHandle) => void;
  reject: (e: unknown) => void;
}

/** The front door's waiting room, oldest first. */
export class DoorQueue {
  private readonly held: Held[] = [];

  /** Requests waiting now (each held session's followers too). */
  get size(): number {
    return this.held.reduce((n, h) => n + 1 + h.followers.length, 0);
  }

  /**
   * Holds a new session that arrived at `at`. `start` resolves with its handle once it enters, or
   * rejects with `refusal` (or what entering threw); `cancel` takes it out of the queue.
   */
  hold(at: number, refusal: Error, enter: () => RequestHandle, key?: string): { start: Promise<RequestHandle>; cancel: () => void } {
    const { entry, start } = held(at, refusal, enter, key);
    this.held.push(entry);
    return { start, cancel: cancelIn(this.held, entry) };
  }

  /**
   * A request of session `key` while that session waits at the door: it waits with it, enters when it
   * does and is turned away with it (the first choice of an `n` > 1 opening turn opened the session,
   * which must not count as served before it is let in). Undefined when `key` is not waiting.
   */
  follow(key: string, enter: () => RequestHandle): { start: Promise<RequestHandle>; cancel: () => void } | undefined {
    const lead = this.held.find((h) => h.key === key);
    if (lead === undefined) return undefined;
    const { entry, start } = held(lead.at, lead.refusal, enter, key);
    lead.followers.push(entry);
    return { start, cancel: cancelIn(lead.followers, entry) };
  }

  /** Lets the oldest in while `room()` says so (each entering spends what it reads). Returns how many entered. */
  admitWhile(room: () => boolean): number {
    let n = 0;
    while (this.held.length > 0 && room()) {
      enter(this.held.shift()!);
      n++;
    }
    return n;
  }

  /**
   * Those that arrived at `cutoff` or before (waited the longest the door holds them): turned away
   * with their refusal when `reject`, else let in. Returns how many requests were turned away.
   */
  expire(cutoff: number, reject: boolean): number {
    let due = 0;
    while (due < this.held.length && this.held[due].at <= cutoff) due++;
    let refused = 0;
    for (const h of this.held.splice(0, due)) {
      if (!reject) enter(h);
      else {
        for (const x of [h, ...h.followers]) x.reject(x.refusal);
        refused += 1 + h.followers.length;
      }
    }
    return refused;
  }

  /** Turns every waiting session away with `e` (the cluster stops). */
  clear(e: Error): void {
    for (const h of this.held.splice(0)) for (const x of [h, ...h.followers]) x.reject(e);
  }
}

/** Takes `entry` out of `list` and tells it (and its followers) it was cancelled; nothing once it has left. */
function cancelIn(list: Held[], entry: Held): () => void {
  return () => {
    const i = list.indexOf(entry);
    if (i < 0) return;
    list.splice(i, 1);
    for (const x of [entry, ...entry.followers]) x.reject(new Error("Cancelled at the front door"));
  };
}

function held(at: number, refusal: Error, enter: () => RequestHandle, key: string | undefined): { entry: Held; start: Promise<RequestHandle> } {
  let entry!: Held;
  const start = new Promise<RequestHandle>((resolve, reject) => {
    entry = { at, refusal, enter, resolve, reject, followers: [], ...(key !== undefined ? { key } : {}) };
  });
  return { entry, start };
}

/** Lets `h` in, then its followers (each resolves with its handle, or rejects with what entering threw). */
function enter(h: Held): void {
  for (const x of [h, ...h.followers]) {
    try {
      x.resolve(x.enter());
    } catch (e) {
      x.reject(e);
    }
  }
}

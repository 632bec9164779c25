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
  /** The session it opens, when named; else the prompt of the conversation it opens. */
  key?: string;
  prompt?: readonly number[];
  /** Requests of the same session sent meanwhile (the other choices of an `n` > 1 request): they go with it. */
  followers: Held[];
  /** What the client gets if it is turned away. */
  refusal: Error;
  /** Routes and queues it (the cluster's dispatch past the door); throws what a submit throws. */
  enter: () => RequestHandle;
  resolve: (h: RequestHandle) => void;
  reject: (e: unknown) => void;
}

/**
 * The session a held request opens: its key, or for one naming none its prompt (an opening turn's
 * other choices repeat it exactly; no turn holding an answer can).
 */
export type DoorSession = { key: string } | { prompt: readonly number[] };

/** A request waiting at the door: `start` settles when it enters or is turned away; `cancel` takes it out. */
export interface Waiting {
  start: Promise<RequestHandle>;
  cancel: () => void;
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
  hold(at: number, refusal: Error, enter: () => RequestHandle, opens: DoorSession): Waiting {
    const { entry, start } = held(at, refusal, enter, opens);
    this.held.push(entry);
    return { start, cancel: cancelIn(this.held, entry) };
  }

  /**
   * A request of a session waiting at the door (the other choices of an `n` > 1 opening turn: by its
   * key, or without one by the opening turn's very prompt): it waits with it, enters when it does and
   * is turned away with it, so that the session counts as served only once let in. Undefined when no
   * such session waits.
   */
  follow(of: DoorSession, enter: () => RequestHandle): Waiting | undefined {
    const lead = this.held.find((h) => ("key" in of ? h.key === of.key : h.prompt !== undefined && samePrompt(h.prompt, of.prompt)));
    if (lead === undefined) return undefined;
    const { entry, start } = held(lead.at, lead.refusal, enter, of);
    lead.followers.push(entry);
    return { start, cancel: cancelIn(lead.followers, entry) };
  }

  /** Lets the oldest in while `room()` says so (each entering spends what it reads). */
  admitWhile(room: () => boolean): void {
    while (this.held.length > 0 && room()) enter(this.held.shift()!);
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

function held(at: number, refusal: Error, enter: () => RequestHandle, opens: DoorSession): { entry: Held; start: Promise<RequestHandle> } {
  let entry!: Held;
  const start = new Promise<RequestHandle>((resolve, reject) => {
    entry = { at, refusal, enter, resolve, reject, followers: [], ...opens };
  });
  return { entry, start };
}

function samePrompt(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
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

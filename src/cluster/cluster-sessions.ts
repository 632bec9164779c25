/**
 * Where a cluster's sessions are, for the router's affinity, the planner's front door and tool waits:
 * a keyed session (`prompt_cache_key`, `user`, a session header) by its name (session-places.ts), a
 * conversation without a key by where its turns' prompts ended (keyless-turns.ts). The cluster asks
 * before routing ({@link ClusterSessions.locate}) and tells it where each request went and ended.
 */
import type { BlockHash } from "../../kv/index.ts";
import { type KeylessTurn, KeylessTurns } from "./keyless-turns.ts";
import { SessionPlaces } from "./session-places.ts";

/** What the cluster knows of a request's session before routing it. */
export interface SessionPlace {
  /** The worker that served the session (or the keyless conversation) last, if known. */
  lastWorker?: string;
  /** The session a keyless request continues under the name its worker made up, if it reported one. */
  continuedAs?: string;
}

/** Keyed sessions' and keyless conversations' workers. */
export class ClusterSessions {
  private readonly places = new SessionPlaces();
  private readonly keyless: KeylessTurns;

  /** `movedAway(workerId, sessionId)`: tells a worker a session it held now runs elsewhere. */
  constructor(blockSize: number, private readonly movedAway: (workerId: string, sessionId: string) => void) {
    this.keyless = new KeylessTurns(blockSize);
  }

  /** Whether keyed session `sessionId` has not been placed yet (the planner's front door counts it as new). */
  isNew(sessionId: string): boolean {
    return !this.places.has(sessionId);
  }

  /**
   * Where `sessionId`'s last turn went; without a key, where the conversation `prompt` continues went
   * (`hashes`: its full blocks' chain in namespace `root`). A session with no last worker opens here.
   */
  locate(sessionId: string | undefined, prompt: readonly number[], hashes: readonly BlockHash[], root: number | undefined): SessionPlace {
    if (sessionId !== undefined) {
      const last = this.places.get(sessionId);
      return last === undefined ? {} : { lastWorker: last };
    }
    const turn: KeylessTurn | undefined = this.keyless.find(prompt, hashes, root);
    if (turn === undefined) return {};
    return turn.sessionId === undefined ? { lastWorker: turn.workerId } : { lastWorker: turn.workerId, continuedAs: turn.sessionId };
  }

  /** `sessionId`'s turn went to `workerId`; the worker it left (a flip, a busy holder) no longer holds it waiting on a tool. */
  placed(sessionId: string, workerId: string): void {
    const left = this.places.get(sessionId);
    if (left !== undefined && left !== workerId) this.movedAway(left, sessionId);
    this.places.remember(sessionId, workerId);
  }

  /** A new session's first turn was refused on `workerId`: it is placed nowhere. */
  unplace(sessionId: string, workerId: string): void {
    if (this.places.get(sessionId) === workerId) this.places.delete(sessionId);
  }

  /**
   * A keyless turn on `workerId` ended: the session its worker reported (`sessionId`) is placed there,
   * for tool waits, and the prompt's end is kept for the next turn's route.
   */
  keylessEnded(prompt: readonly number[], hashes: readonly BlockHash[], root: number | undefined, sessionId: string | undefined, workerId: string): void {
    if (sessionId !== undefined) this.places.remember(sessionId, workerId);
    this.keyless.remember(prompt, hashes, root, sessionId === undefined ? { workerId } : { workerId, sessionId });
  }

  /** The worker that served `sessionId` last, if remembered. */
  workerOf(sessionId: string): string | undefined {
    return this.places.get(sessionId);
  }
}

/**
 * The cluster's front door, checked before any routing work: the bound on requests waiting over all
 * workers, and the planner's budget of new sessions for this tick (ITL admission; planner/
 * itl-admission.ts). Turns of sessions already served always enter.
 *
 * A request naming no session is new only when it opens a conversation (`openingTurn`: a chat request
 * with no answer in it yet). keyless-turns.ts recognises a keyless continuation only while its last
 * turn is kept, and refusing a returning agent it missed would break that agent mid-task, whereas an
 * opening turn cannot be one. For the same reason a request holding an answer always enters, under a
 * key not seen before too (the agents of a restarted cluster come back so). A raw prompt without a key
 * says neither, and enters.
 */
import { EngineOverloadedError, type GenerateRequest, SessionRefusedError } from "../engine/engine-types.ts";

/** What the front door reads of the cluster now. */
export interface DoorState {
  /** Requests waiting over all workers. */
  waiting: number;
  /** The most that may wait; at this many a request is refused. */
  maxWaiting: number;
  /** New sessions the planner lets in before its next tick (Infinity while it sets no budget). */
  newSessionBudget: number;
  /** Whether the cluster has not served the session named `key`. */
  isNewSession(key: string): boolean;
}

/**
 * Lets `req` through the front door, or throws: EngineOverloadedError when the queues are full,
 * SessionRefusedError when it opens a session and the budget is spent (both HTTP 503). Returns whether
 * it opens a new session, which then takes one from the budget once it is queued.
 */
export function passFrontDoor(req: GenerateRequest, d: DoorState): boolean {
  if (d.waiting >= d.maxWaiting) throw new EngineOverloadedError(`${d.maxWaiting} requests are already waiting`);
  const keyed = req.sessionId !== undefined;
  const newSession = req.openingTurn !== false && (keyed ? d.isNewSession(req.sessionId!) : req.openingTurn === true);
  if (newSession && d.newSessionBudget < 1) {
    const what = keyed ? `new session "${req.sessionId}"` : "a new conversation (a request naming no session, with no answer in it yet)";
    throw new SessionRefusedError(`No room for ${what}: the decode pool is at its ITL target`);
  }
  return newSession;
}

/**
 * Agent-aware KV retention for one engine: the session tracker its block pool's policy reads, fed
 * with request turns (started on submit, ended on finish, marked as a tool wait by the server).
 * The policy and tracker are the simulator's, from kv/, unchanged.
 */
import { AgentAwarePolicy, type RetentionPolicy, SessionTracker } from "../../kv/index.ts";

/** KV retention policies an engine can run. */
export type KvRetention = "agent" | "lru";

/** The retention policy names, for CLIs and checks. */
export const KV_RETENTIONS: readonly KvRetention[] = ["agent", "lru"];

/** True when `s` names a retention policy. */
export function isKvRetention(s: string): s is KvRetention {
  return (KV_RETENTIONS as readonly string[]).includes(s);
}

/** Session turns of one engine, for {@link AgentAwarePolicy}. Times are seconds. */
export class EngineSessions {
  readonly tracker = new SessionTracker();
  readonly policy: RetentionPolicy = new AgentAwarePolicy(this.tracker);
  private lastPrune = -Infinity;

  /** Sessions that are not running are forgotten after `ttlS` seconds of quiet. */
  constructor(private readonly ttlS: number) {
    if (!(ttlS > 0)) throw new RangeError(`Session time-to-live must be a positive number of seconds, got ${ttlS}`);
  }

  /** A request of `sessionId` was submitted. */
  started(sessionId: string, now: number): void {
    // A server never hears that a session closed: forget long-quiet ones now and then.
    if (now - this.lastPrune > Math.min(60, this.ttlS)) {
      this.tracker.prune(now, this.ttlS);
      this.lastPrune = now;
    }
    this.tracker.turnStarted(sessionId, now);
  }

  /** Its request finished: the session is idle until told it waits on a tool. */
  ended(sessionId: string, now: number): void {
    this.tracker.turnEnded(sessionId, now, null);
  }

  /** Its answer called `tool`: its KV is worth keeping until the predicted return. */
  waitsOnTool(sessionId: string, tool: string, now: number): void {
    this.tracker.turnEnded(sessionId, now, tool);
  }
}

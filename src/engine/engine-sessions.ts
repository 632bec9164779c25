/**
 * Agent-aware KV retention for one engine: the session tracker its block pool's policy reads, fed
 * with request turns (started on submit, ended on finish, marked as a tool wait by the server),
 * and the session of a request that names none, inferred from its prompt's cached prefix.
 * The policy and tracker are the simulator's, from kv/, unchanged.
 */
import { AgentAwarePolicy, type BlockMeta, SessionTracker } from "../../kv/index.ts";

/** KV retention policies an engine can run. */
export type KvRetention = "agent" | "lru";

/** The retention policy names, for CLIs and checks. */
export const KV_RETENTIONS: readonly KvRetention[] = ["agent", "lru"];

/** True when `s` names a retention policy. */
export function isKvRetention(s: string): s is KvRetention {
  return (KV_RETENTIONS as readonly string[]).includes(s);
}

/** The session key the engine makes up for request `requestId` when it starts a conversation of its own. */
export function syntheticSessionId(requestId: number): string {
  return `~${requestId}`;
}

/**
 * The session of request `requestId`, which names none, from `metas`: the metas of the cached
 * blocks that prefix its prompt, in chain order (kv/ BlockPool.probePrefix). When that prefix holds
 * generated tokens of an earlier request (a block typed "output" or "reasoning"), the prompt
 * continues that request's conversation: it gets the session of the deepest such block (the latest
 * turn's; an explicit key if that turn had one). A prompt that shares only prompt text with earlier
 * ones (a system prompt, a retried question) starts a conversation: {@link syntheticSessionId}.
 * Reasoning blocks count because they too hold an earlier answer's tokens: a prompt that sends the
 * reasoning back (templates that keep it within a tool-call loop) continues that answer, and the
 * answer's first block is a reasoning block whenever the answer opens with `<think>`.
 */
export function inferSessionId(metas: readonly (BlockMeta | undefined)[], requestId: number): string {
  for (let b = metas.length - 1; b >= 0; b--) {
    const m = metas[b];
    if ((m?.type === "output" || m?.type === "reasoning") && m.sessionId !== undefined) return m.sessionId;
  }
  return syntheticSessionId(requestId);
}

/** Session turns of one engine, for {@link AgentAwarePolicy}. Times are seconds. */
export class EngineSessions {
  readonly tracker = new SessionTracker();
  readonly policy = new AgentAwarePolicy(this.tracker);
  private lastPrune = -Infinity;
  /**
   * Requests of each session still running (a session with none is absent): a session runs until its
   * last one ends (a request's `n` choices, agents sending turns of one conversation side by side).
   */
  private readonly inFlight = new Map<string, number>();
  /** The tool a session's answer called while others of its requests still ran: its wait starts when they end. */
  private readonly pendingTool = new Map<string, string>();

  /**
   * Sessions that are not running are forgotten after `ttlS` seconds of quiet, and the quietest of
   * them early once more than `maxSessions` are tracked: every request without a key starts a
   * session of its own (see {@link syntheticSessionId}), so a busy server meets many within a ttl.
   */
  constructor(private readonly ttlS: number, private readonly maxSessions = 100_000) {
    if (!(ttlS > 0)) throw new RangeError(`Session time-to-live must be a positive number of seconds, got ${ttlS}`);
    if (!(Number.isInteger(maxSessions) && maxSessions >= 1)) throw new RangeError(`Session cap must be a positive integer, got ${maxSessions}`);
  }

  /** A request of `sessionId` was submitted. */
  started(sessionId: string, now: number): void {
    // A server never hears that a session closed: forget long-quiet ones now and then.
    if (now - this.lastPrune > Math.min(60, this.ttlS)) {
      this.tracker.prune(now, this.ttlS);
      this.lastPrune = now;
    }
    // Past the cap, down to 90% of it at once, so the sort is paid once per tenth of the cap.
    if (this.tracker.size >= this.maxSessions) this.tracker.pruneToSize(Math.floor(0.9 * this.maxSessions));
    this.inFlight.set(sessionId, (this.inFlight.get(sessionId) ?? 0) + 1);
    // The session came back: a tool wait noted while it still ran is over.
    this.pendingTool.delete(sessionId);
    this.tracker.turnStarted(sessionId, now);
  }

  /**
   * A request of the session finished: once none of its requests runs, the session is idle until told
   * it waits on a tool (or waits on the tool an answer of it called meanwhile).
   */
  ended(sessionId: string, now: number): void {
    const left = (this.inFlight.get(sessionId) ?? 1) - 1;
    if (left > 0) {
      this.inFlight.set(sessionId, left);
      return;
    }
    this.inFlight.delete(sessionId);
    const tool = this.pendingTool.get(sessionId);
    this.pendingTool.delete(sessionId);
    this.tracker.turnEnded(sessionId, now, tool ?? null);
  }

  /**
   * Its answer called `tool`: its KV is worth keeping until the predicted return. While other requests
   * of the session still run, the wait starts when the last of them ends.
   */
  waitsOnTool(sessionId: string, tool: string, now: number): void {
    if (this.inFlight.has(sessionId)) {
      this.pendingTool.set(sessionId, tool);
      return;
    }
    this.tracker.turnEnded(sessionId, now, tool);
    // Its blocks were released while it was idle (the server parses the call afterwards): the policy
    // ranked them as a session that just went idle, the cheapest there is. Rank again before evicting.
    this.policy.rerank();
  }
}

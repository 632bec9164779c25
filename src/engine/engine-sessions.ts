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

/**
 * The session key the engine makes up for request `requestId` when it starts a conversation of its
 * own. A cluster's worker (`workerId`) names its own: every worker counts requests from 0, and two
 * workers' `~0` would be one session to the cluster, which forwards tool waits by session.
 */
export function syntheticSessionId(requestId: number, workerId?: string): string {
  return workerId === undefined ? `~${requestId}` : `~${workerId}.${requestId}`;
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
export function inferSessionId(metas: readonly (BlockMeta | undefined)[], requestId: number, workerId?: string): string {
  for (let b = metas.length - 1; b >= 0; b--) {
    const m = metas[b];
    if ((m?.type === "output" || m?.type === "reasoning") && m.sessionId !== undefined) return m.sessionId;
  }
  return syntheticSessionId(requestId, workerId);
}

/** Turn ends remembered per anchor block (the most recent first); older ones are dropped past this. */
const ENDS_PER_ANCHOR = 8;

/** What a turn left for its next turn to be found by (see {@link EngineSessions.rememberEnd}). */
interface TurnEnd {
  sessionId: string;
  /** The prompt's tokens after its last full block. */
  tail: readonly number[];
  /** The answer's first token (none when it had none). */
  first?: number;
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
   * Recent turns' prompt ends, by their prompt's last full block's tokens and cache namespace: a short
   * answer (a tool call of a few tokens) fills no block, so no cached block names its session, and a
   * template that drops the reasoning an answer began with sends back none of its cached blocks;
   * without these, each of their next turns would start a new session.
   */
  private readonly ends = new Map<string, TurnEnd[]>();

  /**
   * Sessions that are not running are forgotten after `ttlS` seconds of quiet, and the quietest of
   * them early once more than `maxSessions` are tracked: every request without a key starts a
   * session of its own (see {@link syntheticSessionId}), so a busy server meets many within a ttl.
   */
  /** `workerId`: the cluster worker this engine is, which names the sessions it makes up ({@link syntheticSessionId}). */
  constructor(private readonly ttlS: number, private readonly maxSessions = 100_000, private readonly workerId?: string) {
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

  /**
   * The session's next turn runs on another worker (a cluster moved it): here it waits on nothing
   * any more, so its blocks rank as an idle session's, not as a tool wait's until its time-to-live.
   * A session unknown here, or with a request still running here, is left as it is.
   */
  movedAway(sessionId: string, now: number): void {
    this.pendingTool.delete(sessionId);
    if (this.inFlight.has(sessionId) || this.tracker.status(sessionId) !== "waiting-tool") return;
    this.tracker.turnEnded(sessionId, now, null);
    this.policy.rerank();
  }

  /**
   * The session of a prompt that names none: {@link inferSessionId} over its cached prefix (`metas`,
   * `matched` tokens long), else the session of a remembered turn whose whole prompt it repeats (at
   * the cached prefix's end) and goes past: one whose answer's first token follows first (of several
   * turns of the same prompt, the one it answers), else the latest. A retry of the same prompt goes
   * no further, so it starts a conversation.
   */
  infer(prompt: readonly number[], metas: readonly (BlockMeta | undefined)[], matched: number, requestId: number, blockSize: number, root?: number): string {
    const found = inferSessionId(metas, requestId, this.workerId);
    if (found !== syntheticSessionId(requestId, this.workerId)) return found;
    const ends = (this.ends.get(anchorKey(prompt, matched, blockSize, root)) ?? [])
      .filter((e) => matched + e.tail.length < prompt.length && e.tail.every((t, i) => prompt[matched + i] === t));
    return (ends.find((e) => prompt[matched + e.tail.length] === e.first) ?? ends[0])?.sessionId ?? found;
  }

  /**
   * A turn of `sessionId` ended with `tokens` (its prompt, `promptLength` long, then its answer):
   * remember the prompt's tokens after its last full block, and the answer's first token, under that
   * block's tokens. A next turn sending the answer back as written is found by the answer's cached
   * blocks when it filled one; this finds it when it filled none, or when the template rendered it
   * back otherwise (its reasoning dropped).
   */
  rememberEnd(sessionId: string, tokens: readonly number[], promptLength: number, blockSize: number, root?: number): void {
    const full = Math.floor(promptLength / blockSize) * blockSize;
    const key = anchorKey(tokens, full, blockSize, root);
    const end: TurnEnd = { sessionId, tail: tokens.slice(full, promptLength), ...(tokens.length > promptLength ? { first: tokens[promptLength] } : {}) };
    const list = [end, ...(this.ends.get(key) ?? []).filter((e) => e.sessionId !== sessionId)];
    this.ends.delete(key);
    this.ends.set(key, list.slice(0, ENDS_PER_ANCHOR));
    // Oldest anchors first out (a Map keeps insertion order), as many as sessions are kept.
    while (this.ends.size > this.maxSessions) this.ends.delete(this.ends.keys().next().value!);
  }
}

/** The key of the full block that ends at token `end` of `tokens` (none when `end` is 0), in cache namespace `root`. */
function anchorKey(tokens: readonly number[], end: number, blockSize: number, root: number | undefined): string {
  return `${root ?? ""}|${tokens.slice(Math.max(0, end - blockSize), end).join(",")}`;
}

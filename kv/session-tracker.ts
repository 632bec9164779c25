/**
 * What the KV layer knows about agent sessions: which one is running, which is waiting on a tool
 * (and when it will probably come back), which went idle. Return times are learned online from the
 * session's own history and the tool's history across sessions (log-normal gaps, EWMA in log space).
 */
import { KvStateError } from "./types.ts";

/** Where a session stands. */
export type SessionStatus = "running" | "waiting-tool" | "idle";

/** Priors and learning rates; every number is a stated assumption, overridable. */
export interface SessionTrackerOptions {
  /** Median tool-call gap (s) before any history: SWE-agent tool steps run from <1 s to minutes. */
  priorToolGapS?: number;
  /** Median gap (s) before a human answers a finished turn. */
  priorIdleGapS?: number;
  /** Spread (sigma of log gap) assumed for return times. */
  sigma?: number;
  /** Probability a session continues after a tool call / after a final answer. */
  pContinueAfterTool?: number;
  pContinueAfterAnswer?: number;
  /** Weight of a new observation in the EWMA of log gaps. */
  alpha?: number;
  /**
   * Tools whose return times are remembered at most, least recently observed forgotten first (see
   * {@link DEFAULT_MAX_TRACKED_TOOLS}).
   */
  maxTools?: number;
}

/**
 * Tool names whose gap statistics are kept by default. Tool names come from the model's calls of the
 * tools clients declare, so a week of traffic meets an unbounded set of them (generated names, one
 * per client, typos); an agent fleet uses a few dozen. 4096 records of ~100 bytes plus the name stay
 * a few MB, and a forgotten tool only falls back to the prior.
 */
export const DEFAULT_MAX_TRACKED_TOOLS = 4096;

/**
 * Characters of a tool name kept as its key: names come from the model's output, so one may be as
 * long as an answer, and each tool-waiting session (100k of them, engine-sessions.ts) holds its own.
 * OpenAI caps function names at 64 characters; longer ones are told apart by their first 256.
 */
export const MAX_TOOL_NAME_CHARS = 256;

interface SessionRecord {
  /** Set when the session is forgotten, so a {@link SessionHandle} held elsewhere is known stale. */
  gone: boolean;
  status: SessionStatus;
  since: number;
  tool: string | null;
  logGap: number | null;
  observations: number;
}

interface ToolRecord {
  logGap: number;
  observations: number;
}

/** Standard normal CDF (Abramowitz–Stegun 7.1.26 through erf). */
export function normalCdf(x: number): number {
  const z = Math.abs(x) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * z);
  const y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-z * z);
  return x >= 0 ? 0.5 * (1 + y) : 0.5 * (1 - y);
}

/**
 * Throws {@link KvStateError} for a time that is not a finite number: a session stamped with NaN would
 * never be pruned and would predict NaN return times (a broken clock is the caller's bug).
 */
function checkTime(now: number): void {
  if (!Number.isFinite(now)) throw new KvStateError(`Session time must be a finite number of seconds, got ${now}`);
}

/** Opaque reference to one tracked session (see {@link SessionTracker.handle}). */
export interface SessionHandle {
  readonly status: SessionStatus;
}

/** Tracks agent sessions and predicts when each will send its next turn. */
export class SessionTracker {
  private readonly sessions = new Map<string, SessionRecord>();
  private readonly tools = new Map<string, ToolRecord>();
  /**
   * Tracked sessions by status, kept as they change: a cluster's router reads them for every
   * candidate worker of every request, where counting the records (100k sessions) cost O(sessions).
   */
  private readonly counts: Record<SessionStatus, number> = { running: 0, "waiting-tool": 0, idle: 0 };
  private readonly o: Required<SessionTrackerOptions>;
  /** log(priorToolGapS), computed once: gapOf() runs for every waiting session on every re-ranking. */
  private readonly logPriorToolGap: number;

  /** Creates a tracker with the given priors. */
  constructor(opts: SessionTrackerOptions = {}) {
    this.o = {
      priorToolGapS: opts.priorToolGapS ?? 3,
      priorIdleGapS: opts.priorIdleGapS ?? 120,
      sigma: opts.sigma ?? 1.0,
      pContinueAfterTool: opts.pContinueAfterTool ?? 0.97,
      pContinueAfterAnswer: opts.pContinueAfterAnswer ?? 0.2,
      alpha: opts.alpha ?? 0.3,
      maxTools: opts.maxTools ?? DEFAULT_MAX_TRACKED_TOOLS,
    };
    if (!(Number.isInteger(this.o.maxTools) && this.o.maxTools >= 1)) throw new RangeError(`Tracked tool cap must be a positive integer, got ${this.o.maxTools}`);
    this.logPriorToolGap = Math.log(this.o.priorToolGapS);
  }

  /** A turn of `sessionId` started (its request arrived); learns the gap if it was waiting. */
  turnStarted(sessionId: string, now: number): void {
    checkTime(now);
    const s = this.sessions.get(sessionId);
    // A clock that went backwards measured no gap: learning one of 1 ms would make this session's and
    // this tool's every later wait look instant (their KV then priced as about to return).
    if (s !== undefined && s.status === "waiting-tool" && now >= s.since) {
      const lg = Math.log(Math.max(1e-3, now - s.since));
      const a = this.o.alpha;
      s.logGap = s.logGap === null ? lg : (1 - a) * s.logGap + a * lg;
      s.observations++;
      if (s.tool !== null) {
        const t = this.tools.get(s.tool);
        // Re-inserted so the map stays in order of last observation: the least recent goes past the cap.
        this.tools.delete(s.tool);
        if (t === undefined) this.tools.set(s.tool, { logGap: lg, observations: 1 });
        else { t.logGap = (1 - a) * t.logGap + a * lg; t.observations++; this.tools.set(s.tool, t); }
        if (this.tools.size > this.o.maxTools) this.tools.delete(this.tools.keys().next().value!);
      }
    }
    // Updated in place (not replaced) so handles stay valid; the fields are those a new record would get.
    if (s !== undefined) { this.setStatus(s, "running"); s.since = now; s.tool = null; return; }
    this.add(sessionId, { gone: false, status: "running", since: now, tool: null, logGap: null, observations: 0 });
  }

  /** A turn ended: with a tool call (`tool` names it) the session waits; with `null` it goes idle. */
  turnEnded(sessionId: string, now: number, tool: string | null): void {
    checkTime(now);
    if (tool !== null && tool.length > MAX_TOOL_NAME_CHARS) tool = tool.slice(0, MAX_TOOL_NAME_CHARS);
    const s = this.sessions.get(sessionId);
    const status = tool === null ? "idle" : "waiting-tool";
    if (s !== undefined) { this.setStatus(s, status); s.since = now; s.tool = tool; return; }
    this.add(sessionId, { gone: false, status, since: now, tool, logGap: null, observations: 0 });
  }

  private setStatus(s: SessionRecord, status: SessionStatus): void {
    this.counts[s.status]--;
    this.counts[status]++;
    s.status = status;
  }

  private add(sessionId: string, s: SessionRecord): void {
    this.sessions.set(sessionId, s);
    this.counts[s.status]++;
  }

  /** Forgets one record (its handles go stale). */
  private drop(sessionId: string, s: SessionRecord): void {
    s.gone = true;
    this.sessions.delete(sessionId);
    this.counts[s.status]--;
  }

  /** Sessions tracked now. */
  get size(): number {
    return this.sessions.size;
  }

  /** Tools whose return times are remembered now (at most `maxTools`). */
  get toolCount(): number {
    return this.tools.size;
  }

  /** Tracked sessions by status (for metrics and routers; a copy, kept as they change, so O(1)). */
  statusCounts(): Record<SessionStatus, number> {
    return { ...this.counts };
  }

  /**
   * Forgets every session that is not running and has not changed state for `maxAgeS` seconds
   * (a server never hears that a session closed; without this its records would pile up).
   * Returns how many were dropped. Their blocks then rank as an unknown session's: first to go.
   */
  prune(now: number, maxAgeS: number): number {
    let n = 0;
    for (const [id, s] of this.sessions) {
      if (s.status !== "running" && now - s.since > maxAgeS) { this.drop(id, s); n++; }
    }
    return n;
  }

  /**
   * Forgets the sessions that are not running, least recently changed first, until at most
   * `maxSessions` are tracked (running ones are never dropped, so more may remain). A bound on
   * memory for a server that many keys reach within the time-to-live of {@link prune}. Returns how
   * many were dropped; their blocks then rank as an unknown session's.
   */
  pruneToSize(maxSessions: number): number {
    const excess = this.sessions.size - maxSessions;
    if (excess <= 0) return 0;
    const quiet = [...this.sessions].filter(([, s]) => s.status !== "running").sort((a, b) => a[1].since - b[1].since);
    const drop = quiet.slice(0, excess);
    for (const [id, s] of drop) this.drop(id, s);
    return drop.length;
  }

  /** Drops a session (it closed). */
  forget(sessionId: string): void {
    const s = this.sessions.get(sessionId);
    if (s === undefined) return;
    this.drop(sessionId, s);
  }

  /**
   * The live record of a session, for callers that score it often (retention re-ranking): pass it to
   * {@link returnProbabilityOf} instead of looking the id up each time. Stale once `isStale()` says so.
   */
  handle(sessionId: string): SessionHandle | undefined {
    return this.sessions.get(sessionId);
  }

  /** True when `h` no longer describes a tracked session (forgotten); look the id up again. */
  static isStale(h: SessionHandle): boolean {
    return (h as SessionRecord).gone;
  }

  /** Current status, or undefined for an unknown session. */
  status(sessionId: string): SessionStatus | undefined {
    return this.sessions.get(sessionId)?.status;
  }

  /** Predicted median gap (s) of the session's current wait. */
  predictedGapS(sessionId: string): number {
    return this.gapOf(this.sessions.get(sessionId));
  }

  private gapOf(s: SessionRecord | undefined): number {
    if (s === undefined || s.status === "idle") return this.o.priorIdleGapS;
    if (s.status === "running") return 0;
    // Blend session history, tool history and the prior by how much each has seen.
    let sum = this.logPriorToolGap;
    let w = 1;
    const t = s.tool === null ? undefined : this.tools.get(s.tool);
    if (t !== undefined) { sum += t.logGap * Math.min(t.observations, 8); w += Math.min(t.observations, 8); }
    if (s.logGap !== null) { sum += s.logGap * Math.min(s.observations, 4); w += Math.min(s.observations, 4); }
    return Math.exp(sum / w);
  }

  /** Predicted absolute time of the session's next turn (now for a running session). */
  predictedReturnTime(sessionId: string, now: number): number {
    const s = this.sessions.get(sessionId);
    if (s === undefined) return now + this.o.priorIdleGapS;
    if (s.status === "running") return now;
    return Math.max(now, s.since + this.gapOf(s));
  }

  /**
   * Probability the session sends its next turn within `horizonS` seconds from `now`, given it has
   * not yet returned (log-normal gap, conditioned on the time already waited).
   */
  returnProbability(sessionId: string, now: number, horizonS: number): number {
    return this.returnProbabilityOf(this.sessions.get(sessionId), now, horizonS);
  }

  /** {@link returnProbability} for a session given by its handle (undefined: unknown session, 0). */
  returnProbabilityOf(h: SessionHandle | undefined, now: number, horizonS: number): number {
    const s = h as SessionRecord | undefined;
    if (s === undefined) return 0;
    if (s.status === "running") return 1;
    const pCont = s.status === "waiting-tool" ? this.o.pContinueAfterTool : this.o.pContinueAfterAnswer;
    return this.returnWithin(pCont, this.gapOf(s), now - s.since, horizonS);
  }

  /**
   * {@link returnProbability} for KV of no known session, released at `since`: priced as a session
   * that gave its final answer then (idle priors), the most a block nobody claims can be counted on.
   */
  anonymousReturnProbability(since: number, now: number, horizonS: number): number {
    return this.returnWithin(this.o.pContinueAfterAnswer, this.o.priorIdleGapS, now - since, horizonS);
  }

  private returnWithin(pCont: number, medianGapS: number, waitedS: number, horizonS: number): number {
    const mu = Math.log(medianGapS);
    const sig = this.o.sigma;
    const waited = Math.max(1e-6, waitedS);
    const fNow = normalCdf((Math.log(waited) - mu) / sig);
    const fEnd = normalCdf((Math.log(waited + horizonS) - mu) / sig);
    const tail = 1 - fNow;
    // A session long overdue is less likely to be alive at all: survival discounts continuation.
    const alive = (pCont * tail) / (pCont * tail + (1 - pCont));
    return tail <= 1e-12 ? 0 : alive * (fEnd - fNow) / tail;
  }
}

/**
 * One worker of an in-process cluster: an engine, the role the planner gives it, and the window of
 * its measured steps. It reports itself in the planner's and the routers' terms (planner/types.ts,
 * planner/routers.ts), the same records the simulator's workers fill.
 */
import type { WorkerOverlap } from "../../kv/index.ts";
import type { RouteCandidate } from "../../planner/routers.ts";
import { StepWindow } from "../../planner/step-window.ts";
import type { Role, WorkerSnapshot } from "../../planner/types.ts";
import type { WorkerStatus } from "../engine/engine-types.ts";
import { type StepRecord, stepSeconds } from "../engine/step-record.ts";
import type { QueueState } from "../engine/scheduler-types.ts";
import type { WorkerEngine } from "./worker-engine.ts";

/** A cluster worker. Its engine always runs as "mixed": roles are kept by routing, not by the engine. */
export class ClusterWorker {
  /** What the router sends here: whole requests (decode, mixed) or prefills to hand on (prefill). */
  role: Role;
  /** Leaving the cluster: the router sends it nothing new (see Cluster.removeWorker). */
  draining = false;
  /**
   * Parked by the baseline planner's replica targets (replica-targets.ts): the router sends it nothing
   * new, what it has finishes, and it stays in the cluster to serve again when a target wants it.
   */
  parked = false;
  /** Until this time (the cluster's clock, ms) a worker a replica target took back is starting: routers skip it. */
  startsServingAt = 0;
  /** Requests routed through this worker (decoding, prefilling or sending a prefix) not yet finished. */
  inFlight = 0;
  /**
   * Prompt tokens routed here for a prefill that has not reached this worker's engine yet (a hand-off
   * moving KV first): counted as queued, so that requests routed meanwhile see them.
   */
  handoffTokens = 0;
  /** The LoRA adapters this worker has loaded (the router sends a request for one only to workers that have it). */
  readonly adapters = new Set<string>();
  private readonly window: StepWindow;

  constructor(readonly engine: WorkerEngine, role: Role, initialPrefillRate: number) {
    this.role = role;
    this.window = new StepWindow(initialPrefillRate);
  }

  /** Feeds one engine step (wire the engine's `onStep` here). */
  observeStep(r: StepRecord): void {
    // The planner prices steps as the simulator runs them: the worker's whole cycle, loop included.
    this.window.observe({ ...r, seconds: stepSeconds(r) });
  }

  /** The worker's name (its engine's). */
  get id(): string {
    return this.engine.id;
  }

  /**
   * This worker as a router sees it, given its overlap with the request's blocks. With the request's
   * `priority`, the prefill queued ahead of it is the work at that priority or more urgent: its
   * scheduler admits the request before the rest (and preempts for it), so the rest does not delay it.
   */
  candidate(overlap: WorkerOverlap | undefined, priority?: number): RouteCandidate {
    const q = this.engine.queueState();
    const s = this.engine.stats();
    return {
      id: this.id, role: this.role, overlapDevice: overlap?.device ?? 0, overlapHost: overlap?.deviceOrHost ?? 0,
      queuedPrefillTokens: (priority === undefined ? q.waitingPrefillTokens : queuedAhead(q, priority)) + this.handoffTokens, activeBlocks: s.kvUsedBlocks, decodeBatch: q.decoding,
      decodeQueue: q.waitingDecodes, freeBlocks: this.engine.freeBlocks(), liveSessions: liveSessions(this.engine.sessionStatusCounts()),
      prefillRate: this.window.prefillRate, decodeStepS: this.window.decodeStepS, rack: 0,
    };
  }

  /** Whether `now` (the cluster's clock, ms) falls in the start-up of a worker a replica target took back. */
  starting(now: number): boolean {
    return now < this.startsServingAt;
  }

  /** The planner's view of the last window at `now` (the cluster's clock, ms; absent: not starting); starts the next one. */
  snapshot(now?: number): WorkerSnapshot {
    const q = this.engine.queueState();
    const s = this.engine.stats();
    return {
      id: this.id, role: this.role, state: this.draining ? "draining" : this.parked ? "off" : now !== undefined && this.starting(now) ? "starting" : "serving", waitingPrefillTokens: q.waitingPrefillTokens, queueDelayS: q.oldestWaitS,
      decodeBatch: q.decoding, waitingDecodes: q.waitingDecodes, kvUsage: s.kvUsedBlocks / Math.max(1, s.kvTotalBlocks),
      ...this.window.take(),
    };
  }

  /** Role and load at `now` (the cluster's clock, ms), for /metrics. */
  status(now: number): WorkerStatus {
    const s = this.engine.stats();
    const sessions = this.engine.sessionStatusCounts();
    return {
      id: this.id, role: this.role, waiting: s.waiting, running: s.running, kvUsage: s.kvUsedBlocks / Math.max(1, s.kvTotalBlocks),
      draining: this.draining, ...(this.parked ? { parked: true } : {}), ...(this.starting(now) ? { starting: true } : {}), alive: this.engine.alive, ...(sessions ? { sessions } : {}),
    };
  }
}

/** Prefill tokens queued at `priority` or more urgent (lower); everything queued is at 0 without a split. */
export function queuedAhead(q: QueueState, priority: number): number {
  if (!q.prefillByPriority) return priority < 0 ? 0 : q.waitingPrefillTokens;
  let n = 0;
  for (const [p, tokens] of q.prefillByPriority) if (p <= priority) n += tokens;
  return n;
}

/** Sessions that will bring another turn: running one, or waiting on a tool call (0 without agent retention, which tracks none). */
function liveSessions(counts: Record<string, number> | undefined): number {
  return (counts?.running ?? 0) + (counts?.["waiting-tool"] ?? 0);
}

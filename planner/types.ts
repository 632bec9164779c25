/**
 * What planners and routers see and decide. Pure data: the simulator and a real cluster fill the
 * same snapshot, so a planner's decisions mean the same in both.
 */

/** What a worker admits: prefill only, decode only (plus short local prefills), or both. */
export type Role = "prefill" | "decode" | "mixed";

/** Lifecycle of a worker (the baseline scales by starting and stopping workers). */
export type WorkerState = "serving" | "starting" | "draining" | "off";

/**
 * What one engine step computes: the one shape shared by the real engine's step log
 * (src/engine/step-record.ts), the simulator's cost model and the planner's step model.
 * Field names are the step-log format; keep them stable.
 */
export interface StepShape {
  /** New prompt tokens computed (chunked prefill). */
  prefillTokens: number;
  /** Σ over prompt tokens of the context each attends to. */
  prefillAttnPairs: number;
  /** Sequences producing one token each. */
  decodeSeqs: number;
  /** Σ over decoding sequences of the context each reads. */
  decodeAttnTokens: number;
}

/** One measured engine step (or `count` identical ones): its shape and how long it took. */
export interface StepSample extends StepShape {
  seconds: number;
  /** Identical consecutive steps this sample stands for (default 1). */
  count?: number;
}

/** Per-worker metrics over the last window. */
export interface WorkerSnapshot {
  id: string;
  role: Role;
  state: WorkerState;
  /** Uncached prompt tokens queued for prefill (not yet computed). */
  waitingPrefillTokens: number;
  /** Age (s) of the oldest request waiting for prefill. */
  queueDelayS: number;
  /** Sequences decoding now. */
  decodeBatch: number;
  /** Sequences ready to decode but waiting for a batch slot or for KV memory. */
  waitingDecodes: number;
  /** Prefill tokens computed in the window and seconds of steps that carried prefill. */
  prefillTokens: number;
  prefillBusyS: number;
  /** Steps in the window that carried prefill (optional; lets a planner measure how long such a step takes). */
  prefillSteps?: number;
  /** Decode tokens produced in the window and seconds of decode-carrying steps. */
  decodeTokens: number;
  decodeBusyS: number;
  /** Mean step time (s) over decode-only steps in the window (all decode-carrying steps if none; 0 when none). */
  decodeStepS: number;
  /** Mean decode batch over those steps. */
  meanDecodeBatch: number;
  /** Fraction of device KV blocks in use. */
  kvUsage: number;
  /** Turns waiting for KV memory before their prefill can start (optional; 0 when unknown). */
  waitingForMemory?: number;
  /** Some of the window's steps, with their shapes (optional; a bounded sample). */
  steps?: StepSample[];
}

/** One finished request, as the frontend sees it. */
export interface CompletedRequest {
  isl: number;
  osl: number;
  ttftS: number;
  itlS: number;
}

/** Everything a planner reads at one tick. */
export interface MetricsSnapshot {
  now: number;
  windowS: number;
  workers: WorkerSnapshot[];
  /** Requests that arrived in the window, with their prompt tokens and uncached prompt tokens. */
  arrivals: number;
  arrivedPromptTokens: number;
  arrivedUncachedTokens: number;
  arrivedOutputTokens: number;
  /** Requests that finished in the window (a real cluster keeps the latest 65,536: see completedRequests). */
  completions: CompletedRequest[];
  /** How many requests finished in the window, where `completions` may hold only the latest (absent: all there). */
  completedRequests?: number;
}

/** A planner decision. */
export type PlannerAction =
  | { kind: "flip"; workerId: string; to: Role }
  | { kind: "replicas"; prefill: number; decode: number }
  | { kind: "local-prefill-threshold"; tokens: number }
  /** Whether workers run a step's prefill chunk and its decodes as two steps instead of one mixed step. */
  | { kind: "step-mixing"; split: boolean }
  /**
   * Whether new sessions are admitted or held at the front door (held: one enters as one leaves, and
   * none waits there longer than `maxHoldS`; then it enters, or with `rejectAfterHold` it is turned
   * away). `newSessions`, when given, is how many new sessions may enter before the next tick
   * (held ones first); without it there is no such limit.
   */
  | { kind: "admission"; holdNewSessions: boolean; maxHoldS: number; newSessions?: number; rejectAfterHold?: boolean };

/** A planner: called every `intervalS` seconds of (injected) time with a fresh snapshot. */
export interface Planner {
  readonly name: string;
  readonly intervalS: number;
  tick(snapshot: MetricsSnapshot): PlannerAction[];
  /**
   * Decisions for a worker set that changed between ticks (a worker joined or left a cluster whose
   * workers come and go by themselves), from what the planner last decided; optional, and only the
   * workers are read. Without it a joiner serves as it joined until the next tick.
   */
  rebudget?(workers: readonly WorkerSnapshot[]): PlannerAction[];
}

/** Raised for a planner or router configured with impossible values. */
export class PlannerConfigError extends Error {
  override name = "PlannerConfigError";
}

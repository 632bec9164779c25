/**
 * Guards for measured planner inputs. A real cluster fills snapshots from timers and gauges; one NaN,
 * infinite or negative reading (a step timed across a clock glitch, a gauge divided by zero, two ticks
 * fired in the same millisecond) must not become a NaN decision, nor poison the planners' moving
 * averages, which never recover from a NaN. Well-formed snapshots pass through untouched (the same
 * object), so the simulator, which only produces well-formed ones, plans exactly as before.
 */
import type { CompletedRequest, MetricsSnapshot, StepSample, WorkerSnapshot } from "./types.ts";

/** True for a finite number of at least 0 (false for NaN). */
export function isGauge(x: number): boolean {
  return x >= 0 && x < Infinity;
}

/** `x` when it is a finite number of at least 0, else 0. */
export function gauge(x: number): number {
  return x >= 0 && x < Infinity ? x : 0;
}

/** A measured step whose shape and time are finite and non-negative (and whose `count`, if any, too). */
export function isValidStep(s: StepSample): boolean {
  return isGauge(s.seconds) && isGauge(s.prefillTokens) && isGauge(s.prefillAttnPairs) && isGauge(s.decodeSeqs) &&
    isGauge(s.decodeAttnTokens) && (s.count === undefined || isGauge(s.count));
}

/** A finished request whose lengths and latencies are finite and non-negative (`itlS` may be NaN: none measured). */
export function isValidCompletion(c: CompletedRequest): boolean {
  return isGauge(c.isl) && isGauge(c.osl) && isGauge(c.ttftS) && (Number.isNaN(c.itlS) || isGauge(c.itlS));
}

const WORKER_GAUGES = [
  "waitingPrefillTokens", "queueDelayS", "decodeBatch", "waitingDecodes", "prefillTokens", "prefillBusyS",
  "decodeTokens", "decodeBusyS", "decodeStepS", "meanDecodeBatch", "kvUsage",
] as const;
const OPTIONAL_GAUGES = ["prefillSteps", "waitingForMemory"] as const;

function workerOk(w: WorkerSnapshot): boolean {
  for (const k of WORKER_GAUGES) if (!isGauge(w[k])) return false;
  for (const k of OPTIONAL_GAUGES) if (w[k] !== undefined && !isGauge(w[k])) return false;
  return w.steps === undefined || w.steps.every(isValidStep);
}

function cleanWorker(w: WorkerSnapshot): WorkerSnapshot {
  if (workerOk(w)) return w;
  const out: WorkerSnapshot = { ...w };
  for (const k of WORKER_GAUGES) out[k] = gauge(w[k]);
  for (const k of OPTIONAL_GAUGES) if (w[k] !== undefined) out[k] = gauge(w[k]!);
  if (w.steps !== undefined) out.steps = w.steps.filter(isValidStep);
  return out;
}

/**
 * `s` with every reading a planner can trust: worker gauges that are NaN, infinite or negative read 0,
 * malformed step samples and completions are dropped, a window shorter than half the planner's
 * interval (or not a number) counts as half an interval (arrivals are rates over the window: the same
 * tokens over a 1 ms window read as a thousandfold burst), and a `now` that is not finite is `lastNow`.
 * Returns `s` itself when nothing needed cleaning.
 */
export function cleanSnapshot(s: MetricsSnapshot, intervalS: number, lastNow: number): MetricsSnapshot {
  const minWindow = intervalS / 2;
  const windowOk = s.windowS >= minWindow && s.windowS < Infinity;
  const nowOk = Number.isFinite(s.now);
  const countsOk = isGauge(s.arrivals) && isGauge(s.arrivedPromptTokens) && isGauge(s.arrivedUncachedTokens) && isGauge(s.arrivedOutputTokens) &&
    (s.completedRequests === undefined || isGauge(s.completedRequests));
  const workersOk = s.workers.every(workerOk);
  const doneOk = s.completions.every(isValidCompletion);
  if (windowOk && nowOk && countsOk && workersOk && doneOk) return s;
  return {
    now: nowOk ? s.now : lastNow,
    windowS: windowOk ? s.windowS : minWindow,
    workers: workersOk ? s.workers : s.workers.map(cleanWorker),
    arrivals: gauge(s.arrivals), arrivedPromptTokens: gauge(s.arrivedPromptTokens),
    arrivedUncachedTokens: gauge(s.arrivedUncachedTokens), arrivedOutputTokens: gauge(s.arrivedOutputTokens),
    completions: doneOk ? s.completions : s.completions.filter(isValidCompletion),
    ...(s.completedRequests !== undefined ? { completedRequests: gauge(s.completedRequests) } : {}),
  };
}

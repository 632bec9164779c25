/** Engine stats of several workers added up (gauges and counters alike). */
import type { EngineStats } from "../engine/engine-types.ts";

/** Field-by-field sum of `all` (zeros when empty). */
export function sumStats(all: readonly EngineStats[]): EngineStats {
  const out: EngineStats = {
    waiting: 0, running: 0, kvUsedBlocks: 0, kvTotalBlocks: 0, prefixQueriedTokens: 0, prefixHitTokens: 0, preemptions: 0, priorityPreemptions: 0,
    swapOuts: 0, swappedOutBlocks: 0, swappedInBlocks: 0, swapUsedBlocks: 0, swapTotalBlocks: 0, recomputedTokens: 0, specStateRollbacks: 0, specRefedTokens: 0, steps: 0,
    kvHostBlocks: 0, kvHostCapacityBlocks: 0, kvHostBytes: 0, kvOffloadedBlocks: 0, kvRestoredBlocks: 0, kvPrefetchedBlocks: 0, jumpForwardTokens: 0, stepsRunAhead: 0,
    stateCheckpoints: 0, stateCheckpointCapacity: 0, stateCheckpointsWritten: 0, stateCheckpointResumes: 0, hostStateCheckpoints: 0, hostStateCapacity: 0,
    hostStatesOffloaded: 0, hostStatesRestored: 0,
    specDrafts: 0, specDraftTokens: 0, specAcceptedTokens: 0, specAcceptedPerPos: [],
  };
  const keys = (Object.keys(out) as (keyof EngineStats)[]).filter((k): k is Exclude<keyof EngineStats, "specAcceptedPerPos"> => k !== "specAcceptedPerPos");
  for (const s of all) {
    // A worker from before a field (a protocol peer of an older build) reports none: it counts nothing.
    for (const k of keys) out[k] += s[k] ?? 0;
    (s.specAcceptedPerPos ?? []).forEach((n, i) => (out.specAcceptedPerPos[i] = (out.specAcceptedPerPos[i] ?? 0) + n));
  }
  return out;
}

/** The fields of EngineStats that are gauges (what a worker holds now), not counters. */
const GAUGES = [
  "waiting", "running", "kvUsedBlocks", "kvTotalBlocks", "swapUsedBlocks", "swapTotalBlocks", "kvHostBlocks", "kvHostCapacityBlocks", "kvHostBytes",
  "stateCheckpoints", "stateCheckpointCapacity", "hostStateCheckpoints", "hostStateCapacity",
] as const satisfies readonly (keyof EngineStats)[];

/**
 * `s` with its gauges at zero and its counters kept: what a worker that died or left still adds to
 * the cluster's figures (its counters, so that cluster-wide counters never go back; none of its load).
 */
export function countersOf(s: EngineStats): EngineStats {
  const out = { ...s, specAcceptedPerPos: [...(s.specAcceptedPerPos ?? [])] };
  for (const k of GAUGES) out[k] = 0;
  return out;
}

/** Sessions by status, summed over workers' counts (undefined when none reports any: LRU retention). */
export function sumSessionCounts(all: readonly (Record<string, number> | undefined)[]): Record<string, number> | undefined {
  let out: Record<string, number> | undefined;
  for (const c of all) {
    if (!c) continue;
    out ??= {};
    for (const [k, v] of Object.entries(c)) out[k] = (out[k] ?? 0) + v;
  }
  return out;
}

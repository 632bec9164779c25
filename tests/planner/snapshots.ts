/** Synthetic cluster snapshots for planner tests. */
import type { MetricsSnapshot, Role, StepSample, WorkerSnapshot } from "../../planner/index.ts";
import { SeededRng } from "../../kv/rng.ts";

/**
 * A cluster snapshot: `roles` per worker, prefill backlog and decode load per the arguments. Prompts
 * go to the workers that take them (prefill workers, mixed workers, or every worker when none
 * prefills). A prefill worker computes 50k tokens/s; a decoding worker `poolRate` (default 40k: its
 * chunks are smaller and its steps also carry the decodes), in chunk steps of `chunkS` (long prompts
 * make them long). Decode-only steps cost 10 ms + 40 µs per sequence unless set.
 */
export function snap(
  now: number, roles: Role[],
  o: { uncachedPerS: number; outputPerS: number; backlog: number; seqs: number; stepA?: number; stepB?: number; chunkS?: number; poolRate?: number },
): MetricsSnapshot {
  const pre = roles.filter((r) => r === "prefill").length;
  const dec = roles.length - pre;
  const takes = (r: Role) => r === "prefill" || r === "mixed" || pre === 0;
  const takers = roles.filter(takes).length;
  const poolRate = o.poolRate ?? 40_000;
  const rate = (r: Role) => (r === "prefill" ? 50_000 : poolRate);
  const chunkS = o.chunkS ?? 0.2;
  const workers: WorkerSnapshot[] = roles.map((role, i) => {
    const decodes = role !== "prefill";
    const b = (o.seqs / dec) * (0.9 + 0.2 * (i % 2));
    const t = takes(role) ? Math.min(0.95, o.uncachedPerS / Math.max(1, takers) / rate(role)) : 0;
    return {
      id: `w${i}`, role, state: "serving", waitingPrefillTokens: takes(role) ? o.backlog / takers : 0, queueDelayS: 0,
      decodeBatch: decodes ? o.seqs / dec : 0, waitingDecodes: 0,
      prefillTokens: rate(role) * t, prefillBusyS: t, prefillSteps: t / (role === "prefill" ? 16_384 / 50_000 : chunkS),
      decodeTokens: 0, decodeBusyS: decodes ? 1 : 0,
      decodeStepS: decodes ? (o.stepA ?? 0.01) + (o.stepB ?? 0.00004) * b : 0, meanDecodeBatch: decodes ? b : 0, kvUsage: 0.3,
    };
  });
  return {
    now, windowS: 1, workers, arrivals: 100, arrivedPromptTokens: 100 * 20_000, arrivedUncachedTokens: o.uncachedPerS,
    arrivedOutputTokens: o.outputPerS, completions: [],
  };
}


/** A made-up GPU's step time: 1.5 ms overhead, 20 ms of weights, per-token and attention costs, `mixedS` extra per mixed step. */
export function stepTime(s: Omit<StepSample, "seconds">, mixedS: number): number {
  const tokens = s.prefillTokens + s.decodeSeqs;
  const compute = 2e-6 * tokens + 5e-10 * (s.prefillAttnPairs + s.decodeAttnTokens);
  const memory = 0.02 + 2e-9 * (s.decodeAttnTokens + s.prefillTokens);
  return 0.0015 + Math.max(compute, memory) + (s.prefillTokens > 0 && s.decodeSeqs > 0 ? mixedS : 0);
}

/** Steps of an all-mixed worker: decode-only ones and mixed ones with small and full chunks (±1% noise). */
export function mixedWorkerSteps(mixedS: number, n: number, seed: number): StepSample[] {
  const rng = new SeededRng(seed);
  const out: StepSample[] = [];
  for (let i = 0; i < n; i++) {
    const b = 1 + Math.floor(rng.next() * 120);
    const ctx = 5000 + rng.next() * 80000;
    const r = rng.next();
    const p = r < 0.4 ? 0 : r < 0.7 ? Math.floor(50 + rng.next() * 1500) : 8192 - b;
    const s = { prefillTokens: p, prefillAttnPairs: p * (2000 + rng.next() * 60000), decodeSeqs: b, decodeAttnTokens: b * ctx };
    out.push({ ...s, seconds: stepTime(s, mixedS) * (1 + 0.02 * (rng.next() - 0.5)) });
  }
  return out;
}

/**
 * Summaries of a run: TTFT / ITL / end-to-end mean and percentiles (seconds), goodput (requests/s
 * meeting every SLO), throughput, KV hit rate, completed and rejected counts with reasons.
 */
import type { RequestOutcome } from "./request.ts";

/** Mean and percentiles of one latency. */
export interface LatencyStats {
  mean: number;
  p50: number;
  p95: number;
  p99: number;
}

/** The per-system block of the report JSON. */
export interface SystemSummary {
  ttft: LatencyStats;
  itl: LatencyStats;
  e2e: LatencyStats;
  goodput: number;
  throughput: number;
  output_tokens_per_s: number;
  kv_hit_rate: number;
  completed: number;
  rejected: number;
  offered: number;
  completed_fraction: number;
  rejected_reasons: Record<string, number>;
  gpu_seconds: number;
}

/** Percentile (nearest rank) of sorted values; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

function stats(values: number[]): LatencyStats {
  const s = values.slice().sort((a, b) => a - b);
  const mean = s.length === 0 ? NaN : s.reduce((a, b) => a + b, 0) / s.length;
  return { mean, p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99) };
}

/** Summarises outcomes over a workload of `durationS` seconds. */
export function summarize(outcomes: readonly RequestOutcome[], durationS: number, slo: { ttftS: number; itlS: number }, gpuSeconds: number): SystemSummary {
  const ok = outcomes.filter((o) => o.rejected === null);
  const reasons: Record<string, number> = {};
  for (const o of outcomes) if (o.rejected !== null) reasons[o.rejected] = (reasons[o.rejected] ?? 0) + 1;
  const good = ok.filter((o) => o.ttft <= slo.ttftS && o.itl <= slo.itlS).length;
  let prompt = 0, cached = 0, out = 0;
  for (const o of ok) { prompt += o.prompt; cached += o.cached; out += o.output; }
  return {
    ttft: stats(ok.map((o) => o.ttft)), itl: stats(ok.map((o) => o.itl)), e2e: stats(ok.map((o) => o.e2e)),
    goodput: good / durationS, throughput: ok.length / durationS, output_tokens_per_s: out / durationS,
    kv_hit_rate: prompt > 0 ? cached / prompt : 0, completed: ok.length, rejected: outcomes.length - ok.length,
    offered: outcomes.length, completed_fraction: outcomes.length > 0 ? ok.length / outcomes.length : 1,
    rejected_reasons: reasons, gpu_seconds: gpuSeconds,
  };
}

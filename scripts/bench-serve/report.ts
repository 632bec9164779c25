/**
 * Summaries of a load-generator run: latency distributions, throughput and goodput at SLOs,
 * rendered as a Markdown table and as a JSON object.
 */
import type { RequestResult } from "./client.ts";

/** Mean and percentiles of one metric, in ms. */
export interface Distribution {
  count: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
}

/** The whole report. */
export interface BenchReport {
  requests: number;
  succeeded: number;
  failed: number;
  durationS: number;
  requestThroughput: number;
  outputTokThroughput: number;
  totalTokThroughput: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  prefixHitRate: number;
  ttftMs: Distribution;
  itlMs: Distribution;
  tpotMs: Distribution;
  e2eMs: Distribution;
  slo: { ttftMs: number; itlMs: number; e2eMs: number };
  goodput: number;
  goodRequests: number;
  errors: string[];
}

/** Percentile by linear interpolation on sorted values (numpy's default). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(sorted.length - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/** Distribution of a sample. */
export function distribution(values: readonly number[]): Distribution {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const mean = v.length ? v.reduce((a, b) => a + b, 0) / v.length : NaN;
  return { count: v.length, mean, p50: percentile(v, 0.5), p95: percentile(v, 0.95), p99: percentile(v, 0.99) };
}

/** Time per output token after the first, per request. */
function tpot(r: RequestResult): number {
  return r.completionTokens > 1 ? (r.e2eMs - r.ttftMs) / (r.completionTokens - 1) : NaN;
}

/** Builds the report; a request is "good" when it succeeded and met every SLO. */
export function summarize(results: readonly RequestResult[], durationMs: number, slo: BenchReport["slo"]): BenchReport {
  const ok = results.filter((r) => r.ok);
  const sum = (f: (r: RequestResult) => number) => ok.reduce((a, r) => a + f(r), 0);
  const durationS = durationMs / 1000;
  const good = ok.filter((r) => {
    const t = tpot(r);
    return r.ttftMs <= slo.ttftMs && (!Number.isFinite(t) || t <= slo.itlMs) && r.e2eMs <= slo.e2eMs;
  }).length;
  const promptTokens = sum((r) => r.promptTokens);
  const completionTokens = sum((r) => r.completionTokens);
  const cachedTokens = sum((r) => r.cachedTokens);
  const errs = new Map<string, number>();
  for (const r of results) if (!r.ok) errs.set(r.error ?? "unknown", (errs.get(r.error ?? "unknown") ?? 0) + 1);
  return {
    requests: results.length,
    succeeded: ok.length,
    failed: results.length - ok.length,
    durationS,
    requestThroughput: ok.length / durationS,
    outputTokThroughput: completionTokens / durationS,
    totalTokThroughput: (promptTokens + completionTokens) / durationS,
    promptTokens,
    completionTokens,
    cachedTokens,
    prefixHitRate: promptTokens ? cachedTokens / promptTokens : 0,
    ttftMs: distribution(ok.map((r) => r.ttftMs)),
    itlMs: distribution(ok.flatMap((r) => r.itlMs)),
    tpotMs: distribution(ok.map(tpot)),
    e2eMs: distribution(ok.map((r) => r.e2eMs)),
    slo,
    goodput: good / durationS,
    goodRequests: good,
    errors: [...errs].map(([e, n]) => `${n}× ${e}`),
  };
}

const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");

/** The report as a Markdown table (what gets committed under docs/results). */
export function reportTable(r: BenchReport): string {
  const row = (name: string, d: Distribution) => `| ${name} | ${f(d.mean)} | ${f(d.p50)} | ${f(d.p95)} | ${f(d.p99)} |`;
  return [
    `| requests | ok | failed | duration s | req/s | output tok/s | total tok/s | prefix hit | goodput req/s |`,
    `|---|---|---|---|---|---|---|---|---|`,
    `| ${r.requests} | ${r.succeeded} | ${r.failed} | ${f(r.durationS, 2)} | ${f(r.requestThroughput, 2)} | ${f(r.outputTokThroughput)} | ${f(r.totalTokThroughput)} | ${f(100 * r.prefixHitRate)}% | ${f(r.goodput, 2)} (${r.goodRequests}/${r.succeeded}) |`,
    ``,
    `| metric (ms) | mean | P50 | P95 | P99 |`,
    `|---|---|---|---|---|`,
    row("TTFT", r.ttftMs),
    row("ITL", r.itlMs),
    row("TPOT", r.tpotMs),
    row("E2E", r.e2eMs),
    ``,
    `SLOs for goodput: TTFT ≤ ${r.slo.ttftMs} ms, TPOT ≤ ${r.slo.itlMs} ms, E2E ≤ ${r.slo.e2eMs} ms. ` +
      `Tokens: ${r.promptTokens} prompt (${r.cachedTokens} cached), ${r.completionTokens} output.`,
    ...(r.errors.length ? [``, `Errors: ${r.errors.join("; ")}`] : []),
  ].join("\n");
}

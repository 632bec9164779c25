/**
 * The periodic stats line `serve` prints while it works, as vLLM's engine does (its wording, so log
 * readers built for vLLM's lines read ours): prompt and generation throughput since the last line,
 * requests running and waiting, KV cache usage and the prefix cache's hit rate since the last line.
 * Quiet while idle. `--disable-log-stats` turns it off; `VLLM_LOG_STATS_INTERVAL` sets the period
 * (seconds, default 10), as in vLLM. A cluster prints a line per worker, as vLLM does per engine of a
 * data-parallel deployment ("Engine 000: …"), naming the worker and its role.
 */
import type { EngineStats, ServingEngine } from "../engine/engine-types.ts";

/** vLLM's default period between stats lines (`VLLM_LOG_STATS_INTERVAL`), seconds. */
export const DEFAULT_LOG_STATS_INTERVAL_S = 10;

/** The counters one line compares with the last's, and when they were read (s). */
export interface StatsSnapshot {
  atS: number;
  promptTokens: number;
  generationTokens: number;
  prefixQueriedTokens: number;
  prefixHitTokens: number;
}

/** What a stats line reads of an engine or a cluster's worker. */
export interface StatsSource {
  readonly metrics: { readonly promptTokens: number; readonly generationTokens: number };
  stats(): EngineStats;
}

/** One of a cluster's workers, for its own line. */
export interface StatsWorker {
  id: string;
  role: string;
  engine: StatsSource;
}

/** The engine's counters now (`s`: its stats, when already read). */
export function statsSnapshot(engine: StatsSource, atS: number, s: EngineStats = engine.stats()): StatsSnapshot {
  return { atS, promptTokens: engine.metrics.promptTokens, generationTokens: engine.metrics.generationTokens, prefixQueriedTokens: s.prefixQueriedTokens, prefixHitTokens: s.prefixHitTokens };
}

/** The gauges a line shows as they are now. */
export interface StatsGauges {
  running: number;
  waiting: number;
  kvUsedBlocks: number;
  kvTotalBlocks: number;
}

/**
 * The line for the period from `prev` to `now`; undefined when nothing was computed in it and
 * nothing runs or waits (an idle server prints nothing).
 */
export function statsLine(prev: StatsSnapshot, now: StatsSnapshot, g: StatsGauges): string | undefined {
  const prompt = now.promptTokens - prev.promptTokens;
  const generated = now.generationTokens - prev.generationTokens;
  if (prompt === 0 && generated === 0 && g.running === 0 && g.waiting === 0) return undefined;
  const seconds = Math.max(now.atS - prev.atS, 1e-9);
  const queried = now.prefixQueriedTokens - prev.prefixQueriedTokens;
  const hit = now.prefixHitTokens - prev.prefixHitTokens;
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  return `Avg prompt throughput: ${(prompt / seconds).toFixed(1)} tokens/s, Avg generation throughput: ${(generated / seconds).toFixed(1)} tokens/s, ` +
    `Running: ${g.running} reqs, Waiting: ${g.waiting} reqs, KV cache usage: ${pct(g.kvTotalBlocks > 0 ? g.kvUsedBlocks / g.kvTotalBlocks : 0)}, ` +
    `Prefix cache hit rate: ${pct(queried > 0 ? hit / queried : 0)}`;
}

/**
 * Prints `engine`'s stats line to `write` every `intervalS` seconds while it works; returns what stops
 * it. `nowS` is a monotonic clock in seconds. With `workers` (a cluster's, read at each line: workers
 * join and leave), one line per worker that works, `Engine NNN (id, role): `, NNN its place in the list.
 */
export function startStatsLog(
  engine: ServingEngine, intervalS: number, write: (line: string) => void, nowS: () => number, workers?: () => readonly StatsWorker[],
): () => void {
  if (!(intervalS > 0 && Number.isFinite(intervalS))) throw new RangeError(`The stats interval must be a positive number of seconds, got ${intervalS}`);
  const sources = (): { key: string; prefix: string; engine: StatsSource }[] =>
    workers ? workers().map((w, i) => ({ key: w.id, prefix: `Engine ${String(i).padStart(3, "0")} (${w.id}, ${w.role}): `, engine: w.engine })) : [{ key: "", prefix: "", engine }];
  let prev = new Map(sources().map((src) => [src.key, statsSnapshot(src.engine, nowS())]));
  const timer = setInterval(() => {
    const next = new Map<string, StatsSnapshot>();
    for (const src of sources()) {
      // One read of the stats a line.
      const s = src.engine.stats();
      const now = statsSnapshot(src.engine, nowS(), s);
      next.set(src.key, now);
      // A worker that joined since the last line starts its period now.
      const before = prev.get(src.key);
      const line = before && statsLine(before, now, s);
      if (line !== undefined) write(src.prefix + line);
    }
    prev = next;
  }, intervalS * 1000);
  return () => clearInterval(timer);
}

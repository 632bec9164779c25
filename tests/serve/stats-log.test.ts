/** serve's periodic stats line (src/serve/stats-log.ts): vLLM's wording, rates over the period, quiet while idle. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { eventually } from "../eventually.ts";
import { type StatsSnapshot, startStatsLog, statsLine } from "../../src/serve/stats-log.ts";
import type { EngineStats, ServingEngine } from "../../src/engine/engine-types.ts";

const at = (atS: number, promptTokens: number, generationTokens: number, prefixQueriedTokens = 0, prefixHitTokens = 0): StatsSnapshot =>
  ({ atS, promptTokens, generationTokens, prefixQueriedTokens, prefixHitTokens });

test("statsLine() gives the period's throughput, the gauges and the period's prefix hit rate", () => {
  const line = statsLine(at(10, 100, 50, 200, 20), at(20, 600, 250, 600, 320), { running: 3, waiting: 1, kvUsedBlocks: 16, kvTotalBlocks: 64 });
  assert.equal(line, "Avg prompt throughput: 50.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 25.0%, Prefix cache hit rate: 75.0%");
});

test("statsLine() is quiet while idle, and speaks while something runs or waits though nothing was computed", () => {
  const idle = { running: 0, waiting: 0, kvUsedBlocks: 0, kvTotalBlocks: 8 };
  assert.equal(statsLine(at(0, 5, 5), at(10, 5, 5), idle), undefined);
  assert.match(statsLine(at(0, 5, 5), at(10, 5, 5), { ...idle, waiting: 2 })!, /Avg prompt throughput: 0\.0 tokens\/s.*Waiting: 2 reqs.*Prefix cache hit rate: 0\.0%/);
  assert.match(statsLine(at(0, 5, 5), at(10, 5, 6), idle)!, /Avg generation throughput: 0\.1 tokens\/s/);
});

test("startStatsLog() with a cluster's workers prints a line per working worker, and starts a joining worker's period when it joins", async () => {
  const worker = (id: string, role: string) => {
    const metrics = { promptTokens: 0, generationTokens: 0 };
    const gauges = { running: 0, waiting: 0 };
    const engine = {
      metrics,
      stats: () => ({ ...gauges, kvUsedBlocks: 4, kvTotalBlocks: 16, prefixQueriedTokens: 0, prefixHitTokens: 0 }) as unknown as EngineStats,
    };
    return { id, role, engine, metrics, gauges };
  };
  const workers = [worker("worker-0", "prefill"), worker("worker-1", "decode")];
  const lines: string[] = [];
  const cluster = { metrics: { promptTokens: 0, generationTokens: 0 }, stats: () => ({}) } as unknown as ServingEngine;
  const stop = startStatsLog(cluster, 0.02, (l) => lines.push(l), () => performance.now() / 1000, () => workers);
  const from = (prefix: string) => lines.filter((l) => l.startsWith(prefix));
  try {
    workers[0].metrics.promptTokens = 500;
    await eventually(() => lines.length, (n) => n > 0);
    assert.match(lines[0], /^Engine 000 \(worker-0, prefill\): Avg prompt throughput: [1-9][\d.]* tokens\/s, Avg generation throughput: 0\.0 tokens\/s, Running: 0 reqs, Waiting: 0 reqs, KV cache usage: 25\.0%/);
    assert.equal(from("Engine 001").length, 0, "an idle worker prints nothing");
    // worker-1 runs from now on (a line each period); worker-2 joins with counters already up.
    workers[1].gauges.running = 2;
    const late = worker("worker-2", "decode");
    late.metrics.generationTokens = 900;
    workers.push(late);
    lines.length = 0;
    await eventually(() => from("Engine 001").length, (n) => n > 0);
    assert.equal(from("Engine 002").length, 0, `its counters before it joined are no period's: ${lines.join("\n")}`);
    late.metrics.generationTokens = 950;
    await eventually(() => from("Engine 002 (worker-2, decode): ").length, (n) => n > 0);
    assert.match(from("Engine 002")[0], /Avg generation throughput: [1-9][\d.]* tokens\/s/);
    assert.ok(from("Engine 001 (worker-1, decode): ").every((l) => l.includes("Running: 2 reqs")));
  } finally {
    stop();
  }
});

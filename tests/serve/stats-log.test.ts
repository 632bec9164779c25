/** serve's periodic stats line (src/serve/stats-log.ts): vLLM's wording, rates over the period, quiet while idle. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type StatsSnapshot, statsLine } from "../../src/serve/stats-log.ts";

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

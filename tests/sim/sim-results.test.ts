import { test } from "../harness.ts";
import assert from "node:assert/strict";
import { bestBaselineAmong, type SimResult, type SystemFigures } from "../../scripts/sim-results.ts";

const sys = (goodput: number, e2eMean: number, done: number): SystemFigures =>
  ({ ttft: { p95: 1 }, e2e: { mean: e2eMean }, goodput, completed_fraction: done });

/** A result in which the variant with the most goodput does not sustain the load. */
const result: SimResult = {
  load: 3,
  workload: "computer-use",
  model: "kimi-k2.6",
  assumptions: [],
  systems: { baseline: sys(14, 40, 0.916), evolving: sys(70, 16, 0.87) },
  baseline_variants: {
    "dynamo-disagg-sla": sys(14, 40, 0.916),
    "dynamo-agg": sys(8, 80, 0.983),
    "dynamo-agg-tuned": sys(20, 30, 0.99),
    "dynamo-agg-shed": sys(20, 28, 0.957),
  },
};

test("bestBaselineAmong() takes the most goodput among the variants kept, ties to the lower mean E2E", () => {
  assert.equal(bestBaselineAmong(result, () => true)?.variant, "dynamo-agg-shed");
  const shipped = (k: string) => k !== "dynamo-agg-tuned" && k !== "dynamo-agg-shed";
  assert.equal(bestBaselineAmong(result, shipped)?.variant, "dynamo-disagg-sla");
  // Only variants completing 95% sustain the load: the SLA planner (91.6%) drops out.
  const sustained = bestBaselineAmong(result, (k, v) => shipped(k) && v.completed_fraction >= 0.95);
  assert.equal(sustained?.variant, "dynamo-agg");
  assert.equal(sustained?.goodput, 8);
});

test("bestBaselineAmong() returns null when no variant is kept", () => {
  assert.equal(bestBaselineAmong(result, (_k, v) => v.completed_fraction >= 0.999), null);
});

import { test } from "../harness.ts";
import assert from "node:assert/strict";
import { splitOverTime, ttftCdf } from "../../src/sim/report.ts";
import type { SimSample } from "../../src/sim/simulator.ts";

const samples = (roles: (t: number) => [number, number, number]): SimSample[] =>
  [0, 10, 20, 30].map((t) => {
    const [p, d, m] = roles(t);
    return { t, prefillWorkers: p, decodeWorkers: d, mixedWorkers: m, kvHitRate: 0.5, ttftP50: 0.1 };
  });

/** The legend entries of an SVG chart, with the colour each is drawn in. */
function legend(svg: string): Map<string, string> {
  return new Map([...svg.matchAll(/<text x="[\d.]+" y="[\d.]+" fill="(#[0-9a-f]{6})" font-size="11">([^<]+)<\/text>/g)].map((m) => [m[2], m[1]]));
}

test("splitOverTime() draws mixed workers and leaves out roles no worker held", () => {
  const svg = splitOverTime({
    workload: "w",
    series: {
      "dynamo-disagg-sla": samples(() => [8, 24, 0]),
      "dynamo-agg": samples(() => [0, 0, 32]),
      evolving: samples((t) => (t < 20 ? [0, 0, 32] : [4, 0, 28])),
    },
  });
  const l = legend(svg);
  assert.deepEqual([...l.keys()], ["dynamo-disagg-sla prefill", "dynamo-disagg-sla decode", "evolving prefill", "evolving mixed"]);
  // One colour per system, another for the next system.
  assert.equal(l.get("evolving prefill"), l.get("evolving mixed"));
  assert.notEqual(l.get("evolving mixed"), l.get("dynamo-disagg-sla prefill"));
});

test("ttftCdf() gives each of seven systems its own colour", () => {
  const names = ["a", "b", "c", "d", "e", "evolving", "evolving-static"];
  const svg = ttftCdf({ workload: "w", ttft_samples: Object.fromEntries(names.map((n, i) => [n, [0.1 * (i + 1), 0.2 * (i + 1)]])) });
  const colours = [...legend(svg).values()];
  assert.equal(colours.length, 7);
  assert.equal(new Set(colours).size, 7);
});

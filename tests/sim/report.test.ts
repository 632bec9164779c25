import { test } from "../harness.ts";
import assert from "node:assert/strict";
import { lineChart, niceStep, splitOverTime, ttftCdf } from "../../src/sim/report.ts";
import type { SimSample } from "../../src/sim/simulator.ts";
import { parseSimArgs } from "../../src/sim/cli-options.ts";
import { markdownView, runOnce, textView } from "../../src/sim/run.ts";

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

/** The tick labels of a chart's y axis (right-aligned) and x axis (centred), in drawing order. */
function tickLabels(svg: string): { y: number[]; x: number[] } {
  const y = [...svg.matchAll(/font-size="10" text-anchor="end">([^<]+)</g)].map((m) => Number(m[1]));
  const x = [...svg.matchAll(/font-size="10" text-anchor="middle">([^<]+)</g)].map((m) => Number(m[1]));
  return { y, x };
}

test("niceStep() returns 1, 2 or 5 times a power of ten", () => {
  assert.equal(niceStep(8.4), 2);
  assert.equal(niceStep(1), 0.2);
  assert.equal(niceStep(1200, 5), 200);
  assert.equal(niceStep(35), 10);
  assert.equal(niceStep(0), 1);
});

test("lineChart() puts axis ticks at round numbers, the y axis ending at one", () => {
  // 8.4 workers at most over 1,170 s: quarters of the range would read 2.2, 4.4, 6.6, 8.8 and 292.
  const svg = lineChart("t", "time (s)", "workers", [{ name: "a", points: [[0, 3], [585, 8.4], [1170, 5]] }]);
  const { y, x } = tickLabels(svg);
  assert.deepEqual(y, [0, 2, 4, 6, 8, 10]);
  assert.deepEqual(x, [0, 200, 400, 600, 800, 1000]);
});

test("lineChart() on a log axis ticks at powers of ten, with 2 and 5 between on a narrow one", () => {
  const wide = tickLabels(lineChart("t", "s", "f", [{ name: "a", points: [[0.02, 0], [150, 1]] }], 1, true));
  assert.deepEqual(wide.x, [0.1, 1, 10, 100]);
  assert.deepEqual(wide.y, [0, 0.2, 0.4, 0.6, 0.8, 1]);
  const narrow = tickLabels(lineChart("t", "s", "f", [{ name: "a", points: [[0.3, 0], [4, 1]] }], 1, true));
  assert.deepEqual(narrow.x, [0.5, 1, 2]);
});

test("textView() and markdownView() print n/a, not NaN, for a run in which nothing completes", () => {
  // One second of coding: no session starts, so every latency and ratio is undefined.
  let t = 0;
  const c = runOnce(parseSimArgs(["--scenario", "coding-256", "--gpus", "16", "--duration", "1", "--baselines", "dynamo-agg"]), 1, null, () => t++);
  assert.equal(c.systems.evolving.completed, 0);
  for (const text of [textView(c, 1), markdownView(c, 1, "sim")]) {
    assert.ok(!text.includes("NaN"), text);
    assert.match(text, /p95 TTFT n\/a/);
  }
});

test("lineChart() puts the legend right of every line, with a swatch in each series' dash", () => {
  const svg = lineChart("t", "time (s)", "workers", [
    { name: "ours prefill", points: [[0, 1], [100, 9]] },
    { name: "ours decode", points: [[0, 9], [100, 1]], dash: "dashed" },
  ]);
  const pathXs = [...svg.matchAll(/<path d="([^"]+)"/g)].flatMap((m) => [...m[1].matchAll(/[ML]([\d.]+),/g)].map((p) => Number(p[1])));
  const legendXs = [...svg.matchAll(/<text x="([\d.]+)" y="[\d.]+" fill="#/g)].map((m) => Number(m[1]));
  assert.equal(legendXs.length, 2);
  assert.ok(Math.min(...legendXs) > Math.max(...pathXs), `legend at x ${legendXs} overlaps lines reaching x ${Math.max(...pathXs)}`);
  const swatches = [...svg.matchAll(/<line x1="([\d.]+)" y1="[\d.]+" x2="[\d.]+" y2="[\d.]+" stroke="#[0-9a-f]{6}" stroke-width="1.8"( stroke-dasharray="6,3")?\/>/g)];
  assert.equal(swatches.length, 2);
  assert.equal(swatches[1][2], ' stroke-dasharray="6,3"');
  assert.ok(Number(swatches[0][1]) > Math.max(...pathXs));
});

/**
 * Report rendering: a text table of a comparison, a Markdown table, and SVG plots (TTFT CDF,
 * prefill/decode split over time, KV hit rate over time). Pure string builders; the CLI writes files.
 */
import type { Comparison } from "./compare.ts";
import type { SystemSummary } from "./metrics.ts";
import type { SimSample } from "./simulator.ts";

const f3 = (x: number) => (Number.isFinite(x) ? x.toFixed(3) : "n/a");
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "n/a");
/** A ratio for text: two decimals and ×, or n/a where a system completed nothing. */
export const ratioText = (x: number) => (Number.isFinite(x) ? `${x.toFixed(2)}×` : "n/a");
/** Seconds as milliseconds with one decimal. */
const ms1 = (x: number) => (Number.isFinite(x) ? (x * 1000).toFixed(1) : "n/a");

function row(name: string, s: SystemSummary): string[] {
  return [
    name, f3(s.ttft.mean), f3(s.ttft.p50), f3(s.ttft.p95), f3(s.ttft.p99), ms1(s.itl.mean), ms1(s.itl.p95),
    f2(s.e2e.mean), f2(s.e2e.p95), f2(s.goodput), f2(s.throughput), f3(s.kv_hit_rate), `${s.completed}/${s.offered}`,
    (100 * s.completed_fraction).toFixed(1) + "%", Math.round(s.gpu_seconds / 3600).toString(),
  ];
}

const HEAD = ["system", "TTFT mean", "p50", "p95", "p99", "ITL ms", "ITL p95", "E2E mean", "E2E p95", "goodput/s", "req/s", "KV hit", "completed", "done", "GPU-h"];

/** All rows of a comparison: each baseline variant, then ours, then any ablations of ours. */
export function tableRows(c: Comparison): string[][] {
  const rows = Object.entries(c.baseline_variants).map(([k, s]) => row(k + (k === c.systems.baseline.variant ? " *" : ""), s));
  rows.push(row("evolving (ours)", c.systems.evolving));
  for (const [k, s] of Object.entries(c.ablations ?? {})) rows.push(row(`${k} (ablation)`, s));
  return rows;
}

/** Fixed-width text table for the terminal. */
export function textTable(c: Comparison): string {
  const rows = [HEAD, ...tableRows(c)];
  const w = HEAD.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const line = (r: string[]) => r.map((x, i) => (i === 0 ? x.padEnd(w[i]) : x.padStart(w[i]))).join("  ");
  const head = `${c.workload} · ${c.model} on ${c.gpus}× ${c.hardware} (${c.gpus_per_worker} GPUs/worker) · SLO TTFT ≤ ${c.slo.ttft_s} s, ITL ≤ ${c.slo.itl_s * 1000} ms`;
  const ratios = `ratios (baseline ${c.systems.baseline.variant} ÷ ours): p95 TTFT ${ratioText(c.ratios.p95_ttft)}, mean E2E ${ratioText(c.ratios.mean_e2e)}; goodput ours ÷ baseline ${ratioText(c.ratios.goodput)}`;
  return [head, line(HEAD), ...rows.slice(1).map(line), ratios, "(* = baseline variant reported: highest goodput)"].join("\n");
}

/** Markdown table of a comparison. */
export function markdownTable(c: Comparison): string {
  const rows = tableRows(c);
  return [`| ${HEAD.join(" | ")} |`, `|${HEAD.map(() => "---").join("|")}|`, ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n");
}

/** Ten distinguishable colours (Tableau 10): a report plots up to seven systems, two lines each at most. */
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

/** Line styles of a chart: one system's several lines share a colour and differ in dash. */
const DASHES = { solid: "", dashed: ' stroke-dasharray="6,3"', dotted: ' stroke-dasharray="2,2"' } as const;

/** One line of a chart. */
interface Series {
  name: string;
  points: [number, number][];
  /** Index into the palette (default: the series' own index). */
  color?: number;
  dash?: keyof typeof DASHES;
}

/** A tick label: whole numbers from 10 up, two significant digits below. */
function tickLabel(v: number): string {
  return Math.abs(v) >= 10 ? Math.round(v).toString() : Number(v.toPrecision(2)).toString();
}

/** The colour of series `i` (its own palette index unless it names one). */
function seriesColor(s: Series, i: number): string {
  return COLORS[(s.color ?? i) % COLORS.length];
}

/**
 * A round step for an axis spanning `range` with about `target` intervals: 1, 2 or 5 times a power
 * of ten, so ticks read 0, 2, 4, 6, 8 rather than quarters of the range (8.4 workers).
 */
export function niceStep(range: number, target = 4): number {
  if (!(range > 0) || !Number.isFinite(range)) return 1;
  const raw = range / target;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

/** Multiples of `step` within [lo, hi] (a hair of slack for rounding). */
function multiples(lo: number, hi: number, step: number): number[] {
  const out: number[] = [];
  const eps = step * 1e-9;
  for (let k = Math.ceil((lo - eps) / step); k * step <= hi + eps; k++) out.push(Number((k * step).toPrecision(12)));
  return out;
}

/**
 * Ticks of a log axis spanning 10^lo to 10^hi: the powers of ten, with 2× and 5× between them when
 * the axis spans fewer than three decades.
 */
function logTicks(lo: number, hi: number): number[] {
  const mults = hi - lo < 3 ? [1, 2, 5] : [1];
  const out: number[] = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of mults) {
      const v = Number((m * Math.pow(10, e)).toPrecision(12));
      const l = Math.log10(v);
      if (l >= lo - 1e-9 && l <= hi + 1e-9) out.push(v);
    }
  }
  return out;
}

/**
 * A minimal line chart. Without `yMax` the y axis runs from 0 to the first round tick at or above
 * the data; ticks on both axes sit at round numbers. The legend sits in a margin right of the plot
 * (a swatch in each series' colour and dash, then its name), so it never hides a line.
 */
export function lineChart(title: string, xLabel: string, yLabel: string, series: Series[], yMax?: number, logX = false): string {
  const W = 860, H = 360, L = 60, R = 240, T = 30, B = 45;
  // Only drawn points set the ranges (a hit rate is undefined, NaN, once no prompts arrive).
  const drawn = series.flatMap((s) => s.points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1])));
  const xs = drawn.map((p) => p[0]);
  const ys = drawn.map((p) => p[1]);
  const tx = (x: number) => (logX ? Math.log10(Math.max(x, 1e-3)) : x);
  const x0 = xs.length ? Math.min(...xs.map(tx)) : 0, x1 = xs.length ? Math.max(...xs.map(tx)) : 1;
  const yTop = yMax ?? Math.max(1e-9, ...ys) * 1.05;
  const yStep = niceStep(yTop);
  const y1 = yMax ?? Math.ceil(yTop / yStep - 1e-9) * yStep;
  const sx = (x: number) => L + ((tx(x) - x0) / Math.max(1e-9, x1 - x0)) * (W - L - R);
  const sy = (y: number) => H - B - (Math.min(y, y1) / y1) * (H - T - B);
  const paths = series.map((s, i) => {
    const pts = s.points.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]));
    const d = pts.map((p, j) => `${j === 0 ? "M" : "L"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    const color = seriesColor(s, i);
    const ly = T + 16 * i + 8;
    return `<path d="${d}" fill="none" stroke="${color}" stroke-width="1.8"${DASHES[s.dash ?? "solid"]}/>` +
      `<line x1="${W - R + 14}" y1="${ly}" x2="${W - R + 40}" y2="${ly}" stroke="${color}" stroke-width="1.8"${DASHES[s.dash ?? "solid"]}/>` +
      `<text x="${W - R + 46}" y="${ly + 4}" fill="${color}" font-size="11">${s.name}</text>`;
  });
  const xTicks = logX ? logTicks(x0, x1) : multiples(x0, x1, niceStep(x1 - x0, 5));
  const ticks = [
    ...multiples(0, y1, yStep).map((y) =>
      `<line x1="${L - 3}" y1="${sy(y).toFixed(1)}" x2="${L}" y2="${sy(y).toFixed(1)}" stroke="#333"/>` +
      `<text x="${L - 6}" y="${(sy(y) + 4).toFixed(1)}" font-size="10" text-anchor="end">${tickLabel(y)}</text>`
    ),
    ...xTicks.map((x) =>
      `<line x1="${sx(x).toFixed(1)}" y1="${H - B}" x2="${sx(x).toFixed(1)}" y2="${H - B + 3}" stroke="#333"/>` +
      `<text x="${sx(x).toFixed(1)}" y="${H - B + 14}" font-size="10" text-anchor="middle">${tickLabel(x)}</text>`
    ),
  ];
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">` +
    `<rect width="${W}" height="${H}" fill="white"/><text x="${W / 2}" y="18" text-anchor="middle" font-size="13">${title}</text>` +
    `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#333"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#333"/>` +
    ticks.join("") + paths.join("") +
    `<text x="${W / 2}" y="${H - 8}" text-anchor="middle" font-size="11">${xLabel}</text>` +
    `<text x="14" y="${H / 2}" transform="rotate(-90 14 ${H / 2})" text-anchor="middle" font-size="11">${yLabel}</text></svg>`;
}

/** TTFT CDF per system (log-scaled time axis). */
export function ttftCdf(c: Pick<Comparison, "workload" | "ttft_samples">): string {
  const series = Object.entries(c.ttft_samples).map(([name, v]) => {
    const s = v.slice().sort((a, b) => a - b);
    const step = Math.max(1, Math.floor(s.length / 400));
    const pts: [number, number][] = [];
    for (let i = 0; i < s.length; i += step) pts.push([s[i], (i + 1) / s.length]);
    if (s.length > 0) pts.push([s[s.length - 1], 1]);
    return { name, points: pts };
  });
  return lineChart(`TTFT CDF — ${c.workload}`, "TTFT (s, log scale)", "fraction of requests", series, 1, true);
}

/**
 * Workers in each role over time (prefill solid, decode dashed, mixed dotted; one colour per system)
 * for every system with roles: the SLA- and load-planned baselines and ours. The aggregated baselines
 * have none (every worker is mixed, always). A role no worker of a system held is left out, so a
 * system that kept every worker mixed shows one line.
 */
export function splitOverTime(c: Pick<Comparison, "workload" | "series">): string {
  const series: Series[] = [];
  const roles = [["prefill", "prefillWorkers", "solid"], ["decode", "decodeWorkers", "dashed"], ["mixed", "mixedWorkers", "dotted"]] as const;
  Object.keys(c.series).filter((name) => !name.startsWith("dynamo-agg")).forEach((name, color) => {
    const s: SimSample[] = c.series[name];
    for (const [role, key, dash] of roles) {
      if (s.every((x) => x[key] === 0)) continue;
      series.push({ name: `${name} ${role}`, points: s.map((x) => [x.t, x[key]]), color, dash });
    }
  });
  return lineChart(`Workers by role over time — ${c.workload}`, "time (s)", "workers", series);
}

/** KV prefix hit rate over time per system. */
export function hitRateOverTime(c: Pick<Comparison, "workload" | "series">): string {
  const series = Object.entries(c.series).map(([name, s]) => ({ name, points: s.map((x) => [x.t, x.kvHitRate] as [number, number]) }));
  return lineChart(`KV hit rate over time — ${c.workload}`, "time (s)", "hit rate (cached / prompt tokens)", series, 1);
}

/**
 * One CLI invocation's work: build the workload (scenario or trace), run the comparison at one load
 * or a sweep, and produce the JSON object and text tables. File writing stays in the CLI.
 */
import { type Comparison, compare, type CompareOptions } from "./compare.ts";
import type { SimOptions } from "./cli-options.ts";
import { calibrateHardware, parseStepLog } from "./calibration.ts";
import { gpusPerWorker, HARDWARE, MODELS } from "./profiles.ts";
import { markdownTable, ratioText, textTable } from "./report.ts";
import { buildScenario } from "./scenarios.ts";
import { parseAzure, parseMooncake } from "./traces.ts";
import type { Workload } from "./workload-types.ts";

/** Builds the workload for `o` at `load` (trace text passed in by the caller). */
export function workloadFor(o: SimOptions, load: number, traceText: string | null): Workload {
  if (o.trace !== null) {
    const w = o.format === "mooncake" ? parseMooncake(traceText ?? "", load, o.maxRequests) : parseAzure(traceText ?? "", load, o.maxRequests);
    return w;
  }
  return buildScenario(o.scenario!, { gpus: o.gpus, load, seed: o.seed, durationS: o.durationS, maxContext: MODELS[o.model].maxContext });
}

/** Runs one comparison; with a step log, on a cost model calibrated from it. */
export function runOnce(o: SimOptions, load: number, traceText: string | null, clock: () => number, stepLogText: string | null = null): Comparison {
  const w = workloadFor(o, load, traceText);
  const model = MODELS[o.model];
  let hw = HARDWARE[o.hw];
  let note: string | null = null;
  if (stepLogText !== null) {
    const gpw = gpusPerWorker(model, hw);
    const cal = calibrateHardware(model, hw, gpw, parseStepLog(stepLogText), o.kvReplicated ? gpw : 1);
    hw = cal.hw;
    note = `Cost model calibrated from ${cal.steps} measured steps: ${(100 * hw.flopEfficiency).toFixed(1)}% of peak FLOP/s, ` +
      `${(100 * hw.bandwidthEfficiency).toFixed(1)}% of HBM bandwidth, ${(1000 * hw.stepOverheadS).toFixed(2)} ms per step ` +
      `, ${(1000 * (hw.mixedStepOverheadS ?? 0)).toFixed(2)} ms more per mixed prefill+decode step ` +
      `(RMS error ${(1000 * cal.rmsBeforeS).toFixed(2)} ms assumed → ${(1000 * cal.rmsAfterS).toFixed(2)} ms fitted)`;
  }
  if (o.mixedStepOverheadMs !== null) {
    hw = { ...hw, mixedStepOverheadS: o.mixedStepOverheadMs / 1000 };
    const m = `Mixed prefill+decode steps cost ${o.mixedStepOverheadMs} ms more than the roofline (--mixed-step-overhead-ms)`;
    note = note === null ? m : `${note}; ${m}`;
  }
  const opts: CompareOptions = {
    model, hw, gpus: o.gpus, startupS: o.startupS,
    baselines: (o.baselines ?? undefined) as CompareOptions["baselines"], ablation: o.ablation, remoteStoreBytes: o.remoteStoreTb * 1e12, kvReplicated: o.kvReplicated,
    ...(o.itlAim !== null ? { itlAim: o.itlAim } : {}),
  };
  const c = compare(w, opts, clock);
  if (note !== null) c.assumptions = [note, ...c.assumptions];
  return c;
}

/** The JSON object the CLI prints: the report without per-request samples and time series. */
export function jsonView(c: Comparison, load: number): Record<string, unknown> {
  const { series: _s, ttft_samples: _t, ...rest } = c;
  return { load, ...rest };
}

/** Text printed for one comparison. */
export function textView(c: Comparison, load: number): string {
  return `load ${load}\n${textTable(c)}`;
}

/** Markdown section for one comparison (used by the report). */
export function markdownView(c: Comparison, load: number, command: string): string {
  const params = Object.entries(c.params).map(([k, v]) => `- **${k}**: ${Object.entries(v).map(([a, b]) => `${a}=${b}`).join(", ")}`);
  return [
    `## ${c.workload} at load ${load}`, "", "```", command, "```", "", markdownTable(c), "",
    `Ratios (baseline = ${c.systems.baseline.variant}): p95 TTFT ${ratioText(c.ratios.p95_ttft)}, mean E2E ${ratioText(c.ratios.mean_e2e)}, goodput ${ratioText(c.ratios.goodput)}.`,
    "", "Parameters:", ...params, "", "Assumptions:", ...c.assumptions.map((a) => `- ${a}`), "",
    "Wall time: " + Object.entries(c.perf).map(([k, p]) => `${k} ${p.wall_s.toFixed(1)} s (${Math.round(p.events_per_s)} events/s)`).join(", "),
  ].join("\n");
}

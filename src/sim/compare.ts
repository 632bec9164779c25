/**
 * Runs the baseline variants and ours on the same workload and seed, and builds the report object:
 * `systems.baseline` (the best baseline variant by goodput), `systems.evolving`, and `ratios`.
 */
import { decodeThroughput, type OfflineProfile, prefillThroughput } from "../../planner/profile.ts";
import { CostModel } from "./cost-model.ts";
import { type SystemSummary, summarize } from "./metrics.ts";
import { profileSweep } from "./profiler.ts";
import { gpusPerWorker, type HardwareProfile, type ModelProfile } from "./profiles.ts";
import { ClusterSim, type SimConfig, type SimSample } from "./simulator.ts";
import { baselineAgg, baselineAggShed, baselineAggTuned, baselineDisaggLoad, baselineDisaggSla, evolving, evolvingStatic, type SystemContext, type SystemSpec } from "./systems.ts";
import type { Workload } from "./workload-types.ts";

/** Options of one comparison. */
export interface CompareOptions {
  model: ModelProfile;
  hw: HardwareProfile;
  gpus: number;
  startupS?: number;
  drainS?: number;
  maxQueueS?: number;
  /** Which baseline variants to run (default all). */
  baselines?: ("dynamo-disagg-sla" | "dynamo-disagg-load" | "dynamo-agg" | "dynamo-agg-tuned" | "dynamo-agg-shed")[];
  /** Tensor-parallel attention: every GPU of a worker holds and reads the whole (MLA latent) KV. */
  kvReplicated?: boolean;
  /** Bytes of a shared remote KV store below the host tiers, for every system (default none). */
  remoteStoreBytes?: number;
  /** Also run ablations of ours (`evolving-static`: no role planner), reported apart from the baselines. */
  ablation?: boolean;
  /** Ours' ITL admission at this fixed fraction of the ITL target (default: the measured aim). */
  itlAim?: number;
}

/** One system's run, summarised. */
export interface SystemResult {
  summary: SystemSummary;
  samples: SimSample[];
  ttfts: number[];
  params: Record<string, string | number | boolean>;
  events: number;
  wallS: number;
}

/** The comparison report. */
export interface Comparison {
  workload: string;
  model: string;
  hardware: string;
  gpus: number;
  gpus_per_worker: number;
  slo: { ttft_s: number; itl_s: number };
  systems: { baseline: SystemSummary & { variant: string }; evolving: SystemSummary };
  baseline_variants: Record<string, SystemSummary>;
  /** Ablations of ours, when asked for (never a baseline). */
  ablations?: Record<string, SystemSummary>;
  ratios: { p95_ttft: number; mean_e2e: number; goodput: number };
  params: Record<string, Record<string, string | number | boolean>>;
  assumptions: string[];
  perf: Record<string, { events: number; wall_s: number; events_per_s: number }>;
  series: Record<string, SimSample[]>;
  ttft_samples: Record<string, number[]>;
}

const SLO = { ttftS: 1, itlS: 0.05 };

/** Mean ISL, new (not previously seen) prompt tokens, OSL and request rate a workload plans. */
export function plannedLoad(w: Workload): { rate: number; isl: number; fresh: number; osl: number } {
  let n = 0, isl = 0, fresh = 0, osl = 0;
  for (const s of w.sessions) {
    let stream = s.sharedTokens;
    for (const t of s.turns) {
      const prompt = t.fixedPromptTokens ?? stream + t.newTokens;
      fresh += t.fixedPromptTokens ?? t.newTokens + (stream === s.sharedTokens ? 0 : w.blockTokens / 2);
      stream = prompt + t.outputTokens - t.reasoningTokens;
      n++; isl += prompt; osl += t.outputTokens;
    }
  }
  const k = Math.max(1, n);
  return { rate: n / Math.max(1, w.durationS), isl: isl / k, fresh: fresh / k, osl: osl / k };
}

/**
 * The baseline's best static start: its own replica formulas at the planned mean load, with the
 * prompt tokens that actually need prefill (an operator who profiled the workload knows its cache
 * hit rate), scaled up to fill the whole worker budget.
 */
export function initialSplit(w: Workload, profile: OfflineProfile, workers: number): { prefill: number; decode: number } {
  const load = plannedLoad(w);
  const p = (load.rate * load.fresh) / prefillThroughput(profile, load.isl);
  const d = (load.rate * load.osl) / decodeThroughput(profile, load.isl + load.osl / 2, 0.05);
  const prefill = Math.min(workers - 1, Math.max(1, Math.round((workers * p) / Math.max(1e-9, p + d))));
  return { prefill, decode: workers - prefill };
}

/** The baseline variant reported: highest goodput, ties to the lower mean end-to-end latency. */
export function bestVariant(summaries: Record<string, { goodput: number; e2e: { mean: number } }>): string {
  return Object.keys(summaries).reduce((a, b) => {
    const x = summaries[a], y = summaries[b];
    return y.goodput > x.goodput || (y.goodput === x.goodput && y.e2e.mean < x.e2e.mean) ? b : a;
  });
}

/**
 * What every system of a comparison shares: the context its spec is built from (worker count, the
 * baseline's offline profile and starting split, SLO targets) and the simulator's configuration.
 */
export function simulationSetup(w: Workload, o: CompareOptions): { ctx: SystemContext; cfg: SimConfig } {
  const gpw = gpusPerWorker(o.model, o.hw);
  const workers = Math.floor(o.gpus / gpw);
  const kvReplication = o.kvReplicated ? gpw : 1;
  const profile = profileSweep(new CostModel(o.model, o.hw, gpw, kvReplication));
  const ctx: SystemContext = {
    workers, profile, initialSplit: initialSplit(w, profile, workers), ttftTargetS: 0.5, itlTargetS: 0.05, startupS: o.startupS ?? 60,
    ...(o.itlAim !== undefined ? { itlAim: o.itlAim } : {}),
  };
  const cfg: SimConfig = {
    model: o.model, hw: o.hw, gpus: o.gpus, gpusPerWorker: gpw, drainS: o.drainS ?? 300, maxQueueS: o.maxQueueS ?? 120,
    sampleS: Math.max(1, Math.min(10, w.durationS / 120)), slo: SLO, remoteStoreBytes: o.remoteStoreBytes ?? 0, kvReplication,
  };
  return { ctx, cfg };
}

/** Runs every system and compares. `clock` measures wall time (impure; injected by the CLI). */
export function compare(w: Workload, o: CompareOptions, clock: () => number): Comparison {
  const { ctx, cfg } = simulationSetup(w, o);
  const gpw = cfg.gpusPerWorker;
  const makers: Record<string, (c: SystemContext) => SystemSpec> = {
    "dynamo-disagg-sla": baselineDisaggSla, "dynamo-disagg-load": baselineDisaggLoad, "dynamo-agg": baselineAgg,
    "dynamo-agg-tuned": baselineAggTuned, "dynamo-agg-shed": baselineAggShed,
  };
  const results: Record<string, SystemResult> = {};
  const ours: Record<string, (c: SystemContext) => SystemSpec> = { evolving, "evolving-static": evolvingStatic };
  const names = [...(o.baselines ?? Object.keys(makers)), "evolving", ...(o.ablation ? ["evolving-static"] : [])];
  for (const name of names) {
    const spec = (ours[name] ?? makers[name])(ctx);
    const t0 = clock();
    const run = new ClusterSim(w, spec, cfg).run();
    const wallS = clock() - t0;
    results[name] = {
      summary: summarize(run.outcomes, w.durationS, SLO, run.gpuSeconds), samples: run.samples,
      ttfts: run.outcomes.filter((x) => x.rejected === null).map((x) => x.ttft), params: spec.params, events: run.events, wallS,
    };
  }
  const evo = results.evolving.summary;
  const variants = Object.keys(results).filter((k) => !(k in ours));
  // The baseline reported is its best variant: highest goodput, ties to lower mean end-to-end.
  const best = bestVariant(Object.fromEntries(variants.map((k) => [k, results[k].summary])));
  const base = results[best].summary;
  const out: Comparison = {
    workload: w.name, model: o.model.name, hardware: o.hw.name, gpus: o.gpus, gpus_per_worker: gpw,
    slo: { ttft_s: SLO.ttftS, itl_s: SLO.itlS },
    systems: { baseline: { ...base, variant: best }, evolving: evo },
    baseline_variants: Object.fromEntries(variants.map((k) => [k, results[k].summary])),
    ...(o.ablation ? { ablations: { "evolving-static": results["evolving-static"].summary } } : {}),
    ratios: { p95_ttft: base.ttft.p95 / evo.ttft.p95, mean_e2e: base.e2e.mean / evo.e2e.mean, goodput: evo.goodput / base.goodput },
    params: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, r.params])),
    assumptions: [
      ...((o.remoteStoreBytes ?? 0) > 0
        ? [`Shared remote KV store of ${((o.remoteStoreBytes ?? 0) / 1e12).toFixed(1)} TB below every host tier (all systems), fetched at the cross-rack link rate`]
        : []),
      ...(o.kvReplicated
        ? [`Tensor-parallel attention: each of a worker's ${gpw} GPUs holds and reads the whole MLA latent KV (KV capacity ÷ ${gpw}, KV traffic × ${gpw}), all systems`]
        : []),
      ...w.assumptions,
    ],
    perf: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, { events: r.events, wall_s: r.wallS, events_per_s: r.events / Math.max(1e-9, r.wallS) }])),
    series: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, r.samples])),
    ttft_samples: Object.fromEntries(Object.entries(results).map(([k, r]) => [k, r.ttfts])),
  };
  return out;
}

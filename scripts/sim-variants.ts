/**
 * Runs named variants of ours and of the tuned aggregated baseline on one scenario (Kimi-K2.6-like unless MODEL says,
 * 256 GB300 GPUs, seed 1) and prints one line per variant: how the design choices in docs/sim.md
 * were measured before they were adopted or dropped.
 *
 *   npx tsx scripts/sim-variants.ts SCENARIO LOAD DURATION_S VARIANT[,VARIANT...]
 *
 * A variant is a base, `ours`, `tuned` or `agg` (Dynamo aggregated as shipped), followed by any of these suffixes:
 *   -fcfs            prefill queue in arrival order (both bases default to short-first)
 *   -sfN / -sfNk     short-first with aging N (or N thousand) tokens per second waited
 *   -owX             the baseline router's overlap_weight X (Dynamo's default 1; the tuned variant's 64)
 *   -swX             ours' router stall weight X
 *   -mwX             ours' router memoryWaitS X (s per turn waiting for KV memory there)
 *   -ptX             ours' router pulls a session's prefix from its holder (peer transfer), memoryFullS X
 *   -ssX             ours' router charges a new session X s per live session homed on a worker (sessionSpreadS)
 *   -wop             ours' router never charges a new session's pulls (waiveOpeningPulls)
 *   -pmX             ours' router charges X s for pulling a prefix from a peer
 *   -adm / -noadm    ours' planner holds new sessions while turns wait for KV memory on many workers (or never)
 *   -admhX           as -adm, a new session held at most X s (default 60)
 *   -itlm / -itlX / -noitl  ours' planner lets in only the new sessions the decode pool takes within the ITL
 *                    target, aiming at the measured mean/P90 ratio of requests' ITL (or X × the target; both on by default), or lets all in
 *   -itlfit          as -itlm, the pool kept at the load maximising good requests/s on a fitted curve
 *                    (experiment, docs/results/variants/itl-admission.txt H, I and J)
 *   -itlmpP          as -itlm with percentile P (default 0.9)
 *   -itlmaxX         as -itlm, the measured aim at most X (and at least min(0.5, X))
 *   -itlnoag         as -itlm, the pool priced as its sessions are now (before the thirteenth session), not as they will be: today's
 *                    prefill and decode contexts, extra sequences decoding only
 *   -itllaX          as -itlm, rising contexts priced X s ahead along their trend (default 60; 0: held peaks only, before the fourteenth session)
 *   -itlnd           as -itlm, the pool priced at the sequences it holds only, not at recent arrivals' decode demand
 *   -itlmwX          as -itlm, a new session without room waits up to X s at the door (default 0: to the next tick)
 *   -busyX / -busyXpN  Dynamo's request rejection: turn requests away while every worker holds more than X of its KV
 *                    blocks for requests (or has more than N prompt tokens waiting for prefill)
 *   -demote / -nodemote  the holder's copy of a session that moved away goes first (or ranks as the session's)
 *   -nopt            ours without peer transfer
 *   -ph / -noph      ours' peer pulls also take the holder's host-memory blocks (or not)
 *   -pf / -pfX / -nopf  ours prefetches a tool-waiting session's host-tier KV 1 s (or X s) before its predicted return (or fetches on arrival)
 *   -static          ours without the role planner
 *   -noflip          ours' planner never flips roles (it still adapts step mixing and the local-prefill threshold)
 *   -nomix           ours' planner never separates prefill and decode steps (before session 5)
 *   -nosm            ours' planner prices steps from per-role rates, not the online step model (before session 4)
 *   -splitP          ours without the planner, P prefill workers and the rest decode workers
 * Environment: ROLES=1 also prints role flips, the role split over time and P95 TTFT / mean ITL by arrival time; SEED=N picks the workload seed (default 1); MODEL=glm-5.2 runs the GLM-5.2-like profile instead of Kimi-K2.6; HW=h200 runs on the H200 profile (PCIe host link) instead of GB300; MIXED_MS=X adds X ms to every mixed prefill+decode step; KV_REPLICATED=1 replicates
 * the MLA KV on every GPU of a worker (as --kv-replicated).
 */
import { simulationSetup } from "../src/sim/compare.ts";
import { summarize } from "../src/sim/metrics.ts";
import { HARDWARE, MODELS } from "../src/sim/profiles.ts";
import { buildScenario } from "../src/sim/scenarios.ts";
import { ClusterSim } from "../src/sim/simulator.ts";
import { baselineAgg, baselineAggTuned, evolving, oursPlannerOptions, type SystemSpec } from "../src/sim/systems.ts";
import { OnlinePlanner, type OnlinePlannerOptions } from "../planner/online-planner.ts";

const [scenario = "coding-256", loadArg = "1", durArg = "600", list = "tuned,ours"] = process.argv.slice(2);
const load = Number(loadArg), durationS = Number(durArg);
const baseHw = HARDWARE[process.env.HW ?? "gb300"];
if (baseHw === undefined) throw new Error(`HW must be one of ${Object.keys(HARDWARE).join(", ")}`);
const model = MODELS[process.env.MODEL ?? "kimi-k2.6"];
if (model === undefined) throw new Error(`MODEL must be one of ${Object.keys(MODELS).join(", ")}`);
const hw = { ...baseHw, mixedStepOverheadS: Number(process.env.MIXED_MS ?? 0) / 1000 };
const workload = buildScenario(scenario, { gpus: 256, load, seed: Number(process.env.SEED ?? 1), durationS, maxContext: model.maxContext });
const { ctx, cfg } = simulationSetup(workload, { model, hw, gpus: 256, kvReplicated: process.env.KV_REPLICATED === "1" });

/** Ours' planner with `o` over its defaults in the simulator (systems.ts, oursPlannerOptions). */
function oursPlanner(o: OnlinePlannerOptions): OnlinePlanner {
  return new OnlinePlanner({ ...oursPlannerOptions(ctx), ...o });
}

/** The system a variant name describes. */
function specOf(name: string): SystemSpec {
  const [base, ...mods] = name.split("-");
  if (base !== "ours" && base !== "tuned" && base !== "agg") throw new Error(`Variant "${name}" must start with ours, tuned or agg`);
  let s: SystemSpec = base === "ours" ? evolving(ctx) : base === "tuned" ? baselineAggTuned(ctx) : baselineAgg(ctx);
  for (const m of mods) {
    let x: RegExpExecArray | null;
    if (m === "fcfs") s = { ...s, prefillOrder: undefined };
    else if ((x = /^sf(\d+)(k?)$/.exec(m))) s = { ...s, prefillOrder: { order: "short-first", agingTokensPerS: Number(x[1]) * (x[2] ? 1000 : 1) } };
    else if ((x = /^ow([\d.]+)$/.exec(m))) s = { ...s, overlapWeight: Number(x[1]) };
    else if ((x = /^sw([\d.]+)$/.exec(m))) s = { ...s, stallWeight: Number(x[1]) };
    else if ((x = /^mw([\d.]+)$/.exec(m))) s = { ...s, memoryWaitS: Number(x[1]) };
    else if ((x = /^pt([\d.]+)$/.exec(m))) s = { ...s, peerTransfer: true, memoryFullS: Number(x[1]) };
    else if ((x = /^pm([\d.]+)$/.exec(m))) s = { ...s, peerMoveS: Number(x[1]) };
    else if ((x = /^ss([\d.]+)$/.exec(m))) s = { ...s, sessionSpreadS: Number(x[1]) };
    else if (m === "wop") s = { ...s, waiveOpeningPulls: true };
    else if (m === "adm") s = { ...s, planner: oursPlanner({ sessionAdmission: true }) };
    else if ((x = /^admh([\d.]+)$/.exec(m))) s = { ...s, planner: oursPlanner({ sessionAdmission: { maxHoldS: Number(x[1]) } }) };
    else if ((x = /^itl(m|[\d.]+)(?:p([\d.]+))?$/.exec(m))) s = { ...s, planner: oursPlanner({ itlAdmission: { aim: x[1] === "m" ? "measured" : Number(x[1]), percentile: x[2] === undefined ? 0.9 : Number(x[2]) } }) };
    else if ((x = /^itlmw([\d.]+)$/.exec(m))) s = { ...s, planner: oursPlanner({ itlAdmission: { maxWaitS: Number(x[1]) } }) };
    else if (m === "itlfit") s = { ...s, planner: oursPlanner({ itlAdmission: { aim: "fitted" } }) };
    else if ((x = /^itlmax([\d.]+)$/.exec(m))) s = { ...s, planner: oursPlanner({ itlAdmission: { maxAim: Number(x[1]), minAim: Math.min(0.5, Number(x[1])) } }) };
    else if (m === "itlnoag") s = { ...s, planner: oursPlanner({ itlAdmission: { agedPricing: false } }) };
    else if ((x = /^itlla([\d.]+)(?:f([\d.]+))?$/.exec(m))) s = { ...s, planner: oursPlanner({ itlAdmission: { lookaheadS: Number(x[1]), lookaheadFrom: x[2] === undefined ? 0.5 : Number(x[2]) } }) };
    else if (m === "itlnd") s = { ...s, planner: oursPlanner({ itlAdmission: { demand: false } }) };
    else if (m === "noitl") s = { ...s, planner: oursPlanner({ itlAdmission: false }) };
    else if ((x = /^busy([\d.]+)(?:p(\d+))?$/.exec(m))) s = { ...s, busyThresholds: { activeBlocks: Number(x[1]), prefillTokens: x[2] === undefined ? undefined : Number(x[2]) } };
    else if (m === "noadm") s = { ...s, planner: oursPlanner({ sessionAdmission: false }) };
    else if (m === "demote") s = { ...s, demoteMovedSessions: true };
    else if (m === "nodemote") s = { ...s, demoteMovedSessions: false };
    else if (m === "ph") s = { ...s, peerHostBlocks: true };
    else if (m === "noph") s = { ...s, peerHostBlocks: false };
    else if (m === "nopt") s = { ...s, peerTransfer: false, memoryFullS: 0 };
    else if ((x = /^pf([\d.]*)$/.exec(m))) s = { ...s, prefetchLeadS: x[1] === "" ? 1 : Number(x[1]) };
    else if (m === "nopf") s = { ...s, prefetchLeadS: undefined };
    else if (m === "static") s = { ...s, planner: null };
    else if (m === "noflip") s = { ...s, planner: oursPlanner({ cooldownS: Infinity }) };
    else if (m === "nomix") s = { ...s, planner: oursPlanner({ adaptStepMixing: false }) };
    else if (m === "nosm") s = { ...s, planner: oursPlanner({ stepModel: false }) };
    else if ((x = /^split(\d+)$/.exec(m))) s = { ...s, planner: null, initialPrefill: Number(x[1]), initialRole: Number(x[1]) === 0 ? "mixed" : "decode" };
    else throw new Error(`Unknown variant suffix "${m}" in "${name}"`);
  }
  return s;
}

console.log(`${scenario} load ${load}, ${durationS} s, ${hw.name}, mixed-step overhead ${hw.mixedStepOverheadS * 1000} ms, KV replication ${cfg.kvReplication}`);
for (const name of list.split(",")) {
  const sim = new ClusterSim(workload, specOf(name), cfg);
  const run = sim.run();
  const s = summarize(run.outcomes, durationS, cfg.slo, run.gpuSeconds);
  console.log(
    `${name.padEnd(16)} ttft p50 ${s.ttft.p50.toFixed(3)} p95 ${s.ttft.p95.toFixed(3)} p99 ${s.ttft.p99.toFixed(3)}` +
      ` · e2e ${s.e2e.mean.toFixed(2)} · itl ${(1000 * s.itl.mean).toFixed(1)} ms · goodput ${s.goodput.toFixed(2)}/s` +
      ` · done ${(100 * s.completed_fraction).toFixed(1)}% · hit ${s.kv_hit_rate.toFixed(3)} · peer transfers ${sim.peerTransfers} (${sim.peerHostBlocks} blocks from host) · sessions held ${sim.sessionsHeld} · prefetched blocks ${sim.prefetchedBlocks}` +
      ` · host waits ${sim.hostWaits} (${sim.hostWaitS.toFixed(1)} s)`,
  );
  const p = sim.prefetchStats;
  if (p.looks > 0) {
    console.log(`${"".padEnd(16)} prefetch looks ${p.looks}: session back first ${p.returnedFirst}, nothing on host ${p.nothingOnHost}, put off ${p.putOff}, no room ${p.noRoom}, partial ${p.partial}, whole ${p.whole}`);
  }
  if (process.env.ROLES === "1") {
    // Role flips and step-mixing switches, and the prefill/decode/mixed workers every tenth of the run.
    const every = Math.max(1, Math.floor(run.samples.length / 10));
    const split = run.samples.filter((_, i) => i % every === 0).map((x) => `${x.t.toFixed(0)}s ${x.prefillWorkers}/${x.decodeWorkers}/${x.mixedWorkers}`);
    console.log(`${"".padEnd(16)} flips ${sim.roleFlips}, step-mixing switches ${sim.mixingChanges}; prefill/decode/mixed: ${split.join(", ")}`);
    // P95 TTFT and mean ITL of the requests that arrived in each tenth of the run.
    const span = durationS / 10, by: string[] = [];
    for (let k = 0; k < 10; k++) {
      const w = run.outcomes.filter((o) => o.rejected === null && o.arrival >= k * span && o.arrival < (k + 1) * span);
      const t = w.map((o) => o.ttft).sort((x, y) => x - y);
      by.push(`${(k * span).toFixed(0)}s ${(t[Math.floor(0.95 * (t.length - 1))] ?? NaN).toFixed(3)}/${(1000 * w.reduce((a, o) => a + o.itl, 0) / Math.max(1, w.length)).toFixed(0)}ms`);
    }
    console.log(`${"".padEnd(16)} P95 TTFT / mean ITL by arrival: ${by.join(", ")}`);
  }
}

/**
 * The simulator against the real server. Plays synthetic agent sessions against `serve --workers 2
 * --transport threads` (reference backend, the bundled stories260K) with a step log; fits the
 * simulator's cost model to that log; replays the same sessions in the simulator (start times, prompt
 * and output token counts, tool gaps as the real run saw them) with the same control plane (online
 * planner, session router, agent-aware KV) and the engines' limits; prints both side by side.
 *
 *   npx tsx scripts/sim-validate.ts [--sessions 24] [--turns 4] [--session-interval-ms 1000]
 *       [--tool-gap-ms 500] [--seed 1] [--runs 1] [--port 8151] [--out tmp/sim-validate]
 *       [--calibrate-from STEPLOG]   (fit to another run's log: an out-of-sample check)
 *       [--replay DIR]               (no server: replay a saved run's requests.json under this setup, fitted to its steps.jsonl)
 *       [--roles prefill,decode] [--planner online|none] [--local-prefill-tokens N]
 *                                    (prefill/decode split: the simulator starts the same roles)
 *       [--mixed-step-overhead-ms N] (the server's mixed steps N ms dearer; the simulator fits it from the log)
 *       [--max-batch-tokens 8192]    (a step's token budget, on the server and in the simulator)
 *       [--step-mixing auto|mixed|split] (auto, the default with the planner: it switches it; mixed or split: kept, both sides)
 *
 * The load generator, the server's main thread and its two worker threads share this machine's
 * cores, so a run is one noisy sample: repeat it and quote medians.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { type BenchOptions, parseBenchArgs } from "./bench-serve/args.ts";
import type { RequestResult } from "./bench-serve/client.ts";
import { runSessions } from "./bench-serve/driver.ts";
import { type Session, syntheticSessions } from "./bench-serve/workload.ts";
import { OnlinePlanner } from "../planner/online-planner.ts";
import { loadModel } from "../src/model/load.ts";
import { modelChatRenderer } from "../src/serve/chat-template.ts";
import { calibrateHardware, type MeasuredStep, parseStepLog } from "../src/sim/calibration.ts";
import { CostModel } from "../src/sim/cost-model.ts";
import { simulationSetup } from "../src/sim/compare.ts";
import { percentile } from "../src/sim/metrics.ts";
import { CPU_REFERENCE, STORIES_260K } from "../src/sim/profiles.ts";
import type { RequestOutcome } from "../src/sim/request.ts";
import { ClusterSim, type SimChange } from "../src/sim/simulator.ts";
import type { PlannerLogRecord } from "../src/serve/step-log.ts";
import type { Role } from "../planner/types.ts";
import { evolving } from "../src/sim/systems.ts";
import type { SessionPlan, Workload } from "../src/sim/workload-types.ts";

const WORKERS = 2;
const ENGINE = { maxNumSeqs: 512, kvBlocks: 8192, blockTokens: 16 };

function flag(argv: string[], name: string, dflt: string): string {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
}

/** How the cluster is set up, on the server and in the simulator alike. */
interface ClusterSetup {
  /** Initial roles: `prefill` workers first, then the rest in one role (the simulator's initial layout). */
  roles: { prefill: number; rest: "decode" | "mixed" };
  planner: "online" | "none";
  /** A fixed local-prefill threshold, or null for the planner's adaptive one. */
  localPrefillTokens: number | null;
  /** Milliseconds the server adds to each mixed step (0: none). */
  mixedStepOverheadMs: number;
  /** A step's token budget (every worker; the planner prices chunks of this size). */
  maxBatchTokens: number;
  /** "auto": the planner switches step mixing (from mixed); "mixed" or "split": kept as given. */
  stepMixing: "auto" | "mixed" | "split";
}

function setupArgs(c: ClusterSetup): string[] {
  return [
    "--roles", Array.from({ length: WORKERS }, (_, i) => (i < c.roles.prefill ? "prefill" : c.roles.rest)).join(","), "--planner", c.planner,
    ...(c.localPrefillTokens === null ? [] : ["--local-prefill-tokens", String(c.localPrefillTokens)]),
    ...(c.mixedStepOverheadMs > 0 ? ["--mixed-step-overhead-ms", String(c.mixedStepOverheadMs)] : []),
    ...(c.stepMixing !== "auto" ? ["--step-mixing", c.stepMixing] : []),
  ];
}

async function startServer(port: number, stepLog: string, plannerLog: string, setup: ClusterSetup): Promise<ChildProcess> {
  const args = ["--import", "tsx", "src/cli/serve.ts", "--port", String(port), "--backend", "reference", "--workers", String(WORKERS),
    "--transport", "threads", "--max-batch-tokens", String(setup.maxBatchTokens), "--max-num-seqs", String(ENGINE.maxNumSeqs),
    "--kv-blocks", String(ENGINE.kvBlocks), "--step-log", stepLog, "--planner-log", plannerLog, ...setupArgs(setup)];
  const child = spawn("node", args, { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  for (let i = 0; i < 150; i++) {
    if (child.exitCode !== null) throw new Error(`Server exited: ${err}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/v1/models`)).ok) return child;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  child.kill();
  throw new Error(`Server did not start in 30 s: ${err}`);
}

/** Tokens the first prompts of all sessions share (system prompt and the template before the user's text). */
async function sharedPrefixTokens(sessions: readonly Session[]): Promise<number> {
  const m = await loadModel("models/stories260K.gguf");
  const chat = modelChatRenderer(m);
  const first = sessions.slice(0, 2).map((s) => {
    const r = chat.render([{ role: "system", content: s.system ?? "" }, { role: "user", content: s.turns[0].text }]);
    return m.tokenizer.encode(r.text, { addBos: m.config.addBos && !r.startsWithBos });
  });
  let n = 0;
  while (n < first[0].length && n < first[1].length && first[0][n] === first[1][n]) n++;
  return n;
}

/** The real run's sessions as simulator plans: observed starts, token counts and client-side gaps. */
function workloadOf(results: readonly RequestResult[], shared: number): Workload {
  const bySession = new Map<string, RequestResult[]>();
  for (const r of results) {
    if (!r.ok) throw new Error(`A request failed in the real run (${r.error}); the replay needs every turn`);
    const list = bySession.get(r.session!) ?? [];
    list.push(r);
    bySession.set(r.session!, list);
  }
  const t0 = Math.min(...results.map((r) => r.sendMs));
  const sharedFull = Math.floor(shared / ENGINE.blockTokens);
  const sessions: SessionPlan[] = [...bySession.values()].map((rs, idx): SessionPlan => {
    rs.sort((a, b) => a.turn! - b.turn!);
    return {
      idx, id: rs[0].session!, kind: "coding", start: (rs[0].sendMs - t0) / 1000,
      sharedChunks: Array.from({ length: sharedFull }, (_, c) => c), sharedTokens: shared, chunkBase: (idx + 1) * 100_000,
      // The bundled model has no chat template: messages are joined by newlines, so the next turn's
      // prompt puts a newline where the model went on straight from the user's text, and no block of
      // generated tokens is ever reused (seen in the real run's cached_tokens). The simulator's way to
      // say that a turn's output is not reused is to count it as reasoning the next turn drops; the
      // output then comes back as new prompt tokens.
      turns: rs.map((r, k) => ({
        newTokens: Math.max(0, k === 0 ? r.promptTokens - shared : r.promptTokens - rs[k - 1].promptTokens),
        outputTokens: r.completionTokens, reasoningTokens: r.completionTokens,
        tool: k + 1 < rs.length ? "tool" : null,
        gapS: k + 1 < rs.length ? Math.max(0, (rs[k + 1].sendMs - r.sendMs - r.e2eMs) / 1000) : 0,
      })),
    };
  }).sort((a, b) => a.start - b.start).map((s, idx) => ({ ...s, idx }));
  const end = Math.max(...results.map((r) => r.sendMs + r.e2eMs));
  return { name: "sim-validate", durationS: Math.ceil((end - t0) / 1000) + 5, sessions, blockTokens: ENGINE.blockTokens, assumptions: [] };
}

/** Sum of a Prometheus series over every label set. */
function sumOf(metrics: string, name: string): number {
  let sum = 0;
  for (const line of metrics.split("\n")) {
    const m = /^(\S+?)(?:\{[^}]*\})? (\S+)$/.exec(line);
    if (m?.[1] === name) sum += Number(m[2]);
  }
  return sum;
}

/** Mean of a Prometheus histogram (every label set summed). */
function meanOf(metrics: string, name: string): number {
  return sumOf(metrics, `${name}_sum`) / sumOf(metrics, `${name}_count`);
}

/** Measured over predicted time, summed over prefill-carrying steps and over decode-only steps. */
function fitByKind(steps: readonly MeasuredStep[], cost: CostModel): string {
  const ratio = (xs: readonly MeasuredStep[]) => xs.reduce((a, s) => a + s.seconds, 0) / xs.reduce((a, s) => a + cost.stepTime(s), 0);
  const pre = steps.filter((s) => s.prefillTokens > 0), dec = steps.filter((s) => s.prefillTokens === 0);
  return `measured ÷ fitted: ${ratio(pre).toFixed(2)} over ${pre.length} prefill-carrying steps, ${ratio(dec).toFixed(2)} over ${dec.length} decode-only steps`;
}

interface Row { ttft: number[]; e2e: number[]; itl: number[]; prompt: number; cached: number; n: number }

function realRow(results: readonly RequestResult[]): Row {
  return {
    ttft: results.map((r) => r.ttftMs / 1000), e2e: results.map((r) => r.e2eMs / 1000),
    itl: results.filter((r) => r.completionTokens > 1).map((r) => (r.e2eMs - r.ttftMs) / 1000 / (r.completionTokens - 1)),
    prompt: results.reduce((a, r) => a + r.promptTokens, 0), cached: results.reduce((a, r) => a + r.cachedTokens, 0), n: results.length,
  };
}

function simRow(outcomes: readonly RequestOutcome[]): Row {
  const ok = outcomes.filter((o) => o.rejected === null);
  return {
    ttft: ok.map((o) => o.ttft), e2e: ok.map((o) => o.e2e), itl: ok.filter((o) => o.output > 1).map((o) => o.itl),
    prompt: ok.reduce((a, o) => a + o.prompt, 0), cached: ok.reduce((a, o) => a + o.cached, 0), n: ok.length,
  };
}

/** Per-row figures: requests, TTFT mean/P50/P95, E2E mean/P95, ITL mean (ms), prefix hit (%). */
function figures(r: Row): number[] {
  const stat = (v: number[], p: number | "mean") => {
    const s = v.slice().sort((a, b) => a - b);
    return 1000 * (p === "mean" ? s.reduce((a, b) => a + b, 0) / s.length : percentile(s, p));
  };
  return [r.n, stat(r.ttft, "mean"), stat(r.ttft, 50), stat(r.ttft, 95), stat(r.e2e, "mean"), stat(r.e2e, 95), stat(r.itl, "mean"), (100 * r.cached) / Math.max(1, r.prompt)];
}

const fmt = (f: number[]) => f.map((x, i) => (i === 0 ? String(x) : i === 7 ? `${x.toFixed(1)}%` : x.toFixed(1)));

/** One real run and its replay in the simulator. */
async function oneRun(
  bench: BenchOptions, sessions: readonly Session[], shared: number, out: string, port: number, calibrateFrom: string | null, setup: ClusterSetup,
): Promise<{ real: number[]; sim: number[]; engine: number[]; note: string }> {
  const stepLog = `${out}/steps.jsonl`, plannerLog = `${out}/planner.jsonl`;
  const server = await startServer(port, stepLog, plannerLog, setup);
  let counts = { handoffs: 0, moves: 0, flips: 0, mixing: 0 };
  let results: RequestResult[];
  let engine: number[] = [];
  try {
    results = (await runSessions(sessions, bench, "stories260K")).results;
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    engine = ["time_to_first_token", "e2e_request_latency", "inter_token_latency"].map((m) => 1000 * meanOf(metrics, `vllm:${m}_seconds`));
    counts = {
      handoffs: sumOf(metrics, "evolving:prefill_handoffs_total"), moves: sumOf(metrics, "evolving:prefix_moves_total"),
      flips: sumOf(metrics, "evolving:role_flips_total"), mixing: sumOf(metrics, "evolving:step_mixing_changes_total"),
    };
    await new Promise((r) => setTimeout(r, 1000)); // the step log is appended in the background
  } finally {
    server.kill();
  }
  writeFileSync(`${out}/requests.json`, JSON.stringify(results.map(({ text: _t, itlMs: _i, ...r }) => r)) + "\n");
  const replay = replayRun(results, shared, readFileSync(calibrateFrom ?? stepLog, "utf8"), setup, out);
  const note = `${replay.note}; real / simulator: ` +
    `prefill hand-offs ${counts.handoffs} / ${replay.sim.handoffs}, ` +
    `prefixes moved (pulled from a peer, or sent to the prefill worker first) ${counts.moves} / ${replay.sim.moves}, role flips ${counts.flips} / ${replay.sim.flips}, ` +
    `step-mixing switches ${counts.mixing} / ${replay.sim.mixing}` +
    (counts.flips + counts.mixing + replay.changes.length > 0
      ? ` (real: ${describeChanges(realChanges(readFileSync(plannerLog, "utf8"), results))}; simulator: ${describeChanges(replay.changes)})`
      : "");
  return { real: figures(realRow(results)), sim: replay.figures, engine, note };
}

/**
 * A real run's sessions replayed in the simulator under `setup`, the cost model fitted to `stepLog`.
 * With `--replay DIR` this runs alone on a saved run (its requests.json and steps.jsonl): the same
 * arrivals under another cluster setup or planner, in seconds instead of minutes.
 */
function replayRun(results: readonly RequestResult[], shared: number, stepLog: string, setup: ClusterSetup, out: string): {
  figures: number[]; note: string; changes: readonly SimChange[]; sim: { handoffs: number; moves: number; flips: number; mixing: number };
} {
  const w = workloadOf(results, shared);
  const steps = parseStepLog(stepLog);
  const cal = calibrateHardware(STORIES_260K, CPU_REFERENCE, 1, steps);
  const { ctx, cfg } = simulationSetup(w, { model: STORIES_260K, hw: cal.hw, gpus: WORKERS });
  // Ours as the real server runs it: the planner sized to the engines' limits (clusterPlanner()), no ITL admission.
  const fixed = setup.localPrefillTokens;
  const planner = setup.planner === "none" ? null : new OnlinePlanner({
    mixedChunkTokens: setup.maxBatchTokens, prefillChunkTokens: setup.maxBatchTokens, maxDecodeBatch: ENGINE.maxNumSeqs,
    initialSplitSteps: setup.stepMixing === "split", adaptStepMixing: setup.stepMixing === "auto",
    ...(fixed === null ? { minLocalPrefill: Math.min(256, setup.maxBatchTokens), initialLocalPrefill: Math.min(512, setup.maxBatchTokens) } : { minLocalPrefill: fixed, maxLocalPrefill: fixed, initialLocalPrefill: fixed }),
  });
  const prefill = setup.roles.prefill;
  const sim = new ClusterSim(w, {
    ...evolving(ctx), planner, maxLocalPrefill: planner?.localPrefillThreshold() ?? fixed ?? 512,
    initialPrefill: prefill, initialDecode: WORKERS - prefill, initialRole: setup.roles.rest,
    stepTokens: { mixed: setup.maxBatchTokens, prefill: setup.maxBatchTokens }, stepMixing: setup.stepMixing === "split" ? "split" : "mixed",
  }, cfg);
  const run = sim.run();
  writeFileSync(`${out}/sim-requests.json`, JSON.stringify(run.outcomes) + "\n");
  const rejected = run.outcomes.filter((o) => o.rejected !== null).length;
  const note = `fit from ${cal.steps} steps: ${(100 * cal.hw.flopEfficiency).toFixed(2)}% of the nominal 100 GFLOP/s, ` +
    `${(1000 * cal.hw.stepOverheadS).toFixed(2)} ms per step, ${(1000 * (cal.hw.mixedStepOverheadS ?? 0)).toFixed(2)} ms more per mixed step, ` +
    `RMS error ${(1000 * cal.rmsAfterS).toFixed(2)} ms (median step ${(1000 * percentile(steps.map((s) => s.seconds).sort((a, b) => a - b), 50)).toFixed(2)} ms); ` +
    `${fitByKind(steps, new CostModel(STORIES_260K, cal.hw, 1))}; simulator rejected ${rejected}`;
  return {
    figures: figures(simRow(run.outcomes)), note, changes: sim.changes,
    sim: { handoffs: run.outcomes.filter((o) => o.remotePrefill).length, moves: sim.peerTransfers + sim.prefixesToPrefill, flips: sim.roleFlips, mixing: sim.mixingChanges },
  };
}

/**
 * The real run's role flips and step-mixing switches from its planner log, timed from the first
 * request sent (the load generator's `sendMs` are `performance.now()` of this process).
 */
function realChanges(log: string, results: readonly RequestResult[]): SimChange[] {
  const t0 = (performance.timeOrigin + Math.min(...results.map((r) => r.sendMs))) / 1000;
  return log.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as PlannerLogRecord)
    .filter((r) => r.changed && (r.kind === "flip" || r.kind === "step-mixing"))
    .map(({ unixS, changed: _c, from, ...action }) => ({ t: unixS - t0, action, ...(from !== undefined ? { from: from as Role } : {}) }));
}

/** "worker 0 prefill→mixed at 3.1 s, separate steps at 20.8 s" (worker ids "worker-0" and "w0" alike). */
function describeChanges(changes: readonly SimChange[]): string {
  if (changes.length === 0) return "none";
  return changes.map(({ t, action: a, from }) => {
    const what = a.kind === "flip" ? `worker ${a.workerId.replace(/^\D+/, "")} ${from ?? "?"}→${a.to}` : a.kind === "step-mixing" ? (a.split ? "separate steps" : "mixed steps") : a.kind;
    return `${what} at ${t.toFixed(1)} s`;
  }).join(", ");
}

/** `--roles` as the simulator lays workers out: prefill workers first, then the rest in one decoding role. */
function parseRoles(text: string): ClusterSetup["roles"] {
  const roles = text.split(",");
  const prefill = roles[0] === "prefill" ? 1 : 0;
  const rest = roles[prefill];
  if (roles.length !== WORKERS || (rest !== "decode" && rest !== "mixed") || roles.slice(prefill).some((r) => r !== rest)) {
    throw new Error(`--roles must name ${WORKERS} roles, at most one prefill worker first and the rest all decode or all mixed (the simulator's initial layout), got "${text}"`);
  }
  return { prefill, rest };
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const out = flag(argv, "out", "tmp/sim-validate");
  const port = Number(flag(argv, "port", "8151"));
  const runs = Number(flag(argv, "runs", "1"));
  // Out of sample: fit the cost model to another run's step log instead of this run's own.
  const calibrateFrom = argv.includes("--calibrate-from") ? flag(argv, "calibrate-from", "") : null;
  // Replay a saved run (its out folder) in the simulator only, under the setup given here.
  const replayFrom = argv.includes("--replay") ? flag(argv, "replay", "") : null;
  if (replayFrom === "") throw new Error("--replay needs the folder of a saved run (its requests.json and steps.jsonl)");
  const planner = flag(argv, "planner", "online");
  if (planner !== "online" && planner !== "none") throw new Error(`Unknown planner "${planner}"; choose online or none`);
  const lpt = argv.includes("--local-prefill-tokens") ? Number(flag(argv, "local-prefill-tokens", "")) : null;
  if (lpt !== null && !(Number.isInteger(lpt) && lpt >= 0)) throw new Error(`--local-prefill-tokens must be a whole number of tokens, got "${flag(argv, "local-prefill-tokens", "")}"`);
  const overhead = Number(flag(argv, "mixed-step-overhead-ms", "0"));
  if (!(overhead >= 0)) throw new Error(`--mixed-step-overhead-ms must be a non-negative number of milliseconds, got "${flag(argv, "mixed-step-overhead-ms", "")}"`);
  const maxBatchTokens = Number(flag(argv, "max-batch-tokens", "8192"));
  if (!(Number.isInteger(maxBatchTokens) && maxBatchTokens >= 1)) throw new Error(`--max-batch-tokens must be a positive whole number of tokens, got "${flag(argv, "max-batch-tokens", "")}"`);
  const stepMixing = flag(argv, "step-mixing", planner === "none" ? "mixed" : "auto");
  if (stepMixing !== "auto" && stepMixing !== "mixed" && stepMixing !== "split") throw new Error(`Unknown step mixing "${stepMixing}"; choose auto, mixed or split`);
  if (stepMixing === "auto" && planner === "none") throw new Error("--step-mixing auto needs the planner: with --planner none choose mixed or split");
  const setup: ClusterSetup = {
    roles: parseRoles(flag(argv, "roles", "mixed,mixed")), planner, localPrefillTokens: lpt, mixedStepOverheadMs: overhead, maxBatchTokens, stepMixing,
  };
  mkdirSync(out, { recursive: true });
  const bench = parseBenchArgs([
    "--url", `http://127.0.0.1:${port}`, "--trace", "synthetic", "--sessions", flag(argv, "sessions", "24"), "--turns", flag(argv, "turns", "4"),
    "--session-interval-ms", flag(argv, "session-interval-ms", "1000"), "--tool-gap-ms", flag(argv, "tool-gap-ms", "500"), "--seed", flag(argv, "seed", "1"),
    "--length-scale", "0.05", "--output-scale", "0.25", "--ignore-eos", "--max-requests", "100000", "--quiet",
  ]);
  const sessions = syntheticSessions(bench);
  const shared = await sharedPrefixTokens(sessions);
  console.log(`${sessions.length} sessions × ${bench.turns} turns, a session every ${bench.sessionIntervalMs} ms on average, tool gaps ${bench.toolGapMs} ms on average; ` +
    `cost model fitted to ${calibrateFrom ?? (replayFrom === null ? "each run's own step log" : `${replayFrom}/steps.jsonl`)}; ${replayFrom === null ? "server" : "simulated"} flags ${setupArgs(setup).join(" ")}\n`);
  console.log("| run | | requests | TTFT mean ms | TTFT P50 ms | TTFT P95 ms | E2E mean ms | E2E P95 ms | ITL mean ms | prefix hit | server-side TTFT / E2E / ITL mean ms |");
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  const ratios: number[][] = [];
  const notes: string[] = [];
  if (replayFrom !== null) {
    // The saved run's arrivals under this setup: no real server, so one simulator row beside the saved real one.
    const results = JSON.parse(readFileSync(`${replayFrom}/requests.json`, "utf8")) as RequestResult[];
    const r = replayRun(results, shared, readFileSync(calibrateFrom ?? `${replayFrom}/steps.jsonl`, "utf8"), setup, out);
    console.log(`| 1 | real server (saved, its own setup) | ${fmt(figures(realRow(results))).join(" | ")} | |`);
    console.log(`| 1 | simulator | ${fmt(r.figures).join(" | ")} | |`);
    console.log(`\n- replay of ${replayFrom}: ${r.note}; simulator: hand-offs ${r.sim.handoffs}, prefixes moved ${r.sim.moves}, ` +
      `role flips ${r.sim.flips}, step-mixing switches ${r.sim.mixing} (${describeChanges(r.changes)})`);
    return;
  }
  for (let k = 1; k <= runs; k++) {
    const r = await oneRun(bench, sessions, shared, out, port, calibrateFrom, setup);
    // The simulator has no HTTP, tokenizer or streaming: its latencies compare with the server's own histograms too.
    const simSide = [r.sim[1], r.sim[4], r.sim[6]];
    console.log(`| ${k} | real server | ${fmt(r.real).join(" | ")} | ${r.engine.map((x) => x.toFixed(1)).join(" / ")} |`);
    console.log(`| ${k} | simulator | ${fmt(r.sim).join(" | ")} | ${simSide.map((x) => x.toFixed(1)).join(" / ")} |`);
    ratios.push([...r.sim.map((x, i) => x / r.real[i]), ...simSide.map((x, i) => x / r.engine[i])]);
    notes.push(`- run ${k}: ${r.note}`);
  }
  const med = (i: number) => {
    const v = ratios.map((r) => r[i]).sort((a, b) => a - b);
    return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  };
  const x = (i: number) => `${med(i).toFixed(2)}×`;
  console.log(`| median | simulator ÷ real | ${[0, 1, 2, 3, 4, 5, 6, 7].map(x).join(" | ")} | ${[8, 9, 10].map(x).join(" / ")} |`);
  console.log(`\n${notes.join("\n")}`);
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.message : String(e));
  process.exit(1);
});

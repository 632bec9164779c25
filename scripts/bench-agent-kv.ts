/**
 * Agent-aware vs LRU KV retention in the real server. Starts `serve` (reference backend, a KV pool
 * too small for every session) with a scripted agent model (scripts/bench-agent-kv/agent-model.ts)
 * and plays a seeded workload through the `openai` client: agent sessions in tool loops, each answer
 * calling a fast tool (back in under a second) or a slow one (tens of seconds), and one-shot chats.
 * Each repeat runs `--kv-retention agent` and `lru` on fresh servers, same workload; medians over
 * repeats. Figures and workload: docs/results/bench-agent-kv.md.
 *
 *   npx tsx scripts/bench-agent-kv.ts --repeats 3 --json tmp/akv-result.json
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { distribution } from "./bench-serve/report.ts";
import { agentModel } from "./bench-agent-kv/agent-model.ts";
import { type AgentApi, runOnce, type RunResult, type TurnRecord } from "./bench-agent-kv/run.ts";
import { buildWorkload, WORKLOAD_DEFAULTS, type WorkloadOptions } from "./bench-agent-kv/workload.ts";
import type { KvRetention } from "../src/engine/engine-sessions.ts";
import { isPeerTransferMode, type PeerTransferMode } from "../src/cluster/cluster-router.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { writeFile } from "../src/runtime/fs.ts";

/** Command-line options. */
export interface AgentKvOptions {
  workload: WorkloadOptions;
  kvBlocks: number;
  /** Host-memory KV tier: compare agent retention with it ("agent+host") against agent retention without. */
  offloadBlocks?: number;
  /**
   * With `offloadBlocks`: instead, serve with this many worker threads and compare peer pulls that take
   * the holder's host-memory blocks too (`--peer-transfer host`) against device blocks only.
   */
  peerHostWorkers?: number;
  /**
   * Instead: serve with this many worker threads and compare sessions sent under a `prompt_cache_key`
   * against the same sessions naming none (the cluster and its workers infer them).
   */
  keylessWorkers?: number;
  /**
   * With a cluster (`keylessWorkers` or `peerHostWorkers`): serve with `--itl-admission-ms` this, so its
   * front door refuses new sessions (503) while the planner predicts the ITL above it; clients retry.
   */
  itlAdmissionMs?: number;
  /**
   * Instead: serve with this many worker threads and compare ours (agent retention, our router, the
   * online planner) against the Dynamo-like baseline (LRU, Dynamo's KV-aware router, the SLA planner
   * from an offline profile of the workers, measured once and kept for the later runs).
   */
  dynamoWorkers?: number;
  /** With `dynamoWorkers`: the SLA planner's interval (s; default 30, as the workload lasts about 3 minutes; Dynamo's is 180). */
  slaIntervalS: number;
  /**
   * With `dynamoWorkers`: the baseline's deployment, "sla" (disaggregated, the SLA planner, default),
   * "load" (disaggregated, its load-based mode: ±1 worker a pool every 5 s) or "agg" (aggregated: every
   * worker mixed, no planner; the simulator's dynamo-agg), or "ours" (ours again, under
   * `baselineRouterOptions`: an A/B of our router's tunables).
   */
  baseline: "sla" | "load" | "agg" | "ours";
  /** With `dynamoWorkers`: ours' `--router-options`, and with `--baseline ours` the second configuration's. */
  oursRouterOptions?: string;
  baselineRouterOptions?: string;
  /** With `dynamoWorkers`: ours' `--peer-transfer` (default: the server's, host). */
  oursPeerTransfer?: PeerTransferMode;
  /** Write each run's step log, and with workers its route and planner logs, into this folder. */
  logDir?: string;
  repeats: number;
  jsonPath?: string;
  /** The API the sessions speak (default chat). */
  api: AgentApi;
}

/** A flag the benchmark cannot use. */
export class AgentKvArgsError extends Error {
  override name = "AgentKvArgsError";
}

const USAGE = `bench-agent-kv: agent-aware vs LRU KV retention in the real server (scripted model, reference backend)
  --sessions N (agent sessions, ${WORKLOAD_DEFAULTS.sessions})  --turns N (tool calls each, ${WORKLOAD_DEFAULTS.turns})
  --chats N (one-shot chats, ${WORKLOAD_DEFAULTS.chats})  --seed N (${WORKLOAD_DEFAULTS.seed})  --kv-blocks N (256)
  --agent-start-s N (agents start uniformly in 0-N s, ${WORKLOAD_DEFAULTS.agentStartS}; 0: all at once)  --repeats N (3)  --json PATH
  --api chat|responses (chat): chat completions resending each conversation under a prompt_cache_key, or the
    Responses API continuing each by previous_response_id with no key (the server's session per conversation)
  --offload-blocks N: compare agent retention with a host-memory KV tier of N blocks against agent retention alone
  --peer-host-workers N (with --offload-blocks): N worker threads, each with that host tier; compare
    --peer-transfer host (pulls take the holder's host blocks too) against --peer-transfer device
  --keyless-workers N: N worker threads; compare chat sessions under a prompt_cache_key against the same
    sessions naming no session (told apart by the cluster's keyless routing and the workers' session inference)
  --itl-admission-ms N (with --keyless-workers or --peer-host-workers): serve with the planner's front door at an
    ITL target of N ms; a refused turn (503) is sent again after its Retry-After, its wait counted in its TTFT
  --dynamo-workers N: N worker threads; compare ours (agent retention, session router, online planner) against the
    Dynamo-like baseline (lru, --router kv-aware, --planner sla from a profile of the workers measured once)
  --sla-interval-s N (with --dynamo-workers): the SLA planner's interval (30; Dynamo's default is 180)
  --baseline sla|load|agg (with --dynamo-workers): the baseline disaggregated under the SLA planner (sla) or
    its load-based mode (load, every 5 s), or aggregated, every worker mixed and no planner (agg)
  --ours-peer-transfer off|device|host (with --dynamo-workers): ours' --peer-transfer (the server's default, host)
  --ours-router-options S (with --dynamo-workers): ours' --router-options (NAME=VALUE,...)
  --baseline ours --baseline-router-options S: instead of the Dynamo-like baseline, ours again under other router options (an A/B)
  --log-dir DIR: write each run's --step-log (and with workers --route-log, --planner-log) as DIR/NAME-rN.*.jsonl`;

const INT_FLAGS = { sessions: 1, turns: 0, chats: 0, seed: 0, "kv-blocks": 8, repeats: 1, "offload-blocks": 1, "peer-host-workers": 2, "keyless-workers": 2, "agent-start-s": 0, "itl-admission-ms": 1, "dynamo-workers": 2, "sla-interval-s": 1 } as const;

/** Parses argv; throws AgentKvArgsError quoting the bad flag or value. */
export function parseAgentKvArgs(argv: readonly string[]): AgentKvOptions {
  const o: AgentKvOptions = { workload: { ...WORKLOAD_DEFAULTS }, kvBlocks: 256, repeats: 3, api: "chat", slaIntervalS: 30, baseline: "sla" };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const name = flag.replace(/^--/, "");
    if (!flag.startsWith("--")) throw new AgentKvArgsError(`Unexpected argument "${flag}"\n${USAGE}`);
    const value = argv[++i];
    if (value === undefined) throw new AgentKvArgsError(`Flag "${flag}" needs a value`);
    if (name === "json") { o.jsonPath = value; continue; }
    if (name === "log-dir") { o.logDir = value; continue; }
    if (name === "ours-peer-transfer") {
      if (!isPeerTransferMode(value)) throw new AgentKvArgsError(`Flag "--ours-peer-transfer" takes off, device or host, got "${value}"`);
      o.oursPeerTransfer = value;
      continue;
    }
    if (name === "ours-router-options") { o.oursRouterOptions = value; continue; }
    if (name === "baseline-router-options") { o.baselineRouterOptions = value; continue; }
    if (name === "baseline") {
      if (value !== "sla" && value !== "load" && value !== "agg" && value !== "ours") throw new AgentKvArgsError(`Flag "--baseline" takes sla, load, agg or ours, got "${value}"`);
      o.baseline = value;
      continue;
    }
    if (name === "api") {
      if (value !== "chat" && value !== "responses") throw new AgentKvArgsError(`Flag "--api" takes chat or responses, got "${value}"`);
      o.api = value;
      continue;
    }
    if (!Object.hasOwn(INT_FLAGS, name)) throw new AgentKvArgsError(`Unknown flag "${flag}"\n${USAGE}`);
    const min = INT_FLAGS[name as keyof typeof INT_FLAGS];
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min) throw new AgentKvArgsError(`Flag "${flag}" needs an integer ≥ ${min}, got "${value}"`);
    if (name === "kv-blocks") o.kvBlocks = n;
    else if (name === "repeats") o.repeats = n;
    else if (name === "offload-blocks") o.offloadBlocks = n;
    else if (name === "peer-host-workers") o.peerHostWorkers = n;
    else if (name === "keyless-workers") o.keylessWorkers = n;
    else if (name === "agent-start-s") o.workload.agentStartS = n;
    else if (name === "itl-admission-ms") o.itlAdmissionMs = n;
    else if (name === "dynamo-workers") o.dynamoWorkers = n;
    else if (name === "sla-interval-s") o.slaIntervalS = n;
    else o.workload[name as "sessions" | "turns" | "chats" | "seed"] = n;
  }
  if (o.peerHostWorkers !== undefined && o.offloadBlocks === undefined) throw new AgentKvArgsError("Flag --peer-host-workers needs --offload-blocks");
  if (o.keylessWorkers !== undefined && (o.offloadBlocks !== undefined || o.api !== "chat")) throw new AgentKvArgsError("Flag --keyless-workers compares chat sessions: it takes neither --offload-blocks nor --api");
  if (o.dynamoWorkers !== undefined && (o.offloadBlocks !== undefined || o.keylessWorkers !== undefined || o.itlAdmissionMs !== undefined)) {
    throw new AgentKvArgsError("Flag --dynamo-workers compares ours against the baseline as each is configured: it takes none of --offload-blocks, --keyless-workers, --itl-admission-ms");
  }
  if (o.baselineRouterOptions !== undefined && o.baseline !== "ours") throw new AgentKvArgsError("Flag --baseline-router-options needs --baseline ours");
  for (const flag of ["--sla-interval-s", "--baseline", "--ours-peer-transfer", "--ours-router-options"]) if (o.dynamoWorkers === undefined && argv.includes(flag)) throw new AgentKvArgsError(`Flag ${flag} needs --dynamo-workers`);
  if (o.baseline !== "sla" && argv.includes("--sla-interval-s")) throw new AgentKvArgsError(`Flag --sla-interval-s is the SLA planner's throughput mode's; --baseline ${o.baseline} runs ${o.baseline === "load" ? "its load mode (5 s)" : o.baseline === "ours" ? "ours" : "no planner"}`);
  if (o.itlAdmissionMs !== undefined && o.keylessWorkers === undefined && o.peerHostWorkers === undefined) {
    throw new AgentKvArgsError("Flag --itl-admission-ms needs worker threads (--keyless-workers or --peer-host-workers): the front door is the cluster's");
  }
  return o;
}

/** One run's figures. */
export interface RunSummary {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  hitRate: number;
  fastReturns: number;
  fastHitRate: number;
  slowHitRate: number;
  /** Prompt tokens the session's previous turn had already computed, computed again. */
  recomputedTokens: number;
  fastRecomputedTokens: number;
  ttftMeanMs: number;
  ttftP50Ms: number;
  ttftP95Ms: number;
  fastTtftMeanMs: number;
  e2eMeanMs: number;
  /** 503 refusals (the front door) of sessions' first turns, and of later turns (which it should never refuse). */
  firstRefusals: number;
  laterRefusals: number;
  preemptions: number;
  wallS: number;
  serverCpuS: number;
}

const sum = (t: readonly TurnRecord[], f: (r: TurnRecord) => number) => t.reduce((a, r) => a + f(r), 0);
const hit = (t: readonly TurnRecord[]) => sum(t, (r) => r.cachedTokens) / sum(t, (r) => r.promptTokens);
const lost = (r: TurnRecord) => Math.max(0, r.reusableTokens - r.cachedTokens);

/** Summarises one run. */
export function summarizeRun(r: RunResult): RunSummary {
  const t = r.turns;
  const fast = t.filter((x) => x.label === "fast-return");
  const ttft = distribution(t.map((x) => x.ttftMs));
  return {
    requests: t.length, promptTokens: sum(t, (x) => x.promptTokens), cachedTokens: sum(t, (x) => x.cachedTokens), hitRate: hit(t),
    fastReturns: fast.length, fastHitRate: hit(fast), slowHitRate: hit(t.filter((x) => x.label === "slow-return")),
    recomputedTokens: sum(t, lost), fastRecomputedTokens: sum(fast, lost),
    ttftMeanMs: ttft.mean, ttftP50Ms: ttft.p50, ttftP95Ms: ttft.p95, fastTtftMeanMs: distribution(fast.map((x) => x.ttftMs)).mean,
    e2eMeanMs: distribution(t.map((x) => x.e2eMs)).mean,
    firstRefusals: sum(t.filter((x) => x.label === "first"), (x) => x.refusals), laterRefusals: sum(t.filter((x) => x.label !== "first"), (x) => x.refusals),
    preemptions: r.preemptions, wallS: r.wallS, serverCpuS: r.serverCpuS,
  };
}

/** Field-wise median of run summaries. */
export function medianSummary(runs: readonly RunSummary[]): RunSummary {
  const out = {} as Record<keyof RunSummary, number>;
  for (const k of Object.keys(runs[0]) as (keyof RunSummary)[]) out[k] = distribution(runs.map((r) => r[k])).p50;
  return out;
}

const ROWS: [keyof RunSummary, string, (v: number) => string][] = [
  ["requests", "requests", String], ["promptTokens", "prompt tokens", String], ["cachedTokens", "cached tokens", String],
  ["hitRate", "prefix hit rate", pct], ["fastReturns", "fast-tool returns", String], ["fastHitRate", "hit rate, fast-tool returns", pct],
  ["slowHitRate", "hit rate, slow-tool returns", pct], ["recomputedTokens", "recomputed prompt tokens", String],
  ["fastRecomputedTokens", "recomputed, fast-tool returns", String], ["ttftMeanMs", "TTFT mean (ms)", ms], ["ttftP50Ms", "TTFT P50 (ms)", ms],
  ["ttftP95Ms", "TTFT P95 (ms)", ms], ["fastTtftMeanMs", "TTFT mean, fast-tool returns (ms)", ms], ["e2eMeanMs", "E2E mean (ms)", ms],
  ["firstRefusals", "refusals (503) of first turns", String], ["laterRefusals", "refusals (503) of later turns", String], ["preemptions", "preemptions", String], ["serverCpuS", "server CPU time (s)", (v) => v.toFixed(1)],
  ["wallS", "run wall time (s)", (v) => v.toFixed(1)],
];
function pct(v: number): string { return `${(100 * v).toFixed(1)}%`; }
function ms(v: number): string { return v.toFixed(0); }

/** The Markdown table: medians per configuration and their ratio. */
export function reportTable(agent: RunSummary, lru: RunSummary, repeats: number, names: readonly [string, string] = ["agent", "lru"]): string {
  const lines = [`| median of ${repeats} | ${names[0]} | ${names[1]} | ${names[0]} / ${names[1]} |`, "|---|---|---|---|"];
  for (const [k, label, f] of ROWS) {
    const ratio = lru[k] === 0 ? "—" : (agent[k] / lru[k]).toFixed(2);
    lines.push(`| ${label} | ${f(agent[k])} | ${f(lru[k])} | ${ratio} |`);
  }
  return lines.join("\n");
}

/** Ours' serve flags beyond the worker threads: its peer-transfer mode and router options, where given. */
function oursArgs(peerTransfer: PeerTransferMode | undefined, routerOptions: string | undefined): string[] {
  return [...(peerTransfer ? ["--peer-transfer", peerTransfer] : []), ...(routerOptions ? ["--router-options", routerOptions] : [])];
}

/** Serve flags writing a run's step log, and with workers its route and planner logs, to `stem`.*.jsonl. */
function logArgs(stem: string, cluster: boolean): string[] {
  const step = ["--step-log", `${stem}.steps.jsonl`];
  return cluster ? [...step, "--route-log", `${stem}.routes.jsonl`, "--planner-log", `${stem}.planner.jsonl`] : step;
}

async function main(): Promise<void> {
  const argv = cliArgs();
  if (argv.includes("--help")) return void console.log(USAGE);
  const o = parseAgentKvArgs(argv);
  const plans = buildWorkload(o.workload);
  if (o.logDir !== undefined) mkdirSync(o.logDir, { recursive: true });
  const dir = mkdtempSync(`${tmpdir()}/bench-agent-kv-`);
  try {
    const modelPath = `${dir}/agent-scripted.gguf`;
    await agentModel(modelPath);
    // Two configurations on the same workload: the retention policies, or agent retention with and without a host tier.
    // Or, with worker threads, peer pulls that take the holder's host blocks too against device blocks only.
    const offload = ["--kv-offload-blocks", String(o.offloadBlocks)];
    const door = o.itlAdmissionMs === undefined ? [] : ["--itl-admission-ms", String(o.itlAdmissionMs)];
    const threads = ["--workers", String(o.peerHostWorkers), "--transport", "threads", ...offload, ...door];
    // Or, with worker threads, sessions under a key against the same sessions naming none.
    const keylessThreads = ["--workers", String(o.keylessWorkers), "--transport", "threads", ...door];
    // Or ours against the Dynamo-like baseline, each with its own retention, router and planner.
    const dynamoThreads = ["--workers", String(o.dynamoWorkers), "--transport", "threads"];
    const slaArgs = o.baseline === "agg"
      ? ["--router", "kv-aware", "--planner", "none"]
      : o.baseline === "load"
      ? ["--router", "kv-aware", "--planner", "load", "--sla-profile", `${dir}/sla-profile.json`]
      : ["--router", "kv-aware", "--planner", "sla", "--sla-interval-s", String(o.slaIntervalS), "--sla-profile", `${dir}/sla-profile.json`];
    const configs: { name: string; retention: KvRetention; args: string[]; api?: AgentApi }[] = o.dynamoWorkers !== undefined
      ? [
        { name: "ours", retention: "agent", args: [...dynamoThreads, ...oursArgs(o.oursPeerTransfer, o.oursRouterOptions)] },
        o.baseline === "ours"
          ? { name: "ours-b", retention: "agent", args: [...dynamoThreads, ...oursArgs(o.oursPeerTransfer, o.baselineRouterOptions)] }
          : { name: `dynamo-${o.baseline}`, retention: "lru", args: [...dynamoThreads, ...slaArgs] },
      ]
      : o.keylessWorkers !== undefined
      ? [{ name: "keyed", retention: "agent", args: keylessThreads }, { name: "keyless", retention: "agent", args: keylessThreads, api: "chat-keyless" }]
      : o.offloadBlocks === undefined
      ? [{ name: "agent", retention: "agent", args: [] }, { name: "lru", retention: "lru", args: [] }]
      : o.peerHostWorkers !== undefined
      ? [{ name: "host-pulls", retention: "agent", args: [...threads, "--peer-transfer", "host"] }, { name: "device-pulls", retention: "agent", args: [...threads, "--peer-transfer", "device"] }]
      : [{ name: "agent+host", retention: "agent", args: offload }, { name: "agent", retention: "agent", args: [] }];
    const runs: RunSummary[][] = [[], []];
    const turns: TurnRecord[][][] = [[], []];
    for (let r = 0; r < o.repeats; r++) {
      // Alternate which configuration runs first, so a slow spell of the shared machine hits both alike.
      for (const c of r % 2 === 0 ? [0, 1] : [1, 0]) {
        const { name, retention, args, api } = configs[c];
        const log = o.logDir === undefined ? [] : logArgs(`${o.logDir}/${name}-r${r + 1}`, args.includes("--workers"));
        const result = await runOnce(modelPath, o.kvBlocks, retention, plans, [...args, ...log], api ?? o.api);
        const s = summarizeRun(result);
        runs[c].push(s);
        turns[c].push(result.turns);
        console.error(`repeat ${r + 1} ${name}: hit ${pct(s.hitRate)}, fast-return hit ${pct(s.fastHitRate)}, recomputed ${s.recomputedTokens}, ` +
          `TTFT mean ${ms(s.ttftMeanMs)} ms, server CPU ${s.serverCpuS.toFixed(1)} s, ${s.wallS.toFixed(1)} s${result.rolesAtEnd ? `, roles at the end ${result.rolesAtEnd}` : ""}` +
          (result.rolesAtEnd.includes(",") ? `, ${JSON.stringify(result.clusterMoves)}` : ""));
      }
    }
    const a = medianSummary(runs[0]);
    const b = medianSummary(runs[1]);
    console.log(reportTable(a, b, o.repeats, [configs[0].name, configs[1].name]));
    if (o.jsonPath) {
      const byName = (x: unknown[]) => Object.fromEntries(configs.map((c, i) => [c.name, x[i]]));
      await writeFile(o.jsonPath, JSON.stringify({ options: o, medians: byName([a, b]), runs: byName(runs), turns: byName(turns) }) + "\n");
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof AgentKvArgsError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e));
  exitProcess(e instanceof AgentKvArgsError ? 2 : 1);
});

/**
 * Command-line options of the simulator CLI, parsed and validated into one typed object.
 * Bad input raises {@link SimUsageError} with a one-line message quoting the value.
 */
import { gpusPerWorker, HARDWARE, MODELS } from "./profiles.ts";
import { nominalRate, SCENARIOS } from "./scenarios.ts";
import { MAX_REPLAY_S } from "./traces.ts";

/** Raised for a bad command line. */
export class SimUsageError extends Error {
  override name = "SimUsageError";
}

/** Asked for the usage text (--help): printed to stdout, exit 0. */
export class SimHelp extends Error {
  override name = "SimHelp";
}

/** The baseline variants --baselines accepts. */
export const BASELINES = ["dynamo-disagg-sla", "dynamo-disagg-load", "dynamo-agg", "dynamo-agg-tuned", "dynamo-agg-shed"] as const;

/** Parsed options. */
export interface SimOptions {
  scenario: string | null;
  trace: string | null;
  format: "mooncake" | "azure";
  gpus: number;
  model: string;
  hw: string;
  load: number;
  seed: number;
  durationS: number;
  json: boolean;
  sweep: number[] | null;
  report: string | null;
  startupS: number;
  baselines: string[] | null;
  maxRequests: number;
  /** Also run ours without the role planner (ablation). */
  ablation: boolean;
  /** Step log (JSONL of measured engine steps) to calibrate the cost model from. */
  calibrate: string | null;
  /** Terabytes of a shared remote KV store below the host tiers (0: none). */
  remoteStoreTb: number;
  /** Tensor-parallel attention replicating the MLA latent KV on every GPU of a worker. */
  kvReplicated: boolean;
  /** Extra ms per mixed prefill+decode step (null: the hardware profile's, or the calibrated, value). */
  mixedStepOverheadMs: number | null;
  /** Ours' ITL admission held at this fixed fraction of the ITL target (null: the measured aim). */
  itlAim: number | null;
}

/** Usage text. */
export const USAGE = `usage: sim --scenario NAME [--gpus N] [--model PROFILE] [--hw HW] [--load X] [--seed N] [--duration S] [--json] [--sweep [X,Y,...]] [--report DIR]
       sim --trace PATH --format mooncake|azure [--load X (time scale)] [--max-requests N] ...
scenarios: ${SCENARIOS.join(", ")} · models: ${Object.keys(MODELS).join(", ")} · hardware: ${Object.keys(HARDWARE).join(", ")}
baselines (--baselines a,b): dynamo-disagg-sla, dynamo-disagg-load, dynamo-agg, dynamo-agg-tuned, dynamo-agg-shed · --startup S: baseline worker start-up (default 60)
--calibrate FILE: fit the cost model's efficiencies and step overhead to a step log (JSONL; deno task serve --step-log)
--kv-replicated: tensor-parallel attention, every GPU of a worker holds and reads the whole MLA KV (default: KV split across them)
--remote-store-tb X: a shared remote KV store of X TB below every host tier, for every system (default none)
--mixed-step-overhead-ms X: extra cost of a step carrying both prefill and decode (default 0; a step log fits it)
--ablation: also run ours without the role planner (evolving-static; reported under "ablations", never as a baseline)
--itl-aim X: ours lets new sessions in while the decode pool's ITL stays below X × the ITL target (0 < X ≤ 1; default: measured, mean/P90 of recent requests' ITL)`;

/** A decimal number as a person writes one (Number() would also take "0x10", "" and " 1 "). */
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** Most GPUs a run may simulate (a bound on memory and time, far above the 256 of the scenarios). */
export const MAX_GPUS = 65536;

/**
 * Most sessions a scenario run may start (rate × GPUs × load × duration): a scenario's workload is
 * built whole before the run, so a mistyped --load or --duration would otherwise exhaust memory.
 * Over twice the largest default sweep (steady-profiled at load 6 for an hour on 256 GPUs, 4.3M).
 */
export const MAX_SESSIONS = 1e7;

/** The largest seed: the generator keeps 32 bits (kv/rng.ts), so larger seeds would alias smaller ones. */
const MAX_SEED = 2 ** 32 - 1;

function num(flag: string, v: string | undefined, min: number, integer = false, max = Infinity): number {
  const x = v !== undefined && DECIMAL.test(v) ? Number(v) : NaN;
  if (!Number.isFinite(x) || x < min || x > max || (integer && !Number.isSafeInteger(x))) {
    const range = max < Infinity ? `in [${min}, ${max}]` : `≥ ${min}`;
    throw new SimUsageError(`Option ${flag} needs ${integer ? "an integer" : "a number"} ${range}, got "${v ?? ""}"`);
  }
  return x;
}

/** A flag's value; another flag in its place is a missing value, not a value. */
function value(flag: string, v: string | undefined): string {
  if (v === undefined || v === "" || v.startsWith("--")) throw new SimUsageError(`Option ${flag} needs a value, got "${v ?? ""}"`);
  return v;
}

/** Options that take no value. */
const SWITCHES: readonly string[] = ["--json", "--ablation", "--kv-replicated", "--help"];

/** Parses argv (without the script name); `--flag=value` is read as `--flag value`, as serve's flags are. */
export function parseSimArgs(rawArgv: readonly string[]): SimOptions {
  const argv = rawArgv.flatMap((a) => {
    if (!a.startsWith("--") || !a.includes("=")) return [a];
    const [flag, v] = [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)];
    // A switch given a value (--json=yes) would leave the value behind as an unknown option.
    if (SWITCHES.includes(flag)) throw new SimUsageError(`Option ${flag} takes no value, got "${v}"`);
    return [flag, v];
  });
  const o: SimOptions = {
    scenario: null, trace: null, format: "mooncake", gpus: 256, model: "kimi-k2.6", hw: "gb300", load: 1, seed: 1,
    durationS: 3600, json: false, sweep: null, report: null, startupS: 60, baselines: null, maxRequests: Infinity, ablation: false, calibrate: null, remoteStoreTb: 0, kvReplicated: false, mixedStepOverheadMs: null, itlAim: null,
  };
  const given = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i];
    given.add(a);
    switch (a) {
      case "--scenario": o.scenario = value(a, next()); break;
      case "--trace": o.trace = value(a, next()); break;
      case "--format": {
        const f = next();
        if (f !== "mooncake" && f !== "azure") throw new SimUsageError(`Option --format must be mooncake or azure, got "${f ?? ""}"`);
        o.format = f;
        break;
      }
      case "--gpus": o.gpus = num(a, next(), 1, true, MAX_GPUS); break;
      case "--model": o.model = value(a, next()); break;
      case "--hw": o.hw = value(a, next()); break;
      case "--load": o.load = num(a, next(), 1e-6); break;
      case "--seed": o.seed = num(a, next(), 0, true, MAX_SEED); break;
      case "--duration": o.durationS = num(a, next(), 1, false, MAX_REPLAY_S); break;
      case "--startup": o.startupS = num(a, next(), 0); break;
      case "--max-requests": o.maxRequests = num(a, next(), 1, true); break;
      case "--json": o.json = true; break;
      case "--ablation": o.ablation = true; break;
      case "--calibrate": o.calibrate = value(a, next()); break;
      case "--mixed-step-overhead-ms": o.mixedStepOverheadMs = num(a, next(), 0); break;
      case "--kv-replicated": o.kvReplicated = true; break;
      case "--itl-aim": {
        const v = next();
        const x = v !== undefined && DECIMAL.test(v) ? Number(v) : NaN;
        if (!(x > 0 && x <= 1)) throw new SimUsageError(`Option --itl-aim needs a fraction of the ITL target in (0, 1], got "${v ?? ""}"`);
        o.itlAim = x;
        break;
      }
      // Bounded at an exabyte: 1e300 TB overflows to an Infinity-byte store that the report would print.
      case "--remote-store-tb": o.remoteStoreTb = num(a, next(), 0, false, 1e6); break;
      case "--report": o.report = value(a, next()); break;
      case "--baselines": {
        const v = value(a, next());
        o.baselines = v.split(",").filter((x) => x !== "");
        if (o.baselines.length === 0) throw new SimUsageError(`Option --baselines needs at least one of ${BASELINES.join(", ")}, got "${v}"`);
        break;
      }
      case "--sweep": {
        const v = argv[i + 1];
        if (v !== undefined && !v.startsWith("--")) { i++; o.sweep = v.split(",").map((x) => num("--sweep", x, 1e-6)); }
        else o.sweep = [0.5, 1, 2, 3, 4, 6];
        // Each load writes its own report folder (load-X): a load given twice would overwrite its first run.
        const twice = o.sweep.find((x, k) => o.sweep!.indexOf(x) !== k);
        if (twice !== undefined) throw new SimUsageError(`Option --sweep lists load ${twice} twice, got "${v}"`);
        break;
      }
      case "-h": case "--help": throw new SimHelp(USAGE);
      default: throw new SimUsageError(`Unknown option "${a}"; run with --help for usage`);
    }
  }
  if ((o.scenario === null) === (o.trace === null)) throw new SimUsageError("Give exactly one of --scenario NAME or --trace PATH");
  if (o.scenario !== null && !(SCENARIOS as readonly string[]).includes(o.scenario)) {
    throw new SimUsageError(`Unknown scenario "${o.scenario}"; known: ${SCENARIOS.join(", ")}`);
  }
  // Own keys only: "toString" or "__proto__" are in every object.
  if (!Object.hasOwn(MODELS, o.model)) throw new SimUsageError(`Unknown model profile "${o.model}"; known: ${Object.keys(MODELS).join(", ")}`);
  if (!Object.hasOwn(HARDWARE, o.hw)) throw new SimUsageError(`Unknown hardware profile "${o.hw}"; known: ${Object.keys(HARDWARE).join(", ")}`);
  for (const b of o.baselines ?? []) {
    if (!(BASELINES as readonly string[]).includes(b)) throw new SimUsageError(`Unknown baseline "${b}"; known: ${BASELINES.join(", ")}`);
  }
  // The baselines split workers into prefill and decode pools: two workers at least. Scenarios scale
  // their traffic with --gpus, so a count that is not whole workers would load the workers there are
  // more than the figures say.
  const gpw = gpusPerWorker(MODELS[o.model], HARDWARE[o.hw]);
  if (o.gpus % gpw !== 0 || o.gpus < 2 * gpw) {
    throw new SimUsageError(`Option --gpus needs a multiple of ${gpw} (GPUs per worker of ${o.model} on ${o.hw}) of at least ${2 * gpw}, got "${o.gpus}"`);
  }
  const notWith = (flags: string[], why: string) => {
    const f = flags.find((x) => given.has(x));
    if (f !== undefined) throw new SimUsageError(`Option ${f} does not apply ${why}`);
  };
  if (o.scenario !== null) notWith(["--format", "--max-requests"], "to a scenario (only to --trace)");
  else notWith(["--duration"], "to a trace (it lasts as long as its requests)");
  if (o.sweep !== null) notWith(["--load"], "with --sweep (the sweep gives the loads)");
  if (o.scenario !== null) {
    const load = Math.max(...(o.sweep ?? [o.load]));
    const sessions = nominalRate(o.scenario) * (o.gpus / 256) * load * o.durationS;
    if (sessions > MAX_SESSIONS) {
      throw new SimUsageError(
        `Scenario ${o.scenario} at load ${load} on ${o.gpus} GPUs for ${o.durationS} s would start about ${sessions.toPrecision(3)} sessions; ` +
          `the simulator takes at most ${MAX_SESSIONS} (lower --load, --gpus or --duration)`,
      );
    }
  }
  return o;
}

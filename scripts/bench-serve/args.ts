/**
 * Command-line flags of `scripts/bench-serve.ts`, parsed into one typed options object.
 * Flags take the form `--name value` or `--name=value`; booleans are bare `--name`.
 */

/** What kind of traffic to generate. */
export type TraceKind = "mooncake" | "azure" | "synthetic";

/** Every option of the load generator. */
export interface BenchOptions {
  /** Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000 (no /v1). */
  url: string;
  /** Model name sent in requests; empty means "ask GET /v1/models and take the first". */
  model: string;
  apiKey?: string;
  endpoint: "chat" | "completions";
  trace: TraceKind;
  /** Trace file for mooncake/azure. */
  tracePath?: string;
  /** Multiplies trace input lengths (and the 512-token hash block) — makes big traces fit small models. */
  lengthScale: number;
  /** Multiplies output lengths. */
  outputScale: number;
  /** Multiplies every inter-arrival and tool gap: 0.5 replays twice as fast. */
  timeScale: number;
  /** Caps on the prompt (words) and output (tokens) of any request after scaling. */
  maxInputWords: number;
  maxOutputTokens: number;
  /** Stop after this many requests (trace rows or session turns). */
  maxRequests: number;
  /** At most this many requests in flight (0 = unbounded, open loop). */
  concurrency: number;
  /** Synthetic agent sessions: count, turns each, mean session inter-arrival (ms), mean tool gap (ms). */
  sessions: number;
  turns: number;
  sessionIntervalMs: number;
  toolGapMs: number;
  seed: number;
  /** SLOs for goodput, in ms. */
  sloTtftMs: number;
  sloItlMs: number;
  sloE2eMs: number;
  /** Ask the server to ignore EOS (vLLM/SGLang extension) so output lengths follow the trace. */
  ignoreEos: boolean;
  /** Per-request timeout in ms. */
  timeoutMs: number;
  /** Where to write the JSON report (stdout gets the table either way). */
  jsonPath?: string;
  /** Hide the stderr progress bar. */
  quiet: boolean;
}

/** A flag the load generator does not understand, or a value it cannot use. */
export class BenchArgsError extends Error {
  override name = "BenchArgsError";
}

const DEFAULTS: BenchOptions = {
  url: "http://127.0.0.1:8000",
  model: "",
  endpoint: "chat",
  trace: "synthetic",
  lengthScale: 1,
  outputScale: 1,
  timeScale: 1,
  maxInputWords: 1_000_000,
  maxOutputTokens: 1_000_000,
  maxRequests: 100,
  concurrency: 0,
  sessions: 8,
  turns: 4,
  sessionIntervalMs: 500,
  toolGapMs: 1000,
  seed: 1,
  sloTtftMs: 500,
  sloItlMs: 50,
  sloE2eMs: 30_000,
  ignoreEos: false,
  timeoutMs: 120_000,
  quiet: false,
};

const NUMERIC: Record<string, keyof BenchOptions> = {
  "length-scale": "lengthScale",
  "output-scale": "outputScale",
  "time-scale": "timeScale",
  "max-input-words": "maxInputWords",
  "max-output-tokens": "maxOutputTokens",
  "max-requests": "maxRequests",
  concurrency: "concurrency",
  sessions: "sessions",
  turns: "turns",
  "session-interval-ms": "sessionIntervalMs",
  "tool-gap-ms": "toolGapMs",
  seed: "seed",
  "slo-ttft-ms": "sloTtftMs",
  "slo-itl-ms": "sloItlMs",
  "slo-e2e-ms": "sloE2eMs",
  "timeout-ms": "timeoutMs",
};

/** Usage text printed by --help. */
export const USAGE = `bench-serve: load generator for any OpenAI-compatible server
  --url http://127.0.0.1:8000   --model NAME (default: first of GET /v1/models)   --api-key KEY
  --endpoint chat|completions   --trace synthetic|mooncake:PATH|azure:PATH
  --length-scale F  --output-scale F  --time-scale F  --max-input-words N  --max-output-tokens N
  --max-requests N  --concurrency N (0 = open loop)  --seed N  --ignore-eos
  --sessions N --turns N --session-interval-ms MS --tool-gap-ms MS   (synthetic agent sessions)
  --slo-ttft-ms MS --slo-itl-ms MS --slo-e2e-ms MS   --timeout-ms MS   --json PATH   --quiet`;

/** Parses argv into options; throws BenchArgsError naming the bad flag or value. */
export function parseBenchArgs(argv: readonly string[]): BenchOptions {
  const o: BenchOptions = { ...DEFAULTS };
  const rec = o as unknown as Record<string, unknown>;
  for (let i = 0; i < argv.length; i++) {
    const raw = argv[i];
    if (!raw.startsWith("--")) throw new BenchArgsError(`Unexpected argument "${raw}"`);
    const eq = raw.indexOf("=");
    const name = eq >= 0 ? raw.slice(2, eq) : raw.slice(2);
    const takeValue = (): string => {
      if (eq >= 0) return raw.slice(eq + 1);
      const v = argv[++i];
      if (v === undefined) throw new BenchArgsError(`Flag "--${name}" needs a value`);
      return v;
    };
    if (name === "ignore-eos") o.ignoreEos = true;
    else if (name === "quiet") o.quiet = true;
    else if (name === "url") o.url = takeValue().replace(/\/+$/, "").replace(/\/v1$/, "");
    else if (name === "model") o.model = takeValue();
    else if (name === "api-key") o.apiKey = takeValue();
    else if (name === "json") o.jsonPath = takeValue();
    else if (name === "endpoint") {
      const v = takeValue();
      if (v !== "chat" && v !== "completions") throw new BenchArgsError(`Unknown endpoint "${v}" (use chat or completions)`);
      o.endpoint = v;
    } else if (name === "trace") {
      const v = takeValue();
      const [kind, ...rest] = v.split(":");
      if (kind !== "synthetic" && kind !== "mooncake" && kind !== "azure") {
        throw new BenchArgsError(`Unknown trace "${v}" (use synthetic, mooncake:PATH or azure:PATH)`);
      }
      o.trace = kind;
      o.tracePath = rest.join(":") || undefined;
      if (kind !== "synthetic" && !o.tracePath) throw new BenchArgsError(`Trace "${v}" needs a file path`);
    } else if (name in NUMERIC) {
      const v = takeValue();
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) throw new BenchArgsError(`Flag "--${name}" needs a non-negative number, got "${v}"`);
      rec[NUMERIC[name]] = n;
    } else throw new BenchArgsError(`Unknown flag "--${name}"`);
  }
  if (o.lengthScale <= 0) throw new BenchArgsError(`Flag "--length-scale" must be above 0, got "${o.lengthScale}"`);
  return o;
}

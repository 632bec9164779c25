/**
 * Named scenarios. Session rates are per 256 GPUs at load 1 and scale with the GPU count and
 * `--load`. Agent traffic is bursty (see BURSTY); steady-profiled is stationary single requests
 * shaped like the baseline's offline profile (ISL 3000, OSL 150, no prefix reuse).
 */
import { SeededRng } from "../../kv/rng.ts";
import { type AgentShape, agentWorkload, BURSTY, CODING, COMPUTER_USE, MATH } from "./workloads.ts";
import type { SessionPlan, Workload } from "./workload-types.ts";

/** Scenario parameters resolved from the CLI. */
export interface ScenarioArgs {
  gpus: number;
  load: number;
  seed: number;
  durationS: number;
  maxContext: number;
}

/** Nominal session starts per second per 256 GPUs at load 1. */
export const BASE_SESSION_RATE: Record<string, number> = {
  coding: 4, math: 12, "computer-use": 6, "mixed-shift": 6,
};

/** Nominal requests per second per 256 GPUs at load 1 for steady-profiled. */
export const STEADY_RATE = 200;

const ASSUME = [
  "Agent session starts are Poisson, modulated in 60 s bursts at 2.5× every 300 s (0.625× otherwise, mean 1×)",
  "Turns are closed-loop: the next turn arrives a tool gap after the previous one finishes",
];

/** Scenario names the CLI accepts. */
export const SCENARIOS = ["coding-256", "math-256", "computer-use-256", "mixed-shift-256", "steady-profiled"] as const;

/** Nominal session (or, for steady-profiled, request) starts per second of scenario `name` per 256 GPUs at load 1. */
export function nominalRate(name: string): number {
  const base = name.replace(/-\d+$/, "");
  return base === "steady-profiled" ? STEADY_RATE : BASE_SESSION_RATE[base] ?? 0;
}

/** Builds a scenario's workload. */
export function buildScenario(name: string, a: ScenarioArgs): Workload {
  const scale = (a.gpus / 256) * a.load;
  const base = name.replace(/-\d+$/, "");
  const one = (s: AgentShape) => () => s;
  switch (base) {
    case "coding": return agentWorkload(name, a.durationS, BASE_SESSION_RATE.coding * scale, a.seed, a.maxContext, one(CODING), BURSTY, ASSUME);
    case "math": return agentWorkload(name, a.durationS, BASE_SESSION_RATE.math * scale, a.seed, a.maxContext, one(MATH), BURSTY, ASSUME);
    case "computer-use": return agentWorkload(name, a.durationS, BASE_SESSION_RATE["computer-use"] * scale, a.seed, a.maxContext, one(COMPUTER_USE), BURSTY, ASSUME);
    case "mixed-shift": {
      // The mix rotates every 20 minutes: coding-heavy → math-heavy (decode) → computer-use-heavy (prefill).
      const period = 1200;
      const pick = (t: number, rng: SeededRng): AgentShape => {
        const ph = (2 * Math.PI * t) / period;
        const w = [1 + Math.cos(ph), 1 + Math.cos(ph - (2 * Math.PI) / 3), 1 + Math.cos(ph + (2 * Math.PI) / 3)];
        const r = rng.next() * (w[0] + w[1] + w[2]);
        return r < w[0] ? CODING : r < w[0] + w[1] ? MATH : COMPUTER_USE;
      };
      return agentWorkload(name, a.durationS, BASE_SESSION_RATE["mixed-shift"] * scale, a.seed, a.maxContext, pick, BURSTY,
        [...ASSUME, "Mix weights 1+cos(2πt/1200 s − phase) for coding, math, computer-use (phases 0, 2π/3, −2π/3)"]);
    }
    case "steady-profiled": return steady(a.durationS, STEADY_RATE * scale, a.seed);
    default: throw new RangeError(`Unknown scenario "${name}"; known: ${SCENARIOS.join(", ")}`);
  }
}

function steady(durationS: number, rate: number, seed: number): Workload {
  const rng = new SeededRng(seed);
  const sessions: SessionPlan[] = [];
  let t = 0;
  let base = 1 << 20;
  for (;;) {
    t += rng.exponential(1 / rate);
    if (t >= durationS) break;
    const isl = Math.max(64, Math.round(rng.normal() * 300 + 3000));
    const osl = Math.max(8, Math.round(rng.normal() * 15 + 150));
    const full = Math.floor(isl / 2048);
    sessions.push({
      idx: sessions.length, id: `steady-${sessions.length}`, kind: "steady", start: t, sharedChunks: [], sharedTokens: 0, chunkBase: base,
      turns: [{ newTokens: isl, outputTokens: osl, reasoningTokens: 0, tool: null, gapS: 0, fixedPromptTokens: isl, fixedChunks: Array.from({ length: full }, (_, c) => base + c) }],
    });
    base += full + 1;
  }
  return {
    name: "steady-profiled", durationS, sessions, blockTokens: 2048,
    assumptions: [`Stationary Poisson at ${rate.toFixed(1)} req/s, ISL normal(3000, 300), OSL normal(150, 15), no prefix reuse`],
  };
}

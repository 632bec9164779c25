/**
 * Synthetic agent workloads. Leads (stated as assumptions): coding agents hit the prefix cache
 * 85–97% and about 40% of their output is reasoning the next turn drops (Dynamo on Claude Code
 * traces); SWE-agent tool steps take from under a second to seconds, test runs far longer; Mooncake's
 * tool-and-agent trace averages 8.6k input / 182 output tokens per request.
 */
import { SeededRng } from "../../kv/rng.ts";
import { AGENT_BLOCK_TOKENS, type SessionKind, type SessionPlan, type TurnPlan, type Workload } from "./workload-types.ts";

/** Shape of one agent kind. */
export interface AgentShape {
  kind: SessionKind;
  apps: number;
  systemTokens: number;
  firstUserTokens: [median: number, sigma: number];
  newTokensPerTurn: [median: number, sigma: number];
  outputTokens: [median: number, sigma: number];
  /** Probability a turn reasons, and the reasoning share of that turn's output. */
  pReasoning: number;
  reasoningShare: number;
  turns: [min: number, max: number];
  /** Tool gaps: most are short; a fraction are long (test runs). */
  toolGap: [median: number, sigma: number];
  longToolP: number;
  longToolGap: [median: number, sigma: number];
  tools: string[];
}

/** Coding agent: long growing contexts, short outputs, many turns. */
export const CODING: AgentShape = {
  kind: "coding", apps: 4, systemTokens: 12000, firstUserTokens: [1500, 0.8], newTokensPerTurn: [1200, 1.0],
  outputTokens: [220, 0.8], pReasoning: 0.6, reasoningShare: 0.65, turns: [15, 45],
  toolGap: [1.5, 1.0], longToolP: 0.1, longToolGap: [25, 0.7], tools: ["read_file", "grep", "edit", "bash"],
};

/** Math agent: short prompts, long reasoning outputs, a few code-execution turns. */
export const MATH: AgentShape = {
  kind: "math", apps: 2, systemTokens: 1500, firstUserTokens: [300, 0.6], newTokensPerTurn: [250, 0.8],
  outputTokens: [3000, 0.6], pReasoning: 0.95, reasoningShare: 0.85, turns: [2, 8],
  toolGap: [1.0, 0.6], longToolP: 0.05, longToolGap: [8, 0.5], tools: ["python"],
};

/** Computer-use agent: large context jumps per turn (screenshots, accessibility trees), medium outputs. */
export const COMPUTER_USE: AgentShape = {
  kind: "computer-use", apps: 3, systemTokens: 5000, firstUserTokens: [600, 0.6], newTokensPerTurn: [5000, 0.5],
  outputTokens: [350, 0.6], pReasoning: 0.5, reasoningShare: 0.5, turns: [8, 30],
  toolGap: [2.5, 0.6], longToolP: 0.05, longToolGap: [15, 0.5], tools: ["click", "type", "screenshot"],
};

/** Session-start rate multiplier over time (1 = nominal). */
export type RateShape = (t: number) => number;

/** Bursty agent traffic: 60 s bursts at 2.5× every 300 s, 0.625× otherwise (mean 1). */
export const BURSTY: RateShape = (t) => ((t % 300) < 60 ? 2.5 : 0.625);

/** Builds one session of `shape` starting at `start`. */
export function makeSession(shape: AgentShape, idx: number, start: number, chunkBase: number, rng: SeededRng, maxContext: number): SessionPlan {
  const app = rng.int(0, shape.apps - 1);
  const sharedFull = Math.floor(shape.systemTokens / AGENT_BLOCK_TOKENS);
  // Shared ids: per kind and app, small and disjoint from per-session ranges (which start at 1<<20).
  const kindSalt = { coding: 1, math: 2, "computer-use": 3, steady: 4, trace: 5 }[shape.kind];
  const sharedChunks = Array.from({ length: sharedFull }, (_, c) => kindSalt * 100000 + app * 1000 + c + 1);
  const nTurns = rng.int(shape.turns[0], shape.turns[1]);
  const turns: TurnPlan[] = [];
  let ctx = shape.systemTokens;
  for (let k = 0; k < nTurns; k++) {
    const [m, s] = k === 0 ? shape.firstUserTokens : shape.newTokensPerTurn;
    const newTokens = Math.max(16, Math.round(rng.logNormal(m, s)));
    const out = Math.max(8, Math.round(rng.logNormal(shape.outputTokens[0], shape.outputTokens[1])));
    const reasoning = rng.next() < shape.pReasoning ? Math.round(out * shape.reasoningShare) : 0;
    if (ctx + newTokens + out > maxContext * 0.9 && k > 0) break;
    ctx += newTokens + (out - reasoning);
    const last = k === nTurns - 1;
    const long = rng.next() < shape.longToolP;
    const [gm, gs] = long ? shape.longToolGap : shape.toolGap;
    turns.push({
      newTokens, outputTokens: out, reasoningTokens: reasoning,
      tool: last ? null : shape.tools[rng.int(0, shape.tools.length - 1)] + (long ? ":long" : ""),
      gapS: last ? 0 : rng.logNormal(gm, gs),
    });
  }
  return {
    idx, id: `${shape.kind}-${idx}`, kind: shape.kind, start, sharedChunks, sharedTokens: shape.systemTokens,
    chunkBase, turns,
  };
}

/** Poisson session starts at `sessionsPerS × shape(t)` (thinning), kinds drawn by `pick(t)`. */
export function agentWorkload(
  name: string, durationS: number, sessionsPerS: number, seed: number, maxContext: number,
  pick: (t: number, rng: SeededRng) => AgentShape, rate: RateShape, assumptions: string[],
): Workload {
  const rng = new SeededRng(seed);
  const starts = rng.fork(1);
  const sessions: SessionPlan[] = [];
  const peak = 2.5 * sessionsPerS;
  let t = 0;
  let chunkBase = 1 << 20;
  const maxChunks = Math.ceil(maxContext / AGENT_BLOCK_TOKENS) + 8;
  for (;;) {
    t += starts.exponential(1 / peak);
    if (t >= durationS) break;
    if (starts.next() * peak > sessionsPerS * rate(t)) continue;
    const shape = pick(t, starts);
    sessions.push(makeSession(shape, sessions.length, t, chunkBase, rng.fork(sessions.length + 7), maxContext));
    chunkBase += maxChunks;
  }
  const shapes = [CODING, MATH, COMPUTER_USE].map(describeShape);
  return {
    name, durationS, sessions, blockTokens: AGENT_BLOCK_TOKENS,
    assumptions: [...assumptions, ...shapes, `KV simulated in ${AGENT_BLOCK_TOKENS}-token blocks (last partial block of each prompt recomputed)`],
  };
}

/** One line stating a shape's parameters. */
export function describeShape(s: AgentShape): string {
  return `${s.kind}: system ${s.systemTokens} tok (${s.apps} apps share it), first user lognormal(${s.firstUserTokens}), ` +
    `new tokens/turn lognormal(${s.newTokensPerTurn}), output lognormal(${s.outputTokens}), reasoning in ${s.pReasoning * 100}% of turns ` +
    `(${s.reasoningShare * 100}% of their output, dropped next turn), turns ${s.turns[0]}–${s.turns[1]}, tool gap lognormal(${s.toolGap}) s, ` +
    `${s.longToolP * 100}% long tools lognormal(${s.longToolGap}) s`;
}

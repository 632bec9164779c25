/**
 * One timed agent session on an engine, shared by the benchmarks that compare engine settings over
 * turns (bench-recurrent-turns.ts, bench-window-kv.ts): each prompt the last prompt, its answer and a
 * tool result, greedy, one turn at a time.
 */
import type { Engine } from "../src/engine/engine.ts";

/** The session's shape: turns, the first prompt's tokens, each answer's and each tool result's. */
export interface SessionShape {
  turns: number;
  prompt: number;
  answer: number;
  tool: number;
}

/** Per turn: seconds to the first token, prompt tokens computed (not from cache), seconds per output token after the first. */
export interface SessionTimes {
  ttft: number[];
  computed: number[];
  tpot: number[];
}

/** Deterministic token ids in 10..2009 (`seed` picks the run). */
export function sessionIds(n: number, seed: number): number[] {
  return Array.from({ length: n }, (_, i) => (seed * 7919 + i * 104729) % 2000 + 10);
}

/** The median of `xs`. */
export function median(xs: readonly number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
}

/** Runs one session of `shape` on `engine`, then stops it. */
export async function timeAgentSession(engine: Engine, shape: SessionShape): Promise<SessionTimes> {
  const times: SessionTimes = { ttft: [], computed: [], tpot: [] };
  try {
    let prompt = sessionIds(shape.prompt, 1);
    for (let t = 0; t < shape.turns; t++) {
      const r = await engine.submit({ prompt, maxTokens: shape.answer, temperature: 0, ignoreEos: true }).result;
      times.ttft.push(r.firstTokenS ?? NaN);
      times.tpot.push(((r.lastTokenS ?? NaN) - (r.firstTokenS ?? NaN)) / Math.max(1, r.tokenIds.length - 1));
      times.computed.push(prompt.length - r.cachedTokens);
      prompt = [...prompt, ...r.tokenIds, ...sessionIds(shape.tool, t + 2)];
    }
  } finally {
    await engine.stop();
  }
  return times;
}

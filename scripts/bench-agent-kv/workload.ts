/**
 * The seeded agentic workload of bench-agent-kv: agent sessions in tool loops (each answer calls a
 * fast or a slow tool, the last one answers) and one-shot chats that rarely come back, all sharing
 * one system prompt. Which answer the scripted model gives is set by the last character of the
 * message sent (agent-model.ts ENDING): the workload, not the model, decides each next action.
 */
import { seededRandom } from "../bench-serve/workload.ts";
import { ENDING } from "./agent-model.ts";

/** Why a request is sent: a session's first turn, or a return after a fast tool, a slow tool or an idle wait. */
export type TurnLabel = "first" | "fast-return" | "slow-return" | "chat-return";

/** One request of a session: a message appended to the conversation after a wait. */
export interface Step {
  /** Milliseconds after the previous answer (for the first step: after the run's start). */
  delayMs: number;
  /** "tool": the result of the previous answer's call; "user": a user message. */
  role: "user" | "tool";
  text: string;
  label: TurnLabel;
}

/** A conversation, played step by step with its own `prompt_cache_key`. */
export interface SessionPlan {
  id: string;
  kind: "agent" | "chat";
  steps: Step[];
}

/** Workload knobs; times in seconds, lengths in characters (about one token each for this model). */
export interface WorkloadOptions {
  seed: number;
  /** Agent sessions, started uniformly over `agentStartS`. */
  sessions: number;
  /** Tool calls per agent session (then one final answer). */
  turns: number;
  /** One-shot chats, arriving uniformly over `chatArrivalS`. */
  chats: number;
  slowFraction: number;
  fastGapS: [number, number];
  slowGapS: [number, number];
  taskChars: [number, number];
  resultChars: [number, number];
  chatChars: [number, number];
  /** Probability that a chat's user comes back once, after `chatReturnS`. */
  chatReturnP: number;
  chatReturnS: [number, number];
  agentStartS: number;
  chatArrivalS: number;
}

/** The documented defaults (docs/results/bench-agent-kv.md). */
export const WORKLOAD_DEFAULTS: WorkloadOptions = {
  seed: 1, sessions: 8, turns: 6, chats: 6, slowFraction: 0.25,
  fastGapS: [0.2, 1], slowGapS: [20, 40], taskChars: [300, 600], resultChars: [60, 160], chatChars: [600, 1200],
  chatReturnP: 0.2, chatReturnS: [30, 60], agentStartS: 30, chatArrivalS: 90,
};

/** The system prompt every session shares (about 170 tokens with the tools line). */
export const SYSTEM_PROMPT = `you are a coding agent ${words(seededRandom(7), 150)}`;

/** Lowercase pseudo-words of about `chars` characters: no piece of the model's vocab, no ending mark. */
export function words(rnd: () => number, chars: number): string {
  let s = "";
  while (s.length < chars) {
    const n = 2 + Math.floor(rnd() * 7);
    for (let i = 0; i < n; i++) s += String.fromCharCode(97 + Math.floor(rnd() * 26));
    s += " ";
  }
  return s.slice(0, chars).trimEnd();
}

/** Every session of the workload, deterministic in `o.seed`. */
export function buildWorkload(o: WorkloadOptions): SessionPlan[] {
  const rnd = seededRandom(o.seed);
  const uni = ([a, b]: [number, number]) => a + (b - a) * rnd();
  const len = (r: [number, number]) => Math.round(uni(r));
  const out: SessionPlan[] = [];
  for (let i = 0; i < o.sessions; i++) {
    const actions = Array.from({ length: o.turns }, () => (rnd() < o.slowFraction ? "slow" as const : "fast" as const));
    const end = (k: number) => ENDING[k < actions.length ? actions[k] : "final"];
    const steps: Step[] = [{ delayMs: uni([0, o.agentStartS]) * 1000, role: "user", text: `task ${i} ${words(rnd, len(o.taskChars))}${end(0)}`, label: "first" }];
    actions.forEach((a, k) => {
      const gap = uni(a === "fast" ? o.fastGapS : o.slowGapS) * 1000;
      steps.push({ delayMs: gap, role: "tool", text: `result ${words(rnd, len(o.resultChars))}${end(k + 1)}`, label: `${a}-return` });
    });
    out.push({ id: `agent-${i}`, kind: "agent", steps });
  }
  for (let i = 0; i < o.chats; i++) {
    const steps: Step[] = [{ delayMs: uni([0, o.chatArrivalS]) * 1000, role: "user", text: `question ${i} ${words(rnd, len(o.chatChars))}${ENDING.final}`, label: "first" }];
    if (rnd() < o.chatReturnP) steps.push({ delayMs: uni(o.chatReturnS) * 1000, role: "user", text: `and ${words(rnd, 100)}${ENDING.final}`, label: "chat-return" });
    out.push({ id: `chat-${i}`, kind: "chat", steps });
  }
  return out;
}

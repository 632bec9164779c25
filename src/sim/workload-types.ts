/**
 * Workload plans: what arrives, independent of the system serving it, so baseline and ours replay
 * the same sessions for a seed. Agent turns are closed-loop: turn k+1 arrives a tool gap after turn k
 * finishes. Trace requests are single-turn plans with fixed arrival times.
 */

/** One turn of a session. */
export interface TurnPlan {
  /** Tokens appended to the conversation before this turn (user text, tool output, observation). */
  newTokens: number;
  /** Tokens generated; the first `reasoningTokens` of them are reasoning the next turn drops. */
  outputTokens: number;
  reasoningTokens: number;
  /** Tool the turn ends by calling (the session then waits `gapS`), or null for a final answer. */
  tool: string | null;
  gapS: number;
  /** Block content ids of the prompt, when a trace gives them (otherwise derived from the stream). */
  fixedChunks?: number[];
  /** Prompt length when fixed by a trace. */
  fixedPromptTokens?: number;
}

/** Agent kinds (trace replay uses "trace"). */
export type SessionKind = "coding" | "math" | "computer-use" | "steady" | "trace";

/** One session: a start time, shared system-prompt chunks and its turns. */
export interface SessionPlan {
  idx: number;
  id: string;
  kind: SessionKind;
  start: number;
  /** Content ids of system-prompt chunks shared with other sessions of the same agent app. */
  sharedChunks: number[];
  sharedTokens: number;
  /** First content id reserved for this session's own chunks. */
  chunkBase: number;
  turns: TurnPlan[];
}

/** A whole workload. */
export interface Workload {
  name: string;
  durationS: number;
  sessions: SessionPlan[];
  /** Tokens per simulated KV block (content-addressed chunk). */
  blockTokens: number;
  /** Assumptions behind the numbers, printed in reports. */
  assumptions: string[];
}

/** Tokens per KV block in trace replay (Mooncake's hash_ids are 512-token blocks). */
export const TRACE_BLOCK_TOKENS = 512;

/**
 * Tokens per KV block in synthetic agent workloads. Coarser than an engine's 16 so an hour at 256
 * GPUs simulates in seconds; the prompt's last partial block is recomputed, so hit rates here are a
 * lower bound for both systems alike.
 */
export const AGENT_BLOCK_TOKENS = 2048;

/** Content ids above this are unique decode-generated (dropped-reasoning) chunks. */
export const REASONING_ID_BASE = 1 << 30;

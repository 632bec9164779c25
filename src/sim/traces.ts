/**
 * Trace replay. Mooncake JSONL (timestamp in ms, input_length, output_length, hash_ids of 512-token
 * blocks): requests sharing leading hash ids share a prefix, and the session is inferred from the
 * first hash id. Azure LLM inference CSV (TIMESTAMP, ContextTokens, GeneratedTokens): no prefix
 * information, so every request's blocks are unique.
 */
import { TRACE_BLOCK_TOKENS, type SessionPlan, type Workload } from "./workload-types.ts";

/** Raised for a trace line that cannot be read. */
export class TraceFormatError extends Error {
  override name = "TraceFormatError";
}

const TRACE_ID_BASE = 1 << 29;

function single(idx: number, id: string, start: number, prompt: number, output: number, chunks: number[]): SessionPlan {
  return {
    idx, id, kind: "trace", start, sharedChunks: [], sharedTokens: 0, chunkBase: 0,
    turns: [{
      newTokens: prompt, outputTokens: Math.max(1, output), reasoningTokens: 0, tool: null, gapS: 0,
      fixedChunks: chunks, fixedPromptTokens: prompt,
    }],
  };
}

/** Parses Mooncake JSONL; `timeScale` divides inter-arrival times (2 = twice the rate). */
export function parseMooncake(text: string, timeScale = 1, maxRequests = Infinity): Workload {
  const sessions: SessionPlan[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length && sessions.length < maxRequests; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    let r: { timestamp?: unknown; input_length?: unknown; output_length?: unknown; hash_ids?: unknown };
    try { r = JSON.parse(line); } catch { throw new TraceFormatError(`Mooncake line ${i + 1} is not JSON: "${line.slice(0, 60)}"`); }
    if (typeof r.timestamp !== "number" || typeof r.input_length !== "number" || typeof r.output_length !== "number" || !Array.isArray(r.hash_ids)) {
      throw new TraceFormatError(`Mooncake line ${i + 1} lacks timestamp/input_length/output_length/hash_ids: "${line.slice(0, 60)}"`);
    }
    const ids = (r.hash_ids as number[]).map((h) => TRACE_ID_BASE + h);
    const full = Math.min(ids.length, Math.floor(r.input_length / TRACE_BLOCK_TOKENS));
    const sid = `mc-${r.hash_ids[0] ?? i}`;
    sessions.push(single(sessions.length, sid, r.timestamp / 1000 / timeScale, r.input_length, r.output_length, ids.slice(0, full)));
  }
  const durationS = sessions.length > 0 ? sessions[sessions.length - 1].start + 1 : 0;
  return {
    name: "mooncake-trace", durationS, sessions, blockTokens: TRACE_BLOCK_TOKENS,
    assumptions: ["Mooncake trace: hash_ids are 512-token blocks; requests sharing leading ids share KV; session = first hash id"],
  };
}

/** Parses the Azure LLM inference CSV; `timeScale` divides inter-arrival times. */
export function parseAzure(text: string, timeScale = 1, maxRequests = Infinity): Workload {
  const lines = text.split("\n");
  const header = lines[0].trim().split(",");
  const ti = header.indexOf("TIMESTAMP");
  const ci = header.indexOf("ContextTokens");
  const gi = header.indexOf("GeneratedTokens");
  if (ti < 0 || ci < 0 || gi < 0) throw new TraceFormatError(`Azure header must have TIMESTAMP,ContextTokens,GeneratedTokens, got "${lines[0].trim()}"`);
  const sessions: SessionPlan[] = [];
  let t0: number | null = null;
  let base = 1 << 20;
  for (let i = 1; i < lines.length && sessions.length < maxRequests; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    const f = line.split(",");
    const t = Date.parse(f[ti].replace(" ", "T") + "Z");
    const ctx = Number(f[ci]);
    const gen = Number(f[gi]);
    if (!Number.isFinite(t) || !Number.isFinite(ctx) || !Number.isFinite(gen)) throw new TraceFormatError(`Azure line ${i + 1} is malformed: "${line}"`);
    if (t0 === null) t0 = t;
    const full = Math.floor(ctx / TRACE_BLOCK_TOKENS);
    const chunks = Array.from({ length: full }, (_, c) => base + c);
    base += full + 1;
    sessions.push(single(sessions.length, `az-${sessions.length}`, (t - t0) / 1000 / timeScale, ctx, gen, chunks));
  }
  const durationS = sessions.length > 0 ? sessions[sessions.length - 1].start + 1 : 0;
  return { name: "azure-code-trace", durationS, sessions, blockTokens: TRACE_BLOCK_TOKENS, assumptions: ["Azure trace: no prefix information; every request's blocks are unique"] };
}

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

/** One request read from a trace line, before arrival times are made relative. */
interface TraceRow {
  line: number;
  /** Arrival time as the trace gives it, in milliseconds. */
  t: number;
  prompt: number;
  output: number;
}

/** Whether `v` is a whole number ≥ `min` that a double holds exactly. */
const count = (v: unknown, min: number): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= min;

/**
 * Requests in arrival order (a trace's rows need not be sorted; ties keep file order), at most
 * `maxRequests`, with times measured from the earliest and divided by `timeScale`; `blocks` names
 * each one's session and KV blocks, called in that order. The workload lasts from the first arrival
 * to one second past the last.
 */
function replay<R extends TraceRow>(
  rows: R[], timeScale: number, maxRequests: number, kind: string, blocks: (r: R, idx: number) => { id: string; chunks: number[] },
): { sessions: SessionPlan[]; durationS: number } {
  if (rows.length === 0) throw new TraceFormatError(`The ${kind} trace has no requests`);
  const sorted = rows.slice().sort((a, b) => a.t - b.t || a.line - b.line).slice(0, maxRequests);
  const t0 = sorted[0].t;
  const sessions = sorted.map((r, idx) => {
    const { id, chunks } = blocks(r, idx);
    return single(idx, id, (r.t - t0) / 1000 / timeScale, r.prompt, r.output, chunks);
  });
  return { sessions, durationS: sessions[sessions.length - 1].start + 1 };
}

/** Parses Mooncake JSONL; `timeScale` divides inter-arrival times (2 = twice the rate). */
export function parseMooncake(text: string, timeScale = 1, maxRequests = Infinity): Workload {
  const rows: (TraceRow & { id: string; chunks: number[] })[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    let r: unknown;
    try { r = JSON.parse(line); } catch {
      const hint = i === 0 && /^[A-Za-z_]+(,[A-Za-z_]+)+$/.test(line) ? " (a CSV header: is this an Azure trace? add --format azure)" : "";
      throw new TraceFormatError(`Mooncake line ${i + 1} is not JSON: "${line.slice(0, 60)}"${hint}`);
    }
    const o = (typeof r === "object" && r !== null && !Array.isArray(r) ? r : {}) as { timestamp?: unknown; input_length?: unknown; output_length?: unknown; hash_ids?: unknown };
    if (typeof o.timestamp !== "number" || typeof o.input_length !== "number" || typeof o.output_length !== "number" || !Array.isArray(o.hash_ids)) {
      throw new TraceFormatError(`Mooncake line ${i + 1} lacks timestamp/input_length/output_length/hash_ids: "${line.slice(0, 60)}"`);
    }
    if (!Number.isFinite(o.timestamp) || o.timestamp < 0) throw new TraceFormatError(`Mooncake line ${i + 1} has timestamp ${o.timestamp}; expected milliseconds ≥ 0`);
    if (!count(o.input_length, 1)) throw new TraceFormatError(`Mooncake line ${i + 1} has input_length ${o.input_length}; expected a whole number of tokens ≥ 1`);
    if (!count(o.output_length, 0)) throw new TraceFormatError(`Mooncake line ${i + 1} has output_length ${o.output_length}; expected a whole number of tokens ≥ 0`);
    const bad = (o.hash_ids as unknown[]).find((h) => !count(h, 0));
    if (bad !== undefined) throw new TraceFormatError(`Mooncake line ${i + 1} has hash id ${JSON.stringify(bad)}; expected whole numbers ≥ 0`);
    const hashes = o.hash_ids as number[];
    const ids = hashes.map((h) => TRACE_ID_BASE + h);
    const full = Math.min(ids.length, Math.floor(o.input_length / TRACE_BLOCK_TOKENS));
    rows.push({ line: i, id: `mc-${hashes[0] ?? i}`, t: o.timestamp, prompt: o.input_length, output: o.output_length, chunks: ids.slice(0, full) });
  }
  const { sessions, durationS } = replay(rows, timeScale, maxRequests, "Mooncake", (r) => r);
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
  const rows: TraceRow[] = [];
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    const f = line.split(",");
    if (f.length !== header.length) throw new TraceFormatError(`Azure line ${i + 1} has ${f.length} fields, the header ${header.length}: "${line}"`);
    const t = Date.parse(f[ti].replace(" ", "T") + "Z");
    // Number("") is 0: an empty field is malformed, not a zero.
    const ctx = f[ci].trim() === "" ? NaN : Number(f[ci]);
    const gen = f[gi].trim() === "" ? NaN : Number(f[gi]);
    if (!Number.isFinite(t) || !Number.isFinite(ctx) || !Number.isFinite(gen)) throw new TraceFormatError(`Azure line ${i + 1} is malformed: "${line}"`);
    if (!count(ctx, 1) || !count(gen, 0)) throw new TraceFormatError(`Azure line ${i + 1} has ContextTokens ${f[ci]} and GeneratedTokens ${f[gi]}; expected whole numbers ≥ 1 and ≥ 0`);
    rows.push({ line: i, t, prompt: ctx, output: gen });
  }
  // Blocks are numbered in arrival order, each request's own (no prefix information).
  let base = 1 << 20;
  const { sessions, durationS } = replay(rows, timeScale, maxRequests, "Azure", (r, idx) => {
    const full = Math.floor(r.prompt / TRACE_BLOCK_TOKENS);
    const chunks = Array.from({ length: full }, (_, c) => base + c);
    base += full + 1;
    return { id: `az-${idx}`, chunks };
  });
  return { name: "azure-code-trace", durationS, sessions, blockTokens: TRACE_BLOCK_TOKENS, assumptions: ["Azure trace: no prefix information; every request's blocks are unique"] };
}

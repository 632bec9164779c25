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

/**
 * Block hashing reads a chunk id's low 32 bits only (kv/hash.ts), so hash ids at or past this bound
 * would alias smaller ones: a trace that has such ids is renumbered (see mooncakeChunkIds).
 */
const HASH_ID_LIMIT = 2 ** 32 - TRACE_ID_BASE;

/**
 * The longest replay (s, after --load's time scale): a bound far above real traces (Azure's
 * longest spans a week) that catches timestamps in the wrong unit before the simulator spends
 * hours stepping through an empty span.
 */
export const MAX_REPLAY_S = 30 * 86400;

/** A trace's lines: LF, CRLF and lone-CR (old Mac) endings alike, so line numbers match an editor's. */
const lines = (text: string) => text.split(/\r\n|\r|\n/);

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
  const spanS = (sorted[sorted.length - 1].t - t0) / 1000 / timeScale;
  if (!(spanS <= MAX_REPLAY_S)) {
    const last = sorted[sorted.length - 1];
    throw new TraceFormatError(
      `The ${kind} trace spans ${spanS.toPrecision(3)} s from its first request to its last (line ${last.line + 1})` +
        `${timeScale !== 1 ? ` at time scale ${timeScale}` : ""}; the simulator replays at most ${MAX_REPLAY_S} s (a timestamp in the wrong unit or year?)`,
    );
  }
  const sessions = sorted.map((r, idx) => {
    const { id, chunks } = blocks(r, idx);
    return single(idx, id, (r.t - t0) / 1000 / timeScale, r.prompt, r.output, chunks);
  });
  return { sessions, durationS: sessions[sessions.length - 1].start + 1 };
}

/** Parses Mooncake JSONL; `timeScale` divides inter-arrival times (2 = twice the rate). */
export function parseMooncake(text: string, timeScale = 1, maxRequests = Infinity): Workload {
  const rows: (TraceRow & { id: string; hashes: number[] })[] = [];
  const all = lines(text);
  for (let i = 0; i < all.length; i++) {
    const line = all[i].trim();
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
    const full = Math.min(hashes.length, Math.floor(o.input_length / TRACE_BLOCK_TOKENS));
    rows.push({ line: i, id: `mc-${hashes[0] ?? i}`, t: o.timestamp, prompt: o.input_length, output: o.output_length, hashes: hashes.slice(0, full) });
  }
  const chunkId = mooncakeChunkIds(rows);
  const { sessions, durationS } = replay(rows, timeScale, maxRequests, "Mooncake", (r) => ({ id: r.id, chunks: r.hashes.map(chunkId) }));
  return {
    name: "mooncake-trace", durationS, sessions, blockTokens: TRACE_BLOCK_TOKENS,
    assumptions: ["Mooncake trace: hash_ids are 512-token blocks; requests sharing leading ids share KV; session = first hash id"],
  };
}

/**
 * Chunk ids of a Mooncake trace's hash ids: offset by TRACE_ID_BASE, or, where some id would alias
 * another in the block hash, renumbered in order of first appearance (equal ids stay equal).
 */
function mooncakeChunkIds(rows: readonly { hashes: readonly number[] }[]): (h: number) => number {
  if (rows.every((r) => r.hashes.every((h) => h < HASH_ID_LIMIT))) return (h) => TRACE_ID_BASE + h;
  const dense = new Map<number, number>();
  for (const r of rows) for (const h of r.hashes) if (!dense.has(h)) dense.set(h, TRACE_ID_BASE + dense.size);
  return (h) => dense.get(h)!;
}

/** A CSV field without surrounding blanks and double quotes. */
const field = (f: string) => f.trim().replace(/^"(.*)"$/, "$1").trim();

/** A decimal number as a CSV writes one (Number() would also take "0x10", "0b1" or "Infinity"). */
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/**
 * An Azure TIMESTAMP ("2023-11-16 18:17:03.9799600", UTC) in ms, or NaN. Only dates of that shape
 * (T or a blank between date and time, an optional Z or ±hh:mm zone) are read: Date.parse alone
 * falls back to guessing, and would read "1.5" as 5 January 2001.
 */
function azureTime(f: string): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}(?:\.\d+)?))?)?(Z|[+-]\d{2}:?\d{2})?$/i.exec(f);
  if (m === null) return NaN;
  const [year, month, day, hour, minute] = [m[1], m[2], m[3], m[4] ?? "0", m[5] ?? "0"].map(Number);
  // Date.parse rolls "02-30" over to 2 March and, on some engines, "24:30" into the next day.
  const inMonth = new Date(Date.UTC(year, month - 1, day)).getUTCDate() === day && month >= 1 && month <= 12;
  if (!inMonth || hour > 23 || minute > 59 || Number(m[6] ?? 0) >= 60) return NaN;
  const time = m[4] === undefined ? "00:00:00" : `${m[4]}:${m[5]}${m[6] === undefined ? "" : `:${m[6]}`}`;
  return Date.parse(`${m[1]}-${m[2]}-${m[3]}T${time}${m[7] ?? "Z"}`);
}

/** Parses the Azure LLM inference CSV; `timeScale` divides inter-arrival times. */
export function parseAzure(text: string, timeScale = 1, maxRequests = Infinity): Workload {
  const all = lines(text);
  const first = all[0].trim();
  // Column names as the published traces spell them, matched whatever the case, blanks or quotes.
  const header = first.split(",").map((h) => field(h).toLowerCase());
  const ti = header.indexOf("timestamp");
  const ci = header.indexOf("contexttokens");
  const gi = header.indexOf("generatedtokens");
  if (ti < 0 || ci < 0 || gi < 0) {
    const hint = first.startsWith("{") ? " (a JSON line: is this a Mooncake trace? add --format mooncake)" : "";
    throw new TraceFormatError(`Azure header must have TIMESTAMP,ContextTokens,GeneratedTokens, got "${first.slice(0, 80)}"${hint}`);
  }
  const rows: TraceRow[] = [];
  for (let i = 1; i < all.length; i++) {
    const line = all[i].trim();
    if (line === "") continue;
    const f = line.split(",").map(field);
    if (f.length !== header.length) throw new TraceFormatError(`Azure line ${i + 1} has ${f.length} fields, the header ${header.length}: "${line}"`);
    const t = azureTime(f[ti]);
    if (!Number.isFinite(t)) throw new TraceFormatError(`Azure line ${i + 1} has TIMESTAMP "${f[ti]}"; expected a UTC date and time such as 2023-11-16 18:17:03.98`);
    // An empty field is malformed, not a zero (Number("") is 0).
    const ctx = DECIMAL.test(f[ci]) ? Number(f[ci]) : NaN;
    const gen = DECIMAL.test(f[gi]) ? Number(f[gi]) : NaN;
    if (!Number.isFinite(ctx) || !Number.isFinite(gen)) throw new TraceFormatError(`Azure line ${i + 1} is malformed: "${line}"`);
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

/**
 * Workloads for the load generator, all expressed as sessions of one or more turns.
 * A trace row is a one-turn session; a synthetic agent session has many turns separated by tool
 * gaps. Prompt text is made of pseudo-words so that it costs no tokenizer: each Mooncake hash id
 * maps to a deterministic block of words, so two requests that share hash ids share a real prefix.
 */
import type { BenchOptions } from "./args.ts";

/** One turn: text appended to the conversation, output length, then a tool gap before the next. */
export interface Turn {
  text: string;
  maxTokens: number;
  /** Milliseconds between this turn's completion and the next turn's send (already time-scaled). */
  gapAfterMs: number;
}

/** A conversation the driver plays turn by turn. */
export interface Session {
  id: string;
  /** Send time of the first turn, ms after the start (already time-scaled). */
  startMs: number;
  system?: string;
  turns: Turn[];
}

/** Short common words: each is one or two tokens for most tokenizers, the tiny ones included. */
const WORDS = (
  "the a cat dog sat ran big small red blue tree sun day play girl boy happy saw went home " +
  "ball park bird fish toy box cake hat car bed good nice mom dad friend little said look " +
  "time once upon there was she he it they we you and to in on with for of at up down"
).split(" ");

/** mulberry32: a tiny seeded generator, so every run of a workload sends the same prompts. */
export function seededRandom(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `count` deterministic pseudo-words for a key (a hash id, or a unique tag). */
export function wordsFor(key: number, count: number): string[] {
  const rnd = seededRandom(key * 2654435761 + 12345);
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]);
  return out;
}

/** Words in one scaled Mooncake hash block (512 tokens at scale 1). */
export function blockWords(lengthScale: number): number {
  return Math.max(1, Math.round(512 * lengthScale));
}

/** Prompt text for a trace row: the hash blocks' words, cut to the scaled input length. */
export function promptFromHashIds(hashIds: readonly number[], inputLength: number, o: BenchOptions): string {
  const per = blockWords(o.lengthScale);
  const want = Math.min(o.maxInputWords, Math.max(1, Math.round(inputLength * o.lengthScale)));
  const words: string[] = [];
  for (const h of hashIds) {
    if (words.length >= want) break;
    words.push(...wordsFor(h, per));
  }
  // Rows whose hash ids cover less than input_length get unique filler (no accidental sharing).
  let filler = 0;
  while (words.length < want) words.push(...wordsFor(1e9 + hashIds.length * 7919 + filler++, per));
  return words.slice(0, want).join(" ");
}

function outputTokens(n: number, o: BenchOptions): number {
  return Math.max(1, Math.min(o.maxOutputTokens, Math.round(n * o.outputScale)));
}

interface MooncakeRow {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids?: number[];
}

/** Parses a Mooncake JSONL trace (timestamp in ms, lengths in tokens, 512-token hash ids). */
export function mooncakeSessions(text: string, o: BenchOptions): Session[] {
  const out: Session[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length && out.length < o.maxRequests; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    let row: MooncakeRow;
    try {
      row = JSON.parse(line) as MooncakeRow;
    } catch {
      throw new Error(`Mooncake trace line ${i + 1} is not JSON: "${line.slice(0, 60)}"`);
    }
    if (typeof row.timestamp !== "number" || typeof row.input_length !== "number" || typeof row.output_length !== "number") {
      throw new Error(`Mooncake trace line ${i + 1} lacks timestamp/input_length/output_length: "${line.slice(0, 60)}"`);
    }
    out.push({
      id: `mc-${i}`,
      startMs: row.timestamp * o.timeScale,
      turns: [{ text: promptFromHashIds(row.hash_ids ?? [], row.input_length, o), maxTokens: outputTokens(row.output_length, o), gapAfterMs: 0 }],
    });
  }
  return rebase(out);
}

/** Parses an Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens). */
export function azureSessions(text: string, o: BenchOptions): Session[] {
  const out: Session[] = [];
  const lines = text.split("\n");
  for (let i = 1; i < lines.length && out.length < o.maxRequests; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const [ts, ctx, gen] = line.split(",");
    const t = Date.parse(ts.replace(" ", "T").replace(/(\.\d{3})\d*/, "$1") + "Z");
    const input = Number(ctx);
    const output = Number(gen);
    if (!Number.isFinite(t) || !Number.isFinite(input) || !Number.isFinite(output)) {
      throw new Error(`Azure trace line ${i + 1} is not "timestamp,context,generated": "${line.slice(0, 60)}"`);
    }
    const words = Math.min(o.maxInputWords, Math.max(1, Math.round(input * o.lengthScale)));
    out.push({
      id: `az-${i}`,
      startMs: t * o.timeScale,
      turns: [{ text: wordsFor(2e9 + i, words).join(" "), maxTokens: outputTokens(output, o), gapAfterMs: 0 }],
    });
  }
  return rebase(out);
}

/**
 * Synthetic agent sessions: a shared system prompt, a task, then turns of tool output and short
 * model replies with tool gaps between them — contexts grow and each turn reuses the last prefix.
 */
export function syntheticSessions(o: BenchOptions): Session[] {
  const rnd = seededRandom(o.seed);
  const exp = (mean: number) => -Math.log(1 - rnd()) * mean;
  const scaled = (n: number) => Math.min(o.maxInputWords, Math.max(1, Math.round(n * o.lengthScale)));
  const system = wordsFor(7, scaled(1024)).join(" ");
  const out: Session[] = [];
  let t = 0;
  let budget = o.maxRequests;
  for (let s = 0; s < o.sessions && budget > 0; s++) {
    const turns: Turn[] = [];
    const n = Math.min(o.turns, budget);
    for (let k = 0; k < n; k++) {
      const words = k === 0 ? scaled(2048) : scaled(256 + Math.floor(rnd() * 1024));
      turns.push({
        text: wordsFor(s * 1000 + k + 1, words).join(" "),
        maxTokens: outputTokens(64 + Math.floor(rnd() * 192), o),
        gapAfterMs: exp(o.toolGapMs) * o.timeScale,
      });
    }
    budget -= n;
    out.push({ id: `agent-${s}`, startMs: t, system, turns });
    t += exp(o.sessionIntervalMs) * o.timeScale;
  }
  return out;
}

function rebase(sessions: Session[]): Session[] {
  const t0 = sessions.reduce((m, s) => Math.min(m, s.startMs), Infinity);
  for (const s of sessions) s.startMs -= t0;
  return sessions.sort((a, b) => a.startMs - b.startMs);
}

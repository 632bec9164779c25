/**
 * The order in which a worker's chunked-prefill budget is handed to queued prompts. Pure: the
 * simulator's workers and the engine's scheduler (admission of waiting sequences) call the same
 * function.
 *
 * Agentic traffic mixes two kinds of prompt: a session's first turn (tens of thousands of uncached
 * tokens) and its continuations after a tool call (a long cached prefix plus a short tool result).
 * First-come-first-served makes a continuation wait behind every cold prompt ahead of it, which is
 * where TTFT tails come from. "Shortest first" serves the job with the least uncached work left,
 * with aging so a long job is never starved: each second waited counts as `agingTokensPerS` tokens
 * less work. Every queued job ages at the same rate, so in effect a job goes ahead of any shorter
 * one that arrived more than (its extra tokens ÷ agingTokensPerS) seconds after it.
 */

/** How queued prefills are ordered. */
export type PrefillOrder = "fcfs" | "short-first";

/** The fields of a queued prefill the ordering reads. */
export interface QueuedPrefill {
  /** Uncached tokens still to compute. */
  left: number;
  /** When it joined the queue (s). */
  enqueuedAt: number;
}

/** Options of {@link prefillOrder}. */
export interface PrefillOrderOptions {
  order: PrefillOrder;
  /** Tokens of credit per second waited (short-first only); 0 means pure shortest-first. */
  agingTokensPerS: number;
}

/** First-come-first-served (vLLM's and SGLang's default). */
export const FCFS: PrefillOrderOptions = { order: "fcfs", agingTokensPerS: 0 };

/**
 * Ours: least uncached work first, aged 2000 tokens per second waited. Of aging 0, 500, 2000 and
 * 8000 on 600 s simulator runs, 500–2000 cut P95 TTFT most (4–21%); 2000 kept P99 lowest
 * (docs/sim.md, "Third session"). The simulator's systems and `deno task serve` both use it.
 */
export const AGED_SHORT_FIRST: PrefillOrderOptions = { order: "short-first", agingTokensPerS: 2000 };

/**
 * Indices of `queue` in the order the prefill budget should be spent. For "fcfs" this is the
 * queue order; for "short-first" ascending `left − agingTokensPerS × wait`, ties by arrival.
 */
export function prefillOrder(queue: readonly QueuedPrefill[], now: number, opts: PrefillOrderOptions): number[] {
  const idx = queue.map((_, i) => i);
  if (opts.order === "fcfs" || queue.length < 2) return idx;
  if (!(opts.agingTokensPerS >= 0)) {
    throw new RangeError(`Prefill aging must be a non-negative number of tokens per second, got ${opts.agingTokensPerS}`);
  }
  const key = queue.map((j) => j.left - opts.agingTokensPerS * Math.max(0, now - j.enqueuedAt));
  return idx.sort((a, b) => key[a] - key[b] || queue[a].enqueuedAt - queue[b].enqueuedAt || a - b);
}

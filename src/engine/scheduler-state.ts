/**
 * Two pure computations of the scheduler's, on its sequences as they stand: the queue state a
 * planner and a router read, and how many steps a multi-step group's new KV blocks allow. Pure CPU logic.
 */
import type { QueueState } from "./scheduler-types.ts";
import type { Sequence } from "./sequence.ts";

/** What the waiting queue reports of itself (scheduler-queue.ts `gauges`, `uncachedBySequence`). */
export interface WaitingView {
  gauges(): { uncachedTokens: number; oldestWaitS: number; waitingDecodes: number };
  uncachedBySequence(): Iterable<[Sequence, number]>;
}

/**
 * What waits and runs now (Scheduler.queueState): uncached prompt tokens waiting and left to running
 * prefills, the oldest wait, decoding and prefilling counts; split by priority where any sequence has
 * one (`prioritized` > 0).
 */
export function queueStateOf(running: readonly Sequence[], waiting: WaitingView, prioritized: number): QueueState {
  const w = waiting.gauges();
  let tokens = w.uncachedTokens;
  let prefilling = 0;
  for (const seq of running) {
    if (!seq.inPrefill) continue;
    prefilling++;
    tokens += Math.max(0, seq.promptLength - seq.numComputed);
  }
  const out: QueueState = { waitingPrefillTokens: tokens, oldestWaitS: w.oldestWaitS, decoding: running.length - prefilling, prefilling, waitingDecodes: w.waitingDecodes };
  if (prioritized === 0) return out;
  // Uncached prompt tokens by priority (QueueState.prefillByPriority).
  const by = new Map<number, number>();
  const add = (p: number, n: number) => by.set(p, (by.get(p) ?? 0) + n);
  for (const seq of running) if (seq.inPrefill) add(seq.hints.priority ?? 0, Math.max(0, seq.promptLength - seq.numComputed));
  for (const [seq, n] of waiting.uncachedBySequence()) add(seq.hints.priority ?? 0, n);
  return { ...out, prefillByPriority: [...by].sort((a, b) => a[0] - b[0]) };
}

/**
 * The most steps, up to `steps`, whose new KV blocks fit in `room` free blocks, for decodes at
 * `startPos` holding `tables` blocks of `blockSize` (each step adds a position; the blocks each
 * needs grow with the steps), and the blocks each entry then needs. Zero steps: none fit.
 */
export function lookAheadBlocks(entries: readonly { startPos: number; tableLength: number }[], blockSize: number, room: number, steps: number): { steps: number; need: number[] } {
  const needFor = (k: number) => entries.map((e) => Math.max(0, Math.ceil((e.startPos + 1 + k) / blockSize) - e.tableLength));
  let granted = steps;
  while (granted > 0 && needFor(granted).reduce((a, b) => a + b, 0) > room) granted--;
  return { steps: granted, need: granted > 0 ? needFor(granted) : entries.map(() => 0) };
}

/**
 * Spans of a prompt a prefill chunk may not cut (an image whose positions attend to each other both
 * ways, Gemma 3's: its rows need all of its keys, written in one step). A chunk stops before such a
 * span it would end inside; one that starts in a span (its start, or after a prefix-cache hit that
 * ends inside it: the cached rows were computed with the whole image) runs to its end, past the
 * step's token budget if it must, as llama.cpp decodes an image in one batch.
 */

/** A span [start, end) of prompt positions. */
export type AtomicSpan = readonly [number, number];

/**
 * The tokens a chunk from `start` of at most `n` (at least 1) takes: `n`, shrunk to stop before a
 * span it would end inside, or grown to the end of the span it starts in (at most `pending`, the
 * tokens left). Spans in position order, not overlapping.
 */
export function spanChunk(spans: readonly AtomicSpan[] | undefined, start: number, n: number, pending: number): number {
  if (!spans || spans.length === 0 || n <= 0) return n;
  let take = n;
  for (const [s, t] of spans) {
    if (t <= start) continue;
    if (s <= start) {
      // The chunk starts in this span: all of it, whatever the budget.
      take = Math.min(Math.max(take, t - start), pending);
      continue;
    }
    // A span after the start that the chunk would end inside: stop before it.
    if (s < start + take && start + take < t) take = s - start;
    break;
  }
  return take;
}

/**
 * When a worker's tokens reach the cluster's front: each request's first and latest token as this
 * side sees them (a worker elsewhere measures on its own clock, without the hops the client pays),
 * and each gap between two of its token-bearing deltas, which the cluster observes in its ITL
 * histogram one by one as one engine does (a request's mean gap would flatten the quantiles).
 */
import type { GenerateResult, RequestHandle, StreamDelta } from "../engine/engine-types.ts";
import { AsyncQueue } from "../engine/events.ts";

/** Where a worker engine reports the gaps between a request's tokens (seconds); unset: nowhere. */
export interface TokenGapSink {
  onTokenGap?: ((gapS: number) => void) | undefined;
}

/** One request's token times on this side (ms on `performance.now()`'s clock). */
export class TokenClock {
  tFirst: number | undefined;
  tLast: number | undefined;

  constructor(readonly t0: number = performance.now()) {}

  /** A delta carrying tokens arrived at `t`: the gap since the previous one (s), undefined for the first. */
  tokens(t: number = performance.now()): number | undefined {
    const gap = this.tLast === undefined ? undefined : (t - this.tLast) / 1000;
    this.tFirst ??= t;
    this.tLast = t;
    return gap;
  }

  /**
   * `r` with its first and last token times as this side saw them: the worker's own clock leaves out
   * the hops between it and the cluster (a submit waits in the worker's queue while it steps; a token
   * waits in ours while the front tokenizes or streams), which the client pays.
   */
  frontTimes(r: GenerateResult): GenerateResult {
    if (r.firstTokenS === undefined || this.tFirst === undefined) return r;
    return { ...r, firstTokenS: (this.tFirst - this.t0) / 1000, lastTokenS: ((this.tLast ?? this.tFirst) - this.t0) / 1000 };
  }
}

/**
 * Reports to `sink` the gaps between the token-bearing deltas an engine in this thread pushes into
 * `h`'s stream, as it pushes them (whether or not anyone reads the stream: a request answered whole
 * never does). Returns `h`.
 */
export function reportTokenGaps(h: RequestHandle, sink: TokenGapSink): RequestHandle {
  const q = h.stream;
  if (!(q instanceof AsyncQueue)) return h;
  const clock = new TokenClock();
  q.observePush((d: StreamDelta) => {
    if (d.tokenIds.length === 0) return;
    const gap = clock.tokens();
    // A delta of n tokens (accepted drafts, steps run ahead) counts n gaps of a share each.
    if (gap !== undefined) for (let k = 0; k < d.tokenIds.length; k++) sink.onTokenGap?.(gap / d.tokenIds.length);
  });
  return h;
}

/**
 * What a cluster measures of the requests it serves: the client-facing histograms and counters
 * (/metrics) and, per planner interval, the arrivals and completions the planner's snapshot carries.
 */
import type { CompletedRequest, MetricsSnapshot } from "../../planner/types.ts";
import { EngineMetrics } from "../engine/engine-metrics.ts";
import { EngineOverloadedError, type GenerateResult } from "../engine/engine-types.ts";

/**
 * Completions a window keeps at most (the latest). Windows are emptied by the planner's tick, every
 * second; a cluster served with `--planner none` never ticks, and kept one record per request for
 * good (a week at 100 requests/s: 60M records, GBs). 65536 is far above a second's completions, so
 * the online planner sees them all; the SLA planner's 180 s window may hold more, and it reads their
 * count (`completedRequests`) for demand, the latest 65536 for lengths and latencies.
 */
export const MAX_WINDOW_COMPLETIONS = 65536;

/** Arrivals and completions since the last planner tick, plus the running metrics. */
export class RequestWindow {
  readonly metrics: EngineMetrics = new EngineMetrics();
  private windowStartS: number;
  private arrivals = { count: 0, promptTokens: 0, uncachedTokens: 0, outputTokens: 0 };
  private completions: CompletedRequest[] = [];
  /** Requests finished in this window, those cut from `completions` included. */
  private completedRequests = 0;

  constructor(private readonly now: () => number) {
    this.windowStartS = now() / 1000;
  }

  /** A request was routed: its prompt, the part no worker had cached, and its output budget. */
  arrived(promptTokens: number, uncachedTokens: number, outputTokens: number): void {
    this.arrivals.count++;
    this.arrivals.promptTokens += promptTokens;
    this.arrivals.uncachedTokens += uncachedTokens;
    this.arrivals.outputTokens += outputTokens;
    this.metrics.promptTokens += promptTokens;
  }

  /**
   * A request finished: submitted at `t0`, started on its decoding worker at `tStart` (after any
   * hand-off), both on the cluster's clock in ms; `maxTokens` is its output budget. Returns `r`.
   * The queue time is the wait on the worker that ran its first step (the prefill worker's, after a
   * hand-off; time spent moving a prefix before that counts as prefill), so queue + prefill = TTFT.
   */
  finished(r: GenerateResult, t0: number, tStart: number, maxTokens: number): GenerateResult {
    const m = this.metrics;
    // A worker's refusal reached the client as a 4xx (a full queue: 429), not as a finished request.
    if (r.refused) {
      if (r.refused instanceof EngineOverloadedError) m.rejected++;
      return r;
    }
    m.countFinish(r.error ? "error" : r.finishReason);
    m.generationTokens += r.completionTokens;
    const e2eS = (this.now() - t0) / 1000;
    m.e2e.observe(e2eS);
    const startS = (tStart - t0) / 1000;
    const times = r.firstTokenS === undefined ? r : { ...r, firstTokenS: startS + r.firstTokenS, lastTokenS: startS + (r.lastTokenS ?? r.firstTokenS) };
    m.observeRequest(times, e2eS, maxTokens);
    if (r.firstTokenS !== undefined) {
      const ttft = (tStart - t0) / 1000 + r.firstTokenS;
      const n = r.completionTokens;
      const itl = n > 1 ? ((r.lastTokenS ?? r.firstTokenS) - r.firstTokenS) / (n - 1) : 0;
      // The ITL histogram is fed gap by gap as tokens arrive (the workers' onTokenGap), not here.
      m.ttft.observe(ttft);
      this.completions.push({ isl: r.promptTokens, osl: n, ttftS: ttft, itlS: itl });
      this.completedRequests++;
      // Cut to the latest once twice over, so the copy is paid once per MAX_WINDOW_COMPLETIONS requests.
      if (this.completions.length >= 2 * MAX_WINDOW_COMPLETIONS) this.completions = this.completions.slice(-MAX_WINDOW_COMPLETIONS);
    }
    return r;
  }

  /** The window's part of a planner snapshot (workers filled by the caller); starts the next window. */
  take(): Omit<MetricsSnapshot, "workers"> {
    const now = this.now() / 1000;
    const a = this.arrivals;
    const out = {
      now, windowS: Math.max(1e-3, now - this.windowStartS), arrivals: a.count, arrivedPromptTokens: a.promptTokens,
      arrivedUncachedTokens: a.uncachedTokens, arrivedOutputTokens: a.outputTokens, completions: this.completions.slice(-MAX_WINDOW_COMPLETIONS),
      completedRequests: this.completedRequests,
    };
    this.completedRequests = 0;
    this.windowStartS = now;
    this.arrivals = { count: 0, promptTokens: 0, uncachedTokens: 0, outputTokens: 0 };
    this.completions = [];
    return out;
  }
}

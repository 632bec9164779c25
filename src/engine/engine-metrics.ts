/**
 * The engine's measurements: latency histograms (TTFT, ITL, end-to-end, queue time) and counters.
 * Values only; `src/serve/metrics.ts` renders them as Prometheus text.
 */

/** A cumulative histogram with fixed upper bounds (seconds), as Prometheus expects. */
export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = new Array(bounds.length).fill(0);
  }

  /** Records one observation. */
  observe(v: number): void {
    this.sum += v;
    this.count++;
    for (let i = 0; i < this.bounds.length; i++) if (v <= this.bounds[i]) this.counts[i]++;
  }
}

/** vLLM's TTFT buckets (seconds). */
export const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
/** vLLM's inter-token latency buckets (seconds). */
export const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
/** vLLM's request latency buckets (seconds). */
export const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960];

/** Everything the engine measures. */
export class EngineMetrics {
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly itl = new Histogram(ITL_BUCKETS);
  readonly e2e = new Histogram(E2E_BUCKETS);
  readonly queueTime = new Histogram(TTFT_BUCKETS);
  promptTokens = 0;
  generationTokens = 0;
  /** Generated tokens appended by jump-forward decoding (counted in generationTokens too). */
  jumpForwardTokens = 0;
  /** Speculative decoding: steps that verified a draft, the draft tokens verified, and those accepted. */
  specDrafts = 0;
  specDraftTokens = 0;
  specAcceptedTokens = 0;
  /** Entry i: drafts whose token at position i was accepted. */
  readonly specAcceptedPerPos: number[] = [];
  /** Finished requests by finish reason. */
  readonly finished = new Map<string, number>();
  /** Requests refused (queue full). */
  rejected = 0;
  /** Steps that failed inside the backend. */
  stepErrors = 0;

  /** Counts a finished request. */
  countFinish(reason: string): void {
    this.finished.set(reason, (this.finished.get(reason) ?? 0) + 1);
  }
}

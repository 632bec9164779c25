/**
 * The engine's measurements: latency histograms (TTFT, ITL, end-to-end, request phases) and counters,
 * and the gauges and counters `Engine.stats()` reports with them. Values only; `src/serve/metrics.ts`
 * renders them as Prometheus text.
 */
import type { EngineStats } from "./engine-types.ts";
import type { KvOffloadStats } from "./kv-offload.ts";
import type { SchedulerStats } from "./scheduler-types.ts";
import type { HostStateStats } from "./state-offload.ts";

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

/** vLLM's TTFT buckets (seconds; vllm/v1/metrics/loggers.py). */
export const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
/** vLLM's inter-token latency buckets (seconds). */
export const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
/** vLLM's request latency buckets (seconds), also its prefill, decode and queue time buckets. */
export const E2E_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
/**
 * vLLM's token-count buckets (its build_1_2_5_buckets): 1, 2, 5, 10, 20, 50, … Kept here up to 10⁹;
 * /metrics shows those up to the context length, as vLLM does (no request counts more tokens).
 */
export const TOKEN_BUCKETS: readonly number[] = Array.from({ length: 27 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

/** vLLM's per-step token buckets (`vllm:iteration_tokens_total`; it shows those up to its batch token budget). */
export const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/** What `EngineMetrics.observeRequest` reads of a finished request (seconds from its submission). */
export interface RequestTimes {
  promptTokens: number;
  completionTokens: number;
  firstTokenS?: number;
  lastTokenS?: number;
  /** Until its first step ran; undefined when none did (cancelled or refused while waiting). */
  queueS?: number;
}

/** Everything the engine measures. */
export class EngineMetrics {
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly itl = new Histogram(ITL_BUCKETS);
  readonly e2e = new Histogram(E2E_BUCKETS);
  /** Per finished request: its prompt and generated tokens, and its decode time (first token to last). */
  readonly promptLen = new Histogram(TOKEN_BUCKETS);
  readonly generationLen = new Histogram(TOKEN_BUCKETS);
  readonly decodeTime = new Histogram(E2E_BUCKETS);
  /**
   * vLLM's request phases, per finished request that got a step: waiting before its first step
   * (queue), from that step to its first token (prefill), from that step to its end (inference).
   */
  readonly queueTime = new Histogram(E2E_BUCKETS);
  readonly prefillTime = new Histogram(E2E_BUCKETS);
  readonly inferenceTime = new Histogram(E2E_BUCKETS);
  /** Each finished request's output budget (its max_tokens, or what the context left it). */
  readonly maxTokensParam = new Histogram(TOKEN_BUCKETS);
  /** Tokens each step ran (prompt chunks, decodes and draft tokens together). */
  readonly iterationTokens = new Histogram(ITERATION_TOKEN_BUCKETS);
  promptTokens = 0;
  generationTokens = 0;
  /** Generated tokens appended by jump-forward decoding (counted in generationTokens too). */
  jumpForwardTokens = 0;
  /** Speculative decoding: steps that verified a draft, the draft tokens verified, and those accepted. */
  specDrafts = 0;
  specDraftTokens = 0;
  specAcceptedTokens = 0;
  /** Multi-step decoding: forwards run past a step's first before its read (EngineOptions.schedulerSteps). */
  stepsRunAhead = 0;
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

  /**
   * Records a finished request (any finish reason, a cancelled one's too, as its e2e latency is):
   * its sizes and output budget; when it got a step, its queue, prefill and inference times; when it
   * produced a token, its decode time (first token to last). `e2eS`: seconds from submission to its end.
   */
  observeRequest(r: RequestTimes, e2eS: number, maxTokens: number): void {
    this.promptLen.observe(r.promptTokens);
    this.generationLen.observe(r.completionTokens);
    this.maxTokensParam.observe(maxTokens);
    if (r.queueS !== undefined) {
      const queueS = Math.max(0, r.queueS);
      this.queueTime.observe(queueS);
      this.inferenceTime.observe(Math.max(0, e2eS - queueS));
      if (r.firstTokenS !== undefined) this.prefillTime.observe(Math.max(0, r.firstTokenS - queueS));
    }
    if (r.firstTokenS !== undefined) this.decodeTime.observe(Math.max(0, (r.lastTokenS ?? r.firstTokenS) - r.firstTokenS));
  }
}

/** What an engine's state checkpoints report for its stats (state-checkpoints.ts, state-offload.ts). */
export interface StateStatsSource {
  checkpoints?: { size: number; capacity: number; taken: number; restores: number };
  host?: HostStateStats;
}

/**
 * An engine's stats: its scheduler's gauges and counters, its host tier's (`o`; zeros without one),
 * its state checkpoints' (`states`; zeros without), and the jump-forward and speculative decoding
 * counters of `metrics`.
 */
export function engineStats(scheduler: SchedulerStats, o: KvOffloadStats | undefined, metrics: EngineMetrics, states: StateStatsSource = {}): EngineStats {
  const { checkpoints: c, host: h } = states;
  return {
    ...scheduler, kvHostBlocks: o?.hostBlocks ?? 0, kvHostCapacityBlocks: o?.hostCapacityBlocks ?? 0, kvHostBytes: o?.hostBytes ?? 0,
    kvOffloadedBlocks: o?.offloadedBlocks ?? 0, kvRestoredBlocks: o?.restoredBlocks ?? 0, kvPrefetchedBlocks: o?.prefetchedBlocks ?? 0,
    stateCheckpoints: c?.size ?? 0, stateCheckpointCapacity: c?.capacity ?? 0, stateCheckpointsWritten: c?.taken ?? 0, stateCheckpointResumes: c?.restores ?? 0,
    hostStateCheckpoints: h?.held ?? 0, hostStateCapacity: h?.capacity ?? 0, hostStatesOffloaded: h?.offloaded ?? 0, hostStatesRestored: h?.restored ?? 0,
    jumpForwardTokens: metrics.jumpForwardTokens, stepsRunAhead: metrics.stepsRunAhead,
    specDrafts: metrics.specDrafts, specDraftTokens: metrics.specDraftTokens, specAcceptedTokens: metrics.specAcceptedTokens,
    specAcceptedPerPos: [...metrics.specAcceptedPerPos],
  };
}

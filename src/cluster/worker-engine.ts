/**
 * What a cluster needs from one worker's engine, wherever it runs: in this thread (an {@link Engine},
 * through {@link localWorkerEngine}) or in a worker thread (remote-engine.ts). Gauges are read
 * synchronously by the router; a remote worker answers them from the state it last reported.
 */
import type { KvEvent } from "../../kv/index.ts";
import type { Engine } from "../engine/engine.ts";
import type { EngineMetrics } from "../engine/engine-metrics.ts";
import type { EngineStats, GenerateRequest, RequestHandle } from "../engine/engine-types.ts";
import type { EventChannel } from "../engine/events.ts";
import type { PrefixKv } from "../engine/prefix-transfer.ts";
import type { LoraAdapter } from "../model/lora.ts";
import type { QueueState, StepMixing } from "../engine/scheduler-types.ts";
import { reportTokenGaps, type TokenGapSink } from "./token-gaps.ts";

/**
 * One worker's engine as the cluster drives it. Its `onTokenGap` (set by the cluster) is called with
 * each gap between two token-bearing deltas of a request as they reach the cluster (token-gaps.ts).
 */
export interface WorkerEngine extends TokenGapSink {
  readonly id: string;
  /** Tokens per KV block. */
  readonly blockSize: number;
  readonly maxModelLen: number;
  /** False once the worker can serve no more (its thread died or it stopped): the router skips it. */
  readonly alive: boolean;
  /** Blocks stored and removed, as they happen (feeds the cluster's global block index). */
  readonly kvEvents: EventChannel<KvEvent>;
  /** Finished requests by reason and token counters (histograms only for a local engine). */
  readonly metrics: EngineMetrics;
  /** Prefill chunks and decodes in one step or in separate steps (the planner's step-mixing action). */
  stepMixing: StepMixing;
  /** Queues a request (already checked against the context limit by the cluster). */
  submit(req: GenerateRequest): RequestHandle;
  /**
   * Throws what {@link submit} would throw for the client's mistakes in `req`, queueing nothing (the
   * cluster asks before it moves KV for a request, while the client can still be answered 400). A
   * worker elsewhere checks what it can here; it refuses the rest when the request reaches it.
   */
  check(req: GenerateRequest): void;
  markToolWait(sessionId: string, tool: string): void;
  /** The session's next turn runs on another worker: a tool wait noted here is over (Engine.sessionMovedAway). */
  sessionMovedAway(sessionId: string): void;
  /**
   * KV of the longest cached prefix of `tokens`, device then host tier (null when none is cached);
   * `handoff`: a prompt this worker just prefilled, with the block it ended in; `root`: the prompt's
   * cache namespace (Engine.exportPrefix).
   */
  exportPrefix(tokens: readonly number[], handoff?: boolean, root?: number): Promise<PrefixKv | null>;
  /** Loads a LoRA adapter as `name` (a worker elsewhere reads `adapter.source` itself and checks its fingerprint). */
  loadAdapter(name: string, adapter: LoraAdapter): Promise<void>;
  /** Unloads the adapter `name`. */
  unloadAdapter(name: string): Promise<void>;
  /** Lets go of the block held for a hand-off of `prompt` (in cache namespace `root`) that will not happen (Engine.dropHandoff). */
  dropHandoff(prompt: readonly number[], root?: number): void;
  /** Caches a prefix from another worker; resolves to the blocks written. */
  importPrefix(prefix: PrefixKv, sessionId?: string): Promise<number>;
  stats(): EngineStats;
  queueState(): QueueState;
  /**
   * Milliseconds the worker's warm-up took before it served (Engine.warmUp; undefined: none ran). A
   * worker elsewhere warms up before it reports ready (CreateClusterOptions.warmUp); one in this
   * thread when {@link warmUp} is called.
   */
  readonly warmUpMs?: number;
  /** An engine in this thread: warms it up (Engine.warmUp), before its first request. */
  warmUp?(): Promise<void>;
  /** Device blocks free or evictable now. */
  freeBlocks(): number;
  sessionStatusCounts(): Record<string, number> | undefined;
  stop(): Promise<void>;
}

/** An engine in this thread as a cluster worker. */
export function localWorkerEngine(engine: Engine): WorkerEngine {
  // Stopping (or stopped), it serves no more: the router must not pick it.
  let stopped = false;
  let warmUpMs: number | undefined;
  const w: WorkerEngine = {
    onTokenGap: undefined,
    id: engine.pool.workerId,
    blockSize: engine.pool.blockSize,
    maxModelLen: engine.maxModelLen,
    get alive() {
      return !stopped;
    },
    kvEvents: engine.kvEvents,
    metrics: engine.metrics,
    get stepMixing() {
      return engine.scheduler.stepMixing;
    },
    set stepMixing(m: StepMixing) {
      engine.scheduler.stepMixing = m;
    },
    get warmUpMs() {
      return warmUpMs;
    },
    async warmUp() {
      warmUpMs = await engine.warmUp();
    },
    submit: (req) => reportTokenGaps(engine.submit(req), w),
    check: (req) => engine.checkRequest(req),
    markToolWait: (sid, tool) => engine.markToolWait(sid, tool),
    sessionMovedAway: (sid) => engine.sessionMovedAway(sid),
    exportPrefix: (tokens, handoff, root) => engine.exportPrefix(tokens, handoff, root),
    // A refusal rejects (the executor's throw), as a remote worker's does.
    loadAdapter: (name, adapter) => new Promise<void>((resolve) => resolve(engine.loadAdapter(name, adapter))),
    unloadAdapter: (name) => new Promise<void>((resolve) => resolve(engine.unloadAdapter(name))),
    dropHandoff: (prompt, root) => void engine.dropHandoff(prompt, root),
    importPrefix: (prefix, sid) => Promise.resolve(engine.importPrefix(prefix, sid)),
    stats: () => engine.stats(),
    queueState: () => engine.scheduler.queueState(),
    freeBlocks: () => engine.pool.numFreeBlocks(),
    sessionStatusCounts: () => engine.sessionStatusCounts(),
    stop: () => {
      stopped = true;
      return engine.stop();
    },
  };
  return w;
}

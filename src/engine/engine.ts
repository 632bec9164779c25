/**
 * One worker: wires a scheduler, a KV block pool and a model runner to the worker loop
 * (engine-loop.ts), which plans each step, runs it, samples per request (seeded) and streams text to
 * each request's async iterator; requests are checked and admitted here (engine-admission.ts), end at
 * EOS / stop strings / max tokens / context limits (engine-output.ts), free their KV on finish or
 * cancel, and publish KV events and metrics.
 */
import { hasRecurrentState } from "../model/config.ts";
import { BlockPool, type EvictedBlock, type KvEvent, type SessionTracker } from "../../kv/index.ts";
import type { LoraAdapter } from "../model/lora.ts";
import { checkPromptTokens, endTokensOf, newActive, promptLogprobRowLimit, RequestChecks } from "./engine-admission.ts";
import { cacheRootOf, EngineAdapters } from "./engine-adapters.ts";
import { EngineDrafts } from "./engine-drafts.ts";
import { errorText, StepLoop } from "./engine-loop.ts";
import { EngineMetrics, engineStats } from "./engine-metrics.ts";
import type { EngineOptions } from "./engine-options.ts";
import { EngineOutput } from "./engine-output.ts";
import type { Active } from "./engine-request.ts";
import { EngineSessions, isKvRetention, KV_RETENTIONS } from "./engine-sessions.ts";
import { HostKvOffload } from "./kv-offload.ts";
import { exportHandoff, exportPrefix, importPrefix, type PrefixKv } from "./prefix-transfer.ts";
import { HandoffTails } from "./handoff-tails.ts";
import {
  type EngineStats, EngineOverloadedError, type GenerateRequest, type GenerateResult, type RequestHandle, type ServingEngine, type WorkerStatus,
} from "./engine-types.ts";
import { EventChannel } from "./events.ts";
import { warmUpRunner } from "./engine-warmup.ts";
import { Scheduler } from "./scheduler.ts";
import { countKvEvents, poolBlockManager, withoutHandoffTails, withoutPrefixHits } from "./scheduler-kv-adapter.ts";
import { publishStateChanges, StateCheckpoints } from "./state-checkpoints.ts";
import { exportState, StateImports } from "./state-import.ts";
import { stateBytesPerSlot, stateShapes } from "./kv-cache.ts";
import { HostStateTier, type HostStateStats } from "./state-offload.ts";
import type { StateRestore } from "./scheduler-queue.ts";
import type { StepMixing } from "./scheduler-types.ts";
import type { KvDType } from "../backend/types.ts";
import { AutoStepMixing } from "./step-mixing-auto.ts";
import { draftsFromBlock } from "./mtp-drafts.ts";

export type { EngineOptions } from "./engine-options.ts";
// Imported from here by a cluster's remote engine and by tests (engine-admission.ts defines them).
export { checkPromptTokens, promptLogprobRowLimit };

/** How far ahead a state checkpoint's session is asked to return (s) for it to be kept (StateCheckpoints' worth). */
const CHECKPOINT_HORIZON_S = 60;

/** One worker: a scheduler, a KV block pool and a model runner driven by one loop. */
export class Engine implements ServingEngine {
  readonly kvEvents: EventChannel<KvEvent> = new EventChannel<KvEvent>();
  readonly metrics: EngineMetrics = new EngineMetrics();
  readonly maxModelLen: number;
  readonly pool: BlockPool;
  readonly scheduler: Scheduler;
  private readonly active = new Map<number, Active>();
  private readonly now: () => number;
  readonly maxWaiting: number;
  /** Sequences whose next draft the draft model proposes at the end of this step (EngineDrafts fills and drains it). */
  private readonly wantDrafts = new Set<number>();
  private nextId = 0;
  private stopped = false;
  private stopping: Promise<void> | undefined;
  private readonly turns: EngineSessions | undefined;
  private readonly offload: HostKvOffload | undefined;
  private readonly tails: HandoffTails;
  private readonly adapters: EngineAdapters;
  /** A Gated DeltaNet model's state checkpoints (prefix reuse), if its runner keeps any. */
  readonly checkpoints: StateCheckpoints | undefined;
  /** States moved here with prefixes, on their way into checkpoints (undefined without checkpoints). */
  private readonly stateImports: StateImports | undefined;
  private readonly hostStates: HostStateTier | undefined;
  private readonly checks: RequestChecks;
  private readonly drafts: EngineDrafts;
  private readonly output: EngineOutput;
  private readonly steps: StepLoop;

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? (() => performance.now());
    const r = opts.runner;
    const retention = opts.kvRetention ?? "agent";
    if (!isKvRetention(retention)) throw new RangeError(`KV retention must be one of ${KV_RETENTIONS.join(", ")}, got "${retention}"`);
    this.turns = retention === "agent" ? new EngineSessions(opts.sessionTtlS ?? 3600, undefined, opts.workerId) : undefined;
    const clock = () => this.now() / 1000;
    // Counting the pool's events versions its prefix index, so queueState() need not re-probe the queue.
    const { sink: events, count: kvEventCount } = countKvEvents((e: KvEvent) => this.kvEvents.publish(e));
    // A failed write-back is counted; its prompt computes what the host held.
    const offload = opts.kvOffloadBlocks
      ? new HostKvOffload(r, r.blockSize, opts.kvOffloadBlocks, opts.workerId ?? "worker-0", clock, events, () => this.metrics.stepErrors++)
      : undefined;
    this.offload = offload;
    this.pool = new BlockPool({
      numBlocks: r.numBlocks, blockSize: r.blockSize, clock, events, workerId: opts.workerId, policy: this.turns?.policy,
      ...(offload ? { onEvict: (b: EvictedBlock) => offload.evicted(b) } : {}),
    });
    const steps = opts.schedulerSteps ?? 1;
    if (!Number.isInteger(steps) || steps < 1) throw new RangeError(`Scheduler steps must be a whole number of at least 1, got ${steps}`);
    if (opts.scheduler?.preemption === "swap" && !r.swap) throw new RangeError(`Preemption mode "swap" needs a runner that can copy KV to host memory`);
    // A hand-off's last block waits here between the prefill's end and the decode's admission: a
    // minute at most, and at most an eighth of the pool, so untaken ones never crowd the cache out.
    this.tails = new HandoffTails((ids) => this.pool.release(ids), clock, { maxBlocks: Math.floor(r.numBlocks / 8), ttlS: 60 });
    const maxPromptLogprobRows = promptLogprobRowLimit(opts.config.vocabSize);
    const blocks = poolBlockManager(this.pool, kvEventCount, this.tails);
    // A Gated DeltaNet model's state after a prefix is not in the prefix's blocks (nor, where the
    // sliding layers keep only their windows, are those): its hits reach only as far as a state
    // checkpoint the runner keeps (none without any), and no hand-off tails.
    const stateful = hasRecurrentState(opts.config) || r.stateSlots !== undefined;
    // Under agent-aware retention a checkpoint is worth its session's chance of returning within a minute.
    const worth = this.turns && ((sessionId: string | undefined) => sessionId === undefined ? 0 : this.turns!.tracker.returnProbability(sessionId, clock(), CHECKPOINT_HORIZON_S));
    const checkpoints = stateful && r.stateCheckpoints
      ? new StateCheckpoints(r.stateCheckpoints, r.blockSize, worth, publishStateChanges(events, this.pool.workerId, clock))
      : undefined;
    this.checkpoints = checkpoints;
    this.stateImports = checkpoints && r.writeState ? new StateImports(checkpoints, r, { ...stateShapes(opts.config), ...(r.windowSizes ? { window: r.windowSizes } : {}) }, () => this.scheduler.refreshCheckpointHolds()) : undefined;
    // Checkpoints taken for others go to host memory, and come back for a waiting prompt they fit.
    const hostStates = opts.hostStateCheckpoints ?? 0;
    if (!Number.isInteger(hostStates) || hostStates < 0) throw new RangeError(`Host state checkpoints must be a whole number of at least 0, got ${hostStates}`);
    this.hostStates = checkpoints && this.stateImports && r.readState && hostStates > 0 ? new HostStateTier(hostStates, r, worth) : undefined;
    if (this.hostStates && checkpoints) checkpoints.onEvict = (id, cp) => this.hostStates!.evicted(id, cp);
    const manager = !stateful ? blocks : withoutHandoffTails(checkpoints ? blocks : withoutPrefixHits(blocks));
    const tier = this.hostStates;
    const restore: StateRestore | undefined = tier && checkpoints && r.writeState
      ? (seq, limit, beyond, avoid) => tier.restore(seq, limit, beyond, avoid, checkpoints, (id, v) => r.writeState!(id, v))
      : undefined;
    // A model with recurrent layers verifies as many drafts a step as it keeps states from before them.
    const drafting = r.rollbackState ? { maxDraftingSequences: r.stateScratch ?? 0 } : {};
    this.scheduler = new Scheduler(manager, { maxPromptLogprobRows, ...drafting, ...opts.scheduler }, () => this.now() / 1000, checkpoints, restore);
    const auto = opts.autoStepMixing;
    const mixing = auto ? new AutoStepMixing(this.scheduler.stepMixing, this.scheduler.config.maxBatchTokens, auto === true ? {} : auto) : undefined;
    const poolTokens = (r.numBlocks - this.scheduler.config.watermarkBlocks) * r.blockSize;
    this.maxModelLen = Math.min(opts.maxModelLen ?? opts.config.contextLength, opts.config.contextLength, poolTokens);
    this.maxWaiting = opts.maxWaiting ?? 1024;
    const { active, scheduler, metrics, maxModelLen, now } = this;
    this.drafts = new EngineDrafts(opts, active, this.wantDrafts, scheduler, metrics, maxModelLen, now);
    this.adapters = new EngineAdapters(r);
    this.checks = new RequestChecks(opts.config, opts.tokenizer, maxModelLen, scheduler.config, this.adapters);
    const parts = { active, scheduler, metrics, drafts: this.drafts, offload, opts, now };
    this.output = new EngineOutput({ ...parts, turns: this.turns, maxModelLen, blockSize: r.blockSize });
    this.steps = new StepLoop({
      ...parts, pool: this.pool, output: this.output, tails: this.tails, sessions: this.turns?.tracker, mixing, maxModelLen,
      stopped: () => this.stopped, fail: (id, e) => this.failRequest(id, e),
      ...(this.stateImports ? { beforeSchedule: () => this.stateImports!.apply() } : {}),
    });
  }

  /**
   * The per-sequence state a runner keeps apart from KV blocks (a recurrent model's state; the sliding
   * layers' windows where they keep no more): slots for running sequences, checkpoints, and their bytes
   * in all; undefined where it keeps none.
   */
  recurrentState(): { slots: number; checkpoints: number; scratch: number; bytes: number; host?: HostStateStats } | undefined {
    const r = this.opts.runner;
    if (r.stateSlots === undefined) return undefined;
    const checkpoints = r.stateCheckpoints ?? 0;
    const scratch = r.stateScratch ?? 0;
    const host = this.hostStates?.stats();
    return { slots: r.stateSlots, checkpoints, scratch, bytes: r.stateBytes ?? (r.stateSlots + checkpoints + scratch) * stateBytesPerSlot(this.opts.config), ...(host ? { host } : {}) };
  }

  /**
   * Throws what {@link submit} throws for the client's mistakes in `req` (RequestParamError,
   * ContextLengthError, LoraAdapterError), queueing nothing: a cluster checks a request this way
   * before it moves KV for it, while the client can still be answered 400.
   */
  checkRequest(req: GenerateRequest): void {
    this.checks.check(req);
  }

  /** Queues a request and starts the loop if needed. Throws the typed errors of engine-types.ts. */
  submit(req: GenerateRequest): RequestHandle {
    if (this.stopped) throw new EngineOverloadedError("The engine is shutting down");
    const n = req.prompt.length;
    const checked = this.checks.check(req);
    const ends = endTokensOf(req, this.opts.config.eosTokenIds);
    if (this.scheduler.stats().waiting >= this.maxWaiting) {
      this.metrics.rejected++;
      throw new EngineOverloadedError(`${this.maxWaiting} requests are already waiting`);
    }
    const id = this.nextId++;
    const lora = checked.lora;
    const cacheRoot = cacheRootOf(lora?.root, req.cacheSalt);
    // Agent retention needs every turn in some session: a request naming none is placed by its prefix.
    const probe = req.sessionId === undefined && this.turns ? this.pool.probePrefix(req.prompt, Infinity, cacheRoot ?? null) : undefined;
    const sessionId = req.sessionId ?? (probe && this.turns?.infer(req.prompt, probe.metas, probe.numTokens, id, this.pool.blockSize, cacheRoot));
    if (sessionId !== undefined) this.turns?.started(sessionId, this.now() / 1000);
    const wholePrompt = req.promptLogprobs !== undefined;
    const seq = this.scheduler.submit(id, req.prompt, {
      sessionId, startsInReasoning: req.startsInReasoning, prefillOnly: req.prefillOnly, ...(wholePrompt ? { wholePrompt } : {}), ...(req.priority ? { priority: req.priority } : {}),
      ...(req.embed === true && !req.prefillOnly ? { promptOnly: true } : {}),
      ...(lora ? { adapterSlot: lora.slot } : {}), ...(cacheRoot === undefined ? {} : { cacheRoot }),
      ...(this.opts.config.vision?.bidirectional && req.images?.length ? { atomicSpans: req.images.map((im): [number, number] => [im.start, im.start + im.length]) } : {}),
    });
    let resolve!: (r: GenerateResult) => void;
    const result = new Promise<GenerateResult>((r) => (resolve = r));
    const t0 = this.now();
    const cancel = () => this.cancel(id);
    const a = newActive(req, seq, checked, { sessionId, ends, resolve, t0, cancel, tokenizer: this.opts.tokenizer, vocabSize: this.opts.config.vocabSize });
    this.active.set(id, a);
    this.metrics.promptTokens += n;
    this.start();
    this.steps.wake();
    return { id, sessionId, stream: a.queue, result, cancel };
  }

  /**
   * Marks a session's turn as ended in a call to `tool`: its KV is now worth keeping until the
   * predicted return (learned from this session's and this tool's past gaps). The server calls it
   * after parsing tool calls out of a finished answer. No effect under "lru" retention.
   */
  markToolWait(sessionId: string, tool: string): void {
    this.turns?.waitsOnTool(sessionId, tool, this.now() / 1000);
    // An idle loop re-times its sleep: the session's blocks may be due for a prefetch.
    if (this.offload) this.steps.wake();
  }

  /**
   * The session's next turn runs on another engine (a cluster moved it): a tool wait noted here is
   * over, and its blocks here rank as an idle session's. No effect under "lru" retention.
   */
  sessionMovedAway(sessionId: string): void {
    this.turns?.movedAway(sessionId, this.now() / 1000);
  }

  /** What the agent-aware retention knows about sessions (undefined under "lru"). */
  get sessions(): SessionTracker | undefined {
    return this.turns?.tracker;
  }

  /**
   * KV of the longest cached prefix of `tokens` here, to move to another worker: device blocks, then
   * what the host tier holds after them (null when neither holds any). `handoff`: `tokens` is a prompt
   * this worker just prefilled, sent with the block it ended in (prefix-transfer.ts `exportHandoff`).
   * `root`: the cache namespace of the prompt (SequenceHints.cacheRoot, engine-adapters.ts `cacheRootOf`).
   */
  async exportPrefix(tokens: readonly number[], handoff = false, root?: number): Promise<PrefixKv | null> {
    // A model with recurrent state sends its longest checkpoint within the cached blocks too, read
    // before anything is awaited: the blocks' reads are queued in the same turn, so both are of now.
    // One before the last token: the request the move is for computes that token (for its logits), so
    // only a checkpoint before it can start it.
    const reach = this.checkpoints ? Math.min(this.pool.cachedPrefixTokens(tokens, Infinity, root ?? null), tokens.length - 1) : 0;
    // A longer state in the host tier than any on the device goes instead.
    const device = this.checkpoints?.longest(tokens, reach, root ?? null)?.length ?? 0;
    const held = this.hostStates?.held(tokens, reach, root ?? null, device);
    const state = held ? Promise.resolve(held) : this.checkpoints && exportState(this.checkpoints, this.opts.runner, tokens, reach, root ?? null);
    let prefix: PrefixKv | null;
    try {
      prefix = await (handoff ? exportHandoff(this.pool, this.opts.runner, tokens, this.tails, this.offload, root) : exportPrefix(this.pool, this.opts.runner, tokens, Infinity, this.offload, root));
    } finally {
      // Settled either way: a failed block read leaves no state read unawaited.
      await state?.catch(() => undefined);
    }
    const s = await state;
    return prefix === null || s === undefined || s.tokens > prefix.tokens.length ? prefix : { ...prefix, state: s };
  }

  /**
   * Lets go of the last block held for a hand-off of `prompt` that will not happen (its request was
   * cancelled after the prefill): the block is freed now instead of when its hold runs out, and nothing
   * is read or sent. `root`: the prompt's cache namespace. True when a block was held.
   */
  dropHandoff(prompt: readonly number[], root?: number): boolean {
    const tail = this.tails.take(prompt, root);
    if (tail === null) return false;
    this.pool.release([tail]);
    return true;
  }

  /**
   * Caches a prefix moved from another worker, ranked as `sessionId`'s; a hand-off's last block is held
   * for the request with that prompt. Returns the blocks written.
   */
  importPrefix(prefix: PrefixKv, sessionId?: string): number {
    // A recurrent state is checked before any block is written, and written at the loop's next turn (state-import.ts).
    const queued = this.stateImports?.queue(prefix, sessionId) ?? false;
    const written = importPrefix(this.pool, this.opts.runner, prefix, sessionId === undefined ? undefined : { sessionId }, Infinity, this.tails);
    if (queued) {
      this.steps.start();
      this.steps.wake();
    }
    return written;
  }

  /** Loads a LoRA adapter as `name` (engine-adapters.ts); requests name it in GenerateRequest.adapter. */
  loadAdapter(name: string, adapter: LoraAdapter): void {
    this.adapters.load(name, adapter);
  }

  /** Unloads the adapter `name`; refused while requests use it. */
  unloadAdapter(name: string): void {
    let inUse = 0;
    for (const a of this.active.values()) if (a.req.adapter === name) inUse++;
    this.adapters.unload(name, inUse);
  }

  /** Names of the loaded adapters. */
  adapterNames(): string[] {
    return this.adapters.names();
  }

  /** The adapters of running and of waiting requests, each named once. */
  adapterRequests(): { running: string[]; waiting: string[] } {
    const running = new Set<string>(), waiting = new Set<string>();
    for (const a of this.active.values()) if (a.req.adapter !== undefined) (a.seq.status === "running" ? running : waiting).add(a.req.adapter);
    return { running: [...running], waiting: [...waiting] };
  }

  /** Cancels a request; its KV blocks are freed now or at the end of the step in flight. */
  cancel(id: number): void {
    const a = this.active.get(id);
    if (!a || a.done) return;
    this.scheduler.abort(id);
    if (a.seq.status === "finished") this.output.finish(a, "abort");
    this.steps.wake();
  }


  /** Starts the worker loop (idempotent). */
  start(): void {
    this.steps.start();
  }

  /**
   * Ends one request whose own host-side work threw (its grammar's mask, its text): the error is its
   * result's, and the others in its step go on. Its blocks go back now, or at the step's commit.
   */
  private failRequest(id: number, e: unknown): void {
    const a = this.active.get(id);
    if (!a || a.done) return;
    a.error ??= errorText(e);
    this.cancel(id);
  }

  /** Stops the loop and cancels everything still active. */
  stop(): Promise<void> {
    // Idempotent: the device memory is released once, however many callers ask.
    this.stopping ??= (async () => {
      this.stopped = true;
      for (const id of [...this.active.keys()]) this.cancel(id);
      this.steps.wake();
      await this.steps.running;
      this.opts.runner.close();
      this.drafts.close();
    })();
    return this.stopping;
  }

  /** Scheduler gauges and counters (queue, running, KV blocks, prefix hits) and the host tier's. */
  stats(): EngineStats {
    const o = this.offload?.stats();
    return engineStats(this.scheduler.stats(), o, this.metrics, { checkpoints: this.checkpoints, host: this.hostStates?.stats() });
  }

  /** The element type of this engine's KV cache (f16 halves its memory; engine-factory.ts `kvCacheDtype`). */
  get kvCacheDtype(): KvDType {
    return this.opts.runner.kvDtype ?? "f32";
  }

  /**
   * Runs the kinds of step serving runs once on a free KV block before the first request
   * (engine-warmup.ts), so that a backend's kernels are compiled, and a device that cannot run them
   * fails, at start rather than at a user's request. Nothing is committed or counted: the block
   * stays free. Only before the first request. Resolves to the wall-clock milliseconds it took.
   */
  async warmUp(): Promise<number> {
    // Before any request, no block is used or cached: block 0 holds nothing anyone reads.
    if (this.nextId > 0 || this.pool.numUsedBlocks() > 0) throw new Error("An engine warms up only before its first request");
    const t0 = performance.now();
    const spec = this.opts.speculative;
    await warmUpRunner(this.opts.runner, this.opts.config.vocabSize, this.maxModelLen, this.schedulerSteps, draftsFromBlock(spec) ? spec.numTokens : 0, this.opts.config.vision);
    return performance.now() - t0;
  }

  /** The most forwards a step of plain decodes runs before it reads its tokens (EngineOptions.schedulerSteps). */
  get schedulerSteps(): number {
    return this.opts.schedulerSteps ?? 1;
  }

  /** How steps run prefill chunks and decodes now. */
  get stepMixing(): StepMixing {
    return this.scheduler.stepMixing;
  }

  /** Sessions by status under "agent" retention. */
  sessionStatusCounts(): Record<string, number> | undefined {
    return this.turns?.tracker.statusCounts();
  }

  /** This one worker. */
  workerStatuses(): WorkerStatus[] {
    const s = this.stats();
    return [{ id: this.opts.workerId ?? "worker-0", role: this.scheduler.config.role, waiting: s.waiting, running: s.running, kvUsage: s.kvUsedBlocks / Math.max(1, s.kvTotalBlocks) }];
  }

  /** Requests not yet finished. */
  get activeRequests(): number {
    return this.active.size;
  }

}

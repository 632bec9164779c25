/**
 * The worker loop: plans a step with the scheduler, runs it on the model, samples per request
 * (seeded), streams text to each request's async iterator, applies EOS / stop strings / max tokens
 * / context limits, frees KV on finish or cancel, and publishes KV events and metrics.
 */
import { BlockPool, type EvictedBlock, type KvEvent, type SessionTracker } from "../../kv/index.ts";
import type { LoraAdapter } from "../model/lora.ts";
import { cacheRootOf, EngineAdapters } from "./engine-adapters.ts";
import { EngineMetrics } from "./engine-metrics.ts";
import { EngineSessions, inferSessionId, isKvRetention, KV_RETENTIONS } from "./engine-sessions.ts";
import type { EngineOptions } from "./engine-options.ts";
import { type Active, keepPromptLogprobs, resultOf, samplingRow, speculates, stepExtras } from "./engine-request.ts";
import type { StepOutput } from "./engine-runner.ts";
import { OutputText } from "./engine-text.ts";
import { tokenTextOf } from "../model/config.ts";
import { HostKvOffload } from "./kv-offload.ts";
import { OutputConstraint, TokenMask, TokenTrie } from "./output-constraint.ts";
import { nestsTooDeeply, SchemaError } from "./json-schema.ts";
import { AFTER_THINK } from "./grammar.ts";
import { checkSamplingRequest, LogitAdjuster } from "./logit-adjust.ts";
import { exportHandoff, exportPrefix, importPrefix, type PrefixKv } from "./prefix-transfer.ts";
import { HandoffTails } from "./handoff-tails.ts";
import {
  type EngineStats, EngineOverloadedError, type GenerateRequest, RequestParamError, type GenerateResult, outputBudget, type RequestHandle, type ServingEngine, type StreamDelta,
  type WorkerStatus,
} from "./engine-types.ts";
import { AsyncQueue, EventChannel } from "./events.ts";
import { seededUniforms } from "./sampler-rng.ts";
import { Scheduler } from "./scheduler.ts";
import { countKvEvents, poolBlockManager } from "./scheduler-kv-adapter.ts";
import type { StepMixing, StepPlan } from "./scheduler-types.ts";
import type { KvDType } from "../backend/types.ts";
import type { FinishReason, Sequence } from "./sequence.ts";
import { AutoStepMixing } from "./step-mixing-auto.ts";
import { checkSpeculation, ngramDraft } from "./ngram-draft.ts";
import { DraftModelProposer } from "./draft-model.ts";
import { SuffixCache } from "./suffix-draft.ts";
import { TokenRules } from "./token-rules.ts";
import { stepLogprobs, verifiableDraftLength } from "./draft-extras.ts";
import { BudgetMasks } from "./reasoning-budget.ts";
import { RepeatTracker } from "./repeat-penalty.ts";
import { type StepRecord, stepShapeOf } from "./step-record.ts";

export type { EngineOptions } from "./engine-options.ts";


/** Lets I/O callbacks run between steps (a CPU backend's forward never yields on its own). */
const yieldToEventLoop = (): Promise<void> => {
  // setImmediate runs after pending I/O without setTimeout's 1 ms clamp; Deno and Node both have it.
  const immediate = (globalThis as { setImmediate?: (fn: () => void) => unknown }).setImmediate;
  return new Promise<void>((r) => (immediate ? immediate(r) : setTimeout(r, 0)));
};

/** Bytes of f32 logits that one step's prompt log probabilities may take (on the device and downloaded). */
const PROMPT_LOGPROB_BYTES = 128 * 2 ** 20;

/**
 * Scored prompt tokens per step: 128 MiB of logit rows (220 at a 151,936-token vocabulary, where a
 * 2048-token chunk would be 1.2 GB), never fewer than 16.
 */
export function promptLogprobRowLimit(vocabSize: number): number {
  return Math.max(16, Math.floor(PROMPT_LOGPROB_BYTES / (4 * vocabSize)));
}

/**
 * Refuses a prompt with a token id the model has no embedding for: run, it would fail the forward of
 * its whole step, and with it every request batched there.
 */
export function checkPromptTokens(prompt: readonly number[], vocabSize: number): void {
  for (let i = 0; i < prompt.length; i++) {
    const id = prompt[i];
    if (!(Number.isInteger(id) && id >= 0 && id < vocabSize)) throw new RequestParamError(`Prompt token ${i} is ${id}, outside this model's vocabulary of ${vocabSize} tokens`);
  }
}

/** An error's "name: message", as a result's `error` carries it. */
function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

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
  /** Masks of reasoning budgets' rules (reasoning-budget.ts), shared by the requests that have one. */
  private readonly budgetMasks: BudgetMasks;
  /** Earlier outputs, for suffix drafts (`speculative.method` "suffix"; undefined otherwise). */
  private readonly suffixes: SuffixCache | undefined;
  /** The draft model's proposer (`speculative.method` "draft_model"; undefined otherwise). */
  private readonly drafter: DraftModelProposer | undefined;
  /** Sequences whose next draft the draft model proposes at the end of this step. */
  private readonly wantDrafts = new Set<number>();
  /** Token tries for output grammars, without and with control tokens' strings (built on first use). */
  private readonly tries: [TokenTrie | undefined, TokenTrie | undefined] = [undefined, undefined];
  private nextId = 0;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private stopped = false;
  private stopping: Promise<void> | undefined;
  private readonly turns: EngineSessions | undefined;
  private readonly mixing: AutoStepMixing | undefined;
  private readonly offload: HostKvOffload | undefined;
  private readonly tails: HandoffTails;
  private readonly adapters: EngineAdapters;

  constructor(private readonly opts: EngineOptions) {
    this.now = opts.now ?? (() => performance.now());
    const r = opts.runner;
    const retention = opts.kvRetention ?? "agent";
    if (!isKvRetention(retention)) throw new RangeError(`KV retention must be one of ${KV_RETENTIONS.join(", ")}, got "${retention}"`);
    this.turns = retention === "agent" ? new EngineSessions(opts.sessionTtlS ?? 3600) : undefined;
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
    if (opts.scheduler?.preemption === "swap" && !r.swap) throw new RangeError(`Preemption mode "swap" needs a runner that can copy KV to host memory`);
    // A hand-off's last block waits here between the prefill's end and the decode's admission: a
    // minute at most, and at most an eighth of the pool, so untaken ones never crowd the cache out.
    this.tails = new HandoffTails((ids) => this.pool.release(ids), clock, { maxBlocks: Math.floor(r.numBlocks / 8), ttlS: 60 });
    const maxPromptLogprobRows = promptLogprobRowLimit(opts.config.vocabSize);
    this.scheduler = new Scheduler(poolBlockManager(this.pool, kvEventCount, this.tails), { maxPromptLogprobRows, ...opts.scheduler }, () => this.now() / 1000);
    const auto = opts.autoStepMixing;
    if (auto) this.mixing = new AutoStepMixing(this.scheduler.stepMixing, this.scheduler.config.maxBatchTokens, auto === true ? {} : auto);
    const poolTokens = (r.numBlocks - this.scheduler.config.watermarkBlocks) * r.blockSize;
    this.maxModelLen = Math.min(opts.maxModelLen ?? opts.config.contextLength, opts.config.contextLength, poolTokens);
    this.maxWaiting = opts.maxWaiting ?? 1024;
    if (opts.speculative) checkSpeculation(opts.speculative);
    if (opts.speculative?.method === "suffix") this.suffixes = new SuffixCache(opts.speculative.maxCachedRequests);
    if (opts.speculative?.method === "draft_model") {
      if (!opts.draft) throw new RangeError(`Speculative method "draft_model" needs the draft model's runner (engine-factory.ts builds it from "${opts.speculative.model}")`);
      const { numTokens, schedule } = opts.speculative;
      this.drafter = new DraftModelProposer(opts.draft.runner, opts.config.vocabSize, opts.draft.contextLength, { numTokens, schedule: schedule ?? "heuristic" }, this.now);
    }
    this.budgetMasks = new BudgetMasks(opts.config.vocabSize);
    this.adapters = new EngineAdapters(r);
  }

  /**
   * Throws what {@link submit} throws for the client's mistakes in `req` (RequestParamError,
   * ContextLengthError, LoraAdapterError), queueing nothing: a cluster checks a request this way
   * before it moves KV for it, while the client can still be answered 400.
   */
  checkRequest(req: GenerateRequest): void {
    this.checked(req);
  }

  /** What submit() needs from `req` once it passes the checks, in the order they run. */
  private checked(req: GenerateRequest) {
    const maxTokens = outputBudget(req, this.maxModelLen);
    checkPromptTokens(req.prompt, this.opts.config.vocabSize);
    checkSamplingRequest(req, this.opts.config.vocabSize);
    const constraint = this.outputConstraint(req);
    const budget = this.reasoningBudget(req);
    const lora = req.adapter === undefined ? undefined : this.adapters.resolve(req.adapter);
    return { maxTokens, constraint, budget, lora };
  }

  /** Queues a request and starts the loop if needed. Throws the typed errors of engine-types.ts. */
  submit(req: GenerateRequest): RequestHandle {
    if (this.stopped) throw new EngineOverloadedError("The engine is shutting down");
    const n = req.prompt.length;
    const { maxTokens, constraint, budget, lora } = this.checked(req);
    const ends = [...new Set([...(req.ignoreEos ? [] : this.opts.config.eosTokenIds), ...(req.stopTokenIds ?? [])])];
    if (this.scheduler.stats().waiting >= this.maxWaiting) {
      this.metrics.rejected++;
      throw new EngineOverloadedError(`${this.maxWaiting} requests are already waiting`);
    }
    const id = this.nextId++;
    const cacheRoot = cacheRootOf(lora?.root, req.cacheSalt);
    // Agent retention needs every turn in some session: a request naming none is placed by its prefix.
    const sessionId = req.sessionId ?? (this.turns && inferSessionId(this.pool.probePrefix(req.prompt, Infinity, cacheRoot ?? null).metas, id));
    if (sessionId !== undefined) this.turns?.started(sessionId, this.now() / 1000);
    const wholePrompt = req.promptLogprobs !== undefined;
    const seq = this.scheduler.submit(id, req.prompt, {
      sessionId, startsInReasoning: req.startsInReasoning, prefillOnly: req.prefillOnly, ...(wholePrompt ? { wholePrompt } : {}), ...(req.priority ? { priority: req.priority } : {}),
      ...(req.embed === true && !req.prefillOnly ? { promptOnly: true } : {}),
      ...(lora ? { adapterSlot: lora.slot } : {}), ...(cacheRoot === undefined ? {} : { cacheRoot }),
    });
    let resolve!: (r: GenerateResult) => void;
    const result = new Promise<GenerateResult>((r) => (resolve = r));
    const t0 = this.now();
    const a: Active = {
      seq, req, sessionId, maxTokens, resolve, t0, tLast: t0, done: false,
      queue: new AsyncQueue<StreamDelta>(() => this.cancel(id)),
      text: new OutputText(this.opts.tokenizer, req.stop ?? [], req.skipSpecialTokens === false, req.minTokens ?? 0, req.includeStopString === true),
      rng: seededUniforms(req.seed ?? Math.floor(Math.random() * 2 ** 31), 0),
      adjust: LogitAdjuster.of(req),
      ...(req.repetitionPenalty !== undefined && req.repetitionPenalty !== 1 ? { repeats: new RepeatTracker(req.repetitionPenalty, this.opts.config.vocabSize) } : {}),
      constraint,
      ...(budget === undefined ? {} : { budget }),
      ends,
      ...(req.minTokens ? { minTokens: { count: req.minTokens, mask: TokenMask.allBut(this.opts.config.vocabSize, ends) } } : {}),
      ...(req.allowedTokenIds || req.badWords?.length ? { rules: new TokenRules(this.opts.config.vocabSize, req.allowedTokenIds, req.badWords) } : {}),
      logprobs: req.logprobs === undefined ? undefined : [],
      promptLogprobs: wholePrompt ? new Array<null>(n).fill(null) : undefined,
    };
    this.active.set(id, a);
    this.metrics.promptTokens += n;
    this.start();
    this.wake?.();
    return { id, sessionId, stream: a.queue, result, cancel: () => this.cancel(id) };
  }

  /**
   * Marks a session's turn as ended in a call to `tool`: its KV is now worth keeping until the
   * predicted return (learned from this session's and this tool's past gaps). The server calls it
   * after parsing tool calls out of a finished answer. No effect under "lru" retention.
   */
  markToolWait(sessionId: string, tool: string): void {
    this.turns?.waitsOnTool(sessionId, tool, this.now() / 1000);
    // An idle loop re-times its sleep: the session's blocks may be due for a prefetch.
    if (this.offload) this.wake?.();
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
  exportPrefix(tokens: readonly number[], handoff = false, root?: number): Promise<PrefixKv | null> {
    if (handoff) return exportHandoff(this.pool, this.opts.runner, tokens, this.tails, this.offload, root);
    return exportPrefix(this.pool, this.opts.runner, tokens, Infinity, this.offload, root);
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
    return importPrefix(this.pool, this.opts.runner, prefix, sessionId === undefined ? undefined : { sessionId }, Infinity, this.tails);
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
    if (a.seq.status === "finished") this.finish(a, "abort");
    this.wake?.();
  }

  /** The request's reasoning budget (undefined: none); a RequestParamError when it is not a count or the model's reasoning tokens are unknown. */
  private reasoningBudget(req: GenerateRequest): Active["budget"] {
    const limit = req.reasoningBudget;
    if (limit === undefined) return undefined;
    if (!Number.isInteger(limit) || limit < 0) throw new RequestParamError(`The reasoning budget must be a whole number of tokens, 0 or more, got ${limit}`);
    if (!this.scheduler.config.reasoningTokens) {
      throw new RequestParamError("A reasoning budget needs the model's reasoning tokens, which this server does not track (start it with --reasoning-parser)");
    }
    const tok = this.opts.tokenizer;
    return { limit, masks: this.budgetMasks, ...(tok.tokenBytes ? { bytesOf: (id: number) => tok.tokenBytes!(id) } : {}) };
  }

  /** The request's output constraint, if it has a grammar; a schema outside the subset is a RequestParamError. */
  private outputConstraint(req: GenerateRequest): OutputConstraint | undefined {
    if (req.grammar === undefined) return undefined;
    try {
      return new OutputConstraint(req.grammar, this.tokenTrie(req.skipSpecialTokens === false), this.opts.config.eosTokenIds, req.grammarAfter ?? (req.startsInReasoning ? AFTER_THINK : undefined));
    } catch (e) {
      if (e instanceof SchemaError) throw new RequestParamError(e.message);
      // Compiled again here, deeper in the stack than the server's check (or first, in a worker).
      if (nestsTooDeeply(e)) throw new RequestParamError("The output grammar (response_format, structured_outputs or a forced tool's parameters) nests too deeply to be followed");
      throw e;
    }
  }

  /**
   * The vocabulary's texts as they stream, in a trie built on first use; pieces of characters by
   * their bytes. With `special`, control tokens by their strings (EOS aside: it ends the output).
   */
  private tokenTrie(special: boolean): TokenTrie {
    const built = this.tries[special ? 1 : 0];
    if (built !== undefined) return built;
    const tok = this.opts.tokenizer, eos = this.opts.config.eosTokenIds;
    const texts = Array.from({ length: this.opts.config.vocabSize }, (_, id) => (special && eos.includes(id) ? "" : tokenTextOf(tok, id, { special })));
    return (this.tries[special ? 1 : 0] = new TokenTrie(texts, (id) => tok.tokenBytes?.(id)));
  }

  /** Starts the worker loop (idempotent). */
  start(): void {
    this.loopDone ??= this.loop().catch((e) => this.loopFailed(e));
  }

  /**
   * The loop threw outside a step's forward and one request's work (a bug, or the device's error
   * while copying KV): every request ends with the error instead of hanging, their blocks go back,
   * and the next submit starts a fresh loop. Never rejects (an unhandled rejection ends a process).
   */
  private loopFailed(e: unknown): void {
    this.metrics.stepErrors++;
    const error = errorText(e);
    this.wake = undefined;
    this.loopDone = undefined;
    try {
      this.scheduler.abandonStep();
    } catch { /* its sequences are finished below */ }
    for (const a of [...this.active.values()]) {
      a.error ??= error;
      try {
        this.scheduler.finish(a.seq.id, "abort");
      } catch { /* the request still ends */ }
      this.finish(a, "abort");
    }
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
      this.wake?.();
      await this.loopDone;
      this.opts.runner.close();
      this.drafter?.close();
    })();
    return this.stopping;
  }

  /** Scheduler gauges and counters (queue, running, KV blocks, prefix hits) and the host tier's. */
  stats(): EngineStats {
    const o = this.offload?.stats();
    return {
      ...this.scheduler.stats(), kvHostBlocks: o?.hostBlocks ?? 0, kvHostCapacityBlocks: o?.hostCapacityBlocks ?? 0, kvHostBytes: o?.hostBytes ?? 0,
      kvOffloadedBlocks: o?.offloadedBlocks ?? 0, kvRestoredBlocks: o?.restoredBlocks ?? 0, kvPrefetchedBlocks: o?.prefetchedBlocks ?? 0,
      jumpForwardTokens: this.metrics.jumpForwardTokens,
      specDrafts: this.metrics.specDrafts, specDraftTokens: this.metrics.specDraftTokens, specAcceptedTokens: this.metrics.specAcceptedTokens,
      specAcceptedPerPos: [...this.metrics.specAcceptedPerPos],
    };
  }

  /** The element type of this engine's KV cache (f16 halves its memory; engine-factory.ts `kvCacheDtype`). */
  get kvCacheDtype(): KvDType {
    return this.opts.runner.kvDtype ?? "f32";
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

  private async loop(): Promise<void> {
    // End of the last step's work, before its yield (undefined after an idle wait): back to back, each
    // step's cycle runs from there, so the cycles of a busy stretch tile its time.
    let tMark: number | undefined;
    while (!this.stopped || this.active.size > 0) {
      const tIter = tMark ?? this.now();
      this.offload?.beforeStep(this.pool, this.scheduler.waitingSequences, this.turns?.tracker, this.now() / 1000);
      const plan = this.scheduler.schedule();
      for (const id of plan.truncated) this.finishById(id, "length");
      const moved = plan.preempted.length + plan.truncated.length > 0;
      if (plan.entries.length === 0) {
        // A step that only preempted or truncated changed the state: plan again instead of sleeping.
        if (plan.swapOut.length > 0) await this.swapKv(plan).catch(() => this.metrics.stepErrors++);
        if (moved) continue;
        if (this.stopped) break;
        await this.sleep();
        this.wake = undefined;
        tMark = undefined;
        continue;
      }
      const tPlanned = this.now();
      let stepTokens = 0;
      for (const e of plan.entries) {
        stepTokens += e.tokens.length;
        const a = this.active.get(e.seqId);
        if (a && a.tScheduled === undefined) a.tScheduled = tPlanned;
      }
      this.metrics.iterationTokens.observe(stepTokens);
      // A draft's rows draw their uniforms before the entry's own row, in the order of the positions they sample.
      const drafts = plan.entries.map((e) => (e.draft ? Array.from({ length: e.draft }, () => samplingRow(this.active.get(e.seqId)!, true)) : undefined));
      const rows = plan.entries.map((e) => samplingRow(this.active.get(e.seqId)!, e.sample));
      const asked = stepExtras(plan.entries.map((e) => this.active.get(e.seqId)!), plan.entries, (i, err) => this.failRequest(plan.entries[i].seqId, err));
      const extras = drafts.some((d) => d) ? { ...asked, drafts } : asked;
      let sampled: StepOutput | undefined;
      let error: string | undefined;
      let record: StepRecord | undefined;
      try {
        await this.swapKv(plan);
        const t0 = this.now();
        sampled = await this.opts.runner.run(plan.entries, rows, extras);
        const seconds = (this.now() - t0) / 1000;
        // What a draft token costs to verify, for a schedule that weighs it (draft-schedule.ts).
        this.drafter?.observeTargetStep(plan.entries, seconds);
        if (this.opts.onStep || this.mixing) {
          record = { ...stepShapeOf(plan.entries), seconds, startS: t0 / 1000 };
          if (this.mixing) this.scheduler.stepMixing = this.mixing.observe(record);
        }
      } catch (e) {
        error = errorText(e);
        this.metrics.stepErrors++;
        for (const entry of plan.entries) this.scheduler.abort(entry.seqId);
      }
      const tokens = new Map<number, number>();
      const accepted = new Map<number, readonly number[]>();
      plan.entries.forEach((e, i) => {
        const a = this.active.get(e.seqId);
        // A request cancelled mid-step (or failed) is finished at the commit; its row is not read.
        if (!a || a.seq.abortRequested) return;
        try {
          if (sampled?.promptLogprobs) keepPromptLogprobs(a, e.startPos, sampled.promptLogprobs[i]);
          if (!sampled || !e.sample) return;
          if (sampled.hidden?.[i]) a.embedding = sampled.hidden[i];
          tokens.set(e.seqId, e.draft ? this.verifyDraft(e.seqId, e.tokens.slice(-e.draft), sampled.draftIds![i]!, sampled.ids[i], accepted) : sampled.ids[i]);
          const lps = stepLogprobs(sampled, i, accepted.get(e.seqId)?.length ?? 0);
          if (lps) a.pendingLogprobs = lps;
        } catch (err) {
          this.failRequest(e.seqId, err);
        }
      });
      const advanced = this.scheduler.commit(plan, tokens, accepted);
      for (const seq of advanced) {
        try {
          this.onTokens(seq, 1 + (accepted.get(seq.id)?.length ?? 0));
        } catch (err) {
          this.failRequest(seq.id, err);
        }
      }
      for (const e of plan.entries) {
        const a = this.active.get(e.seqId);
        if (a && !a.done && a.seq.status === "finished") this.finish(a, a.seq.finishReason ?? "abort", error);
      }
      if (this.wantDrafts.size > 0) await this.proposeFromModel();
      // Reported once the step's tokens are out, with the loop's own time (the last yield, planning,
      // committing, streaming) in cycleSeconds; before the yield, so a request's last step is counted
      // by the time its caller resumes.
      tMark = this.now();
      if (record) this.reportStep({ ...record, cycleSeconds: (tMark - tIter) / 1000 });
      await yieldToEventLoop();
    }
  }

  /** Hands a step's record to the step hook; a hook that throws (its log's disk full) is counted, and serving goes on. */
  private reportStep(record: StepRecord): void {
    try {
      this.opts.onStep?.(record);
    } catch {
      this.metrics.stepErrors++;
    }
  }

  /** Waits for a request, or until a host-tier prefetch is due. */
  private sleep(): Promise<void> {
    // A hand-off block nobody came for is let go once its TTL is out, idle or not.
    this.tails.prune();
    return new Promise<void>((resolve) => {
      const prefetchMs = this.turns && this.offload?.nextPrefetchMs(this.turns.tracker, this.now() / 1000);
      const tailS = this.tails.secondsToExpiry();
      const waits = [prefetchMs, tailS === undefined ? undefined : tailS * 1000 + 1].filter((x): x is number => x !== undefined);
      const ms = waits.length > 0 ? Math.min(...waits) : undefined;
      const timer = ms === undefined ? undefined : setTimeout(() => this.wake?.(), ms);
      this.wake = () => {
        if (timer !== undefined) clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Runs the plan's KV copies to and from host memory before its forward. */
  private async swapKv(plan: StepPlan): Promise<void> {
    if (plan.swapOut.length + plan.swapIn.length === 0) return;
    await this.opts.runner.swap!(plan.swapOut, plan.swapIn);
  }

  /**
   * Keeps the longest prefix of `draft` that agrees with the tokens sampled at its rows, and returns
   * the token sampled after it (at the first disagreement, or after the whole draft). Each row sampled
   * from the model given the tokens before it, so what is kept is what decoding one token a step
   * would have produced; the uniforms of the rows past the kept ones are drawn again later.
   */
  private verifyDraft(seqId: number, draft: readonly number[], samples: Int32Array, last: number, accepted: Map<number, readonly number[]>): number {
    let kept = 0;
    while (kept < draft.length && samples[kept] === draft[kept]) kept++;
    accepted.set(seqId, draft.slice(0, kept));
    this.drafter?.observe(seqId, draft.length, kept);
    this.active.get(seqId)!.rng.rewind(draft.length - kept);
    this.metrics.specDrafts++;
    this.metrics.specDraftTokens += draft.length;
    this.metrics.specAcceptedTokens += kept;
    const perPos = this.metrics.specAcceptedPerPos;
    for (let i = 0; i < kept; i++) perPos[i] = (perPos[i] ?? 0) + 1;
    return kept < draft.length ? samples[kept] : last;
  }

  /**
   * Streams the `count` tokens a step appended to `seq` (more than one when it accepted draft
   * tokens) as one delta, and ends the request at the first of them that ends it (EOS, a stop string,
   * the token budget or the context), dropping those after it. Then proposes the next draft.
   */
  private onTokens(seq: Sequence, count: number): void {
    const a = this.active.get(seq.id);
    if (!a || a.done) return;
    const start = seq.tokens.length - count;
    // The log probabilities the step computed for its tokens (kept with the request's others).
    const pending = a.pendingLogprobs;
    const lps = pending?.length === count && pending.every((lp, k) => lp.id === seq.tokens[start + k]) ? pending : undefined;
    a.pendingLogprobs = undefined;
    const t = this.now();
    if (start === seq.promptLength) {
      a.tFirst = t;
      this.metrics.ttft.observe((t - a.t0) / 1000);
    } else this.metrics.itl.observe((t - a.tLast) / 1000);
    a.tLast = t;
    if (a.req.embed && !a.req.prefillOnly) {
      // An embedding request ends at its prompt's last row: the token sampled there is dropped. (A
      // prefill handed to another worker ends as any other; the decode worker computes that row.)
      seq.truncate(seq.promptLength);
      return this.finish(a, "stop");
    }
    if (seq.status === "finished") {
      if (lps) a.logprobs?.push(...lps);
      this.metrics.generationTokens += count;
      return; // prefill role: the first token ends the sequence here
    }
    const first = start === seq.promptLength ? { cachedTokens: seq.numCachedPrompt, ...(a.promptLogprobs ? { promptLogprobs: a.promptLogprobs } : {}) } : {};
    let text = "";
    const ids: number[] = [];
    let eos = false;
    for (let k = 0; k < count; k++) {
      const tok = seq.tokens[start + k];
      this.metrics.generationTokens++;
      if (a.ends.includes(tok)) {
        seq.truncate(start + k + 1);
        eos = true;
        break;
      }
      text += a.text.push(tok);
      ids.push(tok);
      const end = start + k + 1;
      if (a.text.stopped || this.spent(a, end)) {
        seq.truncate(end);
        break;
      }
    }
    // Those of the tokens kept, an EOS that ended the request included (resultOf leaves it out).
    if (lps) a.logprobs?.push(...lps.slice(0, seq.tokens.length - start));
    if (ids.length > 0) a.queue.push({ text, tokenIds: ids, ...(lps ? { logprobs: lps.slice(0, ids.length) } : {}), ...first });
    if (eos) return this.finish(a, "stop");
    if (this.endIfDone(a)) return;
    this.jumpForward(a);
    if (!a.done && this.opts.speculative && speculates(a)) this.propose(a);
  }

  /**
   * Proposes the request's next draft: as many n-gram or suffix draft tokens as its budget and the context
   * leave room for, and its grammar allows; none while the batch is larger than `disableByBatchSize`.
   */
  private propose(a: Active): void {
    const seq = a.seq;
    if (this.scheduler.numRunning > (this.opts.speculative!.disableByBatchSize ?? Infinity)) return;
    const spec = this.opts.speculative!;
    if (spec.method === "draft_model") {
      this.wantDrafts.add(seq.id);
      return;
    }
    const room = this.draftRoom(a);
    // A salted request neither drafts from other requests' outputs nor leaves its own for them: how
    // often drafts are accepted would tell one tenant about another's text, as cache hits would.
    const shared = a.req.cacheSalt === undefined;
    this.offerDraft(a, spec.method === "suffix" ? this.suffixes!.draft(seq.tokens, spec, room, shared) : ngramDraft(seq.tokens, spec, room));
  }

  /** Draft tokens the request may take now: its budget and the context leave room for them and the token after. */
  private draftRoom(a: Active): number {
    return Math.min(this.opts.speculative!.numTokens, a.maxTokens - a.seq.numOutput - 1, this.maxModelLen - a.seq.tokens.length - 1);
  }

  /**
   * The draft model's drafts for the sequences that asked this step, in one batch (draft-model.ts).
   * Its own KV cache only: a draft that cannot be had is no draft, and the request decodes as usual.
   */
  private async proposeFromModel(): Promise<void> {
    const wants = [...this.wantDrafts].flatMap((id) => {
      const a = this.active.get(id);
      return a && !a.done && a.seq.status === "running" ? [{ seqId: id, tokens: a.seq.tokens, limit: this.draftRoom(a) }] : [];
    });
    this.wantDrafts.clear();
    let drafts: Map<number, number[]>;
    try {
      drafts = await this.drafter!.propose(wants);
    } catch {
      // No drafts this step; the requests decode as usual. Counted, so a failing draft model shows.
      this.metrics.stepErrors++;
      return;
    }
    for (const [id, draft] of drafts) {
      const a = this.active.get(id);
      // A request cancelled or preempted while the draft model ran takes no draft.
      if (a && !a.done && a.seq.status === "running") this.offerDraft(a, draft);
    }
  }

  /** Proposes `found` to the scheduler, cut at the first EOS and where the request's grammar stops verifying. */
  private offerDraft(a: Active, found: number[]): void {
    const seq = a.seq;
    // Rows after an EOS would verify tokens the request never keeps (it ends at the EOS). Agent
    // contexts hold EOS tokens (a chat template's end-of-turn), so copied drafts often cross one.
    const eos = found.findIndex((t) => a.ends.includes(t));
    if (eos >= 0) found = found.slice(0, eos + 1);
    const draft = found.slice(0, verifiableDraftLength(a, found, this.jumpsForward(a)));
    if (draft.length > 0) this.scheduler.propose(seq.id, draft);
  }

  /** Ends the request when a stop string matched or its token budget or the context is spent; whether it did. */
  private endIfDone(a: Active): boolean {
    if (a.text.stopped) this.finish(a, "stop");
    else if (this.spent(a, a.seq.tokens.length)) this.finish(a, "length");
    return a.done;
  }

  /** Whether `length` tokens of the request's sequence spend its token budget or the context. */
  private spent(a: Active, length: number): boolean {
    return length - a.seq.promptLength >= a.maxTokens || length >= this.maxModelLen;
  }

  /**
   * Appends the tokens the request's grammar forces next, unsampled (EngineOptions.jumpForward), and
   * streams them as one delta; the next step computes them as one chunk. Not for a request asking
   * for log probabilities: these tokens have none from the model.
   */
  private jumpForward(a: Active): void {
    if (!a.constraint || !this.jumpsForward(a)) return;
    const seq = a.seq;
    const forced = a.constraint.forced(seq.tokens, seq.promptLength, Math.min(a.maxTokens - seq.numOutput, this.maxModelLen - seq.tokens.length));
    if (forced.length === 0) return;
    let text = "";
    const ids: number[] = [];
    for (const tok of forced) {
      text += a.text.push(tok);
      ids.push(tok);
      if (a.text.stopped) break;
    }
    this.scheduler.extend(seq.id, ids);
    this.metrics.generationTokens += ids.length;
    this.metrics.jumpForwardTokens += ids.length;
    a.queue.push({ text, tokenIds: ids });
    this.endIfDone(a);
  }

  /** Whether the request's forced text is written by jump-forward (see {@link jumpForward}). */
  private jumpsForward(a: Active): boolean {
    return a.constraint !== undefined && !a.logprobs && this.opts.jumpForward !== false;
  }

  private finishById(id: number, reason: FinishReason): void {
    const a = this.active.get(id);
    if (a) this.finish(a, reason);
  }

  private finish(a: Active, reason: FinishReason, error?: string): void {
    if (a.done) return;
    a.done = true;
    if (reason !== "abort") {
      const rest = a.text.flush();
      if (rest) a.queue.push({ text: rest, tokenIds: [] });
    }
    // The turn is over; unless the server says it waits on a tool, the session goes idle. Set before
    // the blocks are released so the policy ranks them with the session's new status.
    if (a.sessionId !== undefined) {
      this.turns?.ended(a.sessionId, this.now() / 1000);
      this.offload?.turnEnded(a.sessionId, a.seq.tokens, a.seq.hints.cacheRoot);
    }
    // Suffix drafts come from earlier outputs too; a cancelled one is kept as far as it got.
    if (this.suffixes && !a.req.embed && a.req.cacheSalt === undefined) this.suffixes.add(a.seq.outputTokens);
    this.scheduler.finish(a.seq.id, reason);
    this.opts.runner.discardSwap?.(a.seq.id);
    this.drafter?.release(a.seq.id);
    this.active.delete(a.seq.id);
    a.queue.close();
    const result = resultOf(a, reason, error ?? a.error);
    this.metrics.countFinish(result.error ? "error" : reason);
    const e2eS = (this.now() - a.t0) / 1000;
    this.metrics.e2e.observe(e2eS);
    this.metrics.observeRequest(result, e2eS, a.maxTokens);
    a.resolve(result);
  }
}

/**
 * The cluster's side of an engine running in a worker thread (thread-host.ts) or a worker process
 * over TCP (src/cli/worker.ts), both serving worker-host.ts: forwards requests,
 * cancels, tool waits and prefix moves as messages, turns the worker's deltas and results back into
 * request handles, and answers the router's gauges from the state the worker last reported (bumped
 * at once for requests sent since, so a burst is not all routed to one worker).
 */
import type { LoraAdapter } from "../model/lora.ts";
import type { KvEvent } from "../../kv/index.ts";
import type { BackendChoice } from "../backend/select.ts";
import { EngineMetrics } from "../engine/engine-metrics.ts";
import { type EngineStats, type GenerateRequest, type GenerateResult, outputBudget, type RequestHandle, type StreamDelta } from "../engine/engine-types.ts";
import { checkPromptTokens } from "../engine/engine.ts";
import { checkSamplingRequest } from "../engine/logit-adjust.ts";
import { AsyncQueue, EventChannel } from "../engine/events.ts";
import type { PrefixKv } from "../engine/prefix-transfer.ts";
import type { QueueState, StepMixing } from "../engine/scheduler-types.ts";
import type { StepRecord } from "../engine/step-record.ts";
import { spawnThread, type ThreadPort } from "../runtime/threads.ts";
import { countersOf } from "./cluster-stats.ts";
import { TokenClock } from "./token-gaps.ts";
import { type FromWorker, type ModelLoad, prefixBuffers, type PortableEngineOptions, refusalOf, type WorkerReport, type ToWorker } from "./worker-protocol.ts";
import type { WorkerEngine } from "./worker-engine.ts";
import { type RemoteStartOptions, RemoteWorkerError, watchWorkerStart, workerStartTimeoutS } from "./worker-start.ts";

export { type RemoteStartOptions, RemoteWorkerError } from "./worker-start.ts";

interface Pending {
  queue: AsyncQueue<StreamDelta>;
  resolve: (r: GenerateResult) => void;
  /** Settles the handle's `refusal`: taken (undefined) or refused by the worker's engine (its typed error). */
  settle: (refused: Error | undefined) => void;
  promptTokens: number;
  sessionId?: string;
  /** When it was sent, and when its first and latest tokens came back (this side's clock). */
  clock: TokenClock;
}

/** An engine in a worker thread or a worker process. */
export class RemoteEngine implements WorkerEngine {
  readonly kvEvents: EventChannel<KvEvent> = new EventChannel<KvEvent>();
  readonly metrics: EngineMetrics = new EngineMetrics();
  maxModelLen = 0;
  blockSize = 0;
  /** The worker's vocabulary size (undefined from a worker that does not say). */
  vocabSize: number | undefined;
  /** How the worker's backend was chosen. */
  backendReason = "";
  /** Milliseconds the worker's warm-up took before it reported ready (undefined: none ran). */
  warmUpMs: number | undefined;
  /** The worker's model identity (src/model/fingerprint.ts), to compare with the server's. */
  modelFingerprint = "";
  /** Called with each gap between a request's tokens as they arrive here (the cluster's ITL histogram). */
  onTokenGap: ((gapS: number) => void) | undefined;
  private state: WorkerReport | undefined;
  private readonly requests = new Map<number, Pending>();
  private readonly calls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextRid = 0;
  private nextCid = 0;
  private failure: Error | undefined;

  private constructor(readonly id: string, private readonly port: ThreadPort, private readonly onStep: (id: string, r: StepRecord) => void) {}

  /** Starts a thread that loads the model at `load.path` on `backend` and runs one engine; resolves once it serves. */
  static async start(
    id: string, load: ModelLoad, backend: BackendChoice, engine: PortableEngineOptions, onStep: (id: string, r: StepRecord) => void, o: RemoteStartOptions = {},
  ): Promise<RemoteEngine> {
    return RemoteEngine.over(await spawnThread(new URL("./thread-host.ts", import.meta.url)), id, load, backend, engine, onStep, o);
  }

  /**
   * Drives the worker at the other end of `port` (a thread, or a worker process over TCP): asks it to
   * load the model at `load.path` (a path on its machine) on `backend`; resolves once it serves. Rejects
   * (RemoteWorkerError naming it) when the worker fails, ends, or stays silent past `o.startTimeoutS`.
   */
  static async over(
    port: ThreadPort, id: string, load: ModelLoad, backend: BackendChoice, engine: PortableEngineOptions, onStep: (id: string, r: StepRecord) => void,
    o: RemoteStartOptions = {},
  ): Promise<RemoteEngine> {
    const t = new RemoteEngine(id, port, onStep);
    let timeoutS: number;
    try {
      timeoutS = workerStartTimeoutS(o);
    } catch (e) {
      await port.close();
      throw e;
    }
    const ready = watchWorkerStart(port, id, load.path, timeoutS, { receive: (m) => t.receive(m), fail: (e) => t.fail(e) });
    t.send({ op: "init", modelPath: load.path, ...(load.quantize ? { quantize: load.quantize } : {}), ...(load.mmproj !== undefined ? { mmproj: load.mmproj } : {}), backend, workerId: id, engine });
    try {
      const msg = await ready;
      [t.maxModelLen, t.blockSize, t.vocabSize, t.backendReason, t.modelFingerprint] = [msg.maxModelLen, msg.blockSize, msg.vocabSize, msg.backend, msg.fingerprint];
      t.warmUpMs = msg.warmUpMs;
      t.absorb(msg.state);
    } catch (e) {
      t.fail(e as Error);
      await port.close();
      throw e;
    }
    return t;
  }

  get alive(): boolean {
    return this.failure === undefined;
  }

  get stepMixing(): StepMixing {
    return this.state!.stepMixing;
  }

  set stepMixing(mode: StepMixing) {
    this.state!.stepMixing = mode;
    this.send({ op: "mixing", mode });
  }

  submit(req: GenerateRequest): RequestHandle {
    if (this.failure) throw this.failure;
    this.check(req);
    const rid = this.nextRid++;
    let resolve!: (r: GenerateResult) => void;
    const result = new Promise<GenerateResult>((r) => (resolve = r));
    let settle!: (refused: Error | undefined) => void;
    const refusal = new Promise<Error | undefined>((r) => (settle = r));
    const cancel = () => this.send({ op: "cancel", rid });
    const p: Pending = {
      queue: new AsyncQueue<StreamDelta>(cancel), resolve, settle, promptTokens: req.prompt.length, sessionId: req.sessionId, clock: new TokenClock(),
    };
    this.requests.set(rid, p);
    // Until the thread reports, count the request where the router will look for it.
    const s = this.state!;
    s.stats.waiting++;
    s.queue.waitingPrefillTokens += req.prompt.length;
    this.send({ op: "submit", rid, req });
    return {
      id: rid, stream: p.queue, result, cancel, refusal,
      get sessionId() {
        return p.sessionId;
      },
    };
  }

  /**
   * The checks that need no engine (context, token ids, sampling parameters), so that the client's
   * common mistakes are thrown here; the worker refuses the rest (a grammar, a reasoning budget, an
   * adapter it lacks, a full queue) when the request reaches it: the handle's `refusal` and its
   * result's `refused` then carry the same typed error as one engine's submit throws.
   */
  check(req: GenerateRequest): void {
    outputBudget(req, this.maxModelLen);
    if (this.vocabSize === undefined) return;
    checkPromptTokens(req.prompt, this.vocabSize);
    checkSamplingRequest(req, this.vocabSize);
  }

  markToolWait(sessionId: string, tool: string): void {
    this.send({ op: "tool", sessionId, tool });
  }

  sessionMovedAway(sessionId: string): void {
    this.send({ op: "moved", sessionId });
  }

  async exportPrefix(tokens: readonly number[], handoff = false, root?: number): Promise<PrefixKv | null> {
    return (await this.call({ op: "export", cid: 0, tokens: [...tokens], ...(handoff ? { handoff } : {}), ...(root === undefined ? {} : { root }) })) as PrefixKv | null;
  }

  async loadAdapter(name: string, adapter: LoraAdapter): Promise<void> {
    await this.call({ op: "lora-load", cid: 0, name, path: adapter.source, scale: adapter.scale, fingerprint: adapter.fingerprint });
  }

  async unloadAdapter(name: string): Promise<void> {
    await this.call({ op: "lora-unload", cid: 0, name });
  }

  dropHandoff(prompt: readonly number[], root?: number): void {
    this.send({ op: "drop", tokens: [...prompt], ...(root === undefined ? {} : { root }) });
  }

  async importPrefix(prefix: PrefixKv, sessionId?: string): Promise<number> {
    return (await this.call({ op: "import", cid: 0, prefix, ...(sessionId === undefined ? {} : { sessionId }) }, prefixBuffers(prefix))) as number;
  }

  stats(): EngineStats {
    return { ...this.state!.stats };
  }

  queueState(): QueueState {
    return { ...this.state!.queue };
  }

  freeBlocks(): number {
    return this.state!.freeBlocks;
  }

  sessionStatusCounts(): Record<string, number> | undefined {
    return this.state!.sessions;
  }

  /**
   * Stops the engine, then the thread or connection. A worker that has not answered within `graceMs`
   * (a process stopped or cut off without its connection closing) is let go without its answer:
   * waiting for it would keep the server from ever shutting down or draining it.
   */
  async stop(graceMs = 10_000): Promise<void> {
    if (!this.failure) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
      await Promise.race([this.call({ op: "stop", cid: 0 }).catch(() => {}), late]);
      clearTimeout(timer);
    }
    this.fail(new RemoteWorkerError(`Worker ${this.id} has stopped`));
    await this.port.close();
  }

  private send(m: ToWorker, transfer?: ArrayBuffer[]): void {
    if (!this.failure) this.port.post(m, transfer);
  }

  private call(m: Extract<ToWorker, { cid: number }>, transfer?: ArrayBuffer[]): Promise<unknown> {
    if (this.failure) return Promise.reject(this.failure);
    const cid = this.nextCid++;
    return new Promise((resolve, reject) => {
      this.calls.set(cid, { resolve, reject });
      this.send({ ...m, cid }, transfer);
    });
  }

  private receive(m: FromWorker): void {
    switch (m.op) {
      case "state":
        // Once failed or stopped, its figures are final (see fail).
        return void (this.failure === undefined && this.absorb(m.state));
      case "accepted": {
        const p = this.requests.get(m.rid);
        if (p && m.sessionId !== undefined) p.sessionId = m.sessionId;
        p?.settle(undefined);
        return;
      }
      case "delta": {
        const p = this.requests.get(m.rid);
        if (!p) return;
        const n = m.delta.tokenIds.length;
        const gap = n > 0 ? p.clock.tokens() : undefined;
        // A delta of n tokens (accepted drafts, steps run ahead) counts n gaps of a share each, as token-gaps.ts does.
        if (gap !== undefined) for (let k = 0; k < n; k++) this.onTokenGap?.(gap / n);
        return p.queue.push(m.delta);
      }
      case "result":
      case "rejected": {
        const p = this.requests.get(m.rid);
        if (!p) return;
        this.requests.delete(m.rid);
        p.queue.close();
        const refused = m.op === "rejected" ? refusalOf(m) : undefined;
        p.settle(refused);
        p.resolve(m.op === "result" ? p.clock.frontTimes(m.result) : {
          text: "", tokenIds: [], finishReason: "abort", promptTokens: p.promptTokens, completionTokens: 0, cachedTokens: 0,
          error: `${m.name}: ${m.message}`, ...(refused ? { refused } : {}),
        });
        return;
      }
      case "reply": {
        const c = this.calls.get(m.cid);
        this.calls.delete(m.cid);
        if (m.error !== undefined) c?.reject(new RemoteWorkerError(m.error));
        else c?.resolve(m.value);
      }
    }
  }

  private absorb(s: WorkerReport): void {
    this.state = s;
    for (const e of s.events) this.kvEvents.publish(e);
    for (const r of s.steps) this.onStep(this.id, r);
    this.metrics.finished.clear();
    for (const [k, v] of s.finished) this.metrics.finished.set(k, v);
    this.metrics.promptTokens = s.promptTokens;
    this.metrics.generationTokens = s.generationTokens;
  }

  /** Ends every open request and call with `e` (the thread died or stopped). */
  private fail(e: Error): void {
    if (this.failure) return;
    this.failure = e;
    // A dead worker holds no requests and no KV any more: its last report's gauges would stay in the
    // cluster's figures (and /metrics) for good. Its counters stay, so that sums never go back.
    if (this.state) {
      const s = this.state;
      const sessions = s.sessions && Object.fromEntries(Object.keys(s.sessions).map((k) => [k, 0]));
      this.state = {
        ...s, stats: countersOf(s.stats), queue: { waitingPrefillTokens: 0, oldestWaitS: 0, decoding: 0, prefilling: 0, waitingDecodes: 0 }, freeBlocks: 0, sessions,
      };
    }
    for (const [rid, p] of this.requests) {
      this.requests.delete(rid);
      p.queue.close();
      // The worker's failure, not a refusal of the request: the result carries it as an engine error.
      p.settle(undefined);
      p.resolve({ text: "", tokenIds: [], finishReason: "abort", promptTokens: p.promptTokens, completionTokens: 0, cachedTokens: 0, error: e.message });
    }
    for (const [cid, c] of this.calls) {
      this.calls.delete(cid);
      c.reject(e);
    }
  }
}

/**
 * An in-process cluster: several engines on one backend behind our router and online role planner,
 * the same planner/ and kv/ code the simulator runs. Each request is routed over the workers'
 * prefix overlap (a global block index fed by their KV events), queues and measured speeds; a
 * prefill may run on a prefill-role worker and its KV move to the worker that decodes, and a
 * session's cached prefix may move from a busy holder to a peer. `tick()` (every planner interval,
 * driven by the caller's timer) hands the planner a snapshot and applies its decisions.
 */
import { chainHashes, GlobalBlockIndex } from "../../kv/index.ts";
import type { LinkModel, RouteCandidate, SessionRoute, SessionRouterOptions } from "../../planner/routers.ts";
import type { CompletedRequest, MetricsSnapshot, Planner, PlannerAction, Role } from "../../planner/types.ts";
import { EngineMetrics } from "../engine/engine-metrics.ts";
import {
  type EngineStats, EngineOverloadedError, type GenerateRequest, type GenerateResult, outputBudget, type RequestHandle, type ServingEngine, type WorkerStatus,
} from "../engine/engine-types.ts";
import type { StepMixing } from "../engine/scheduler-types.ts";
import { ClusterWorker } from "./cluster-worker.ts";
import { type ClusterRouterName, IN_PROCESS_LINK, routeRequest } from "./cluster-router.ts";
import { relayHandle } from "./relay-handle.ts";
import { sumStats } from "./cluster-stats.ts";
import type { WorkerEngine } from "./worker-engine.ts";

/** How to run a cluster. */
export interface ClusterOptions {
  /** Initial role of each engine, in order (default: all "mixed"). */
  roles?: readonly Role[];
  /** Decides role flips, the local-prefill threshold and step mixing every `intervalS` (null: roles stay). */
  planner?: Planner | null;
  router?: ClusterRouterName;
  /** Router tunables; `localPrefillThreshold` then follows the planner. */
  routerOptions?: Partial<SessionRouterOptions>;
  /** KV bytes per block (what a moved block costs on the link). */
  bytesPerBlock: number;
  links?: LinkModel;
  /** Requests waiting across the cluster at most before `submit` refuses (default 1024 per worker). */
  maxWaiting?: number;
  /** Prefill tokens/s assumed for a worker until it has measured its own (default 2000). */
  initialPrefillRate?: number;
  /** Milliseconds on a monotonic clock. */
  now?: () => number;
}

/** What the cluster has done so far. */
export interface ClusterCounters {
  /** Prefills run on a prefill worker and handed to another worker. */
  prefillHandoffs: number;
  /** Cached prefixes pulled from a peer (peer transfer) or sent to a prefill worker first. */
  prefixMoves: number;
  /** KV blocks written into a worker from another. */
  movedBlocks: number;
  /** Role flips applied. */
  flips: number;
}

/** Sessions remembered for affinity at most (oldest forgotten first). */
const MAX_SESSIONS = 65536;

/** Several engines serving as one. */
export class Cluster implements ServingEngine {
  readonly metrics: EngineMetrics = new EngineMetrics();
  readonly maxModelLen: number;
  readonly workers: readonly ClusterWorker[];
  readonly counters: ClusterCounters = { prefillHandoffs: 0, prefixMoves: 0, movedBlocks: 0, flips: 0 };
  private readonly byId = new Map<string, ClusterWorker>();
  private readonly index = new GlobalBlockIndex();
  private readonly lastWorker = new Map<string, string>();
  private readonly routerOptions: SessionRouterOptions;
  private readonly now: () => number;
  private readonly maxWaiting: number;
  private readonly blockSize: number;
  private nextId = 0;
  private windowStart: number;
  private arrivals = { count: 0, promptTokens: 0, uncachedTokens: 0, outputTokens: 0 };
  private completions: CompletedRequest[] = [];

  /**
   * Takes the workers' engines already started (local or in threads), their steps wired to
   * {@link observeStep}.
   */
  constructor(engines: readonly WorkerEngine[], private readonly o: ClusterOptions) {
    if (engines.length === 0) throw new RangeError("A cluster needs at least one engine");
    const roles = o.roles ?? engines.map((): Role => "mixed");
    if (roles.length !== engines.length) throw new RangeError(`${roles.length} roles were given for ${engines.length} workers`);
    if (!roles.some((r) => r !== "prefill")) throw new RangeError(`At least one worker must decode; the roles are ${roles.join(",")}`);
    this.now = o.now ?? (() => performance.now());
    this.workers = engines.map((e, i) => new ClusterWorker(e, roles[i], o.initialPrefillRate ?? 2000));
    for (const w of this.workers) {
      if (this.byId.has(w.id)) throw new RangeError(`Two workers are named "${w.id}"`);
      this.byId.set(w.id, w);
      w.engine.kvEvents.subscribe((e) => this.index.apply(e));
    }
    this.maxModelLen = Math.min(...engines.map((e) => e.maxModelLen));
    this.blockSize = engines[0].blockSize;
    this.maxWaiting = o.maxWaiting ?? 1024 * engines.length;
    this.routerOptions = { localPrefillThreshold: 512, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5, memoryFullS: 1, ...o.routerOptions };
    this.windowStart = this.now() / 1000;
  }

  /** Feeds an engine step of worker `id` to its window (the engines' `onStep`). */
  observeStep(id: string, r: Parameters<ClusterWorker["observeStep"]>[0]): void {
    this.byId.get(id)?.observeStep(r);
  }

  /** The current local-prefill threshold (uncached tokens a decode worker prefills itself). */
  get localPrefillThreshold(): number {
    return this.routerOptions.localPrefillThreshold;
  }

  /** The first worker's step mixing (the planner sets all workers alike). */
  get stepMixing(): StepMixing {
    return this.workers[0].engine.stepMixing;
  }

  /** Routes and queues a request. Throws the typed errors of engine-types.ts. */
  submit(req: GenerateRequest): RequestHandle {
    const maxTokens = outputBudget(req, this.maxModelLen);
    const waiting = this.workers.reduce((a, w) => a + w.engine.stats().waiting, 0);
    if (waiting >= this.maxWaiting) {
      this.metrics.rejected++;
      throw new EngineOverloadedError(`${this.maxWaiting} requests are already waiting`);
    }
    const { route, cands } = this.route(req);
    const dec = this.byId.get(route.decodeWorker)!;
    const best = cands.reduce((a, c) => Math.max(a, c.overlapDevice), 0);
    this.arrivals.count++;
    this.arrivals.promptTokens += req.prompt.length;
    this.arrivals.uncachedTokens += Math.max(0, req.prompt.length - best * this.blockSize);
    this.arrivals.outputTokens += maxTokens;
    this.metrics.promptTokens += req.prompt.length;
    if (req.sessionId !== undefined) this.remember(req.sessionId, dec.id);
    const t0 = this.now();
    const id = this.nextId++;
    let tStart = t0;
    let h: RequestHandle;
    if (route.prefillWorker === null && route.prefixSource === undefined) h = dec.engine.submit(req);
    else {
      const hop = { cancel: () => {} };
      const start = this.hop(req, route, dec, hop).then((inner) => {
        tStart = this.now();
        return inner;
      });
      h = relayHandle(id, req.prompt.length, req.sessionId, start, () => hop.cancel());
    }
    const result = h.result.then((r) => {
      // A session the worker inferred (no key in the request) is remembered for its tool waits.
      if (req.sessionId === undefined && h.sessionId !== undefined) this.remember(h.sessionId, dec.id);
      return this.finished(r, t0, tStart);
    });
    // The session may be known only later (inferred by a worker, or once a hand-off is done).
    return { id, stream: h.stream, result, cancel: () => h.cancel(), get sessionId() { return h.sessionId; } };
  }

  /** Forwards a tool wait to the worker that served the session last (every worker when unknown). */
  markToolWait(sessionId: string, tool: string): void {
    const w = this.byId.get(this.lastWorker.get(sessionId) ?? "");
    for (const t of w ? [w] : this.workers) t.engine.markToolWait(sessionId, tool);
  }

  /** Gauges and counters summed over workers. */
  stats(): EngineStats {
    return sumStats(this.workers.map((w) => w.engine.stats()));
  }

  /** Sessions by status, summed over workers (undefined under LRU retention). */
  sessionStatusCounts(): Record<string, number> | undefined {
    let out: Record<string, number> | undefined;
    for (const w of this.workers) {
      const c = w.engine.sessionStatusCounts();
      if (!c) continue;
      out ??= {};
      for (const [k, v] of Object.entries(c)) out[k] = (out[k] ?? 0) + v;
    }
    return out;
  }

  /** Each worker's role and load. */
  workerStatuses(): WorkerStatus[] {
    return this.workers.map((w) => w.status());
  }

  /** One planner interval: snapshot, decisions, applied. Returns the decisions. */
  tick(): PlannerAction[] {
    const now = this.now() / 1000;
    const snap: MetricsSnapshot = {
      now, windowS: Math.max(1e-3, now - this.windowStart), workers: this.workers.map((w) => w.snapshot()),
      arrivals: this.arrivals.count, arrivedPromptTokens: this.arrivals.promptTokens, arrivedUncachedTokens: this.arrivals.uncachedTokens,
      arrivedOutputTokens: this.arrivals.outputTokens, completions: this.completions,
    };
    this.windowStart = now;
    this.arrivals = { count: 0, promptTokens: 0, uncachedTokens: 0, outputTokens: 0 };
    this.completions = [];
    const actions = this.o.planner?.tick(snap) ?? [];
    for (const a of actions) this.apply(a);
    return actions;
  }

  /** Stops every engine. */
  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.engine.stop()));
  }

  private apply(a: PlannerAction): void {
    if (a.kind === "flip") {
      const w = this.byId.get(a.workerId);
      // A flip only changes what the router sends; work already on the worker drains there.
      if (w && w.role !== a.to) {
        w.role = a.to;
        this.counters.flips++;
      }
    } else if (a.kind === "local-prefill-threshold") this.routerOptions.localPrefillThreshold = a.tokens;
    else if (a.kind === "step-mixing") for (const w of this.workers) w.engine.stepMixing = a.split ? "split" : "mixed";
    // "replicas" (the worker set is fixed here) and "admission" (no front-door hold) are not applied.
  }

  private route(req: GenerateRequest): { route: SessionRoute; cands: RouteCandidate[] } {
    const live = this.workers.filter((w) => w.engine.alive);
    if (live.length === 0) throw new EngineOverloadedError("No worker is running");
    const overlaps = this.index.overlaps(chainHashes(req.prompt, this.blockSize));
    const cands = live.map((w) => w.candidate(overlaps.get(w.id)));
    const sreq = {
      promptTokens: req.prompt.length, blockTokens: this.blockSize, bytesPerBlock: this.o.bytesPerBlock,
      ...(req.sessionId !== undefined && this.lastWorker.has(req.sessionId) ? { lastWorker: this.lastWorker.get(req.sessionId) } : {}),
    };
    return { route: routeRequest(this.o.router ?? "session", sreq, cands, this.o.links ?? IN_PROCESS_LINK, this.routerOptions), cands };
  }

  /** Moves what the route says, then queues the request on the decoding worker. */
  private async hop(req: GenerateRequest, route: SessionRoute, dec: ClusterWorker, hop: { cancel: () => void }): Promise<RequestHandle> {
    let cancelled = false;
    hop.cancel = () => (cancelled = true);
    const sid = req.sessionId;
    if (route.prefixSource !== undefined) {
      await this.move(this.byId.get(route.prefixSource)!, dec, req.prompt, sid);
    } else if (route.prefillWorker !== null) {
      const pre = this.byId.get(route.prefillWorker)!;
      if (route.prefixTransferBlocks > 0) await this.move(dec, pre, req.prompt, sid);
      const h = pre.engine.submit({ ...req, maxTokens: 1, stop: undefined, prefillOnly: true });
      hop.cancel = () => {
        cancelled = true;
        h.cancel();
      };
      const r = await h.result;
      if (r.error) throw new Error(`The prefill on ${pre.id} failed: ${r.error}`);
      if (cancelled) throw new Error("Cancelled");
      this.counters.prefillHandoffs++;
      await this.move(pre, dec, req.prompt, sid, false);
    }
    if (cancelled) throw new Error("Cancelled");
    return dec.engine.submit(req);
  }

  /** Copies the cached prefix of `tokens` from one worker to another. */
  private async move(from: ClusterWorker, to: ClusterWorker, tokens: readonly number[], sessionId: string | undefined, count = true): Promise<void> {
    const prefix = await from.engine.exportPrefix(tokens);
    if (prefix === null) return;
    if (count) this.counters.prefixMoves++;
    this.counters.movedBlocks += await to.engine.importPrefix(prefix, sessionId);
  }

  /** Records a finished request in the client-facing metrics and the planner's window. */
  private finished(r: GenerateResult, t0: number, tStart: number): GenerateResult {
    const m = this.metrics;
    m.countFinish(r.error ? "error" : r.finishReason);
    m.generationTokens += r.completionTokens;
    m.e2e.observe((this.now() - t0) / 1000);
    if (r.firstTokenS !== undefined) {
      const ttft = (tStart - t0) / 1000 + r.firstTokenS;
      const n = r.completionTokens;
      const itl = n > 1 ? ((r.lastTokenS ?? r.firstTokenS) - r.firstTokenS) / (n - 1) : 0;
      m.ttft.observe(ttft);
      for (let i = 1; i < n; i++) m.itl.observe(itl);
      this.completions.push({ isl: r.promptTokens, osl: n, ttftS: ttft, itlS: itl });
    }
    return r;
  }

  private remember(sessionId: string, workerId: string): void {
    this.lastWorker.delete(sessionId);
    this.lastWorker.set(sessionId, workerId);
    if (this.lastWorker.size > MAX_SESSIONS) this.lastWorker.delete(this.lastWorker.keys().next().value!);
  }
}

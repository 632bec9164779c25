/**
 * An in-process cluster: several engines on one backend behind our router and online role planner,
 * the same planner/ and kv/ code the simulator runs. Each request is routed over the workers'
 * prefix overlap (a global block index fed by their KV events), queues and measured speeds; a
 * prefill may run on a prefill-role worker and its KV move to the worker that decodes, and a
 * session's cached prefix may move from a busy holder to a peer. `tick()` (every planner interval,
 * driven by the caller's timer) hands the planner a snapshot and applies its decisions.
 */
import { chainHashes } from "../../kv/index.ts";
import type { RouteCandidate, SessionRoute, SessionRouterOptions } from "../../planner/routers.ts";
import type { PlannerAction, Role, WorkerSnapshot } from "../../planner/types.ts";
import type { EngineMetrics } from "../engine/engine-metrics.ts";
import {
  type EngineStats, EngineOverloadedError, type GenerateRequest, NoWorkerError, outputBudget, type RequestHandle, type ServingEngine, SessionRefusedError, type WorkerStatus,
} from "../engine/engine-types.ts";
import type { StepMixing } from "../engine/scheduler-types.ts";
import type { ClusterWorker } from "./cluster-worker.ts";
import type { ClusterCounters, ClusterOptions } from "./cluster-types.ts";
import { IN_PROCESS_LINK, routeRequest } from "./cluster-router.ts";
import { relayHandle } from "./relay-handle.ts";
import { sumStats } from "./cluster-stats.ts";
import type { WorkerEngine } from "./worker-engine.ts";
import { RequestWindow } from "./request-window.ts";
import { WorkerSet } from "./worker-set.ts";
import { handOff } from "./handoff.ts";
import { adapterRoot, cacheRootOf, LoraAdapterError } from "../engine/engine-adapters.ts";
import type { LoraAdapter } from "../model/lora.ts";

export type { ClusterCounters, ClusterDecision, ClusterOptions } from "./cluster-types.ts";

/**
 * A loaded LoRA adapter: its cache namespace, its requests in flight, the workers that finished
 * loading it, and when every load sent so far has settled (an unload waits for them, so that a worker
 * still loading it when it is unloaded does not keep it).
 */
interface AdapterEntry {
  adapter: LoraAdapter;
  root: number;
  inFlight: number;
  loadedOn: Set<ClusterWorker>;
  settled: Promise<void>;
}

/** Sessions remembered for affinity at most (oldest forgotten first). */
const MAX_SESSIONS = 65536;

/** Several engines serving as one. */
export class Cluster implements ServingEngine {
  readonly counters: ClusterCounters = { prefillHandoffs: 0, prefixMoves: 0, movedBlocks: 0, flips: 0, mixingChanges: 0, joined: 0, removed: 0 };
  private readonly set: WorkerSet;
  private readonly window: RequestWindow;
  private readonly lastWorker = new Map<string, string>();
  private readonly routerOptions: SessionRouterOptions;
  private readonly now: () => number;
  private readonly blockSize: number;
  private mixing: StepMixing;
  private nextId = 0;
  /** New sessions that may still enter before the planner's next tick (its "admission" action). */
  private newSessionBudget = Infinity;
  /** LoRA adapters by name: what joining workers load, each one's cache namespace and requests in flight. */
  private readonly adapters = new Map<string, AdapterEntry>();
  /** Unloads still under way, by name: a new load of the name waits for its own to end. */
  private readonly unloading = new Map<string, Promise<void>>();

  /**
   * Takes the workers' engines already started (local or in threads), their steps wired to
   * {@link observeStep}.
   */
  constructor(engines: readonly WorkerEngine[], private readonly o: ClusterOptions) {
    if (engines.length === 0 && o.shape === undefined) throw new RangeError("A cluster with no engine at the start needs the model's shape");
    const roles = o.roles ?? engines.map((): Role => "mixed");
    if (roles.length !== engines.length) throw new RangeError(`${roles.length} roles were given for ${engines.length} workers`);
    if (engines.length > 0 && !roles.some((r) => r !== "prefill")) throw new RangeError(`At least one worker must decode; the roles are ${roles.join(",")}`);
    this.now = o.now ?? (() => performance.now());
    this.set = new WorkerSet(o.initialPrefillRate ?? 2000, this.now);
    this.window = new RequestWindow(this.now);
    this.blockSize = o.shape?.blockSize ?? engines[0].blockSize;
    this.mixing = o.stepMixing ?? engines[0]?.stepMixing ?? "mixed";
    engines.forEach((e, i) => this.attach(e, roles[i]));
    this.routerOptions = { localPrefillThreshold: 512, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5, memoryFullS: 1, peerHostBlocks: true, ...o.routerOptions };
  }

  /** Finished requests, token counters and the TTFT/ITL/E2E histograms, cluster-wide. */
  get metrics(): EngineMetrics {
    return this.window.metrics;
  }

  /** Feeds an engine step of worker `id` to its window (the engines' `onStep`). */
  observeStep(id: string, r: Parameters<ClusterWorker["observeStep"]>[0]): void {
    this.set.get(id)?.observeStep(r);
  }

  /** The current local-prefill threshold (uncached tokens a decode worker prefills itself). */
  get localPrefillThreshold(): number {
    return this.routerOptions.localPrefillThreshold;
  }

  /** The longest context every worker serves (the model's shape while there is none). */
  get maxModelLen(): number {
    const all = this.set.all;
    return all.length === 0 ? this.o.shape!.maxModelLen : Math.min(...all.map((w) => w.engine.maxModelLen));
  }

  /** The workers now in the cluster, draining ones included, in the order they joined. */
  get workers(): readonly ClusterWorker[] {
    return this.set.all;
  }

  /** The workers' step mixing (the planner sets all workers alike; a joining worker takes it). */
  get stepMixing(): StepMixing {
    return this.mixing;
  }

  /**
   * Adds a started engine while the cluster serves (a worker that joined). Its KV block size must be
   * the cluster's (throws RangeError naming both, leaving the engine to the caller); a shorter context
   * than the others' lowers the cluster's {@link maxModelLen} while it stays.
   */
  addWorker(engine: WorkerEngine, role: Role = "mixed"): ClusterWorker {
    if (engine.blockSize !== this.blockSize) throw new RangeError(`Worker "${engine.id}" has KV blocks of ${engine.blockSize} tokens; the cluster's have ${this.blockSize}`);
    const w = this.attach(engine, role);
    this.counters.joined++;
    // It serves an adapter's requests once it has loaded it (until then the router sends them elsewhere).
    for (const [name, a] of this.adapters) {
      const load = this.loadOn(w, name, a).catch((e) => {
        console.error(`Worker ${engine.id} could not load the LoRA adapter "${name}": ${e instanceof Error ? e.message : String(e)}`);
      });
      a.settled = Promise.all([a.settled, load]).then(() => {});
    }
    return w;
  }

  /**
   * Loads a LoRA adapter as `name` on every worker (each worker elsewhere reads `adapter.source`
   * itself, and must find the same adapter), and on every worker that joins later. Resolves once all
   * have it; when one cannot, none keeps it and the first failure is thrown (LoraAdapterError).
   */
  async loadAdapter(name: string, adapter: LoraAdapter): Promise<void> {
    if (this.adapters.has(name)) throw new LoraAdapterError(`A LoRA adapter named "${name}" is already loaded`);
    // Registered at once (a second load of the name is refused; a worker joining meanwhile loads it
    // too); its requests go only to workers that have finished loading it.
    let loaded!: () => void;
    const entry: AdapterEntry = { adapter, root: adapterRoot(adapter.fingerprint), inFlight: 0, loadedOn: new Set(), settled: new Promise((r) => (loaded = r)) };
    this.adapters.set(name, entry);
    // An unload of the name still under way ends first (the workers must not have it twice).
    await this.unloading.get(name);
    const workers = this.adapters.get(name) === entry ? this.set.all.filter((w) => w.engine.alive) : [];
    const loads = Promise.allSettled(workers.map((w) => this.loadOn(w, name, entry)));
    void loads.then(() => loaded());
    const done = await loads;
    const failed = done.findIndex((d) => d.status === "rejected");
    if (failed < 0) return;
    // Unloaded meanwhile: that unload lets go of it on the workers that have it.
    if (this.adapters.get(name) === entry) await this.dropAdapter(name, entry);
    const why = (done[failed] as PromiseRejectedResult).reason;
    throw new LoraAdapterError(`Worker ${workers[failed].id} could not load the LoRA adapter "${name}": ${why instanceof Error ? why.message : String(why)}`);
  }

  /** Unloads the adapter `name` from every worker; refused while requests use it. */
  async unloadAdapter(name: string): Promise<void> {
    const a = this.adapters.get(name);
    if (!a) throw new LoraAdapterError(`The LoRA adapter "${name}" is not loaded`, true);
    if (a.inFlight > 0) throw new LoraAdapterError(`The LoRA adapter "${name}" is in use by ${a.inFlight} request${a.inFlight === 1 ? "" : "s"}; unload it when they end`);
    await this.dropAdapter(name, a);
  }

  /** Loads `entry` as `name` on worker `w`; it serves the adapter's requests from then on, unless the adapter was unloaded meanwhile. */
  private async loadOn(w: ClusterWorker, name: string, entry: AdapterEntry): Promise<void> {
    await w.engine.loadAdapter(name, entry.adapter);
    entry.loadedOn.add(w);
    if (this.adapters.get(name) === entry) w.adapters.add(name);
  }

  /**
   * Forgets the adapter `name` (its requests are refused from now on) and unloads it from every worker
   * that loaded it, once the loads still under way have ended (a worker still loading it would
   * otherwise keep it, and refuse the name for good).
   */
  private async dropAdapter(name: string, entry: AdapterEntry): Promise<void> {
    this.adapters.delete(name);
    for (const w of this.set.all) w.adapters.delete(name);
    const prior = this.unloading.get(name);
    const done = (async () => {
      await prior;
      await entry.settled;
      await Promise.allSettled([...entry.loadedOn].map((w) => w.engine.unloadAdapter(name)));
    })();
    this.unloading.set(name, done);
    await done;
    if (this.unloading.get(name) === done) this.unloading.delete(name);
  }

  /** Names of the loaded adapters. */
  adapterNames(): string[] {
    return [...this.adapters.keys()];
  }

  /** Adapters with requests in flight (all counted as running: the workers do not report theirs). */
  adapterRequests(): { running: string[]; waiting: string[] } {
    return { running: [...this.adapters].filter(([, a]) => a.inFlight > 0).map(([name]) => name), waiting: [] };
  }

  /**
   * Takes a worker out: no new request goes to it; with `drainMs` > 0 the requests it has (or moves a
   * prefix for) finish first, for at most that long; then its engine stops and its blocks leave the
   * global index. Resolves once it is gone; false when no such worker is in the cluster.
   */
  async removeWorker(id: string, drainMs = 0): Promise<boolean> {
    const gone = await this.set.remove(id, drainMs);
    if (gone) this.counters.removed++;
    return gone;
  }

  /** Routes and queues a request. Throws the typed errors of engine-types.ts. */
  submit(req: GenerateRequest): RequestHandle {
    const maxTokens = outputBudget(req, this.maxModelLen);
    const waiting = this.set.all.reduce((a, w) => a + w.engine.stats().waiting, 0);
    const maxWaiting = this.o.maxWaiting ?? 1024 * Math.max(1, this.set.all.length);
    if (waiting >= maxWaiting) {
      this.metrics.rejected++;
      throw new EngineOverloadedError(`${maxWaiting} requests are already waiting`);
    }
    // The planner's front door: a session not seen before needs room within the budget of this tick
    // (refused before any routing work); turns of sessions already served always enter. Requests
    // naming no session are let through (a returning agent cannot be told from a new one).
    const newSession = req.sessionId !== undefined && !this.lastWorker.has(req.sessionId);
    if (newSession && this.newSessionBudget < 1) {
      this.metrics.rejected++;
      throw new SessionRefusedError(`No room for new session "${req.sessionId}": the decode pool is at its ITL target`);
    }
    const lora = req.adapter === undefined ? undefined : this.adapters.get(req.adapter);
    if (req.adapter !== undefined && !lora) throw new LoraAdapterError(`The LoRA adapter "${req.adapter}" is not loaded`, true);
    const root = cacheRootOf(lora?.root, req.cacheSalt);
    const { route, cands } = this.route(req, root);
    const dec = this.set.get(route.decodeWorker)!;
    const id = this.nextId++;
    const hop = { cancel: () => {} };
    let tStart = 0;
    const direct = route.prefillWorker === null && route.prefixSource === undefined;
    // Queued first: a request the worker refuses (the client's mistake, or a full queue) spends none of
    // the planner's new-session budget, counts as no arrival and leaves the session unplaced.
    const h: RequestHandle = direct ? dec.engine.submit(req) : relayHandle(
      id, req.prompt.length, req.sessionId,
      handOff(req, route, dec, this.set, this.counters, hop, root).then((inner) => {
        tStart = this.now();
        return inner;
      }),
      () => hop.cancel(),
    );
    if (newSession) this.newSessionBudget--;
    // Every worker the request touches stays in the cluster until it is done (see removeWorker).
    const touched = [dec, ...[route.prefillWorker, route.prefixSource].flatMap((id) => (id == null ? [] : [this.set.get(id)!]))];
    for (const w of touched) w.inFlight++;
    const best = cands.reduce((a, c) => Math.max(a, c.overlapDevice), 0);
    this.window.arrived(req.prompt.length, Math.max(0, req.prompt.length - best * this.blockSize), maxTokens);
    if (req.sessionId !== undefined) this.remember(req.sessionId, dec.id);
    const t0 = this.now();
    if (direct) tStart = t0;
    if (lora) lora.inFlight++;
    const release = () => {
      for (const w of touched) w.inFlight--;
      if (lora) lora.inFlight--;
    };
    const result = h.result.finally(release).then((r) => {
      // A session the worker inferred (no key in the request) is remembered for its tool waits.
      if (req.sessionId === undefined && h.sessionId !== undefined) this.remember(h.sessionId, dec.id);
      return this.window.finished(r, t0, tStart);
    });
    // The session may be known only later (inferred by a worker, or once a hand-off is done).
    return { id, stream: h.stream, result, cancel: () => h.cancel(), get sessionId() { return h.sessionId; } };
  }

  /** Forwards a tool wait to the worker that served the session last (every worker when unknown). */
  markToolWait(sessionId: string, tool: string): void {
    const w = this.set.get(this.lastWorker.get(sessionId) ?? "");
    for (const t of w ? [w] : this.set.all) t.engine.markToolWait(sessionId, tool);
  }

  /** Gauges and counters summed over workers (counters include those of workers that have left). */
  stats(): EngineStats {
    return sumStats([...this.set.all.map((w) => w.engine.stats()), this.set.retiredCounters()]);
  }

  /** Sessions by status, summed over workers (undefined under LRU retention). */
  sessionStatusCounts(): Record<string, number> | undefined {
    let out: Record<string, number> | undefined;
    for (const w of this.set.all) {
      const c = w.engine.sessionStatusCounts();
      if (!c) continue;
      out ??= {};
      for (const [k, v] of Object.entries(c)) out[k] = (out[k] ?? 0) + v;
    }
    return out;
  }

  /** Each worker's role and load. */
  workerStatuses(): WorkerStatus[] {
    return this.set.all.map((w) => w.status());
  }

  /** One planner interval: snapshot, decisions, applied. Returns the decisions. */
  tick(): PlannerAction[] {
    // A worker that can serve no more (its thread died) is "off" to the planner until it is removed:
    // counted as serving, its role and stale queue would be planned with (and the live ones not flipped).
    const workers = this.set.all.map((w): WorkerSnapshot => (w.engine.alive ? w.snapshot() : { ...w.snapshot(), state: "off" }));
    const snap = { ...this.window.take(), workers };
    const actions = this.o.planner?.tick(snap) ?? [];
    for (const a of actions) this.apply(a);
    return actions;
  }

  /** Stops every engine. */
  async stop(): Promise<void> {
    await Promise.all(this.set.all.map((w) => w.engine.stop()));
  }

  /** Adds a worker, which takes the cluster's step mixing. */
  private attach(engine: WorkerEngine, role: Role): ClusterWorker {
    const w = this.set.add(engine, role);
    if (engine.stepMixing !== this.mixing) engine.stepMixing = this.mixing;
    return w;
  }

  private apply(a: PlannerAction): void {
    let changed = true;
    let from: Role | undefined;
    if (a.kind === "flip") {
      const w = this.set.get(a.workerId);
      from = w?.role;
      // A flip only changes what the router sends; work already on the worker drains there.
      changed = w !== undefined && w.role !== a.to;
      if (changed) {
        w!.role = a.to;
        this.counters.flips++;
      }
    } else if (a.kind === "local-prefill-threshold") {
      changed = this.routerOptions.localPrefillThreshold !== a.tokens;
      this.routerOptions.localPrefillThreshold = a.tokens;
    } else if (a.kind === "step-mixing") {
      const mixing = this.o.fixedStepMixing ? this.mixing : a.split ? "split" : "mixed";
      changed = mixing !== this.mixing;
      if (changed) this.counters.mixingChanges++;
      this.mixing = mixing;
      for (const w of this.set.all) w.engine.stepMixing = this.mixing;
    } else if (a.kind === "admission") {
      // No waiting room here: a session the front door cannot take now is refused with Retry-After
      // (HTTP 503) and retries, where the simulator holds it to the next tick.
      const budget = a.holdNewSessions ? 0 : (a.newSessions ?? Infinity);
      changed = budget !== this.newSessionBudget;
      this.newSessionBudget = budget;
    } else changed = false; // "replicas" is not applied: workers join and leave by themselves (see addWorker).
    this.o.onDecision?.({ action: a, changed, ...(from !== undefined ? { from } : {}) });
  }

  private route(req: GenerateRequest, root: number | undefined): { route: SessionRoute; cands: RouteCandidate[] } {
    const live = this.set.all.filter((w) => w.engine.alive && !w.draining && (req.adapter === undefined || w.adapters.has(req.adapter)));
    if (live.length === 0) throw new NoWorkerError(req.adapter === undefined ? "No worker is running" : `No running worker has loaded the LoRA adapter "${req.adapter}" yet`);
    // A prompt scored whole (prompt log probabilities) takes nothing from any cache: route it as uncached.
    const overlaps = req.promptLogprobs !== undefined ? new Map<string, never>() : this.set.index.overlaps(chainHashes(req.prompt, this.blockSize, undefined, root ?? null));
    const cands = live.map((w) => w.candidate(overlaps.get(w.id), req.priority));
    const sreq = {
      promptTokens: req.prompt.length, blockTokens: this.blockSize, bytesPerBlock: this.o.bytesPerBlock,
      ...(req.sessionId !== undefined && this.lastWorker.has(req.sessionId) ? { lastWorker: this.lastWorker.get(req.sessionId) } : {}),
    };
    return { route: routeRequest(this.o.router ?? "session", sreq, cands, this.o.links ?? IN_PROCESS_LINK, this.routerOptions), cands };
  }

  private remember(sessionId: string, workerId: string): void {
    this.lastWorker.delete(sessionId);
    this.lastWorker.set(sessionId, workerId);
    if (this.lastWorker.size > MAX_SESSIONS) this.lastWorker.delete(this.lastWorker.keys().next().value!);
  }
}

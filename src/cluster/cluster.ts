/**
 * An in-process cluster: several engines on one backend behind our router and online role planner,
 * the same planner/ and kv/ code the simulator runs. Each request is routed over the workers'
 * prefix overlap (a global block index fed by their KV events), queues and measured speeds; a
 * prefill may run on a prefill-role worker and its KV move to the worker that decodes, and a
 * session's cached prefix may move from a busy holder to a peer. `tick()` (every planner interval,
 * driven by the caller's timer) hands the planner a snapshot and applies its decisions
 * (cluster-control.ts); LoRA adapters are kept on every worker by cluster-adapters.ts. Requests past
 * the front door are routed and queued by cluster-dispatch.ts.
 */
import type { Planner, PlannerAction, Role } from "../../planner/types.ts";
import type { EngineMetrics } from "../engine/engine-metrics.ts";
import {
  type EngineStats, type GenerateRequest, outputBudget, type RequestHandle, type ServingEngine, SessionRefusedError, type WorkerStatus,
} from "../engine/engine-types.ts";
import type { StepMixing } from "../engine/scheduler-types.ts";
import type { ClusterWorker } from "./cluster-worker.ts";
import type { ClusterCounters, ClusterOptions } from "./cluster-types.ts";
import { relayHandle } from "./relay-handle.ts";
import { sumSessionCounts, sumStats } from "./cluster-stats.ts";
import type { WorkerEngine } from "./worker-engine.ts";
import { RequestWindow } from "./request-window.ts";
import { WorkerSet } from "./worker-set.ts";
import { LoraAdapterError } from "../engine/engine-adapters.ts";
import type { LoraAdapter } from "../model/lora.ts";
import { type AdapterEntry, ClusterAdapters } from "./cluster-adapters.ts";
import { ClusterControl } from "./cluster-control.ts";
import type { AdapterReloader, ClusterFront } from "./cluster-front.ts";
import { ClusterSessions } from "./cluster-sessions.ts";
import { passFrontDoor } from "./front-door.ts";
import { DoorQueue } from "./door-queue.ts";
import { ClusterDispatch } from "./cluster-dispatch.ts";

export type { ClusterCounters, ClusterDecision, ClusterOptions, RouteDecision } from "./cluster-types.ts";

/** Several engines serving as one. */
export class Cluster implements ServingEngine, ClusterFront, AdapterReloader {
  readonly counters: ClusterCounters = { prefillHandoffs: 0, prefixMoves: 0, movedBlocks: 0, flips: 0, mixingChanges: 0, joined: 0, removed: 0, joinFailures: 0 };
  private readonly set: WorkerSet;
  private readonly window: RequestWindow;
  /** Where keyed sessions and keyless conversations were served last. */
  private readonly sessions: ClusterSessions;
  private readonly now: () => number;
  private readonly blockSize: number;
  /** The planner's settings (roles aside, which are on the workers) and their control loop. */
  private readonly control: ClusterControl;
  private readonly adapters: ClusterAdapters;
  /** New sessions waiting at the front door for room. */
  private readonly door = new DoorQueue();
  /** Routing and queueing past the door. */
  private readonly dispatch: ClusterDispatch;

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
    this.sessions = new ClusterSessions(this.blockSize, (w, s) => this.set.get(w)?.engine.sessionMovedAway(s));
    this.control = new ClusterControl(this.set, this.window, this.counters, o, o.stepMixing ?? engines[0]?.stepMixing ?? "mixed", this.now);
    this.adapters = new ClusterAdapters(() => this.set.all);
    this.dispatch = new ClusterDispatch({
      set: this.set, window: this.window, sessions: this.sessions, control: this.control, counters: this.counters, options: o, blockSize: this.blockSize, now: this.now,
    });
    engines.forEach((e, i) => this.attach(e, roles[i]));
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
    return this.control.routerOptions.localPrefillThreshold;
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
    return this.control.mixing;
  }

  /** The planner the cluster's tick asks (null: none). */
  get planner(): Planner | null {
    return this.control.planner;
  }

  /**
   * Hands the cluster's ticks to `planner` from now on: one that needs the running workers to be made
   * (the SLA planner's profile is measured on a worker) is set once they are.
   */
  usePlanner(planner: Planner | null): void {
    this.control.planner = planner;
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
    this.adapters.joined(w);
    this.control.workersChanged();
    return w;
  }

  /**
   * Loads a LoRA adapter as `name` on every worker (each worker elsewhere reads `adapter.source`
   * itself, and must find the same adapter), and on every worker that joins later. Resolves once all
   * have it; when one cannot, none keeps it and the first failure is thrown (LoraAdapterError).
   */
  loadAdapter(name: string, adapter: LoraAdapter): Promise<void> {
    return this.adapters.load(name, adapter);
  }

  /**
   * Reloads the adapter `name` (vLLM's `load_inplace`; a plain load when none is loaded): `adapter` is
   * loaded on every worker first and swapped in once all have it; when one cannot, the old one serves
   * on and the failure is thrown (LoraAdapterError). Refused while requests use the old one.
   */
  replaceAdapter(name: string, adapter: LoraAdapter): Promise<void> {
    return this.adapters.replace(name, adapter);
  }

  /** Unloads the adapter `name` from every worker; refused while requests use it. */
  unloadAdapter(name: string): Promise<void> {
    return this.adapters.unload(name);
  }

  /** Names of the loaded adapters. */
  adapterNames(): string[] {
    return this.adapters.names();
  }

  /** Adapters with requests in flight (all counted as running: the workers do not report theirs). */
  adapterRequests(): { running: string[]; waiting: string[] } {
    return this.adapters.requests();
  }

  /**
   * Takes a worker out: no new request goes to it; with `drainMs` > 0 the requests it has (or moves a
   * prefix for) finish first, for at most that long; then its engine stops and its blocks leave the
   * global index. Resolves once it is gone; false when no such worker is in the cluster.
   */
  async removeWorker(id: string, drainMs = 0): Promise<boolean> {
    const gone = await this.set.remove(id, drainMs);
    if (gone) {
      this.counters.removed++;
      this.control.workersChanged();
    }
    return gone;
  }

  /**
   * Routes and queues a request. Throws the typed errors of engine-types.ts; a new session the
   * planner's budget has no room for waits at the door (door-queue.ts), its handle's `refusal` saying
   * whether it got in.
   */
  submit(req: GenerateRequest): RequestHandle {
    const maxTokens = outputBudget(req, this.maxModelLen);
    const lora = req.adapter === undefined ? undefined : this.adapters.get(req.adapter);
    if (req.adapter !== undefined && !lora) throw new LoraAdapterError(`The LoRA adapter "${req.adapter}" is not loaded`, true);
    // Another request of a session waiting at the door (the other choices of its first turn) waits with it.
    const at = this.now();
    const of = req.sessionId !== undefined ? { key: req.sessionId } : req.openingTurn === false ? { prompt: req.prompt } : undefined;
    const follower = of && this.door.size > 0 ? this.door.follow(of, () => this.dispatch.enter(req, maxTokens, lora, false, at)) : undefined;
    if (follower) return relayHandle(this.dispatch.newId(), req.prompt.length, req.sessionId, follower.start, follower.cancel);
    // The queue bound and the planner's new-session budget, before any routing work (front-door.ts).
    let newSession: boolean;
    try {
      newSession = passFrontDoor(req, {
        waiting: this.set.all.reduce((a, w) => a + w.engine.stats().waiting, 0) + this.door.size,
        maxWaiting: this.o.maxWaiting ?? 1024 * Math.max(1, this.set.all.length),
        newSessionBudget: this.door.size > 0 ? 0 : this.control.newSessionBudget,
        isNewSession: (key) => this.sessions.isNew(key),
      });
    } catch (e) {
      if (e instanceof SessionRefusedError) return this.holdAtDoor(req, maxTokens, lora, e, at);
      this.metrics.rejected++;
      throw e;
    }
    return this.dispatch.enter(req, maxTokens, lora, newSession, at);
  }

  /** A new session without room waits at the door for a tick to let it in (or turn it away with `refusal`). */
  private holdAtDoor(req: GenerateRequest, maxTokens: number, lora: AdapterEntry | undefined, refusal: SessionRefusedError, at: number): RequestHandle {
    const opens = req.sessionId !== undefined ? { key: req.sessionId } : { prompt: req.prompt };
    const { start, cancel } = this.door.hold(at, refusal, () => this.dispatch.enter(req, maxTokens, lora, true, at), opens);
    return relayHandle(this.dispatch.newId(), req.prompt.length, req.sessionId, start, cancel);
  }

  /** Forwards a tool wait to the worker that served the session last (every worker when unknown). */
  markToolWait(sessionId: string, tool: string): void {
    const w = this.set.get(this.sessions.workerOf(sessionId) ?? "");
    for (const t of w ? [w] : this.set.all) t.engine.markToolWait(sessionId, tool);
  }

  /** Gauges and counters summed over workers (counters include those of workers that have left); `waiting` counts the door's too. */
  stats(): EngineStats {
    const s = sumStats([...this.set.all.map((w) => w.engine.stats()), this.set.retiredCounters()]);
    // New sessions held at the front door wait too (vllm:num_requests_waiting).
    return { ...s, waiting: s.waiting + this.door.size };
  }

  /** Sessions by status, summed over workers (undefined under LRU retention). */
  sessionStatusCounts(): Record<string, number> | undefined {
    return sumSessionCounts(this.set.all.map((w) => w.engine.sessionStatusCounts()));
  }

  /** Each worker's role and load. */
  workerStatuses(): WorkerStatus[] {
    const now = this.now();
    return this.set.all.map((w) => w.status(now));
  }

  /**
   * One planner interval: snapshot, decisions, applied; then the sessions waiting at the door enter,
   * oldest first, as far as the new budget goes, and those that have waited the longest the door holds
   * one are turned away (or, under the memory-pressure hold's terms, let in). Returns the decisions.
   */
  tick(): PlannerAction[] {
    const actions = this.control.tick();
    const c = this.control;
    if (!c.holdingNewSessions) this.door.admitWhile(() => c.newSessionBudget >= 1);
    this.metrics.rejected += this.door.expire(this.now() - c.maxHoldS * 1000, c.rejectAfterHold);
    return actions;
  }

  /** Stops every engine; sessions waiting at the door are turned away. */
  async stop(): Promise<void> {
    this.door.clear(new SessionRefusedError("No room for new sessions: the server is stopping"));
    await Promise.all(this.set.all.map((w) => w.engine.stop()));
  }

  /** Adds a worker, which takes the cluster's step mixing. */
  private attach(engine: WorkerEngine, role: Role): ClusterWorker {
    const w = this.set.add(engine, role);
    if (engine.stepMixing !== this.control.mixing) engine.stepMixing = this.control.mixing;
    engine.onTokenGap = (s) => this.window.metrics.itl.observe(s);
    return w;
  }

}

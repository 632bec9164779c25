/**
 * A cluster's control loop: every planner interval, the planner is shown a snapshot of the requests
 * and workers, and its decisions are applied (role flips, the local-prefill threshold, step mixing,
 * admission of new sessions). What they set is read by the cluster's request dispatch (cluster.ts).
 */
import type { SessionRouterOptions } from "../../planner/routers.ts";
import type { Planner, PlannerAction, Role, WorkerSnapshot } from "../../planner/types.ts";
import type { StepMixing } from "../engine/scheduler-types.ts";
import type { ClusterCounters, ClusterOptions } from "./cluster-types.ts";
import type { RequestWindow } from "./request-window.ts";
import type { WorkerSet } from "./worker-set.ts";
import { assignReplicas } from "./replica-targets.ts";

/** The planner's settings for a cluster, and what applies its decisions to them. */
export class ClusterControl {
  /** The router's tunables; the planner moves the local-prefill threshold. */
  readonly routerOptions: SessionRouterOptions;
  /** The workers' step mixing (the planner sets all workers alike; a joining worker takes it). */
  mixing: StepMixing;
  /** New sessions that may still enter before the planner's next tick (its "admission" action). */
  newSessionBudget = Infinity;
  /**
   * The admission action's terms for new sessions waiting at the door (door-queue.ts): whether they are
   * held whatever the budget (the memory-pressure hold), how long one waits at most (s; 0: to the next
   * tick), and whether it is then turned away rather than let in.
   */
  holdingNewSessions = false;
  maxHoldS = 0;
  rejectAfterHold = false;
  /** What decides (null: roles stay as they are); set at the start or once it can be made (Cluster.usePlanner). */
  planner: Planner | null;
  /** Planner ticks so far: a budget given back after a tick would add to the next tick's. */
  private ticks = 0;

  constructor(
    private readonly set: WorkerSet, private readonly window: RequestWindow, private readonly counters: ClusterCounters, private readonly o: ClusterOptions, mixing: StepMixing,
    /** The cluster's clock (ms). */
    private readonly now: () => number,
  ) {
    this.mixing = mixing;
    this.planner = o.planner ?? null;
    // New sessions spread by the live sessions on each worker, their pulls of a shared prompt uncharged
    // (sessionSpreadS, waiveOpeningPulls): at 16 agent sessions on three worker threads, TTFT mean and
    // P95 0.87× and 0.86× those without (docs/results/bench-agent-kv.md). The simulator's ours keeps
    // neither: at 256 GPUs waiving cost computer-use goodput (docs/results/variants/session-spread.txt).
    this.routerOptions = {
      localPrefillThreshold: 512, itlTargetS: 0.05, peerTransfer: true, peerMoveS: 0.5, memoryFullS: 1, peerHostBlocks: true,
      sessionSpreadS: 0.05, waiveOpeningPulls: true, ...o.routerOptions,
    };
  }

  /** One planner interval: snapshot, decisions, applied. Returns the decisions. */
  tick(): PlannerAction[] {
    this.ticks++;
    const snap = { ...this.window.take(), workers: this.workerSnapshots() };
    const actions = this.planner?.tick(snap) ?? [];
    for (const a of actions) this.apply(a);
    return actions;
  }

  /**
   * A worker joined or left between ticks: the planner's decisions for the new set, if it makes any
   * (the SLA planner places a joiner in a pool at once: Planner.rebudget), applied. Returns them.
   */
  workersChanged(): PlannerAction[] {
    const actions = this.planner?.rebudget?.(this.workerSnapshots()) ?? [];
    for (const a of actions) this.apply(a);
    return actions;
  }

  private workerSnapshots(): WorkerSnapshot[] {
    // A worker that can serve no more (its thread died) is "off" to the planner until it is removed:
    // counted as serving, its role and stale queue would be planned with (and the live ones not flipped).
    const now = this.now();
    return this.set.all.map((w): WorkerSnapshot => (w.engine.alive ? w.snapshot(now) : { ...w.snapshot(now), state: "off" }));
  }

  /**
   * The baseline planner's replica targets on this fixed set of workers: spare workers are parked, and
   * parked ones serve again when wanted (replica-targets.ts). Returns whether any worker changed.
   */
  private applyReplicas(prefill: number, decode: number): boolean {
    const able = this.set.all.filter((w) => w.engine.alive && !w.draining);
    if (able.length === 0) return false;
    const places = assignReplicas(able.map((w) => ({ id: w.id, role: w.role, parked: w.parked, load: w.inFlight })), prefill, decode);
    let changed = false;
    const now = this.now();
    for (const w of able) {
      const p = places.get(w.id)!;
      if (p.role !== w.role) this.counters.flips++;
      if (p.role === w.role && p.parked === w.parked) continue;
      changed = true;
      // A worker taken back starts as a new Dynamo worker would, after its start-up (0 by default).
      if (w.parked && !p.parked) w.startsServingAt = now + (this.o.replicaStartS ?? 0) * 1000;
      w.role = p.role;
      w.parked = p.parked;
    }
    return changed;
  }

  /** Spends one new session of this tick's budget; the function returned gives it back, within this tick only. */
  spendNewSession(): () => void {
    this.newSessionBudget--;
    const tick = this.ticks;
    return () => void (this.ticks === tick && this.newSessionBudget++);
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
      // A session the front door cannot take now waits there on these terms, as in the simulator
      // (cluster.ts lets the waiting ones in or turns them away after each tick).
      const budget = a.holdNewSessions ? 0 : (a.newSessions ?? Infinity);
      changed = budget !== this.newSessionBudget;
      this.newSessionBudget = budget;
      this.holdingNewSessions = a.holdNewSessions;
      this.maxHoldS = a.maxHoldS;
      this.rejectAfterHold = a.rejectAfterHold ?? false;
    } else changed = this.applyReplicas(a.prefill, a.decode);
    this.o.onDecision?.({ action: a, changed, ...(from !== undefined ? { from } : {}) });
  }
}

/**
 * Applies planner decisions to the simulated cluster: role flips (ours: instant, in-flight decodes
 * drain on the worker), replica targets (baseline: start workers with a start-up delay, drain
 * removed ones), and the local-prefill threshold.
 */
import type { PlannerAction } from "../../planner/types.ts";
import { releaseHeldSessions } from "./admission.ts";
import type { ClusterSim } from "./simulator.ts";

/** Applies one planner action. */
export function applyAction(sim: ClusterSim, a: PlannerAction): void {
  if (a.kind === "local-prefill-threshold") {
    sim.localThreshold = a.tokens;
    return;
  }
  if (a.kind === "step-mixing") {
    if (sim.splitSteps !== a.split) sim.changes.push({ t: sim.now, action: a });
    sim.splitSteps = a.split;
    return;
  }
  if (a.kind === "admission") {
    sim.holdNewSessions = a.holdNewSessions;
    sim.maxHoldS = a.maxHoldS;
    sim.rejectAfterHold = a.rejectAfterHold ?? false;
    sim.newSessionBudget = a.newSessions ?? Infinity;
    if (!a.holdNewSessions) sim.newSessionBudget -= releaseHeldSessions(sim, sim.newSessionBudget);
    return;
  }
  if (a.kind === "flip") {
    const w = sim.workers.find((x) => x.id === a.workerId);
    if (w === undefined || w.state !== "serving") return;
    if (w.role !== a.to) sim.changes.push({ t: sim.now, action: a, from: w.role });
    w.role = a.to;
    sim.wake(w);
    return;
  }
  for (const role of ["prefill", "decode"] as const) {
    const target = role === "prefill" ? a.prefill : a.decode;
    const pool = sim.workers.filter((w) => w.role === role && (w.state === "serving" || w.state === "starting"));
    if (pool.length < target) {
      // Prefer re-activating a draining worker of the same role, then idle ones.
      const spare = [
        ...sim.workers.filter((w) => w.state === "draining" && w.role === role),
        ...sim.workers.filter((w) => w.state === "off"),
      ];
      for (const w of spare.slice(0, target - pool.length)) sim.startWorker(w, role);
    } else if (pool.length > target) {
      const victims = pool
        .sort((x, y) => (x.state === "starting" ? -1 : 0) - (y.state === "starting" ? -1 : 0) || x.queuedTokens + x.batch - (y.queuedTokens + y.batch))
        .slice(0, pool.length - target);
      for (const w of victims) {
        if (w.state === "starting") { w.state = "off"; continue; }
        w.state = w.queue.length === 0 && w.batch === 0 && w.inflightKv === 0 && !w.busy ? "off" : "draining";
      }
    }
  }
}

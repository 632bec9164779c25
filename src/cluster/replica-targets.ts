/**
 * The baseline planner's replica targets on a fixed set of workers. Dynamo's SLA planner asks for P
 * prefill and D decode workers; Dynamo starts and stops worker processes to get them. A cluster here
 * holds its engines already loaded, so a worker the target has no use for is parked (routers send it
 * nothing; what it has in flight finishes there) and a parked one serves again at once, without the
 * start-up (model load) the simulator charges a new Dynamo worker, unless the cluster is told to wait
 * for one (`ClusterOptions.replicaStartS`, applied in cluster-control.ts). At once favours the baseline.
 *
 * Which workers move follows the simulator's rule (src/sim/actions.ts): a pool over its target parks
 * its least loaded workers; a pool under it takes back parked workers of its own role first (their
 * cache is that role's), then any other spare one. Workers whose role is "mixed" serve in no pool of
 * the SLA planner's (Dynamo's disaggregated serving has none), so they are spare.
 */
import type { Role } from "../../planner/types.ts";

/** A worker as the assignment sees it: its role, whether it is parked, and its load (work in flight). */
export interface ReplicaWorker {
  readonly id: string;
  readonly role: Role;
  readonly parked: boolean;
  readonly load: number;
}

/** A worker's role and parking after the assignment. */
export interface ReplicaPlace {
  role: Role;
  parked: boolean;
}

/**
 * Places `workers` (those able to serve: alive, not leaving) so that `prefill` serve as prefill and
 * `decode` as decode, the rest parked. The targets are clamped to the workers there are, decode first
 * and at least one (a cluster with no decoding worker serves nothing). Returns every worker's place,
 * in the order given.
 */
export function assignReplicas(workers: readonly ReplicaWorker[], prefill: number, decode: number): Map<string, ReplicaPlace> {
  // A target that is not a number asks for none (decode still gets its one).
  const count = (x: number) => (Number.isFinite(x) ? Math.floor(x) : Number.isNaN(x) ? 0 : x);
  const want: Record<"prefill" | "decode", number> = { decode: 0, prefill: 0 };
  want.decode = Math.max(1, Math.min(count(decode), workers.length));
  want.prefill = Math.max(0, Math.min(count(prefill), workers.length - want.decode));
  const place = new Map<string, ReplicaPlace>(workers.map((w) => [w.id, { role: w.role, parked: w.parked || w.role === "mixed" }]));
  const serving = (role: Role) => workers.filter((w) => !place.get(w.id)!.parked && place.get(w.id)!.role === role);
  // Over target: park the least loaded (the busiest have the most to finish).
  for (const role of ["decode", "prefill"] as const) {
    const pool = serving(role).sort((a, b) => a.load - b.load);
    for (const w of pool.slice(0, Math.max(0, pool.length - want[role]))) place.get(w.id)!.parked = true;
  }
  // Under target: parked workers of the role first, then mixed ones, then parked ones of the other role.
  for (const role of ["decode", "prefill"] as const) {
    let missing = want[role] - serving(role).length;
    const rank = (w: ReplicaWorker) => (w.role === role ? 0 : w.role === "mixed" ? 1 : 2);
    const spare = workers.filter((w) => place.get(w.id)!.parked).sort((a, b) => rank(a) - rank(b) || a.load - b.load);
    for (const w of spare) {
      if (missing <= 0) break;
      place.set(w.id, { role, parked: false });
      missing--;
    }
  }
  return place;
}

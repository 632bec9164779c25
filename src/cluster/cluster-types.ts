/**
 * What a {@link Cluster} is given and what it reports: its options, the planner decisions it applied
 * (for a planner log) and its counters.
 */
import type { LinkModel, RouteCandidate, SessionRequest, SessionRoute, SessionRouterOptions } from "../../planner/routers.ts";
import type { Planner, PlannerAction, Role } from "../../planner/types.ts";
import type { StepMixing } from "../engine/scheduler-types.ts";
import type { ClusterRouterName } from "./cluster-router.ts";

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
  /** Bytes of one sequence's recurrent state, which every prefix move carries besides its blocks (engine/kv-cache.ts `stateBytesPerSlot`; 0 or absent: none). */
  stateBytes?: number;
  links?: LinkModel;
  /** Requests waiting across the cluster at most before `submit` refuses (default 1024 per worker). */
  maxWaiting?: number;
  /** Prefill tokens/s assumed for a worker until it has measured its own (default 2000). */
  initialPrefillRate?: number;
  /** Milliseconds on a monotonic clock. */
  now?: () => number;
  /**
   * Context limit and KV block size of the model, required when the cluster starts with no worker
   * (workers join later, see {@link Cluster.addWorker}); otherwise taken from the engines. The limit
   * holds only while no worker is in the cluster.
   */
  shape?: { maxModelLen: number; blockSize: number };
  /** Called with each planner decision as it is applied (a planner log). */
  onDecision?: (d: ClusterDecision) => void;
  /** Called with each routing decision: the request as the router saw it, every candidate, the route (a route log). */
  onRoute?: (d: RouteDecision) => void;
  /**
   * Step mixing of the workers at the start, which each worker takes when it joins (default: the
   * first engine's, else "mixed"). The planner must be told the same (`initialSplitSteps`).
   */
  stepMixing?: StepMixing;
  /**
   * Keep {@link stepMixing} whatever the planner says: its step-mixing actions are not applied (logged
   * as unchanged). The operator chose the mode; the planner should then not adapt it (`adaptStepMixing`).
   */
  fixedStepMixing?: boolean;
  /**
   * Seconds a parked worker takes to serve again when a replica target wants it back (default 0): the
   * start-up (model load) Dynamo's planner waits for when it adds a worker, which an already loaded
   * engine does not need; set it to compare with the baseline on those terms.
   */
  replicaStartS?: number;
}

/** A planner decision the cluster applied, and whether it changed anything. */
export interface ClusterDecision {
  action: PlannerAction;
  /** False where the cluster already was as the action asks (a flip to the worker's role, say). */
  changed: boolean;
  /** A flipped worker's role before the flip. */
  from?: Role;
}

/** One routing decision as the router made it (`serve --route-log`). */
export interface RouteDecision {
  /** The request's session (absent for a raw prompt the cluster tied to none). */
  sessionId?: string;
  request: SessionRequest;
  /** Every live worker as the router priced it. */
  candidates: readonly RouteCandidate[];
  route: SessionRoute;
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
  /** Times the planner switched step mixing (mixed ↔ split). */
  mixingChanges: number;
  /** Workers that joined after the start, and workers removed (drained, failed or gone). */
  joined: number;
  removed: number;
  /** Workers announced on the control plane whose join failed (unreachable, another model, refused). */
  joinFailures: number;
}

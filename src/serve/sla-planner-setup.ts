/**
 * The baseline planner in a real cluster (`serve --workers N --planner sla`): Dynamo's SLA planner
 * (planner/sla-profile-planner.ts, the simulator's baseline), or its load-based mode (`--planner load`,
 * planner/load-planner.ts: ±1 replica a pool every 5 s from queued work), reading an offline profile
 * of this cluster's own workers. As Dynamo's, the profile is taken before serving: read from `--sla-profile
 * FILE` when it exists; otherwise measured on the first worker at start-up (engine-profiler.ts) and,
 * with a path, written there for the next start. Its replica targets park and unpark workers of the
 * fixed set (replica-targets.ts); under NATS, of the workers present at each decision (they join as
 * mixed and serve so until the planner's next decision places them).
 */
import { SlaProfilePlanner } from "../../planner/sla-profile-planner.ts";
import { LoadPlanner } from "../../planner/load-planner.ts";
import type { OfflineProfile } from "../../planner/profile.ts";
import type { Planner, Role } from "../../planner/types.ts";
import type { Cluster } from "../cluster/cluster.ts";
import { parseOfflineProfile, profileEngine, profileJson } from "../cluster/engine-profiler.ts";
import { pathExists, readTextFile, writeFile } from "../runtime/fs.ts";

/** The baseline planners that plan from an offline profile: Dynamo's SLA planner, in throughput or load mode. */
export type ProfilePlannerName = "sla" | "load";

/** True for a planner choice that plans from an offline profile. */
export function isProfilePlanner(p: unknown): p is ProfilePlannerName {
  return p === "sla" || p === "load";
}

/** The SLA planner's settings a server takes (Dynamo's defaults where absent; both modes). */
export interface SlaServeOptions {
  /** The offline profile's JSON file: read when it exists, else measured and written there. */
  profilePath?: string;
  /** Seconds between its decisions (Dynamo: 180; load mode 5). */
  intervalS?: number;
  /** Its SLA targets (Dynamo: TTFT 500 ms, ITL 50 ms). */
  ttftTargetS?: number;
  itlTargetS?: number;
  /** No decisions before this much time has passed (Dynamo: 30 s; load mode has none). */
  startupDelayS?: number;
  /**
   * Seconds a parked worker takes to serve again when the planner wants it back (default 0: the engine
   * is loaded already). Dynamo starts a worker process for it; the simulator charges 60 s.
   */
  workerStartS?: number;
}

/** The model a profile is for: its vocabulary (for the random prompts that measure it) and its fingerprint (src/model/fingerprint.ts). */
export interface ProfiledModel {
  vocabSize: number;
  fingerprint: string;
}

/** The planner made, and where its profile came from (for the start-up line). */
export interface SlaSetup {
  planner: Planner;
  source: string;
}

/** Dynamo's disaggregated start: half the workers (rounded down) prefill, the rest decode. */
export function slaInitialRoles(workers: number): Role[] {
  if (!Number.isInteger(workers) || workers < 2) throw new RangeError(`The SLA planner needs at least 2 workers (a prefill and a decode pool), got ${workers}`);
  const prefill = Math.floor(workers / 2);
  return Array.from({ length: workers }, (_, i): Role => (i < prefill ? "prefill" : "decode"));
}

/**
 * Reads or measures the profile, then makes the planner (`name`'s mode) for `cluster`'s workers. With
 * `joining` (workers come and go through NATS) the budget is the workers present at each decision and
 * the profile must be read from `o.profilePath` (a RangeError when there is none).
 */
export async function setUpSlaPlanner(cluster: Cluster, model: ProfiledModel, o: SlaServeOptions, name: ProfilePlannerName = "sla", joining = false): Promise<SlaSetup> {
  let profile: OfflineProfile;
  let source: string;
  if (o.profilePath !== undefined && await pathExists(o.profilePath)) {
    profile = parseOfflineProfile(await readTextFile(o.profilePath), o.profilePath, model.fingerprint);
    source = `profile read from ${o.profilePath}`;
  } else if (joining) {
    throw new RangeError(`--planner ${name} with --nats reads its offline profile from --sla-profile, and "${o.profilePath ?? ""}" does not exist (a server with --workers 2 --planner ${name} --sla-profile FILE writes one)`);
  } else {
    const first = cluster.workers[0];
    const t0 = performance.now();
    profile = await profileEngine(first.engine, { vocabSize: model.vocabSize });
    source = `profile measured on worker ${first.id} in ${((performance.now() - t0) / 1000).toFixed(1)} s`;
    if (o.profilePath !== undefined) {
      await writeFile(o.profilePath, profileJson(profile, model.fingerprint));
      source += `, written to ${o.profilePath}`;
    }
  }
  const common = {
    profile, maxWorkers: joining ? "present" as const : cluster.workers.length,
    ...(o.intervalS !== undefined ? { intervalS: o.intervalS } : {}),
    ...(o.ttftTargetS !== undefined ? { ttftTargetS: o.ttftTargetS } : {}),
    ...(o.itlTargetS !== undefined ? { itlTargetS: o.itlTargetS } : {}),
  };
  // The load mode reads the profile at the ISL it was taken at until it has measured prompts.
  const planner = name === "load"
    ? new LoadPlanner({ ...common, isl: profile.profiledIsl })
    : new SlaProfilePlanner({ ...common, ...(o.startupDelayS !== undefined ? { startupDelayS: o.startupDelayS } : {}) });
  return { planner, source };
}

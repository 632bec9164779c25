/**
 * The server's cluster (`serve --workers N`): engines in this thread, in worker threads, or in worker
 * processes (at fixed addresses, or joining and leaving through NATS) behind the cluster's router,
 * with its planner ticking at the planner's interval (the online planner's second, the SLA planner's 180 s).
 */
import { type BackendChoice, selectBackend } from "../backend/select.ts";
import type { Backend } from "../backend/types.ts";
import type { Cluster } from "../cluster/cluster.ts";
import { createCluster, type CreateClusterOptions, startTcpCluster, startThreadCluster, warmUpWorkers } from "../cluster/create-cluster.ts";
import { startNatsCluster } from "../cluster/nats-cluster.ts";
import { splitCredentials } from "../cluster/nats-membership.ts";
import { RemoteEngine } from "../cluster/remote-engine.ts";
import type { LoadedModel } from "../model/config.ts";
import { modelFingerprint } from "../model/fingerprint.ts";
import type { Planner } from "../../planner/types.ts";
import { isProfilePlanner, type ProfilePlannerName, setUpSlaPlanner, slaInitialRoles, type SlaServeOptions } from "./sla-planner-setup.ts";

/** Where a server's workers run: this thread, worker threads, or worker processes reached over TCP. */
export type ClusterTransport = "in-process" | "threads" | "tcp";

/** A running cluster and what the server must do to stop it. */
export interface ServingCluster {
  cluster: Cluster;
  /** How the backend was chosen (the first worker's, for threads). */
  backendReason: string;
  /** With the SLA planner: where its offline profile came from. */
  slaSource?: string;
  /** With `warmUp`: the longest warm-up a worker took, in milliseconds (workers joining later through NATS not counted). */
  warmUpMs?: number;
  /** Stops the planner's ticks and, under NATS, the watch for joining and leaving workers. */
  stopControl(): Promise<void>;
  /** Releases the in-process backend (threads release their own). */
  destroyBackend(): void;
}

/** Starts the cluster and, unless the planner is "none", its planner's ticks. */
export async function startServingCluster(
  model: LoadedModel,
  o: Omit<CreateClusterOptions, "planner"> & {
    modelPath: string; backend: BackendChoice; transport: ClusterTransport; planner: "online" | "none" | ProfilePlannerName | Planner;
    /** With planner "sla" or "load": its profile and settings (Dynamo's defaults where absent). */
    sla?: SlaServeOptions;
    /** "host:port" of each worker process (`deno task worker`), for the "tcp" transport. */
    workerAddrs?: string[];
    /** NATS server whose announced workers join the cluster (the "tcp" transport, no `workerAddrs`). */
    nats?: { url: string; clusterName?: string; drainMs?: number };
  },
): Promise<ServingCluster> {
  let cluster: Cluster;
  let backend: Backend | undefined;
  let backendReason: string;
  let stopWatching = async () => {};
  // The SLA planner starts disaggregated, Dynamo's prefill and decode pools, and is made once the workers
  // run (its profile is measured on one). Under NATS workers join as mixed, and its profile is read from a file.
  const chosen = o.planner;
  const profiled = isProfilePlanner(chosen);
  const joining = o.nats !== undefined;
  const co = {
    ...o, planner: profiled ? "none" as const : chosen, roles: profiled && !joining ? o.roles ?? slaInitialRoles(o.workerAddrs?.length ?? o.workers ?? 1) : o.roles,
    ...(profiled && o.sla?.workerStartS !== undefined ? { replicaStartS: o.sla.workerStartS } : {}),
  };
  if (o.nats !== undefined) {
    const n = await startNatsCluster(model, o.modelPath, o.backend, { ...co, natsUrl: o.nats.url, clusterName: o.nats.clusterName, drainMs: o.nats.drainMs });
    cluster = n.cluster;
    stopWatching = n.stopWatching;
    backendReason = `backend ${o.backend} in each worker process that joins through NATS at ${splitCredentials(o.nats.url).server} (cluster "${o.nats.clusterName ?? "default"}")`;
  } else if (o.transport === "threads" || o.transport === "tcp") {
    cluster = o.transport === "threads"
      ? await startThreadCluster(model, o.modelPath, o.backend, co)
      : await startTcpCluster(model, o.modelPath, o.backend, o.workerAddrs ?? [], co);
    const first = cluster.workers[0].engine;
    const n = cluster.workers.length;
    const where = `${n} worker ${o.transport === "threads" ? "thread" : "process"}${n === 1 ? "" : o.transport === "threads" ? "s" : "es"}`;
    backendReason = first instanceof RemoteEngine ? `${first.backendReason} (in each of ${where})` : "";
  } else {
    const picked = await selectBackend(o.backend);
    backend = picked.backend;
    backendReason = picked.reason;
    cluster = createCluster(backend, model, co);
  }
  const c = cluster;
  let warmUpMs: number | undefined;
  try {
    if (o.warmUp) warmUpMs = await warmUpWorkers(c);
  } catch (e) {
    await stopWatching();
    await c.stop();
    backend?.destroy();
    throw e;
  }
  let slaSource: string | undefined;
  if (profiled) {
    try {
      const set = await setUpSlaPlanner(c, { vocabSize: model.config.vocabSize, fingerprint: modelFingerprint(model) }, o.sla ?? {}, chosen, joining);
      c.usePlanner(set.planner);
      slaSource = set.source;
    } catch (e) {
      await stopWatching();
      await c.stop();
      backend?.destroy();
      throw e;
    }
  }
  const planner = c.planner;
  // Each planner at its own interval: the online planner every second, the SLA planner every 180 s (Dynamo's).
  const ticker = planner === null ? undefined : setInterval(() => {
    try {
      c.tick();
    } catch (e) {
      // A planner fault must not take the server down: roles stay as they are until the next tick.
      console.error(`Planner tick failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  }, planner.intervalS * 1000);
  return {
    cluster, backendReason, ...(slaSource !== undefined ? { slaSource } : {}), ...(warmUpMs !== undefined ? { warmUpMs } : {}),
    stopControl: async () => {
      clearInterval(ticker);
      await stopWatching();
    },
    destroyBackend: () => backend?.destroy(),
  };
}

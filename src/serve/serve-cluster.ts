/**
 * The server's cluster (`serve --workers N`): engines in this thread, in worker threads, or in worker
 * processes (at fixed addresses, or joining and leaving through NATS) behind the cluster's router,
 * with the role planner ticking every second.
 */
import { type BackendChoice, selectBackend } from "../backend/select.ts";
import type { Backend } from "../backend/types.ts";
import type { Cluster } from "../cluster/cluster.ts";
import { createCluster, type CreateClusterOptions, startTcpCluster, startThreadCluster } from "../cluster/create-cluster.ts";
import { startNatsCluster } from "../cluster/nats-cluster.ts";
import { splitCredentials } from "../cluster/nats-membership.ts";
import { RemoteEngine } from "../cluster/remote-engine.ts";
import type { LoadedModel } from "../model/config.ts";
import type { Planner } from "../../planner/types.ts";

/** Where a server's workers run: this thread, worker threads, or worker processes reached over TCP. */
export type ClusterTransport = "in-process" | "threads" | "tcp";

/** A running cluster and what the server must do to stop it. */
export interface ServingCluster {
  cluster: Cluster;
  /** How the backend was chosen (the first worker's, for threads). */
  backendReason: string;
  /** Stops the planner's ticks and, under NATS, the watch for joining and leaving workers. */
  stopControl(): Promise<void>;
  /** Releases the in-process backend (threads release their own). */
  destroyBackend(): void;
}

/** Starts the cluster and, unless the planner is "none", its planner's ticks. */
export async function startServingCluster(
  model: LoadedModel,
  o: Omit<CreateClusterOptions, "planner"> & {
    modelPath: string; backend: BackendChoice; transport: ClusterTransport; planner: "online" | "none" | Planner;
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
  if (o.nats !== undefined) {
    const n = await startNatsCluster(model, o.modelPath, o.backend, { ...o, natsUrl: o.nats.url, clusterName: o.nats.clusterName, drainMs: o.nats.drainMs });
    cluster = n.cluster;
    stopWatching = n.stopWatching;
    backendReason = `backend ${o.backend} in each worker process that joins through NATS at ${splitCredentials(o.nats.url).server} (cluster "${o.nats.clusterName ?? "default"}")`;
  } else if (o.transport === "threads" || o.transport === "tcp") {
    cluster = o.transport === "threads"
      ? await startThreadCluster(model, o.modelPath, o.backend, o)
      : await startTcpCluster(model, o.modelPath, o.backend, o.workerAddrs ?? [], o);
    const first = cluster.workers[0].engine;
    const n = cluster.workers.length;
    const where = `${n} worker ${o.transport === "threads" ? "thread" : "process"}${n === 1 ? "" : o.transport === "threads" ? "s" : "es"}`;
    backendReason = first instanceof RemoteEngine ? `${first.backendReason} (in each of ${where})` : "";
  } else {
    const picked = await selectBackend(o.backend);
    backend = picked.backend;
    backendReason = picked.reason;
    cluster = createCluster(backend, model, o);
  }
  const c = cluster;
  const ticker = o.planner === "none" ? undefined : setInterval(() => {
    try {
      c.tick();
    } catch (e) {
      // A planner fault must not take the server down: roles stay as they are until the next tick.
      console.error(`Planner tick failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  }, 1000);
  return {
    cluster, backendReason,
    stopControl: async () => {
      clearInterval(ticker);
      await stopWatching();
    },
    destroyBackend: () => backend?.destroy(),
  };
}

/**
 * The server's cluster (`serve --workers N`): engines in this thread or in worker threads behind the
 * cluster's router, with the role planner ticking every second.
 */
import { type BackendChoice, selectBackend } from "../backend/select.ts";
import type { Backend } from "../backend/types.ts";
import type { Cluster } from "../cluster/cluster.ts";
import { createCluster, type CreateClusterOptions, startTcpCluster, startThreadCluster } from "../cluster/create-cluster.ts";
import { RemoteEngine } from "../cluster/remote-engine.ts";
import type { LoadedModel } from "../model/config.ts";

/** Where a server's workers run: this thread, worker threads, or worker processes reached over TCP. */
export type ClusterTransport = "in-process" | "threads" | "tcp";

/** A running cluster and what the server must do to stop it. */
export interface ServingCluster {
  cluster: Cluster;
  /** How the backend was chosen (the first worker's, for threads). */
  backendReason: string;
  stopTicking(): void;
  /** Releases the in-process backend (threads release their own). */
  destroyBackend(): void;
}

/** Starts the cluster and, unless the planner is "none", its planner's ticks. */
export async function startServingCluster(
  model: LoadedModel,
  o: Omit<CreateClusterOptions, "planner"> & {
    modelPath: string; backend: BackendChoice; transport: ClusterTransport; planner: "online" | "none";
    /** "host:port" of each worker process (`deno task worker`), for the "tcp" transport. */
    workerAddrs?: string[];
  },
): Promise<ServingCluster> {
  let cluster: Cluster;
  let backend: Backend | undefined;
  let backendReason: string;
  if (o.transport === "threads" || o.transport === "tcp") {
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
    stopTicking: () => clearInterval(ticker),
    destroyBackend: () => backend?.destroy(),
  };
}

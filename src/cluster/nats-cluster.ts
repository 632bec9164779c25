/**
 * A cluster whose workers find it through NATS (`serve --nats URL`): it starts with no worker, then
 * every worker process that announces itself on the cluster's subjects (`deno task worker --nats URL`,
 * before or after the server starts) is connected over TCP, asked to load the model, and added; one
 * that announces it is leaving is drained and stopped. See nats-membership.ts for the protocol.
 */
import type { BackendChoice } from "../backend/select.ts";
import { DEFAULT_BLOCK_SIZE } from "../engine/kv-cache.ts";
import { movedKvBytes } from "../engine/engine-factory.ts";
import type { LoadedModel } from "../model/config.ts";
import { Cluster } from "./cluster.ts";
import { modelFingerprint } from "../model/fingerprint.ts";
import { clusterPlanner, connectTcpWorker, type CreateClusterOptions, otherModelError, remoteKvDtype, remoteWorkerWiring } from "./create-cluster.ts";
import { connectControlPlane, controlSubjects, watchWorkers } from "./nats-membership.ts";

/** Where the control plane is and how a leaving worker is treated. */
export interface NatsClusterOptions extends Omit<CreateClusterOptions, "workers"> {
  /** NATS server, "host:port" or "nats://host:port". */
  natsUrl: string;
  /** The cluster's name on that server (default "default"). */
  clusterName?: string;
  /** How long a leaving worker's requests may run before it is stopped (default 60 s). */
  drainMs?: number;
  log?: (line: string) => void;
}

/** A cluster kept in step with the workers announced on NATS; `stop()` ends the watch, then the workers. */
export async function startNatsCluster(
  model: LoadedModel, modelPath: string, backend: BackendChoice, o: NatsClusterOptions,
): Promise<{ cluster: Cluster; stopWatching(): Promise<void> }> {
  const clusterName = o.clusterName ?? "default";
  controlSubjects(clusterName); // a bad name fails before anything starts
  const nc = await connectControlPlane(o.natsUrl, "evolving-serve");
  const e = o.engine ?? {};
  // Until a worker joins, the context limit is what the engines are asked for.
  const shape = { maxModelLen: Math.min(e.maxModelLen ?? model.config.contextLength, model.config.contextLength), blockSize: e.blockSize ?? DEFAULT_BLOCK_SIZE };
  const c = new Cluster([], { ...o, shape, planner: clusterPlanner({ ...o, workers: 0 }), ...movedKvBytes(model.config, e, remoteKvDtype(model.config, e.kvCacheDtype, backend)) });
  const { portable, onStep } = remoteWorkerWiring(o, () => c);
  const fingerprint = modelFingerprint(model);
  const watch = watchWorkers(nc, c, {
    clusterName, drainMs: o.drainMs, log: o.log,
    connect: async (id, addr) => {
      const engine = await connectTcpWorker(id, addr, modelPath, backend, portable, onStep, o.workerToken, o.quantize, o.mmproj);
      if (engine.modelFingerprint === fingerprint) return engine;
      await engine.stop();
      throw otherModelError(engine, fingerprint);
    },
  });
  return {
    cluster: c,
    async stopWatching() {
      watch.stop();
      await nc.close().catch(() => {});
    },
  };
}

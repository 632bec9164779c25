/**
 * Builds a cluster: `workers` engines in this thread on one backend (sharing one upload of the
 * weights, each with its own KV cache), or each in its own worker thread; their steps feed the
 * cluster's planner windows, and by default our online planner is sized to the engines' limits.
 */
import { OnlinePlanner, type OnlinePlannerOptions } from "../../planner/online-planner.ts";
import type { Planner, Role } from "../../planner/types.ts";
import type { BackendChoice } from "../backend/select.ts";
import type { Backend, KvDType } from "../backend/types.ts";
import { type CreateEngineOptions, createEngines, movedKvBytes } from "../engine/engine-factory.ts";
import { type KvDTypeChoice, resolveKvDtype } from "../engine/kv-cache.ts";
import { DEFAULT_SCHEDULER_CONFIG } from "../engine/scheduler-types.ts";
import type { StepRecord } from "../engine/step-record.ts";
import type { QuantizeDType } from "../model/weights.ts";
import type { LoadedModel } from "../model/config.ts";
import { modelFingerprint } from "../model/fingerprint.ts";
import { Cluster, type ClusterOptions } from "./cluster.ts";
import { connectPort } from "./tcp-port.ts";
import { greetWorker } from "./worker-auth.ts";
import { RemoteEngine, RemoteWorkerError } from "./remote-engine.ts";
import type { PortableEngineOptions } from "./worker-protocol.ts";
import { localWorkerEngine } from "./worker-engine.ts";

/** Options of {@link createCluster}. */
export interface CreateClusterOptions extends Omit<ClusterOptions, "bytesPerBlock" | "stateBytes" | "planner" | "roles"> {
  /** Workers (engines); at least 1. */
  workers: number;
  /** Initial roles, one per worker (default all "mixed"). */
  roles?: readonly Role[];
  /** "online" (default): our planner; "none": roles stay as given; or a planner of your own. */
  planner?: "online" | "none" | Planner;
  /** Tunables of the online planner beyond those taken from the engines. */
  plannerOptions?: OnlinePlannerOptions;
  /** Options of every engine (the cluster sets `workerId` and `onStep`). */
  engine?: Omit<CreateEngineOptions, "workerId" | "onStep">;
  /**
   * Each worker runs its step kinds once before it serves (Engine.warmUp: kernels compiled at start,
   * not at a user's first request), its time reported in {@link WorkerEngine.warmUpMs}; default off
   * (`serve` turns it on unless `--no-warmup`).
   */
  warmUp?: boolean;
  /** Also called with every engine step, with the worker's id (a step log). */
  onStep?: (workerId: string, r: StepRecord) => void;
  /** Shared secret of TCP workers started with the same token (worker-auth.ts); none: no check. */
  workerToken?: string;
  /** Each worker quantizes the model's f32/f16/bf16 matrices into this block format as it loads them (`--quantize`). */
  quantize?: QuantizeDType;
  /** Each worker loads this vision projector beside the model (`--mmproj`; a path on its own machine). */
  mmproj?: string;
  /**
   * The draft model of `engine.speculative` "draft_model", for engines in this thread (worker threads
   * and processes load it themselves from the speculation's path).
   */
  draft?: LoadedModel;
}

/** A cluster of `o.workers` engines running `model` on `backend`. */
export function createCluster(backend: Backend, model: LoadedModel, o: CreateClusterOptions): Cluster {
  if (!Number.isInteger(o.workers) || o.workers < 1) throw new RangeError(`The worker count must be a positive integer, got ${o.workers}`);
  const e = o.engine ?? {};
  // The workers' step hooks reach the cluster built from them.
  const built: { cluster?: Cluster } = {};
  const ids = Array.from({ length: o.workers }, (_, i) => `worker-${i}`);
  const engines = createEngines(backend, model, ids.map((workerId) => ({
    ...e, workerId,
    onStep: (r: StepRecord) => {
      built.cluster?.observeStep(workerId, r);
      o.onStep?.(workerId, r);
    },
  })), o.draft);
  const dtype = movedKvDtype(resolveKvDtype(backend, model.config, e.kvCacheDtype));
  built.cluster = new Cluster(engines.map(localWorkerEngine), { ...o, planner: clusterPlanner(o), ...movedKvBytes(model.config, e, dtype) });
  return built.cluster;
}

/**
 * A cluster of `o.workers` engines, each in its own worker thread, which loads `modelPath` and picks
 * `backend` itself (`model` is the same model, loaded here for its shapes). Resolves once every
 * worker serves; if one cannot start, the others are stopped and the error names it.
 */
export async function startThreadCluster(model: LoadedModel, modelPath: string, backend: BackendChoice, o: CreateClusterOptions): Promise<Cluster> {
  if (!Number.isInteger(o.workers) || o.workers < 1) throw new RangeError(`The worker count must be a positive integer, got ${o.workers}`);
  return await startRemoteCluster(model, o, (id, engine, onStep) => RemoteEngine.start(id, { path: modelPath, quantize: o.quantize, mmproj: o.mmproj }, backend, engine, onStep), backend);
}

/**
 * A cluster of worker processes already listening at `addresses` ("host:port", `deno task worker`),
 * each asked to load `modelPath` (a path on its own machine) on `backend`; `o.workers` is ignored.
 */
export async function startTcpCluster(
  model: LoadedModel, modelPath: string, backend: BackendChoice, addresses: readonly string[], o: Omit<CreateClusterOptions, "workers">,
): Promise<Cluster> {
  if (addresses.length === 0) throw new RangeError("A TCP cluster needs at least one worker address");
  for (const a of addresses) parseAddress(a);
  return await startRemoteCluster(model, { ...o, workers: addresses.length }, (id, engine, onStep) => {
    return connectTcpWorker(id, addresses[Number(id.slice("worker-".length))], modelPath, backend, engine, onStep, o.workerToken, o.quantize, o.mmproj);
  }, backend);
}

/**
 * Connects to the worker process listening at `addr` ("host:port"), greets it (with `token`, each
 * proves it knows it: worker-auth.ts) and has it run engine `id` on `modelPath` (a path on its
 * machine); resolves once it serves. Throws RemoteWorkerError naming an unreachable worker,
 * WorkerAuthError when the greeting fails, RangeError for a bad address.
 */
export async function connectTcpWorker(
  id: string, addr: string, modelPath: string, backend: BackendChoice, engine: PortableEngineOptions, onStep: (id: string, r: StepRecord) => void,
  token?: string, quantize?: QuantizeDType, mmproj?: string,
): Promise<RemoteEngine> {
  const { host, port } = parseAddress(addr);
  const p = await connectPort(host, port).catch((e: Error) => {
    throw new RemoteWorkerError(`Worker ${id} at ${addr} cannot be reached: ${e.message}`);
  });
  try {
    await greetWorker(p, id, addr, token);
  } catch (e) {
    await p.close();
    throw e;
  }
  return RemoteEngine.over(p, id, { path: modelPath, quantize, mmproj }, backend, engine, onStep);
}

/**
 * "host:port" (IPv6 hosts in brackets) → its parts; throws RangeError quoting a bad one. Port 0 (any
 * free port) only where `minPort` is 0: an address to listen on, not one to connect to.
 */
export function parseAddress(a: string, minPort = 1): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(a);
  const port = m ? Number(m[3]) : NaN;
  if (!m || !(port >= minPort && port < 65536)) throw new RangeError(`A worker address must be host:port, got "${a}"`);
  return { host: m[1] ?? m[2], port };
}

type StartWorker = (id: string, engine: PortableEngineOptions, onStep: (id: string, r: StepRecord) => void) => Promise<RemoteEngine>;

/**
 * What a remote worker needs from the cluster's options: its engine options (a clock cannot cross
 * into a thread or process; each engine there keeps its own), and a step callback feeding the
 * cluster once `cluster()` has one.
 */
export function remoteWorkerWiring(o: CreateClusterOptions | Omit<CreateClusterOptions, "workers">, cluster: () => Cluster | undefined): {
  portable: PortableEngineOptions; onStep: (id: string, r: StepRecord) => void;
} {
  const { now: _now, ...engine } = o.engine ?? {};
  return {
    portable: o.warmUp ? { ...engine, warmUp: true } : engine,
    onStep: (id, r) => {
      cluster()?.observeStep(id, r);
      o.onStep?.(id, r);
    },
  };
}

/**
 * Warms up the cluster's workers in this thread, one after another (Engine.warmUp; workers elsewhere
 * warmed up before they reported ready, with CreateClusterOptions.warmUp), and returns the longest
 * warm-up any worker took in milliseconds (undefined: none ran).
 */
export async function warmUpWorkers(cluster: Cluster): Promise<number | undefined> {
  for (const w of cluster.workers) await w.engine.warmUp?.();
  const times = cluster.workers.flatMap((w) => (w.engine.warmUpMs === undefined ? [] : [w.engine.warmUpMs]));
  return times.length === 0 ? undefined : Math.max(...times);
}

/**
 * The dtype a cache's blocks move in between workers (engine/kv-copy.ts): its own, but an f8_e4m3
 * cache's host copies are the values its blocks hold, as half bits where f16 holds them exactly (KV
 * values do; a copy that f16 cannot hold goes as f32, twice the price).
 */
function movedKvDtype(dtype: KvDType): KvDType {
  return dtype === "f8_e4m3" ? "f16" : dtype;
}

/**
 * The KV dtype the router prices a block's move in, for workers that resolve their own (`backend` is
 * their choice): a stated dtype, else what "auto" picks on that backend (f16 where attention takes it:
 * webgpu and reference, with an even head dimension); for "auto" backends, which one a worker finds
 * is not known here, so f32 (a move priced at most twice its cost, never under).
 */
export function remoteKvDtype(config: LoadedModel["config"], choice: KvDTypeChoice | undefined, backend: BackendChoice): KvDType {
  if (choice === "f32" || choice === "f16" || choice === "f8_e4m3") return movedKvDtype(choice);
  return (backend === "webgpu" || backend === "reference") && config.headDim % 2 === 0 ? "f16" : "f32";
}

/** Starts `o.workers` remote engines; if one cannot start, stops the others and throws its error. */
async function startRemoteCluster(model: LoadedModel, o: CreateClusterOptions, start: StartWorker, backend: BackendChoice): Promise<Cluster> {
  const e = o.engine ?? {};
  const built: { cluster?: Cluster } = {};
  const { portable, onStep } = remoteWorkerWiring(o, () => built.cluster);
  const started = await Promise.allSettled(Array.from({ length: o.workers }, (_, i) => start(`worker-${i}`, portable, onStep)));
  const engines = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
  const expected = modelFingerprint(model);
  const other = engines.find((t) => t.modelFingerprint !== expected);
  if (failed || other) {
    await Promise.all(engines.map((t) => t.stop()));
    throw failed ? failed.reason : otherModelError(other!, expected);
  }
  built.cluster = new Cluster(engines, { ...o, planner: clusterPlanner(o), ...movedKvBytes(model.config, e, remoteKvDtype(model.config, e.kvCacheDtype, backend)) });
  return built.cluster;
}

/** The error for a worker whose model is not the server's (same path, other file; or another path). */
export function otherModelError(engine: RemoteEngine, expected: string): RemoteWorkerError {
  return new RemoteWorkerError(
    `Worker ${engine.id} loaded another model than this server's (fingerprint ${engine.modelFingerprint.slice(0, 12)} against ${expected.slice(0, 12)}): --model must name the same model file on every machine`,
  );
}

/** The planner of `o`, the online one sized to the engines' batch limits by default. */
export function clusterPlanner(o: CreateClusterOptions): Planner | null {
  if (o.planner === "none") return null;
  if (typeof o.planner === "object") return o.planner;
  const sched = { ...DEFAULT_SCHEDULER_CONFIG, ...o.engine?.scheduler };
  // A local-prefill threshold given to the router is fixed: the planner keeps it.
  const fixed = o.routerOptions?.localPrefillThreshold;
  return new OnlinePlanner({
    // The planner prices steps with the engines' own limits.
    mixedChunkTokens: sched.maxBatchTokens, prefillChunkTokens: sched.maxBatchTokens, maxDecodeBatch: sched.maxRunning,
    // It prices splits with the step mixing workers run, and leaves it alone where the operator fixed it.
    initialSplitSteps: (o.stepMixing ?? sched.stepMixing) === "split", ...(o.fixedStepMixing ? { adaptStepMixing: false } : {}),
    ...(fixed === undefined
      ? { minLocalPrefill: Math.min(256, sched.maxBatchTokens), initialLocalPrefill: Math.min(512, sched.maxBatchTokens) }
      : { minLocalPrefill: fixed, maxLocalPrefill: fixed, initialLocalPrefill: fixed }),
    ...o.plannerOptions,
  });
}

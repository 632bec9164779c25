/**
 * Puts a server together: load the model, pick the backend, build the engine and the app, listen.
 * Used by `src/cli/serve.ts` and by the tests that drive a real server over sockets.
 */
import { detectToolCallFormat } from "./tool-call-detect.ts";
import { loadAdapterInto } from "./lora.ts";
import os from "node:os";
import { selectBackend } from "../backend/select.ts";
import type { Engine } from "../engine/engine.ts";
import type { ServingEngine } from "../engine/engine-types.ts";
import type { ClusterDecision, RouteDecision } from "../cluster/cluster.ts";
import { peerTransferOptions } from "../cluster/cluster-router.ts";
import type { Backend } from "../backend/types.ts";
import type { CreateEngineOptions } from "../engine/engine-factory.ts";
import { type ServingCluster, startServingCluster } from "./serve-cluster.ts";
import { checkClusterOptions } from "./cluster-options-check.ts";
import { createEngine } from "../engine/engine-factory.ts";
import { kvBytesPerBlock } from "../engine/kv-cache.ts";
import type { StepRecord } from "../engine/step-record.ts";
import { loadModel } from "../model/load.ts";
import { loadDraftModel } from "../engine/draft-model.ts";
import { blockLoadOptions } from "../engine/mtp-drafts.ts";
import type { LoadProgress } from "../model/weights.ts";
import { createApp, samplingDefaultsOf } from "./app.ts";
import { listen, type Listening } from "./listen.ts";
import { ServerLifecycle } from "./lifecycle.ts";
import { reasoningTokensOf } from "./harmony-prompt.ts";
import { detectReasoningParser } from "./reasoning.ts";
import type { RunningServer, ServerOptions } from "./server-options.ts";
import { DEFAULT_IMAGE_CACHE_BYTES, ImagePrep } from "./image-prep.ts";
import { DEFAULT_MEDIA_FETCH_TIMEOUT_MS, type ImageFetchOptions, MAX_IMAGE_FILE_BYTES } from "./image-fetch.ts";
import { type PlannerLogRecord, plannerLogRecord, type RouteLogRecord, routeLogRecord, StepLogWriter } from "./step-log.ts";
import { AGED_SHORT_FIRST } from "../../planner/prefill-order.ts";

export type { RunningServer, ServerOptions } from "./server-options.ts";

/** The served name of a model file: its base name without extension. */
export function modelNameOf(path: string): string {
  return (path.split(/[\\/]/).filter(Boolean).pop() ?? "model").replace(/\.gguf$/i, "");
}

/** Starts a server and resolves once it listens. */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  const { workers, transport } = checkClusterOptions(o);
  const onLoadNote = o.onLoadNote;
  const loaded = o.model ?? (await loadModel(o.modelPath, {
    ...(o.quantize ? { quantize: o.quantize } : {}),
    // Speculative method "mtp" drafts with the model's own multi-token-prediction block, "eagle3" and "eagle" with a head beside it.
    ...blockLoadOptions(o.speculative),
    ...(o.mmproj !== undefined ? { mmproj: o.mmproj } : {}),
    ...(onLoadNote ? { onProgress: (p: LoadProgress) => p.note !== undefined && onLoadNote(p.note) } : {}),
  }));
  // `--chat-template`: the model's own is replaced for rendering and for telling its parsers.
  const model = o.chatTemplate === undefined ? loaded : { ...loaded, chatTemplate: o.chatTemplate };
  // As vLLM: a limit past the model's context is refused, not quietly lowered to it.
  if (o.maxModelLen !== undefined && o.maxModelLen > model.config.contextLength) {
    throw new RangeError(`--max-model-len ${o.maxModelLen} is more than the model's context length ${model.config.contextLength}`);
  }
  // Loaded here for an engine in this thread and to refuse a mismatched vocabulary before any worker
  // starts; worker threads and processes load their own from the same path.
  const draft = o.speculative?.method === "draft_model" ? await loadDraftModel(o.speculative, model, o.quantize ? { quantize: o.quantize } : {}) : undefined;
  const kvMemoryBytes = o.kvMemoryFraction === undefined ? undefined : o.kvMemoryFraction * os.totalmem();
  // The fraction is of this machine's memory, shared by the workers; under NATS (worker count not
  // known in advance) each worker gets the whole fraction.
  const kvShare = Math.max(1, workers);
  // Checked at the smallest dtype the choice allows; the engine refuses a budget short of 2 blocks in the dtype it takes.
  const smallestDtype = o.kvCacheDtype === "f32" ? "f32" : o.kvCacheDtype === "f8_e4m3" ? "f8_e4m3" : "f16";
  // A draft model's cache has as many blocks as the model's, from the same budget (engine-factory.ts kvBlockCount).
  const smallestKv = kvBytesPerBlock(model.config, undefined, smallestDtype) + (draft ? kvBytesPerBlock(draft.config, undefined, smallestDtype) : 0);
  if (o.kvBlocks === undefined && kvMemoryBytes !== undefined && kvMemoryBytes / kvShare < 2 * smallestKv) {
    throw new RangeError(`--kv-memory-fraction ${o.kvMemoryFraction} leaves room for fewer than 2 KV blocks per worker`);
  }
  // Tags that are not single tokens are still parsed from the text; only KV typing and budgets need the ids.
  const reasoningParser = o.reasoningParser === "auto" ? detectReasoningParser(model.chatTemplate, model.config.architecture) : o.reasoningParser ?? "none";
  const reasoningTokens = reasoningTokensOf(reasoningParser, model.tokenizer);
  const engineOptions: CreateEngineOptions = {
    numBlocks: o.kvBlocks,
    kvMemoryBytes: kvMemoryBytes === undefined ? undefined : kvMemoryBytes / kvShare,
    ...(o.kvCacheDtype ? { kvCacheDtype: o.kvCacheDtype } : {}),
    ...(o.slidingWindowKv ? { slidingWindowKv: o.slidingWindowKv } : {}),
    ...(o.stateCheckpoints !== undefined ? { stateCheckpoints: o.stateCheckpoints } : {}),
    ...(o.hostStateCheckpoints ? { hostStateCheckpoints: o.hostStateCheckpoints } : {}),
    maxModelLen: o.maxModelLen,
    maxWaiting: o.maxWaiting,
    kvRetention: o.kvRetention,
    ...(o.kvOffloadBlocks ? { kvOffloadBlocks: o.kvOffloadBlocks } : {}),
    ...(o.jumpForward === false ? { jumpForward: false } : {}),
    ...(o.speculative ? { speculative: o.speculative } : {}),
    ...(o.schedulerSteps !== undefined ? { schedulerSteps: o.schedulerSteps } : {}),
    ...(o.mixedStepOverheadMs ? { mixedStepOverheadMs: o.mixedStepOverheadMs } : {}),
    scheduler: {
      ...(o.maxBatchTokens ? { maxBatchTokens: o.maxBatchTokens } : {}),
      ...(o.maxNumSeqs ? { maxRunning: o.maxNumSeqs } : {}),
      ...(o.longPrefillTokenThreshold ? { longPrefillTokenThreshold: o.longPrefillTokenThreshold } : {}),
      ...(o.role ? { role: o.role } : {}),
      ...(o.preemption ? { preemption: o.preemption } : {}),
      ...(o.swapSpaceBlocks !== undefined ? { swapSpaceBlocks: o.swapSpaceBlocks } : {}),
      ...(o.stepMixing && o.stepMixing !== "auto" ? { stepMixing: o.stepMixing } : {}),
      prefillOrder: o.prefillOrder ?? AGED_SHORT_FIRST,
      ...(reasoningTokens ? { reasoningTokens } : {}),
    },
  };
  const stepLog = o.stepLogPath === undefined ? null : await StepLogWriter.open(o.stepLogPath);
  const plannerLog = o.plannerLogPath === undefined ? null : await StepLogWriter.open<PlannerLogRecord>(o.plannerLogPath, "planner log");
  const routeLog = o.routeLogPath === undefined ? null : await StepLogWriter.open<RouteLogRecord>(o.routeLogPath, "route log");
  const unixS = () => (performance.timeOrigin + performance.now()) / 1000;
  let cluster: ServingCluster | undefined;
  let engine: Engine | undefined;
  let backend: Backend | undefined;
  let reason: string;
  let warmUpMs: number | undefined;
  if (workers > 1 || transport === "tcp") {
    cluster = await startServingCluster(model, {
      modelPath: o.modelPath, backend: o.backend, workers, roles: o.roles, planner: o.planner ?? "online", ...(o.sla ? { sla: o.sla } : {}), router: o.router,
      stepMixing: o.stepMixing === "split" ? "split" : "mixed", fixedStepMixing: o.stepMixing === "mixed" || o.stepMixing === "split",
      routerOptions: {
        ...o.routerOptions,
        ...(o.peerTransfer !== undefined ? peerTransferOptions(o.peerTransfer) : {}),
        ...(o.localPrefillTokens !== undefined ? { localPrefillThreshold: o.localPrefillTokens } : {}),
      },
      ...(o.itlAdmissionTargetS !== undefined ? { plannerOptions: { itlTargetS: o.itlAdmissionTargetS, itlAdmission: true } } : {}),
      transport: transport ?? "in-process", workerAddrs: o.workerAddrs, engine: engineOptions, warmUp: o.warmUp !== false,
      ...(o.nats !== undefined ? { nats: { url: o.nats, clusterName: o.clusterName, drainMs: o.drainMs } } : {}),
      ...(o.quantize ? { quantize: o.quantize } : {}), ...(o.mmproj !== undefined ? { mmproj: o.mmproj } : {}), ...(draft ? { draft } : {}),
      ...(o.workerToken !== undefined ? { workerToken: o.workerToken } : {}), ...(stepLog ? { onStep: (id: string, r: StepRecord) => stepLog.record({ ...r, worker: id }) } : {}),
      ...(plannerLog ? { onDecision: (d: ClusterDecision) => plannerLog.record(plannerLogRecord(d, unixS())) } : {}),
      ...(routeLog ? { onRoute: (d: RouteDecision) => routeLog.record(routeLogRecord(d, unixS())) } : {}),
    });
    reason = cluster.backendReason;
    warmUpMs = cluster.warmUpMs;
  } else {
    ({ backend, reason } = await selectBackend(o.backend));
    engine = createEngine(backend, model, {
      ...engineOptions,
      ...(stepLog ? { onStep: (r: StepRecord) => stepLog.record(r) } : {}),
      ...(o.stepMixing === "auto" ? { autoStepMixing: true } : {}),
    }, draft);
    if (o.warmUp !== false) warmUpMs = await engine.warmUp();
  }
  const serving: ServingEngine = cluster?.cluster ?? engine!;
  const modelName = o.servedModelName ?? modelNameOf(o.modelPath);
  const loraSources = new Map<string, string>();
  for (const m of o.loraModules ?? []) {
    try {
      if (m.name === modelName) throw new RangeError("it takes the base model's name");
      await loadAdapterInto(serving, model, m.name, m.path);
    } catch (e) {
      await serving.stop();
      backend?.destroy();
      cluster?.destroyBackend();
      throw new RangeError(`--lora-modules "${m.name}": ${e instanceof Error ? e.message : String(e)}`);
    }
    loraSources.set(m.name, m.path);
  }
  const lifecycle = new ServerLifecycle();
  // Images prepared in a thread of their own and kept by data URL (image-prep.ts); ended at shutdown.
  const imagePrep = model.config.vision ? new ImagePrep(model.config.vision.preprocess, o.imageCacheBytes ?? DEFAULT_IMAGE_CACHE_BYTES) : undefined;
  await imagePrep?.start();
  const toolCallParser = o.toolCallParser === "auto" ? detectToolCallFormat(model.chatTemplate, model.config.architecture) : o.toolCallParser ?? "hermes";
  const app = createApp({ engine: serving, model, modelName, apiKey: o.apiKey, ...(o.allowedOrigins ? { allowedOrigins: o.allowedOrigins } : {}), maxBodyBytes: o.maxBodyBytes, bodyTimeoutMs: o.bodyTimeoutMs, maxStoredResponses: o.maxStoredResponses, maxConversations: o.maxConversations, maxStoredMiB: o.maxStoredMiB, reasoningParser, jsonWhitespace: o.jsonWhitespace, toolCallParser, generationConfig: o.generationConfig, schedulingPolicy: o.schedulingPolicy, lifecycle, loraSources, allowRuntimeLora: o.allowRuntimeLora, imageFetch: imageFetchOf(o), ...(o.maxImagesPerRequest !== undefined ? { maxImages: o.maxImagesPerRequest } : {}), ...(imagePrep ? { imagePrep } : {}) });
  let l: Listening;
  try {
    l = await listen(app.fetch, o.host, o.port);
  } catch (e) {
    // Nothing serves: stop what was started for it, so that a caller that goes on is not left with an engine running.
    await cluster?.stopControl();
    await serving.stop();
    backend?.destroy();
    cluster?.destroyBackend();
    await stepLog?.close();
    await plannerLog?.close();
    await routeLog?.close();
    await imagePrep?.close();
    throw e;
  }
  return {
    ...l,
    url: `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${l.port}`,
    get engine(): Engine {
      if (engine === undefined) throw new RangeError("This server runs several workers: use `serving` or `cluster`, not `engine`");
      return engine;
    },
    serving,
    cluster: cluster?.cluster,
    modelName,
    backendReason: reason,
    ...(warmUpMs !== undefined ? { warmUpMs } : {}),
    ...(cluster?.slaSource !== undefined ? { slaProfileSource: cluster.slaSource } : {}),
    ...(cluster ? { planner: typeof o.planner === "object" ? "custom" : o.planner ?? "online" } : {}),
    toolCallParser,
    reasoningParser,
    reasoningTokens,
    samplingDefaults: samplingDefaultsOf(model, o.generationConfig),
    drain: (graceMs, stopWaiting) => lifecycle.drain(graceMs, stopWaiting),
    get inFlight() {
      return lifecycle.inFlight;
    },
    async shutdown() {
      await cluster?.stopControl();
      await serving.stop();
      await l.close();
      backend?.destroy();
      cluster?.destroyBackend();
      await stepLog?.close();
      await plannerLog?.close();
      await routeLog?.close();
      await imagePrep?.close();
    },
  };
}

/** Where the server reads image URLs from: its options' hosts and directory (image-fetch.ts). */
function imageFetchOf(o: ServerOptions): ImageFetchOptions {
  return {
    allowedDomains: (o.allowedMediaDomains ?? []).map((d) => d.toLowerCase()),
    ...(o.allowedLocalMediaPath !== undefined ? { localPath: o.allowedLocalMediaPath } : {}),
    timeoutMs: o.mediaFetchTimeoutMs ?? DEFAULT_MEDIA_FETCH_TIMEOUT_MS,
    maxBytes: MAX_IMAGE_FILE_BYTES,
  };
}

/**
 * Puts a server together: load the model, pick the backend, build the engine and the app, listen.
 * Used by `src/cli/serve.ts` and by the tests that drive a real server over sockets.
 */
import { type LoraModule, loadAdapterInto } from "./lora.ts";
import type { Speculation } from "../engine/ngram-draft.ts";
import os from "node:os";
import { type BackendChoice, selectBackend } from "../backend/select.ts";
import type { Engine } from "../engine/engine.ts";
import type { ServingEngine } from "../engine/engine-types.ts";
import type { JsonWhitespace, ToolCallFormat } from "../engine/grammar.ts";
import type { Cluster, ClusterDecision, RouteDecision } from "../cluster/cluster.ts";
import { type ClusterRouterName, type PeerTransferMode, peerTransferOptions } from "../cluster/cluster-router.ts";
import type { SessionRouterOptions } from "../../planner/routers.ts";
import type { Backend } from "../backend/types.ts";
import type { CreateEngineOptions } from "../engine/engine-factory.ts";
import { type ClusterTransport, type ServingCluster, startServingCluster } from "./serve-cluster.ts";
import type { ProfilePlannerName, SlaServeOptions } from "./sla-planner-setup.ts";
import { checkClusterOptions } from "./cluster-options-check.ts";
import type { Planner, Role } from "../../planner/types.ts";
import type { KvRetention } from "../engine/engine-sessions.ts";
import { createEngine } from "../engine/engine-factory.ts";
import { kvBytesPerBlock, type KvDTypeChoice } from "../engine/kv-cache.ts";
import type { PreemptionMode, SchedulingPolicy, StepMixing, WorkerRole } from "../engine/scheduler-types.ts";
import type { ReasoningTokens } from "../engine/reasoning-spans.ts";
import type { StepRecord } from "../engine/step-record.ts";
import type { LoadedModel, SamplingDefaults } from "../model/config.ts";
import { loadModel } from "../model/load.ts";
import { loadDraftModel } from "../engine/draft-model.ts";
import type { LoadProgress, QuantizeDType } from "../model/weights.ts";
import { createApp, type GenerationConfigChoice, samplingDefaultsOf } from "./app.ts";
import { listen, type Listening } from "./listen.ts";
import { ServerLifecycle } from "./lifecycle.ts";
import type { ReasoningParserName } from "./reasoning.ts";
import { reasoningTokensOf } from "./harmony-prompt.ts";
import { type PlannerLogRecord, plannerLogRecord, type RouteLogRecord, routeLogRecord, StepLogWriter } from "./step-log.ts";
import { AGED_SHORT_FIRST, type PrefillOrderOptions } from "../../planner/prefill-order.ts";

/** Everything `serve` can be told. */
export interface ServerOptions {
  modelPath: string;
  /** Already loaded model (tests share one); otherwise loaded from modelPath. */
  model?: LoadedModel;
  servedModelName?: string;
  host: string;
  port: number;
  backend: BackendChoice;
  apiKey?: string;
  /** Origins browsers may call from (CORS); default any. */
  allowedOrigins?: readonly string[];
  maxModelLen?: number;
  kvBlocks?: number;
  /** Host-memory KV tier in blocks (per worker): evicted cached KV moves there and comes back on a hit (default 0: off). */
  kvOffloadBlocks?: number;
  /** Fraction of host memory for the KV cache (used when kvBlocks is not given). */
  kvMemoryFraction?: number;
  /** The KV cache's element type: auto (default: f16 where the backend takes it), f16 or f32. */
  kvCacheDtype?: KvDTypeChoice;
  maxBatchTokens?: number;
  maxNumSeqs?: number;
  maxWaiting?: number;
  role?: WorkerRole;
  /** What a preempted request loses: its KV (recompute, the default) or nothing (swap to host). */
  preemption?: PreemptionMode;
  /** Host swap space in KV blocks (swap mode; default: as many as the device pool). */
  swapSpaceBlocks?: number;
  /**
   * Prefill chunks and decodes in one mixed step ("mixed"), in separate alternating steps ("split"),
   * or whichever is priced cheaper online ("auto", from mixed). One engine: default "mixed", and
   * "auto" is the engine's own step model. Several workers: default "auto", the cluster's planner
   * (needs one); "mixed" or "split" given then stay as given.
   */
  stepMixing?: StepMixing | "auto";
  /** Admission order of waiting prompts (default: short-first, aged 2000 tokens/s, as in the simulator). */
  prefillOrder?: PrefillOrderOptions;
  /** "priority" (default): requests may set `priority`, lower first; "fcfs": any but 0 is refused (vLLM's default). */
  schedulingPolicy?: SchedulingPolicy;
  /** LoRA adapters served by name from the start (`--lora-modules`; one engine only). */
  loraModules?: readonly LoraModule[];
  /** `--allow-runtime-lora-updating`: adapters may be loaded and unloaded over HTTP. */
  allowRuntimeLora?: boolean;
  /** Which cached KV goes first under memory pressure (default "agent"). */
  kvRetention?: KvRetention;
  /**
   * "think": chat answers' `<think>…</think>` text is returned as `reasoning_content`, and the engine
   * types KV blocks of reasoning "reasoning" when both tags are single tokens (default "none");
   * "mistral" the same for `[THINK]…[/THINK]`, "harmony" for gpt-oss's analysis messages.
   */
  reasoningParser?: ReasoningParserName;
  /** Jump-forward decoding under output grammars (EngineOptions.jumpForward; default true). */
  jumpForward?: boolean;
  /** N-gram speculative decoding (EngineOptions.speculative; default off). */
  speculative?: Speculation;
  /**
   * How JSON output grammars (response_format, forced tool calls, structured_outputs json) may be
   * spaced unless a request says (`structured_outputs.disable_any_whitespace`): "any" (default) or
   * "compact", json.dumps's `", "` and `": "` only (grammar.ts JsonWhitespace).
   */
  jsonWhitespace?: JsonWhitespace;
  /**
   * "auto" (default, as vLLM's): a request that leaves out temperature, top_p, top_k, min_p,
   * repetition_penalty or max_tokens gets the model's generation_config.json values
   * (ModelConfig.samplingDefaults); "vllm": OpenAI's defaults (temperature 1, top_p 1, no top_k, no
   * min_p or repetition penalty, up to the context) whatever the model recommends.
   */
  generationConfig?: GenerationConfigChoice;
  /**
   * How the model writes tool calls, read out of chat answers and written by forced tool calls:
   * "hermes" (default; Qwen 2.5/3, Hermes), "llama3_json" (Llama 3.1–3.3), "kimi_k2" (Kimi K2),
   * "deepseek_v31" (DeepSeek V3.1), "deepseek_v3" (DeepSeek V3, R1-0528), "glm45" (GLM 4.5–4.7),
   * "qwen3_coder" (Qwen3-Coder), "minimax_m2" (MiniMax M2), "mistral" (Mistral, Magistral,
   * Devstral; the shape by the tokenizer's version) or "harmony" (gpt-oss). vLLM's parser names, but
   * "harmony" (vLLM's "openai").
   */
  toolCallParser?: ToolCallFormat;
  maxBodyBytes?: number;
  /** Longest wait for the next bytes of a request body, in ms (408 after; default 30 s). */
  bodyTimeoutMs?: number;
  /** The most Responses API responses kept (app.ts; default 4096, 0 keeps none). */
  maxStoredResponses?: number;
  /** The most conversations kept (app.ts; default 1024, 0 keeps none). */
  maxConversations?: number;
  /** The most MiB of JSON text each of the response and conversation stores keeps (app.ts; default 512). */
  maxStoredMiB?: number;
  /** Milliseconds added to every step mixing prefill and decode (src/engine/mixed-step-overhead.ts; default 0). */
  mixedStepOverheadMs?: number;
  /** Write every engine step's shape and time to this JSONL file (`deno task sim --calibrate`). */
  stepLogPath?: string;
  /**
   * Write each planner decision the cluster applies to this JSONL file: `{"unixS", "kind", ...the
   * action, "changed", "from"}` (`from`: a flipped worker's role before). Only with `workers`.
   */
  plannerLogPath?: string;
  /**
   * Write each routing decision of the cluster to this JSONL file: `{"unixS", "sessionId", "request",
   * "candidates", "route"}` (every live worker as the router priced it, and where the request went).
   * Only with `workers`.
   */
  routeLogPath?: string;
  /**
   * Engines in one process behind our router and role planner (src/cluster); 1 (default) serves one
   * engine. `kvBlocks` is per worker; `kvMemoryFraction` is shared among them.
   */
  workers?: number;
  /** Initial role of each worker (default all "mixed"); only with `workers`. */
  roles?: Role[];
  /**
   * "online" (default): the planner flips roles every second from what it measures; "none": roles
   * stay; "sla": the baseline, Dynamo's SLA planner, setting prefill and decode replica counts from an
   * offline profile of the workers every `sla.intervalS` (sla-planner-setup.ts); "load": its load
   * mode, ±1 replica a pool every 5 s from queued work and the same profile; or a planner of your own,
   * ticked at its `intervalS`.
   */
  planner?: "online" | "none" | ProfilePlannerName | Planner;
  /** With planner "sla" or "load": its offline profile (read, or measured at start-up) and settings. */
  sla?: SlaServeOptions;
  /** "session" (default, ours) or "kv-aware" (Dynamo's cost). */
  router?: ClusterRouterName;
  /** With the session router: pull a session's prefix from its holder ("host", default), device blocks only, or never. */
  peerTransfer?: PeerTransferMode;
  /** Our router's tunables over the cluster's defaults (`--router-options`); `peerTransfer` and `localPrefillTokens` apply after them. */
  routerOptions?: Partial<SessionRouterOptions>;
  /**
   * The planner lets a new session in only while the decode pool stays within this ITL (seconds): its
   * ITL admission (planner/itl-admission.ts); others wait at the door to its next tick, then get in or 503
   * with Retry-After. Off when absent.
   */
  itlAdmissionTargetS?: number;
  /**
   * Uncached prompt tokens a decode-role worker prefills itself; a longer prompt may be prefilled on
   * a prefill-role worker and its KV moved to the decoding one (Dynamo's max_local_prefill_length:
   * its KV-aware router always does; ours does when that beats prefilling locally).
   * Fixed when given. Absent: the online planner adapts it (from 512, within 256–2048, and at most the
   * batch token budget); with no planner it stays 512.
   */
  localPrefillTokens?: number;
  /**
   * Where the workers run: "in-process" (default; one thread, one backend), "threads" (one worker
   * thread each) or "tcp" (worker processes at `workerAddrs`, each loading `modelPath` itself).
   */
  transport?: ClusterTransport;
  /** "host:port" of each worker process (`deno task worker`) for the "tcp" transport; sets `workers`. */
  workerAddrs?: string[];
  /**
   * NATS server ("host:port" or "nats://host:port") on which worker processes announce themselves
   * (`deno task worker --nats URL`): they join and leave while the server runs (the "tcp" transport,
   * instead of `workerAddrs`).
   */
  nats?: string;
  /** The cluster's name on the NATS server (default "default"). */
  clusterName?: string;
  /** How long a leaving worker's requests may run before it is stopped (default 60000 ms). */
  drainMs?: number;
  /** Shared secret of the TCP workers (`worker --worker-token`): each side proves it knows it. */
  workerToken?: string;
  /** Quantize the model's f32/f16/bf16 matrices into this block format at load (`--quantize`); workers do the same. */
  quantize?: QuantizeDType;
  /** Told what the model's load has to say (i-quant tensors converted on the host, gguf-loader.ts); `serve` prints it. */
  onLoadNote?: (note: string) => void;
}

/** A running server. */
export interface RunningServer extends Listening {
  url: string;
  /** The engine (one-engine servers only: with `workers` it throws; use `serving` or `cluster`). */
  readonly engine: Engine;
  /** What serves requests: the engine, or the cluster. */
  serving: ServingEngine;
  /** The cluster under `workers` (undefined for one engine). */
  cluster: Cluster | undefined;
  modelName: string;
  backendReason: string;
  /** With the SLA planner: where its offline profile came from (read from a file, or measured at start-up). */
  slaProfileSource?: string;
  /** The `<think>`/`</think>` ids the engine tracks reasoning with; undefined when it does not. */
  reasoningTokens: ReasoningTokens | undefined;
  /** The sampling defaults requests get where they leave parameters out (`generationConfig`; empty: OpenAI's). */
  samplingDefaults: SamplingDefaults;
  /**
   * Turns new generation requests away (503; /health answers 503 "draining") and resolves once those
   * in flight have been answered, or after `graceMs`, or when `stopWaiting` resolves, with how many
   * were still in flight. Call {@link shutdown} after it.
   */
  drain(graceMs: number, stopWaiting?: Promise<unknown>): Promise<number>;
  /** Generation responses not yet fully written. */
  readonly inFlight: number;
  /** Stops listening, cancels requests, stops the engine. */
  shutdown(): Promise<void>;
}

/** The served name of a model file: its base name without extension. */
export function modelNameOf(path: string): string {
  return (path.split(/[\\/]/).filter(Boolean).pop() ?? "model").replace(/\.gguf$/i, "");
}

/** Starts a server and resolves once it listens. */
export async function startServer(o: ServerOptions): Promise<RunningServer> {
  const { workers, transport } = checkClusterOptions(o);
  const onLoadNote = o.onLoadNote;
  const model = o.model ?? (await loadModel(o.modelPath, {
    ...(o.quantize ? { quantize: o.quantize } : {}),
    ...(onLoadNote ? { onProgress: (p: LoadProgress) => p.note !== undefined && onLoadNote(p.note) } : {}),
  }));
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
  const smallestDtype = o.kvCacheDtype === "f32" ? "f32" : "f16";
  // A draft model's cache has as many blocks as the model's, from the same budget (engine-factory.ts kvBlockCount).
  const smallestKv = kvBytesPerBlock(model.config, undefined, smallestDtype) + (draft ? kvBytesPerBlock(draft.config, undefined, smallestDtype) : 0);
  if (o.kvBlocks === undefined && kvMemoryBytes !== undefined && kvMemoryBytes / kvShare < 2 * smallestKv) {
    throw new RangeError(`--kv-memory-fraction ${o.kvMemoryFraction} leaves room for fewer than 2 KV blocks per worker`);
  }
  // Tags that are not single tokens are still parsed from the text; only KV typing and budgets need the ids.
  const reasoningTokens = reasoningTokensOf(o.reasoningParser ?? "none", model.tokenizer);
  const engineOptions: CreateEngineOptions = {
    numBlocks: o.kvBlocks,
    kvMemoryBytes: kvMemoryBytes === undefined ? undefined : kvMemoryBytes / kvShare,
    ...(o.kvCacheDtype ? { kvCacheDtype: o.kvCacheDtype } : {}),
    maxModelLen: o.maxModelLen,
    maxWaiting: o.maxWaiting,
    kvRetention: o.kvRetention,
    ...(o.kvOffloadBlocks ? { kvOffloadBlocks: o.kvOffloadBlocks } : {}),
    ...(o.jumpForward === false ? { jumpForward: false } : {}),
    ...(o.speculative ? { speculative: o.speculative } : {}),
    ...(o.mixedStepOverheadMs ? { mixedStepOverheadMs: o.mixedStepOverheadMs } : {}),
    scheduler: {
      ...(o.maxBatchTokens ? { maxBatchTokens: o.maxBatchTokens } : {}),
      ...(o.maxNumSeqs ? { maxRunning: o.maxNumSeqs } : {}),
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
      transport: transport ?? "in-process", workerAddrs: o.workerAddrs, engine: engineOptions,
      ...(o.nats !== undefined ? { nats: { url: o.nats, clusterName: o.clusterName, drainMs: o.drainMs } } : {}),
      ...(o.quantize ? { quantize: o.quantize } : {}), ...(draft ? { draft } : {}),
      ...(o.workerToken !== undefined ? { workerToken: o.workerToken } : {}), ...(stepLog ? { onStep: (id: string, r: StepRecord) => stepLog.record({ ...r, worker: id }) } : {}),
      ...(plannerLog ? { onDecision: (d: ClusterDecision) => plannerLog.record(plannerLogRecord(d, unixS())) } : {}),
      ...(routeLog ? { onRoute: (d: RouteDecision) => routeLog.record(routeLogRecord(d, unixS())) } : {}),
    });
    reason = cluster.backendReason;
  } else {
    ({ backend, reason } = await selectBackend(o.backend));
    engine = createEngine(backend, model, {
      ...engineOptions,
      ...(stepLog ? { onStep: (r: StepRecord) => stepLog.record(r) } : {}),
      ...(o.stepMixing === "auto" ? { autoStepMixing: true } : {}),
    }, draft);
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
  const app = createApp({ engine: serving, model, modelName, apiKey: o.apiKey, ...(o.allowedOrigins ? { allowedOrigins: o.allowedOrigins } : {}), maxBodyBytes: o.maxBodyBytes, bodyTimeoutMs: o.bodyTimeoutMs, maxStoredResponses: o.maxStoredResponses, maxConversations: o.maxConversations, maxStoredMiB: o.maxStoredMiB, reasoningParser: o.reasoningParser, jsonWhitespace: o.jsonWhitespace, toolCallParser: o.toolCallParser, generationConfig: o.generationConfig, schedulingPolicy: o.schedulingPolicy, lifecycle, loraSources, allowRuntimeLora: o.allowRuntimeLora });
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
    ...(cluster?.slaSource !== undefined ? { slaProfileSource: cluster.slaSource } : {}),
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
    },
  };
}

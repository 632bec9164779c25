/**
 * What `startServer` takes (`ServerOptions`, everything `serve` can be told) and what it returns
 * (`RunningServer`); server.ts re-exports both.
 */
import type { LoraModule } from "./lora.ts";
import type { SlidingWindowKv } from "../engine/engine-factory.ts";
import type { Speculation } from "../engine/ngram-draft.ts";
import type { BackendChoice } from "../backend/select.ts";
import type { Engine } from "../engine/engine.ts";
import type { ServingEngine } from "../engine/engine-types.ts";
import type { JsonWhitespace, ToolCallFormat } from "../engine/grammar.ts";
import type { ToolCallChoice } from "./tool-call-detect.ts";
import type { Cluster } from "../cluster/cluster.ts";
import type { ClusterRouterName, PeerTransferMode } from "../cluster/cluster-router.ts";
import type { SessionRouterOptions } from "../../planner/routers.ts";
import type { ClusterTransport } from "./serve-cluster.ts";
import type { ProfilePlannerName, SlaServeOptions } from "./sla-planner-setup.ts";
import type { Planner, Role } from "../../planner/types.ts";
import type { KvRetention } from "../engine/engine-sessions.ts";
import type { KvDTypeChoice } from "../engine/kv-cache.ts";
import type { PreemptionMode, SchedulingPolicy, StepMixing, WorkerRole } from "../engine/scheduler-types.ts";
import type { ReasoningTokens } from "../engine/reasoning-spans.ts";
import type { LoadedModel, SamplingDefaults } from "../model/config.ts";
import type { QuantizeDType } from "../model/weights.ts";
import type { GenerationConfigChoice } from "./app.ts";
import type { Listening } from "./listen.ts";
import type { ReasoningParserChoice, ReasoningParserName } from "./reasoning.ts";
import type { PrefillOrderOptions } from "../../planner/prefill-order.ts";

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
  /** What a sliding-window layer's cache keeps: every position (paged, default) or the window only (engine-factory.ts CreateEngineOptions.slidingWindowKv). */
  slidingWindowKv?: SlidingWindowKv;
  maxBatchTokens?: number;
  maxNumSeqs?: number;
  /** Tokens one sequence feeds per step at most (scheduler-types.ts SchedulerConfig.longPrefillTokenThreshold). */
  longPrefillTokenThreshold?: number;
  /** State checkpoints a model with state outside its KV blocks keeps (engine-factory.ts CreateEngineOptions.stateCheckpoints; default: maxNumSeqs). */
  stateCheckpoints?: number;
  /** State checkpoints kept in host memory once the device's are taken (EngineOptions.hostStateCheckpoints; default 0). */
  hostStateCheckpoints?: number;
  /** Multi-step decoding (EngineOptions.schedulerSteps; default: engine-factory.ts `defaultSchedulerSteps`). */
  schedulerSteps?: number;
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
   * "mistral" the same for `[THINK]…[/THINK]`, "harmony" for gpt-oss's analysis messages; "auto" the one
   * the model's chat template (gpt-oss: its architecture) tells, none where it tells none.
   */
  reasoningParser?: ReasoningParserChoice;
  /** Jump-forward decoding under output grammars (EngineOptions.jumpForward; default true). */
  jumpForward?: boolean;
  /** Run each engine's step kinds once before listening (Engine.warmUp; default true, `--no-warmup` off): a cluster's workers each before they serve. */
  warmUp?: boolean;
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
   * Devstral; the shape by the tokenizer's version), "harmony" (gpt-oss), "granite" (Granite 3.x),
   * "phi4_mini_json" (Phi-4-mini), "lfm2" (LFM2, LFM2.5: Python calls; llama.cpp's format) or
   * "nemotron_json" (Nemotron Nano 2), "seed_oss" (Seed-OSS: Qwen3-Coder's calls in `<seed:tool_call>`) or
   * "gemma4" (Gemma 4, read only). vLLM's parser names, but "harmony" (vLLM's "openai"), "lfm2"
   * (which vLLM has not) and "nemotron_json" (NVIDIA's plugin for vLLM). "auto": the
   * format the model's chat template tells (tool-call-detect.ts), Hermes where it tells none.
   */
  toolCallParser?: ToolCallChoice;
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
  /** A chat template (Jinja text) used instead of the model's (`--chat-template`): for rendering chat messages and for telling the tool-call and reasoning parsers ("auto"). */
  chatTemplate?: string;
  /** A llama.cpp projector file (`--mmproj`): the model reads images in its prompts (model/vision/); one engine only. */
  mmproj?: string;
  /** Hosts whose `http(s)://` image URLs are fetched (`--allowed-media-domains`; "*" any; default none: image-fetch.ts). */
  allowedMediaDomains?: readonly string[];
  /** The directory whose files `file://` image URLs may name (`--allowed-local-media-path`; default none). */
  allowedLocalMediaPath?: string;
  /** The longest an image URL's read may take, in ms (`--media-fetch-timeout`; default 5000, vLLM's). */
  mediaFetchTimeoutMs?: number;
  /** The most images a request may hold (`--limit-mm-per-prompt '{"image": N}'`, vLLM's; default 32; 0 takes none). */
  maxImagesPerRequest?: number;
  /** Bytes of prepared images kept by data URL, so that a resent screenshot is not decoded again (`--mm-processor-cache-gb`; default 1 GiB; 0 keeps none: image-prep.ts). */
  imageCacheBytes?: number;
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
  /** Milliseconds the engine's warm-up took, a cluster's the longest of its workers' (Engine.warmUp; undefined: none ran). */
  warmUpMs?: number;
  /** With the SLA planner: where its offline profile came from (read from a file, or measured at start-up). */
  slaProfileSource?: string;
  /** A cluster's planner as it runs (online, none, sla, load; "custom" for a Planner given as an object); undefined for one engine. */
  planner?: string;
  /** The `<think>`/`</think>` ids the engine tracks reasoning with; undefined when it does not. */
  reasoningTokens: ReasoningTokens | undefined;
  /** How chat answers' reasoning is read (`reasoningParser`, "auto" resolved). */
  reasoningParser: ReasoningParserName;
  /** How chat answers' tool calls are read and forced ones written (`toolCallParser`, "auto" resolved). */
  toolCallParser: ToolCallFormat;
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

/**
 * `deno task serve` / `npm run serve`: an OpenAI-compatible server for one model.
 *
 *   deno task serve --model models/stories260K.gguf --port 8000 --backend auto
 *
 * Runs under Deno (Deno.serve) and Node (@hono/node-server); the runtime is detected.
 */
import { type LoraModule, parseLoraModules } from "../serve/lora.ts";
import { fileURLToPath } from "node:url";
import { BACKEND_NAMES, isBackendChoice } from "../backend/select.ts";
import { BackendUnavailableError } from "../backend/types.ts";
import { isKvRetention, KV_RETENTIONS } from "../engine/engine-sessions.ts";
import { KvCapacityError, kvDtypeChoice } from "../engine/kv-cache.ts";
import { parseSpeculativeConfig, type Speculation, SpeculationConfigError } from "../engine/ngram-draft.ts";
import { TOOL_CALL_FORMAT_ALIASES, TOOL_CALL_FORMATS } from "../engine/grammar.ts";
import { toolCallChoice } from "../serve/tool-call-detect.ts";
import { type PreemptionMode, SCHEDULING_POLICIES, STEP_MIXINGS, type StepMixing, type WorkerRole } from "../engine/scheduler-types.ts";
import { ModelLoadError, type SamplingDefaults } from "../model/config.ts";
import { cliArgs, envVar, exitProcess, runtimeName } from "../runtime/env.ts";
import { AGED_SHORT_FIRST, FCFS } from "../../planner/prefill-order.ts";
import { isReasoningParser, REASONING_PARSER_ALIASES, REASONING_PARSERS, type ReasoningParserChoice, reasoningTags } from "../serve/reasoning.ts";
import { startServer } from "../serve/server.ts";
import { ListenError } from "../serve/listen.ts";
import { CLUSTER_ROUTERS, isClusterRouter, isPeerTransferMode, parseRouterOptions, PEER_TRANSFER_MODES, RouterOptionsError } from "../cluster/cluster-router.ts";
import type { SessionRouterOptions } from "../../planner/routers.ts";
import { RemoteWorkerError } from "../cluster/remote-engine.ts";
import { ControlPlaneError, splitCredentials } from "../cluster/nats-membership.ts";
import { WorkerAuthError } from "../cluster/worker-auth.ts";
import { ProfileFormatError } from "../cluster/engine-profiler.ts";
import type { Role } from "../../planner/types.ts";
import { ArgsError, parseArgs, usage } from "./args.ts";
import { chatTemplateFlag, checkSideFiles, checkVllmFlags, hostFlag, mediaFlags, modelFirst, probeListen } from "./preflight.ts";
import { stopOnSignal } from "./serve-signals.ts";
import { isQuantizeDType, QUANTIZE_DTYPES } from "../model/weights.ts";
import { isProfilePlanner } from "../serve/sla-planner-setup.ts";
import { SERVE_FLAGS } from "./serve-flags.ts";
import { DEFAULT_LOG_STATS_INTERVAL_S, startStatsLog } from "../serve/stats-log.ts";

const DEFAULT_MODEL = fileURLToPath(new URL("../../models/stories260K.gguf", import.meta.url));


/** `--speculative-config`, its errors as the CLI's (one line naming the flag). */
function parseSpeculation(text: string): Speculation {
  try {
    return parseSpeculativeConfig(text);
  } catch (e) {
    if (e instanceof SpeculationConfigError) throw new ArgsError(`--speculative-config: ${e.message}`);
    throw e;
  }
}

/** The startup line's words for a speculation setting. */
function speculationLabel(s: Speculation): string {
  if (s.method === "ngram") return `ngram speculation (${s.numTokens} tokens, n ${s.maxN}..${s.minN})`;
  if (s.method === "suffix") return `suffix speculation (${s.numTokens} tokens, depth ${s.maxDepth}, ${s.maxCachedRequests} outputs kept)`;
  if (s.method === "eagle" || s.method === "eagle3") return `${s.method === "eagle3" ? "EAGLE-3" : "EAGLE"} speculation (${s.numTokens} token${s.numTokens === 1 ? "" : "s"} from the head "${s.model}")`;
  if (s.method === "mtp") return `multi-token-prediction speculation (${s.numTokens} token${s.numTokens === 1 ? "" : "s"} from the model's own block)`;
  return `draft model speculation (${s.numTokens} tokens from "${s.model}")`;
}

/** `v` unless it is empty. */
function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}

async function main(): Promise<void> {
  const f = parseArgs(modelFirst(cliArgs()), SERVE_FLAGS);
  if (f.help) {
    console.log(usage("serve", SERVE_FLAGS));
    return;
  }
  const backend = f.backend ?? "auto";
  if (!isBackendChoice(backend)) throw new ArgsError(`Unknown backend "${backend}"; choose one of ${BACKEND_NAMES.join(", ")}`);
  const role = f.role ?? "mixed";
  if (role !== "mixed" && role !== "prefill" && role !== "decode") throw new ArgsError(`Unknown role "${role}"; choose mixed, prefill or decode`);
  // A lone decode engine admits only prompts already in its cache, and nothing ever puts one there:
  // every request would wait forever. Decode roles belong to --workers (--roles) and worker processes.
  if (role === "decode" && (f.workers ?? 1) <= 1) {
    throw new ArgsError("Flag --role decode on one engine would admit no request (it decodes prompts another worker prefilled); use --workers N --roles …,decode, or a worker process");
  }
  const preemption = f.preemption ?? "recompute";
  if (preemption !== "recompute" && preemption !== "swap") throw new ArgsError(`Unknown preemption mode "${preemption}"; choose recompute or swap`);
  const order = f["prefill-order"] ?? "short-first";
  if (order !== "fcfs" && order !== "short-first") throw new ArgsError(`Unknown prefill order "${order}"; choose fcfs or short-first`);
  const schedulingPolicy = f["scheduling-policy"] ?? "priority";
  let loraModules: LoraModule[] = [];
  try {
    loraModules = parseLoraModules(f["lora-modules"] ?? "");
  } catch (e) {
    throw new ArgsError((e as Error).message);
  }
  if (!(SCHEDULING_POLICIES as readonly string[]).includes(schedulingPolicy)) throw new ArgsError(`Unknown scheduling policy "${schedulingPolicy}"; choose ${SCHEDULING_POLICIES.join(" or ")}`);
  const kvCacheDtypeArg = f["kv-cache-dtype"] ?? "auto";
  const kvCacheDtype = kvDtypeChoice(kvCacheDtypeArg);
  if (kvCacheDtype === undefined) throw new ArgsError(`Unknown KV cache dtype "${kvCacheDtypeArg}"; choose auto, f16, f32 or fp8 (f8_e4m3)`);
  const slidingWindowKv = f["sliding-window-kv"] ?? "paged";
  if (slidingWindowKv !== "paged" && slidingWindowKv !== "window") throw new ArgsError(`Unknown sliding window KV mode "${slidingWindowKv}"; choose paged or window`);
  const kvRetention = f["kv-retention"] ?? "agent";
  if (!isKvRetention(kvRetention)) throw new ArgsError(`Unknown KV retention "${kvRetention}"; choose ${KV_RETENTIONS.join(" or ")}`);
  const jumpForward = f["jump-forward"] ?? "on";
  if (jumpForward !== "on" && jumpForward !== "off") throw new ArgsError(`Unknown jump-forward setting "${jumpForward}"; choose on or off`);
  const speculative = f["speculative-config"] === undefined ? undefined : parseSpeculation(f["speculative-config"]);
  const statsIntervalS = f["disable-log-stats"] ? undefined : logStatsInterval(envVar("VLLM_LOG_STATS_INTERVAL"));
  const quantize = f.quantize;
  if (quantize !== undefined && !isQuantizeDType(quantize)) throw new ArgsError(`Unknown --quantize format "${quantize}"; choose ${QUANTIZE_DTYPES.join(", ")}`);
  const toolCallArg = f["tool-call-parser"] ?? "auto";
  const toolCallParser = toolCallChoice(toolCallArg);
  if (toolCallParser === undefined) {
    throw new ArgsError(`Unknown tool call parser "${toolCallArg}"; choose auto, ${[...TOOL_CALL_FORMATS, ...Object.keys(TOOL_CALL_FORMAT_ALIASES)].join(", ")}`);
  }
  const generationConfig = f["generation-config"] ?? "auto";
  if (generationConfig !== "auto" && generationConfig !== "vllm") throw new ArgsError(`Unknown generation config "${generationConfig}"; choose auto or vllm`);
  const jsonWhitespace = f["json-whitespace"] ?? "any";
  if (jsonWhitespace !== "any" && jsonWhitespace !== "compact") throw new ArgsError(`Unknown JSON whitespace "${jsonWhitespace}"; choose any or compact`);
  const reasoningArg = f["reasoning-parser"] ?? "auto";
  const reasoningName: string = Object.hasOwn(REASONING_PARSER_ALIASES, reasoningArg) ? REASONING_PARSER_ALIASES[reasoningArg] : reasoningArg;
  if (reasoningName !== "auto" && !isReasoningParser(reasoningName)) {
    throw new ArgsError(`Unknown reasoning parser "${reasoningArg}"; choose auto, ${[...REASONING_PARSERS, ...Object.keys(REASONING_PARSER_ALIASES)].join(", ")}`);
  }
  const reasoningParser = reasoningName as ReasoningParserChoice;
  const stepMixing = f["step-mixing"];
  if (stepMixing !== undefined && stepMixing !== "auto" && !STEP_MIXINGS.includes(stepMixing as StepMixing)) throw new ArgsError(`Unknown step mixing "${stepMixing}"; choose auto, ${STEP_MIXINGS.join(" or ")}`);
  if (f["swap-space-blocks"] !== undefined && preemption !== "swap") throw new ArgsError(`Flag --swap-space-blocks ${f["swap-space-blocks"]} needs --preemption swap`);
  const workerAddrs = f["worker-addrs"]?.split(",").map((a) => a.trim()).filter((a) => a.length > 0);
  const workers = workerAddrs?.length ?? f.workers ?? 1;
  const roles = f.roles?.split(",").map((r) => r.trim());
  const badRole = roles?.find((r) => r !== "mixed" && r !== "prefill" && r !== "decode");
  if (badRole !== undefined) throw new ArgsError(`Unknown role "${badRole}" in --roles; choose mixed, prefill or decode`);
  if (roles !== undefined && roles.length !== workers) throw new ArgsError(`--roles names ${roles.length} roles for ${workers} workers (--workers ${workers})`);
  const planner = f.planner ?? "online";
  const profiled = isProfilePlanner(planner);
  if (planner !== "online" && planner !== "none" && !profiled) throw new ArgsError(`Unknown planner "${planner}"; choose online, none, sla or load`);
  if (planner !== "online" && f["itl-admission-ms"] !== undefined) throw new ArgsError(`Flag --itl-admission-ms ${f["itl-admission-ms"]} needs the online planner, not --planner ${planner}`);
  const slaFlag = (["sla-profile", "sla-interval-s", "sla-ttft-ms", "sla-itl-ms", "sla-worker-start-s"] as const).find((k) => f[k] !== undefined);
  if (slaFlag !== undefined && !profiled) throw new ArgsError(`Flag --${slaFlag} ${f[slaFlag]} needs --planner sla or load`);
  if (profiled && workers < 2 && f.nats === undefined) throw new ArgsError(`--planner ${planner} needs at least 2 workers (a prefill and a decode pool); use --workers N`);
  if (profiled && f.nats !== undefined && f["sla-profile"] === undefined) {
    throw new ArgsError(`--planner ${planner} with --nats reads its offline profile from --sla-profile FILE: no worker is there to measure at start-up (a server with --workers 2 --planner ${planner} --sla-profile FILE writes one)`);
  }
  const router = f.router ?? "session";
  if (!isClusterRouter(router)) throw new ArgsError(`Unknown router "${router}"; choose ${CLUSTER_ROUTERS.join(" or ")}`);
  const peerTransfer = f["peer-transfer"];
  if (peerTransfer !== undefined && !isPeerTransferMode(peerTransfer)) throw new ArgsError(`Unknown peer transfer "${peerTransfer}"; choose ${PEER_TRANSFER_MODES.join(", ")}`);
  if (peerTransfer !== undefined && router !== "session") throw new ArgsError(`Flag --peer-transfer ${peerTransfer} is for our router (--router session), not --router ${router}`);
  let routerOptions: Partial<SessionRouterOptions> | undefined;
  if (f["router-options"] !== undefined) {
    if (router !== "session") throw new ArgsError(`Flag --router-options ${f["router-options"]} is for our router (--router session), not --router ${router}`);
    try {
      routerOptions = parseRouterOptions(f["router-options"]);
    } catch (e) {
      if (e instanceof RouterOptionsError) throw new ArgsError(`Flag --router-options: ${e.message}`);
      throw e;
    }
  }
  const nats = f.nats;
  if (nats !== undefined && f["worker-addrs"] !== undefined) throw new ArgsError("--nats and --worker-addrs do not go together: with --nats, workers announce their own addresses");
  if (nats !== undefined && f.transport !== undefined && f.transport !== "tcp") throw new ArgsError(`--nats needs worker processes (--transport tcp), not --transport ${f.transport}`);
  for (const flag of ["cluster-name", "drain-timeout"] as const) {
    if (f[flag] !== undefined && nats === undefined) throw new ArgsError(`Flag --${flag} ${f[flag]} needs --nats`);
  }
  if (nats !== undefined && (f.roles !== undefined || f.workers !== undefined)) {
    throw new ArgsError(`Flag --${f.roles !== undefined ? "roles" : "workers"} needs a fixed worker set; with --nats, workers join by themselves as mixed and the planner sets their roles`);
  }
  const transport = f.transport ?? (nats !== undefined ? "tcp" : "in-process");
  if (transport !== "in-process" && transport !== "threads" && transport !== "tcp") throw new ArgsError(`Unknown transport "${transport}"; choose in-process, threads or tcp`);
  if ((transport === "tcp") !== (workerAddrs !== undefined || nats !== undefined)) throw new ArgsError("--transport tcp needs --worker-addrs or --nats, and they need it");
  if (workerAddrs !== undefined && f.workers !== undefined && f.workers !== workerAddrs.length) {
    throw new ArgsError(`--workers ${f.workers} does not match the ${workerAddrs.length} addresses of --worker-addrs`);
  }
  const cluster = workers > 1 || transport === "tcp";
  const workerToken = f["worker-token"] ?? (transport === "tcp" ? nonEmpty(envVar("EVOLVING_WORKER_TOKEN")) : undefined);
  if (f["worker-token"] !== undefined && transport !== "tcp") throw new ArgsError("Flag --worker-token is for worker processes (--transport tcp or --nats)");
  for (const flag of ["roles", "planner", "router", "transport", "peer-transfer", "router-options", "itl-admission-ms", "local-prefill-tokens"] as const) {
    if (f[flag] !== undefined && !cluster) throw new ArgsError(`Flag --${flag} ${f[flag]} needs --workers 2 or more`);
  }
  if (f.role !== undefined && cluster) throw new ArgsError(`Flag --role ${f.role} sets one engine's role; with --workers ${workers} use --roles`);
  const allowedOrigins = f["allowed-origins"]?.split(",").map((o) => o.trim());
  const badOrigin = allowedOrigins?.find((o) => o !== "*" && !/^[a-z][a-z0-9+.-]*:\/\/[^/\s]+$/i.test(o));
  if (badOrigin !== undefined) throw new ArgsError(`Flag --allowed-origins: "${badOrigin}" is not an origin (scheme://host[:port], no path) or *`);
  const media = mediaFlags(f);
  checkVllmFlags(f);
  const chatTemplate = f["chat-template"] === undefined ? undefined : chatTemplateFlag(f["chat-template"]);
  // As vLLM: the flag, else VLLM_API_KEY, so that a deployment moved over from vLLM does not open up silently.
  const apiKey = f["api-key"] ?? nonEmpty(envVar("VLLM_API_KEY"));
  const host = hostFlag(f.host ?? "127.0.0.1");
  if (f["kv-memory-fraction"] !== undefined && f["kv-blocks"] !== undefined) throw new ArgsError(`Flags --kv-blocks ${f["kv-blocks"]} and --kv-memory-fraction ${f["kv-memory-fraction"]} both size the KV cache; give one`);
  // Before the model loads, which may take minutes.
  await probeListen(host, f.port ?? 8000);
  await checkSideFiles({ lora: loraModules, ...(speculative?.method === "draft_model" ? { draftModel: speculative.model } : {}),
    ...((speculative?.method === "eagle" || speculative?.method === "eagle3") && speculative.model ? { eagleHead: speculative.model } : {}),
    ...(f.mmproj !== undefined ? { mmproj: f.mmproj } : {}),
  });
  const s = await startServer({
    modelPath: f.model ?? DEFAULT_MODEL,
    ...(f.mmproj !== undefined ? { mmproj: f.mmproj } : {}),
    ...media,
    ...(chatTemplate ? { chatTemplate: chatTemplate.text } : {}),
    ...(quantize ? { quantize } : {}),
    onLoadNote: (note) => console.error(`serve: loading: ${note}`),
    servedModelName: f["served-model-name"],
    host,
    port: f.port ?? 8000,
    backend,
    apiKey,
    ...(allowedOrigins ? { allowedOrigins } : {}),
    ...(f["max-stored-responses"] !== undefined ? { maxStoredResponses: f["max-stored-responses"] } : {}),
    ...(f["max-conversations"] !== undefined ? { maxConversations: f["max-conversations"] } : {}),
    ...(f["max-stored-mib"] !== undefined ? { maxStoredMiB: f["max-stored-mib"] } : {}),
    maxModelLen: f["max-model-len"],
    kvBlocks: f["kv-blocks"],
    kvMemoryFraction: f["kv-memory-fraction"],
    kvCacheDtype,
    ...(slidingWindowKv === "window" ? { slidingWindowKv } : {}),
    kvOffloadBlocks: f["kv-offload-blocks"],
    maxBatchTokens: f["max-batch-tokens"],
    maxNumSeqs: f["max-num-seqs"],
    ...(f["long-prefill-token-threshold"] !== undefined ? { longPrefillTokenThreshold: f["long-prefill-token-threshold"] } : {}),
    ...(f["state-checkpoints"] !== undefined ? { stateCheckpoints: f["state-checkpoints"] } : {}),
    ...(f["host-state-checkpoints"] ? { hostStateCheckpoints: f["host-state-checkpoints"] } : {}),
    schedulerSteps: f["num-scheduler-steps"],
    ...(f["no-warmup"] ? { warmUp: false } : {}),
    maxWaiting: f["max-waiting"],
    // The planner only where given: the server's default depends on the model (none for one with recurrent state).
    ...(cluster ? { workers, roles: roles as Role[] | undefined, ...(f.planner !== undefined ? { planner } : {}), router, transport, ...(peerTransfer !== undefined ? { peerTransfer } : {}), ...(routerOptions ? { routerOptions } : {}), ...(workerAddrs ? { workerAddrs } : {}) } : { role: role as WorkerRole }),
    ...(f["itl-admission-ms"] !== undefined ? { itlAdmissionTargetS: f["itl-admission-ms"] / 1000 } : {}),
    ...(profiled
      ? {
        sla: {
          ...(f["sla-profile"] !== undefined ? { profilePath: f["sla-profile"] } : {}),
          ...(f["sla-interval-s"] !== undefined ? { intervalS: f["sla-interval-s"] } : {}),
          ...(f["sla-ttft-ms"] !== undefined ? { ttftTargetS: f["sla-ttft-ms"] / 1000 } : {}),
          ...(f["sla-itl-ms"] !== undefined ? { itlTargetS: f["sla-itl-ms"] / 1000 } : {}),
          ...(f["sla-worker-start-s"] !== undefined ? { workerStartS: f["sla-worker-start-s"] } : {}),
        },
      }
      : {}),
    ...(f["local-prefill-tokens"] !== undefined ? { localPrefillTokens: f["local-prefill-tokens"] } : {}),
    ...(workerToken !== undefined ? { workerToken } : {}),
    ...(nats !== undefined ? { nats, clusterName: f["cluster-name"], ...(f["drain-timeout"] !== undefined ? { drainMs: f["drain-timeout"] * 1000 } : {}) } : {}),
    preemption: preemption as PreemptionMode,
    swapSpaceBlocks: f["swap-space-blocks"],
    prefillOrder: order === "fcfs" ? FCFS : AGED_SHORT_FIRST,
    ...(schedulingPolicy === "fcfs" ? { schedulingPolicy: "fcfs" as const } : {}),
    ...(loraModules.length > 0 ? { loraModules } : {}),
    ...(f["allow-runtime-lora-updating"] ? { allowRuntimeLora: true } : {}),
    ...(stepMixing !== undefined ? { stepMixing: stepMixing as StepMixing | "auto" } : {}),
    kvRetention,
    reasoningParser,
    ...(jumpForward === "off" ? { jumpForward: false } : {}),
    ...(speculative ? { speculative } : {}),
    ...(jsonWhitespace === "compact" ? { jsonWhitespace: "compact" as const } : {}),
    ...(generationConfig === "vllm" ? { generationConfig: "vllm" as const } : {}),
    toolCallParser,
    maxBodyBytes: f["max-body-bytes"],
    stepLogPath: f["step-log"],
    plannerLogPath: f["planner-log"],
    routeLogPath: f["route-log"],
    ...(f["mixed-step-overhead-ms"] ? { mixedStepOverheadMs: f["mixed-step-overhead-ms"] } : {}),
  });
  const st = s.serving.stats();
  const sampling = samplingNote(s.samplingDefaults, generationConfig);
  if (sampling) console.error(sampling);
  const tags = reasoningTags(s.reasoningParser);
  const auto = reasoningParser === "auto" ? "auto, from the chat template; " : "";
  const tools = `; tool calls ${s.toolCallParser}${toolCallParser === "auto" ? " (auto, from the chat template)" : ""}${chatTemplate ? `; chat template from ${chatTemplate.from}` : ""}`;
  // Images are read where a projector was given (each worker loads it from the same path).
  const urls = [media.allowedMediaDomains ? `URLs from ${media.allowedMediaDomains.join(", ")}` : "", media.allowedLocalMediaPath ? `files under ${media.allowedLocalMediaPath}` : ""].filter((u) => u !== "");
  const images = f.mmproj !== undefined ? `; images with the projector ${f.mmproj}${urls.length > 0 ? ` (and ${urls.join(" and ")})` : ""}` : "";
  const reasoning = !tags ? "" : s.reasoningTokens
    ? `; reasoning parser ${s.reasoningParser} (${auto}KV of reasoning typed)`
    : `; reasoning parser ${s.reasoningParser} (${auto}${tags.open}/${tags.close} are not single tokens: KV of reasoning not typed)`;
  console.error(
    `serve: ${s.modelName} on ${s.backendReason}; ${runtimeName()}; KV ${nats !== undefined ? "sized by each worker" : `${st.kvTotalBlocks} blocks`} ${s.cluster ? `dtype ${kvCacheDtype}` : s.engine.kvCacheDtype} (${kvRetention} retention${st.kvHostCapacityBlocks ? `, ${st.kvHostCapacityBlocks} more in host memory` : ""})${reasoning}${tools}${images}, step mixing ${stepMixingLabel(stepMixing, s.cluster !== undefined, s.planner ?? planner)}${f["mixed-step-overhead-ms"] ? ` (mixed steps ${f["mixed-step-overhead-ms"]} ms dearer)` : ""}${speculative ? `, ${speculationLabel(speculative)}` : ""}${schedulerStepsLabel(s.cluster ? f["num-scheduler-steps"] : s.engine.schedulerSteps, speculative !== undefined)}, max model len ${s.serving.maxModelLen}${f["long-prefill-token-threshold"] !== undefined ? `, a sequence's step at most ${f["long-prefill-token-threshold"]} tokens` : ""}${s.warmUpMs !== undefined ? `, warmed up in ${Math.round(s.warmUpMs)} ms` : ""}` +
      (s.cluster && nats !== undefined ? `; workers join through NATS at ${splitCredentials(nats).server}, ${router} router, planner ${s.planner ?? planner}${s.slaProfileSource ? ` (${s.slaProfileSource})` : ""}` : "") +
      (s.cluster && nats === undefined ? `; ${workers} worker${workers === 1 ? "" : "s"} (${s.serving.workerStatuses().map((w) => w.role).join(",")}), ${router} router, planner ${s.planner ?? planner}${s.slaProfileSource ? ` (${s.slaProfileSource})` : ""}, ${transport}` : "") +
      recurrentLabel(s.cluster ? undefined : s.engine.recurrentState(), slidingWindowKv === "window") +
      (loraModules.length > 0 ? `; LoRA adapters ${loraModules.map((m) => m.name).join(", ")}` : "") +
      (f["allow-runtime-lora-updating"] ? "; runtime LoRA loading on" : "") + "; " +
      `listening on ${s.url}${apiKey !== undefined ? ` (API key required${f["api-key"] === undefined ? ", from VLLM_API_KEY" : ""})` : ""}`,
  );
  if (statsIntervalS !== undefined) {
    const cluster = s.cluster;
    const workers = cluster ? () => cluster.workers.map((w) => ({ id: w.engine.id, role: w.role, engine: w.engine })) : undefined;
    startStatsLog(s.serving, statsIntervalS, (line) => console.error(`serve: ${line}`), () => performance.now() / 1000, workers);
  }
  stopOnSignal(s, f["shutdown-timeout"] ?? 30);
}

/** The log's word on a Gated DeltaNet model's recurrent state (empty for other models). */
function recurrentLabel(state: { slots: number; checkpoints: number; scratch: number; bytes: number; host?: { capacity: number } } | undefined, windowsOnly: boolean): string {
  if (!state) return "";
  const host = state.host ? `, ${state.host.capacity} more in host memory` : "";
  const scratch = state.scratch > 0 ? ` + ${state.scratch} before drafts` : "";
  return `; ${windowsOnly ? "sliding windows of" : "recurrent state"} ${state.slots} sequences + ${state.checkpoints} checkpoints${scratch}${host} (${(state.bytes / 2 ** 20).toFixed(1)} MiB)`;
}

/** `VLLM_LOG_STATS_INTERVAL` (vLLM's variable): seconds between stats lines, 10 when unset. */
function logStatsInterval(value: string | undefined): number {
  if (value === undefined || value.trim() === "") return DEFAULT_LOG_STATS_INTERVAL_S;
  const s = Number(value);
  if (!(s > 0 && Number.isFinite(s))) throw new ArgsError(`VLLM_LOG_STATS_INTERVAL must be a positive number of seconds, got "${value}"`);
  return s;
}

/** The log's word on multi-step decoding (empty where it is off: one step; with workers, each takes its backend's default unless given; with speculation, for steps without drafts). */
function schedulerStepsLabel(steps: number | undefined, speculating: boolean): string {
  const where = speculating ? " where no draft is verified" : "";
  return steps === undefined ? `, scheduler steps as each worker's backend takes them${where}` : steps > 1 ? `, ${steps} scheduler steps${where}` : "";
}

/**
 * The step mixing workers run, as the server resolves `--step-mixing` (server.ts): one engine takes
 * the flag (default mixed); with several workers, auto or no flag is the planner's (from mixed), or
 * mixed where no planner runs, and mixed or split stay as given.
 */
function stepMixingLabel(flag: string | undefined, cluster: boolean, planner: string): string {
  if (!cluster) return flag ?? "mixed";
  if (flag !== undefined && flag !== "auto") return flag;
  return planner === "online" ? "auto (the planner's, from mixed)" : "mixed";
}

main().catch((e: unknown) => {
  const known = e instanceof ArgsError || e instanceof ModelLoadError || e instanceof BackendUnavailableError || e instanceof RangeError ||
    e instanceof ListenError || e instanceof RemoteWorkerError || e instanceof ControlPlaneError || e instanceof WorkerAuthError || e instanceof KvCapacityError || e instanceof ProfileFormatError;
  console.error(known ? `serve: ${(e as Error).message}` : `serve: unexpected error: ${e instanceof Error ? e.stack : String(e)}`);
  // As generate: a mistake the user can fix exits 2, anything else 1.
  exitProcess(known ? 2 : 1);
});

/** The start-up line saying which of the model's sampling defaults requests get (undefined: the model has none). */
function samplingNote(d: SamplingDefaults, choice: "auto" | "vllm"): string | undefined {
  if (choice === "vllm") return "serve: requests get OpenAI's sampling defaults (--generation-config vllm)";
  if (Object.keys(d).length === 0) return undefined;
  const set = [["temperature", d.temperature], ["top_p", d.topP], ["top_k", d.topK], ["min_p", d.minP], ["repetition_penalty", d.repetitionPenalty], ["max_tokens", d.maxTokens]].filter(([, v]) => v !== undefined).map(([k, v]) => `${k} ${v}`);
  const skipped = d.unsupported?.length ? `; not applied (unsupported here): ${d.unsupported.join(", ")}` : "";
  const source = d.source === "GGUF general.sampling" ? "GGUF's general.sampling.*" : "generation_config.json";
  return `serve: requests that leave them out get the model's ${source} defaults: ${set.length ? set.join(", ") : "none that apply"}${skipped} (--generation-config vllm for OpenAI's)`;
}

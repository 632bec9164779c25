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
import { KvCapacityError, isKvDtypeChoice } from "../engine/kv-cache.ts";
import { parseSpeculativeConfig, type Speculation, SpeculationConfigError } from "../engine/ngram-draft.ts";
import { isToolCallFormat, TOOL_CALL_FORMAT_ALIASES, TOOL_CALL_FORMATS } from "../engine/grammar.ts";
import { type PreemptionMode, SCHEDULING_POLICIES, STEP_MIXINGS, type StepMixing, type WorkerRole } from "../engine/scheduler-types.ts";
import { ModelLoadError, type SamplingDefaults } from "../model/config.ts";
import { cliArgs, envVar, exitProcess, runtimeName } from "../runtime/env.ts";
import { AGED_SHORT_FIRST, FCFS } from "../../planner/prefill-order.ts";
import { isReasoningParser, REASONING_PARSER_ALIASES, REASONING_PARSERS, reasoningTags } from "../serve/reasoning.ts";
import { startServer } from "../serve/server.ts";
import { ListenError } from "../serve/listen.ts";
import { CLUSTER_ROUTERS, isClusterRouter, isPeerTransferMode, parseRouterOptions, PEER_TRANSFER_MODES, RouterOptionsError } from "../cluster/cluster-router.ts";
import type { SessionRouterOptions } from "../../planner/routers.ts";
import { RemoteWorkerError } from "../cluster/remote-engine.ts";
import { ControlPlaneError, splitCredentials } from "../cluster/nats-membership.ts";
import { WorkerAuthError } from "../cluster/worker-auth.ts";
import { ProfileFormatError } from "../cluster/engine-profiler.ts";
import type { Role } from "../../planner/types.ts";
import { ArgsError, type FlagSpecs, parseArgs, usage } from "./args.ts";
import { checkSideFiles, hostFlag, probeListen } from "./preflight.ts";
import { stopOnSignal } from "./serve-signals.ts";
import { isQuantizeDType, QUANTIZE_DTYPES } from "../model/weights.ts";
import { isProfilePlanner } from "../serve/sla-planner-setup.ts";

const DEFAULT_MODEL = fileURLToPath(new URL("../../models/stories260K.gguf", import.meta.url));

const FLAGS = {
  model: { kind: "string", nonEmpty: true, help: "GGUF file or Hugging Face directory (default: the bundled stories260K)" },
  "served-model-name": { kind: "string", nonEmpty: true, help: "name clients use in 'model' (default: file name)" },
  host: { kind: "string", nonEmpty: true, help: "address to listen on (default 127.0.0.1)" },
  port: { kind: "int", min: 0, max: 65535, help: "TCP port (default 8000)" },
  backend: { kind: "string", help: `${BACKEND_NAMES.join("|")} (default auto)` },
  "api-key": { kind: "string", nonEmpty: true, help: "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on /v1/*, /v2/*, /tokenize, /detokenize, /score and /rerank; /health, /metrics and /version stay open (default: $VLLM_API_KEY, as vLLM's, else none)" },
  "allowed-origins": { kind: "string", nonEmpty: true, help: "origins browsers may call from (CORS), comma-separated, e.g. https://chat.example.com; * for any (default *, as vLLM's)" },
  "max-model-len": { kind: "int", min: 2, help: "context limit, prompt + output: at most the model's context, and lowered to what the KV pool holds (default: the model's)" },
  "kv-blocks": { kind: "int", min: 2, help: "KV cache blocks of 16 tokens" },
  quantize: { kind: "string", help: "block format the model's f32/f16/bf16 matrices are quantized into at load (round to nearest; rows that are not whole blocks stay as stored): q8_0 halves a bf16 model's memory at little cost, q6_k/q5_k/q4_k/q4_0… go further (default: as stored)" },
  "kv-offload-blocks": { kind: "int", min: 1, help: "host-memory KV tier in 16-token blocks (per worker): evicted cached KV moves there and back on a prefix hit (default: off)" },
  "kv-cache-dtype": { kind: "string", help: "auto|f16|f32: element type of the KV cache; f16 halves its memory (twice the blocks for --kv-memory-fraction) and rounds keys and values as vLLM's and llama.cpp's default caches do (default auto: f16 where the backend's attention reads it — WebGPU and reference; CUDA's is f32 for now)" },
  "kv-memory-fraction": { kind: "number", min: 0.0001, max: 0.95, help: "size the KV cache as this fraction of host memory (not with --kv-blocks)" },
  "max-batch-tokens": { kind: "int", min: 1, help: "token budget per step (default 512)" },
  "max-num-seqs": { kind: "int", min: 1, help: "sequences per step at most (default 64)" },
  "max-waiting": { kind: "int", min: 1, help: "queue length before 429 (default 1024)" },
  role: { kind: "string", help: "mixed|prefill|decode (default mixed)" },
  preemption: { kind: "string", help: "recompute|swap: what a request preempted for KV loses (default recompute)" },
  "prefill-order": { kind: "string", help: "fcfs|short-first: which waiting prompt is admitted first (default short-first: least uncached work, aged 2000 tokens/s)" },
  "scheduling-policy": { kind: "string", help: "priority|fcfs: priority lets requests set vLLM's `priority` (an integer, default 0; lower is admitted first, preempted last, and preempts running requests of a higher value when it cannot otherwise get in; ties keep --prefill-order); fcfs refuses any priority but 0, as vLLM's default (default priority)" },
  "lora-modules": { kind: "string", help: "LoRA adapters served as models of their own, name=path pairs separated by commas, or vLLM's JSON form ({\"name\": ..., \"path\": ...} or a list of them) (llama.cpp GGUF adapter files, as convert_lora_to_gguf.py writes them, or Hugging Face PEFT directories): a request whose model is a name runs the base model with that adapter, batched with every other; with workers each worker loads it from the same path (as the model) and must find the same adapter" },
  "enable-lora": { kind: "boolean", help: "accepted for vLLM's command lines; adapters are on whenever --lora-modules or --allow-runtime-lora-updating is given" },
  "allow-runtime-lora-updating": { kind: "boolean", help: "POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter {lora_name} load and unload adapters while serving (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING): they read files the server can reach, so give it only to trusted clients (default off)" },
  "kv-retention": { kind: "string", help: "agent|lru: which cached KV goes first when memory runs short (default agent: keeps sessions waiting on a tool call; sessions come from prompt_cache_key or user)" },
  "tool-call-parser": { kind: "string", help: "hermes|llama3_json|kimi_k2|deepseek_v31|deepseek_v3|glm45|qwen3_coder|minimax_m2|mistral|harmony: how the model writes tool calls, read out of chat answers and written by a forced tool_choice; hermes (Qwen 2.5/3) is <tool_call> blocks, llama3_json (Llama 3.1-3.3) {\"name\", \"parameters\"} objects separated by \"; \", kimi_k2 (Kimi K2) <|tool_call_begin|> blocks in a <|tool_calls_section_begin|> section, deepseek_v31 (DeepSeek V3.1) <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...} blocks, deepseek_v3 (DeepSeek V3, R1-0528) <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME and a ```json fence, glm45 (GLM 4.5-4.7) <tool_call>NAME with <arg_key>/<arg_value> pairs, qwen3_coder (Qwen3-Coder) <function=NAME> with <parameter=KEY> values, minimax_m2 (MiniMax M2) <invoke name=\"NAME\"> with <parameter name=\"KEY\"> values in a <minimax:tool_call> section, mistral (Mistral, Magistral, Devstral) [TOOL_CALLS]NAME[ARGS]{...} per call, or [TOOL_CALLS] [{...}] where the vocabulary has no [ARGS] token (tokenizers before v11), harmony (gpt-oss; vLLM's openai is accepted for it) a message to=functions.NAME whose body is the arguments, one per answer (default hermes)" },
  "generation-config": { kind: "string", help: "auto|vllm: a request that leaves out temperature, top_p, top_k, min_p, repetition_penalty or max_tokens gets the model's generation_config.json values (auto, as vLLM's default; a Hugging Face directory's) or OpenAI's defaults (vllm)" },
  "json-whitespace": { kind: "string", help: "any|compact: how JSON output (response_format, forced tool calls, structured_outputs json) may be spaced unless a request sets structured_outputs.disable_any_whitespace; compact is json.dumps's \", \" and \": \" only, which makes the separators forced text (default any)" },
  "jump-forward": { kind: "string", help: "on|off: append text a request's output grammar forces (response_format json_schema, forced tool_choice) without sampling it, computed in one step (default on; off for requests asking for logprobs)" },
  "speculative-config": { kind: "string", help: "vLLM's JSON, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 5, \"prompt_lookup_max\": 4}': each decode step also verifies up to that many tokens copied from where the context's last n tokens (prompt_lookup_max down to prompt_lookup_min, both 5 when neither is given) occurred before, keeping those the model's own samples agree with; or '{\"method\": \"suffix\"}' (suffix decoding: drafts from the longest recurring suffix in the context and in earlier requests' outputs, by frequency; vLLM's suffix_decoding_max_tree_depth 24, suffix_decoding_max_cached_requests 10000, suffix_decoding_max_spec_factor 1, suffix_decoding_min_token_prob 0.1 and num_speculative_tokens as the depth by default); or '{\"method\": \"draft_model\", \"model\": \"draft.gguf\", \"num_speculative_tokens\": 4}' (a smaller model with the same vocabulary proposes that many tokens greedily, with its own KV cache); outputs are those of decoding one token a step (default: off)" },
  "reasoning-parser": { kind: "string", help: "think|mistral|harmony|none: return chat answers' <think>…</think> text (think; vLLM's deepseek_r1, qwen3 and glm45 are accepted for it), Magistral's [THINK]…[/THINK] (mistral) or gpt-oss's analysis channel (harmony; vLLM's openai_gptoss is accepted for it; its final channel is the content) as reasoning_content (default none: output as generated)" },
  "step-mixing": { kind: "string", help: "auto|mixed|split: prefill chunks and decodes in one step, in separate alternating steps, or as priced cheaper online (one engine: default mixed, auto is the engine's own step model; with --workers: default auto, the planner's choice, and mixed or split stay as given)" },
  "mixed-step-overhead-ms": { kind: "number", min: 0, help: "add this many ms to every step that mixes prefill chunks and decodes, as on GPUs where the two interfere (the simulator's flag of the same name; for trying the planner's answer to dear mixed steps on this backend) (default 0)" },
  "swap-space-blocks": { kind: "int", min: 0, help: "host swap space in KV blocks for --preemption swap (default: the KV pool's size)" },
  "max-body-bytes": { kind: "int", min: 1024, help: "largest request body (default 2 MiB)" },
  "max-stored-responses": { kind: "int", min: 0, help: "Responses API responses kept for previous_response_id and GET /v1/responses/{id}, least recently used dropped first; 0 keeps none (default 4096)" },
  "max-stored-mib": { kind: "number", min: 0.001, help: "MiB of JSON text each of the stored-response and conversation stores keeps, least recently used dropped first (default 512)" },
  "max-conversations": { kind: "int", min: 0, help: "conversations (/v1/conversations, the Responses API's conversation) kept in memory, least recently used dropped first; 0 keeps none (default 1024)" },
  "step-log": { kind: "string", nonEmpty: true, help: "write each engine step's shape and time as JSONL (input of: deno task sim --calibrate FILE)" },
  "planner-log": { kind: "string", nonEmpty: true, help: "write each decision of the cluster's planner (the online planner's role flips, step mixing, local-prefill threshold and admission; the SLA planner's replica targets) as JSONL with its Unix time and whether it changed anything (with --workers)" },
  "route-log": { kind: "string", nonEmpty: true, help: "write each routing decision of the cluster (the request, every worker as the router priced it, the route taken) as JSONL with its Unix time (with --workers)" },
  workers: { kind: "int", min: 1, help: "engines in this process behind our router and online role planner (default 1)" },
  roles: { kind: "string", help: "initial role of each worker, comma-separated: mixed|prefill|decode (default all mixed; with --workers)" },
  planner: { kind: "string", help: "online|none|sla|load: flip worker roles every second from measured load, keep --roles, or run the baseline, Dynamo's SLA planner: every --sla-interval-s it sets how many workers prefill and decode from an offline profile of the workers (--sla-profile), parking the rest; load is its load-based mode, ±1 worker a pool every 5 s when queued work predicts the TTFT or ITL target missed (default online; with --workers; sla and load start half prefill, half decode unless --roles; with --nats, workers join as mixed, the budget is those present and the profile must be given with --sla-profile)" },
  "sla-profile": { kind: "string", nonEmpty: true, help: "the SLA planner's offline profile (JSON: prefill tokens/s by ISL, decode tokens/s and ITL by context and batch): read when the file exists, else measured on the first worker at start-up and written there (default: measured, not kept; with --planner sla or load)" },
  "sla-interval-s": { kind: "number", min: 1, help: "seconds between the SLA planner's decisions (default 180, Dynamo's; load mode 5; with --planner sla or load)" },
  "sla-ttft-ms": { kind: "number", min: 1, help: "the SLA planner's TTFT target (default 500, Dynamo's; with --planner sla or load)" },
  "sla-itl-ms": { kind: "number", min: 1, help: "the SLA planner's ITL target (default 50, Dynamo's; with --planner sla or load)" },
  "sla-worker-start-s": { kind: "number", min: 0, help: "seconds a parked worker takes to serve again when the planner wants it back, as a Dynamo worker's start-up (model load) would (default 0: the engine is loaded already; the simulator charges 60; with --planner sla or load)" },
  "itl-admission-ms": { kind: "number", min: 1, help: "let a new session (new prompt_cache_key or user, or a keyless chat request with no answer in it yet) in only while the planner predicts the decode pool's ITL within this many ms; others wait to its next tick, then get in or get 503 with Retry-After (default off; with --workers, planner online)" },
  "local-prefill-tokens": { kind: "int", min: 0, help: "uncached prompt tokens a decode worker prefills itself; a longer prompt goes to a prefill worker and its KV moves (always with --router kv-aware; with ours when that beats prefilling locally) (default: the online planner adapts it from 512; 512 with --planner none; with --workers)" },
  router: { kind: "string", help: "session|kv-aware: our session/transfer-aware router or Dynamo's KV-aware cost (default session; with --workers)" },
  "peer-transfer": { kind: "string", help: "host|device|off: our router may pull a session's KV from the worker holding it, including what it offloaded to host memory (default host), its device blocks only, or never" },
  "router-options": { kind: "string", nonEmpty: true, help: "NAME=VALUE,...: our router's tunables over the cluster's defaults (planner/routers.ts SessionRouterOptions: itlTargetS, loadWeightS, affinityBonusS, batchWeightS, prefillShortlist, interferenceWeight, memoryWaitS, memoryFullS, peerMoveS, sessionSpreadS, waiveOpeningPulls; with --workers)" },
  transport: { kind: "string", help: "in-process|threads|tcp: workers share this thread and one backend, each run in a worker thread, or are worker processes at --worker-addrs (default in-process; with --workers or --worker-addrs)" },
  "worker-addrs": { kind: "string", help: "host:port of each worker process (`deno task worker --listen host:port`), comma-separated; with --transport tcp" },
  nats: { kind: "string", nonEmpty: true, help: "NATS server (host:port or nats://host:port) where worker processes announce themselves (`deno task worker --nats URL`): they join and leave while the server runs (implies --transport tcp)" },
  "cluster-name": { kind: "string", nonEmpty: true, help: "the cluster's name on the NATS server, so several share one (default \"default\"; with --nats)" },
  "drain-timeout": { kind: "number", min: 0, help: "seconds a leaving worker's requests may run before it is stopped (default 60; with --nats)" },
  "worker-token": { kind: "string", nonEmpty: true, help: "shared secret of the worker processes (started with the same token): each side proves it knows it before any work (default: $EVOLVING_WORKER_TOKEN, else none; with --transport tcp or --nats)" },
  "shutdown-timeout": { kind: "number", min: 0, help: "seconds the requests in flight may run after SIGINT or SIGTERM (new ones get 503 meanwhile) before the rest are cancelled and the server stops (default 30); a second signal stops at once" },
  help: { kind: "boolean", help: "show this help" },
} satisfies FlagSpecs;

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
  return `draft model speculation (${s.numTokens} tokens from "${s.model}")`;
}

/** `v` unless it is empty. */
function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), FLAGS);
  if (f.help) {
    console.log(usage("serve", FLAGS));
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
  const kvCacheDtype = f["kv-cache-dtype"] ?? "auto";
  if (!isKvDtypeChoice(kvCacheDtype)) throw new ArgsError(`Unknown KV cache dtype "${kvCacheDtype}"; choose auto, f16 or f32`);
  const kvRetention = f["kv-retention"] ?? "agent";
  if (!isKvRetention(kvRetention)) throw new ArgsError(`Unknown KV retention "${kvRetention}"; choose ${KV_RETENTIONS.join(" or ")}`);
  const jumpForward = f["jump-forward"] ?? "on";
  if (jumpForward !== "on" && jumpForward !== "off") throw new ArgsError(`Unknown jump-forward setting "${jumpForward}"; choose on or off`);
  const speculative = f["speculative-config"] === undefined ? undefined : parseSpeculation(f["speculative-config"]);
  const quantize = f.quantize;
  if (quantize !== undefined && !isQuantizeDType(quantize)) throw new ArgsError(`Unknown --quantize format "${quantize}"; choose ${QUANTIZE_DTYPES.join(", ")}`);
  const toolCallArg = f["tool-call-parser"] ?? "hermes";
  const toolCallParser = TOOL_CALL_FORMAT_ALIASES[toolCallArg] ?? toolCallArg;
  if (!isToolCallFormat(toolCallParser)) throw new ArgsError(`Unknown tool call parser "${toolCallArg}"; choose ${[...TOOL_CALL_FORMATS, ...Object.keys(TOOL_CALL_FORMAT_ALIASES)].join(", ")}`);
  const generationConfig = f["generation-config"] ?? "auto";
  if (generationConfig !== "auto" && generationConfig !== "vllm") throw new ArgsError(`Unknown generation config "${generationConfig}"; choose auto or vllm`);
  const jsonWhitespace = f["json-whitespace"] ?? "any";
  if (jsonWhitespace !== "any" && jsonWhitespace !== "compact") throw new ArgsError(`Unknown JSON whitespace "${jsonWhitespace}"; choose any or compact`);
  const reasoningArg = f["reasoning-parser"] ?? "none";
  const reasoningParser = REASONING_PARSER_ALIASES[reasoningArg] ?? reasoningArg;
  if (!isReasoningParser(reasoningParser)) {
    throw new ArgsError(`Unknown reasoning parser "${reasoningArg}"; choose ${[...REASONING_PARSERS, ...Object.keys(REASONING_PARSER_ALIASES)].join(", ")}`);
  }
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
  // As vLLM: the flag, else VLLM_API_KEY, so that a deployment moved over from vLLM does not open up silently.
  const apiKey = f["api-key"] ?? nonEmpty(envVar("VLLM_API_KEY"));
  const host = hostFlag(f.host ?? "127.0.0.1");
  if (f["kv-memory-fraction"] !== undefined && f["kv-blocks"] !== undefined) throw new ArgsError(`Flags --kv-blocks ${f["kv-blocks"]} and --kv-memory-fraction ${f["kv-memory-fraction"]} both size the KV cache; give one`);
  // Before the model loads, which may take minutes.
  await probeListen(host, f.port ?? 8000);
  await checkSideFiles({ lora: loraModules, ...(speculative?.method === "draft_model" ? { draftModel: speculative.model } : {}) });
  const s = await startServer({
    modelPath: f.model ?? DEFAULT_MODEL,
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
    kvOffloadBlocks: f["kv-offload-blocks"],
    maxBatchTokens: f["max-batch-tokens"],
    maxNumSeqs: f["max-num-seqs"],
    maxWaiting: f["max-waiting"],
    ...(cluster ? { workers, roles: roles as Role[] | undefined, planner, router, transport, ...(peerTransfer !== undefined ? { peerTransfer } : {}), ...(routerOptions ? { routerOptions } : {}), ...(workerAddrs ? { workerAddrs } : {}) } : { role: role as WorkerRole }),
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
    ...(toolCallParser !== "hermes" ? { toolCallParser } : {}),
    maxBodyBytes: f["max-body-bytes"],
    stepLogPath: f["step-log"],
    plannerLogPath: f["planner-log"],
    routeLogPath: f["route-log"],
    ...(f["mixed-step-overhead-ms"] ? { mixedStepOverheadMs: f["mixed-step-overhead-ms"] } : {}),
  });
  const st = s.serving.stats();
  const sampling = samplingNote(s.samplingDefaults, generationConfig);
  if (sampling) console.error(sampling);
  const tags = reasoningTags(reasoningParser);
  const reasoning = !tags ? "" : s.reasoningTokens
    ? `; reasoning parser ${reasoningParser} (KV of reasoning typed)`
    : `; reasoning parser ${reasoningParser} (${tags.open}/${tags.close} are not single tokens: KV of reasoning not typed)`;
  console.error(
    `serve: ${s.modelName} on ${s.backendReason}; ${runtimeName()}; KV ${nats !== undefined ? "sized by each worker" : `${st.kvTotalBlocks} blocks`} ${s.cluster ? `dtype ${kvCacheDtype}` : s.engine.kvCacheDtype} (${kvRetention} retention${st.kvHostCapacityBlocks ? `, ${st.kvHostCapacityBlocks} more in host memory` : ""})${reasoning}, step mixing ${stepMixingLabel(stepMixing, s.cluster !== undefined, planner)}${f["mixed-step-overhead-ms"] ? ` (mixed steps ${f["mixed-step-overhead-ms"]} ms dearer)` : ""}${speculative ? `, ${speculationLabel(speculative)}` : ""}, max model len ${s.serving.maxModelLen}` +
      (s.cluster && nats !== undefined ? `; workers join through NATS at ${splitCredentials(nats).server}, ${router} router, planner ${planner}${s.slaProfileSource ? ` (${s.slaProfileSource})` : ""}` : "") +
      (s.cluster && nats === undefined ? `; ${workers} worker${workers === 1 ? "" : "s"} (${s.serving.workerStatuses().map((w) => w.role).join(",")}), ${router} router, planner ${planner}${s.slaProfileSource ? ` (${s.slaProfileSource})` : ""}, ${transport}` : "") +
      (loraModules.length > 0 ? `; LoRA adapters ${loraModules.map((m) => m.name).join(", ")}` : "") +
      (f["allow-runtime-lora-updating"] ? "; runtime LoRA loading on" : "") + "; " +
      `listening on ${s.url}${apiKey !== undefined ? ` (API key required${f["api-key"] === undefined ? ", from VLLM_API_KEY" : ""})` : ""}`,
  );
  stopOnSignal(s, f["shutdown-timeout"] ?? 30);
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

/** The start-up line saying which generation_config.json defaults requests get (undefined: the model has none). */
function samplingNote(d: SamplingDefaults, choice: "auto" | "vllm"): string | undefined {
  if (choice === "vllm") return "serve: requests get OpenAI's sampling defaults (--generation-config vllm)";
  if (Object.keys(d).length === 0) return undefined;
  const set = [["temperature", d.temperature], ["top_p", d.topP], ["top_k", d.topK], ["min_p", d.minP], ["repetition_penalty", d.repetitionPenalty], ["max_tokens", d.maxTokens]].filter(([, v]) => v !== undefined).map(([k, v]) => `${k} ${v}`);
  const skipped = d.unsupported?.length ? `; not applied (unsupported here): ${d.unsupported.join(", ")}` : "";
  return `serve: requests that leave them out get the model's generation_config.json defaults: ${set.length ? set.join(", ") : "none that apply"}${skipped} (--generation-config vllm for OpenAI's)`;
}

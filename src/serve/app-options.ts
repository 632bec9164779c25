/**
 * The server's settings (`AppOptions`), their defaults, and the context every handler is served in,
 * built from them once per app.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import type { SchedulingPolicy } from "../engine/scheduler-types.ts";
import type { JsonWhitespace, ToolCallFormat } from "../engine/grammar.ts";
import type { LoadedModel, SamplingDefaults } from "../model/config.ts";
import { modelChatRenderer } from "./chat-template.ts";
import { reasoningTokensOf } from "./harmony-prompt.ts";
import type { ServerLifecycle } from "./lifecycle.ts";
import type { ReasoningParserName } from "./reasoning.ts";
import type { ServeContext } from "./serve-context.ts";
import { type ImageFetchOptions, NO_IMAGE_FETCH } from "./image-fetch.ts";
import { DEFAULT_IMAGE_CACHE_BYTES, ImagePrep } from "./image-prep.ts";
import { MAX_IMAGES } from "./prompt-images.ts";
import { toolCallSyntax } from "./tool-calls-mistral.ts";

/** Server settings. */
export interface AppOptions {
  engine: ServingEngine;
  model: LoadedModel;
  /** Name served at /v1/models and expected in requests. */
  modelName: string;
  /** When set, /v1/* requires `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Origins browsers may call from (CORS; `--allowed-origins`); default any ("*"), as vLLM's. */
  allowedOrigins?: readonly string[];
  /** Largest request body accepted (413 above). */
  maxBodyBytes?: number;
  /** Longest wait for the next bytes of a request body, in ms (408 after; default 30 s). */
  bodyTimeoutMs?: number;
  /** Seconds clients are told to wait after a 429. */
  retryAfterS?: number;
  /** "think": chat answers' `<think>` text is returned as `reasoning_content` ("mistral": `[THINK]`, "harmony": gpt-oss's analysis channel; default "none"). */
  reasoningParser?: ReasoningParserName;
  /** How JSON output grammars may be spaced unless a request says (default "any"; grammar.ts JsonWhitespace). */
  jsonWhitespace?: JsonWhitespace;
  /** How the model writes tool calls (default "hermes"; grammar.ts ToolCallFormat). */
  toolCallParser?: ToolCallFormat;
  /** "auto" (default): requests default to the model's generation_config.json sampling; "vllm": to OpenAI's. */
  generationConfig?: GenerationConfigChoice;
  /** "priority" (default): requests may set `priority`; "fcfs": any but 0 is refused, as vLLM's default. */
  schedulingPolicy?: SchedulingPolicy;
  /** Counts generation responses in flight and says when the server drains (new ones get a 503). */
  lifecycle?: ServerLifecycle;
  /** The most Responses API responses kept for `previous_response_id` and `GET /v1/responses/{id}` (default 4096; 0 keeps none). */
  maxStoredResponses?: number;
  /** The most conversations (`/v1/conversations`) kept (default 1024; 0 keeps none). */
  maxConversations?: number;
  /** The most MiB of JSON text each of the two stores (responses, conversations) keeps (default 512). */
  maxStoredMiB?: number;
  /** Where each LoRA adapter the engine holds was read from, by name (`--lora-modules`; `/v1/models`' `root`). */
  loraSources?: Map<string, string>;
  /** `--allow-runtime-lora-updating`: `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` work. */
  allowRuntimeLora?: boolean;
  /** Where image URLs may be read from (default: nowhere; image-fetch.ts). */
  imageFetch?: ImageFetchOptions;
  /** The most images a request may hold (`--limit-mm-per-prompt`; default 32). */
  maxImages?: number;
  /** Prepares the model's images (image-prep.ts); default one that works on the calling thread, where the model reads images. */
  imagePrep?: ImagePrep;
}

/** Where a request's left-out sampling parameters come from (`--generation-config`). */
export type GenerationConfigChoice = "auto" | "vllm";

/** The sampling defaults requests get where they leave parameters out: the model's (auto), or none (vllm: OpenAI's). */
export function samplingDefaultsOf(model: LoadedModel, choice: GenerationConfigChoice = "auto"): SamplingDefaults {
  return choice === "vllm" ? {} : model.config.samplingDefaults ?? {};
}

/** This server's version, as `GET /version` reports it (package.json's; a test keeps them equal). */
export const SERVER_VERSION = "0.1.0";

/** Responses kept by default (`--max-stored-responses`). */
export const DEFAULT_STORED_RESPONSES = 4096;
/** Conversations kept by default (`--max-conversations`). */
export const DEFAULT_CONVERSATIONS = 1024;
/** MiB of JSON text each store keeps by default (`--max-stored-mib`). */
export const DEFAULT_STORED_MIB = 512;

/** The context requests for the base model are served in (app-kit.ts `ctxFor` derives an adapter's). */
export function serveContextOf(o: AppOptions): ServeContext {
  return {
    engine: o.engine,
    tokenizer: o.model.tokenizer,
    config: o.model.config,
    modelName: o.modelName,
    chat: modelChatRenderer(o.model),
    reasoningParser: o.reasoningParser ?? "none",
    tracksReasoning: reasoningTokensOf(o.reasoningParser ?? "none", o.model.tokenizer) !== undefined,
    jsonWhitespace: o.jsonWhitespace ?? "any",
    toolCallParser: toolCallSyntax(o.toolCallParser ?? "hermes", o.model.tokenizer),
    samplingDefaults: samplingDefaultsOf(o.model, o.generationConfig),
    priorityScheduling: (o.schedulingPolicy ?? "priority") === "priority",
    imageFetch: o.imageFetch ?? NO_IMAGE_FETCH,
    maxImages: o.maxImages ?? MAX_IMAGES,
    ...(o.model.config.vision ? { imagePrep: o.imagePrep ?? new ImagePrep(o.model.config.vision.preprocess, DEFAULT_IMAGE_CACHE_BYTES, false) } : {}),
  };
}

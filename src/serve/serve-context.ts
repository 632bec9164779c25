/**
 * What the generation handlers share: the server's context (engine, tokenizer, template, parsers) and a
 * submitted request as answering it needs it (respond.ts, messages.ts, responses.ts read it).
 */
import type { RequestHandle, ServingEngine } from "../engine/engine-types.ts";
import type { JsonWhitespace, ToolCallSyntax } from "../engine/grammar.ts";
import type { ModelConfig, SamplingDefaults, Tokenizer } from "../model/config.ts";
import type { ChatOutputOptions } from "./chat-output.ts";
import type { ChatRenderer } from "./chat-template.ts";
import type { ImageFetchOptions } from "./image-fetch.ts";
import type { ImagePrep, PreparedImages } from "./image-prep.ts";
import type { ReasoningParserName } from "./reasoning.ts";
import type { ParamNames } from "./refusals.ts";

/** What the handlers need from the server. */
export interface ServeContext {
  engine: ServingEngine;
  tokenizer: Tokenizer;
  config: ModelConfig;
  modelName: string;
  chat: ChatRenderer;
  /** "think": `<think>` text of chat answers goes to `reasoning_content` (`--reasoning-parser`). */
  reasoningParser: ReasoningParserName;
  /** The engine knows the model's reasoning tokens (harmony-prompt.ts `reasoningTokensOf`): reasoning budgets can be kept. */
  tracksReasoning: boolean;
  /** How JSON output grammars may be spaced unless a request says (`--json-whitespace`). */
  jsonWhitespace: JsonWhitespace;
  /**
   * How the model writes tool calls (`--tool-call-parser`, with "mistral" resolved by the tokenizer's
   * version: tool-calls-mistral.ts `toolCallSyntax`): what is parsed, and what a forced call writes.
   */
  toolCallParser: ToolCallSyntax;
  /** What a request that leaves out temperature, top_p, top_k, min_p, repetition_penalty or max_tokens gets (`--generation-config`). */
  samplingDefaults: SamplingDefaults;
  /** Requests may set `priority` (`--scheduling-policy priority`, the default); false: any but 0 is refused (fcfs). */
  priorityScheduling: boolean;
  /** Where image URLs may be read from (`--allowed-media-domains`, `--allowed-local-media-path`: image-fetch.ts). */
  imageFetch: ImageFetchOptions;
  /** Where the model reads images: prepares them, and keeps them by data URL (image-prep.ts). */
  imagePrep?: ImagePrep;
  /** The most images a request may hold (`--limit-mm-per-prompt`; default prompt-images.ts MAX_IMAGES). */
  maxImages: number;
  /** This request's images, prepared before its body was read (app-kit.ts `parse`), by data URL. */
  preparedImages?: PreparedImages;
}

/** Which endpoint a request came through. */
export type Kind = "chat" | "completion";

/** One prompt of a completion request, as `echo` returns it. */
export interface EchoedPrompt {
  ids: number[];
  /** The prompt text as sent (decoded when it came as token ids). */
  text: string;
}

/** What a completion request asks beyond its text: its prompts' echo and `best_of`. */
export interface CompletionShape {
  /** One per prompt, in order. */
  prompts: EchoedPrompt[];
  /** Return each prompt before its completion (`echo`). */
  echo: boolean;
  /** `max_tokens` 0 with `echo`: the prompt is scored, nothing generated is returned. */
  scoreOnly: boolean;
  /** Alternatives per token the client asked for (`logprobs`; null: none). `best_of` asks the engine for log probabilities regardless. */
  logprobs: number | null;
}

/** A submitted request and what answering it needs to know. */
export interface Submitted {
  kind: Kind;
  /**
   * One per generation: `perPrompt` for each prompt in turn (`n`, or `best_of` when larger), so
   * handles[p * perPrompt + j] is prompt p's j-th.
   */
  handles: RequestHandle[];
  perPrompt: number;
  /** Choices returned per prompt (`n`): the likeliest `n` of `perPrompt` when `best_of` is larger. */
  n: number;
  /** How to split a chat answer (reasoning, tool calls); null for completions, whose text is returned as generated. */
  output: ChatOutputOptions | null;
  /** Completions only. */
  completion?: CompletionShape;
  /** vLLM's `prompt_logprobs`: alternatives per prompt token (undefined: not asked). */
  promptLogprobs?: number;
  /** Chat only: the prompt's length in tokens (known before the first token; the result says it again). */
  promptTokens?: number;
  /** The processing tier applied, when the request named one (`service_tier`, returned as OpenAI does). */
  serviceTier?: AppliedTier;
  /** Chat only: vLLM's `echo`, the last message's text that each choice's content starts with. */
  echo?: string;
  /** What the body calls the engine request's fields, for a refusal's `param` (generation-request.ts `paramNames`). */
  params?: ParamNames;
}

/** The tiers a request is served in: `service_tier` "priority" and "flex" as priorities -1 and 1, the rest as 0. */
export type AppliedTier = "default" | "priority" | "flex";

/** The tier `service_tier` gets here: "priority" and "flex" under priority scheduling, else "default". */
export function appliedTier(ctx: Pick<ServeContext, "priorityScheduling">, tier: string | null | undefined): AppliedTier {
  return ctx.priorityScheduling && (tier === "priority" || tier === "flex") ? tier : "default";
}

/**
 * OpenAI's `POST /v1/embeddings` on the served model: each input's last token's hidden state after
 * the output norm (last-token pooling, as vLLM pools decoder models and as Qwen3-Embedding and
 * e5-mistral are trained), L2-normalized unless `normalize` (vLLM's extension) is false; as float
 * arrays, or as base64 of little-endian float32 (what the openai client asks for by default).
 * Inputs are texts or token ids (OpenAI's `input`), or a chat (vLLM's `messages`) embedded as one.
 * Inputs go through the engine as requests that generate nothing (GenerateRequest.embed), so they
 * share its batching, prefix cache and priorities.
 */
import { z } from "zod";
import type { RequestHandle } from "../engine/engine-types.ts";
import { ApiError } from "./errors.ts";
import { chatPrompt, checkPriority, checkTextLength, submit, type ServeContext, truncatedPrompt } from "./openai.ts";
import { ChatRequestSchema, isObject, priorityField, sessionKey, truncatePromptTokensField } from "./schemas.ts";

/** The most inputs one request may hold (each is an engine request; the queue holds --max-waiting). */
export const MAX_EMBEDDING_INPUTS = 256;

const tokenIds = z.array(z.number().int().min(0)).min(1);

/**
 * OpenAI's four input shapes. The lists' lengths are checked by {@link checkInputCount}, which names
 * the limit: a length bound inside the union would fail every branch and say only "Invalid input".
 */
const embeddingInput = z.union([z.string(), z.array(z.string()), tokenIds, z.array(tokenIds)], {
  error: "must be a text, a list of texts, a list of token ids or a list of token-id lists",
});

/** What both shapes of a /v1/embeddings body may set beside the input. */
const embeddingOptions = {
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: sessionKey.nullish(),
  // vLLM's extensions: unit length (default) or the raw pooled state, and the scheduling priority.
  normalize: z.boolean().nullish(),
  priority: priorityField,
  // vLLM's: false leaves out the special tokens the tokenizer adds to a text (BOS, an appended EOS).
  add_special_tokens: z.boolean().nullish(),
  // vLLM's: embed only each input's last this-many tokens (-1: as many as the context holds).
  truncate_prompt_tokens: truncatePromptTokensField,
};

/** OpenAI's shape: `input`. */
const EmbeddingsInputSchema = z.looseObject({ model: z.string().min(1), input: embeddingInput, ...embeddingOptions });
/** vLLM's chat shape: `messages`, rendered by the chat template (no generation prompt unless asked), embedded as one input. */
const EmbeddingsChatSchema = ChatRequestSchema.extend(embeddingOptions);

/**
 * POST /v1/embeddings: `input` (OpenAI's) or `messages` (vLLM's chat embeddings). The shape is
 * picked by whether `messages` is given, so a bad value gets the issue of its own shape.
 */
export const EmbeddingsRequestSchema = z.unknown().transform((v, ctx): z.infer<typeof EmbeddingsInputSchema> | z.infer<typeof EmbeddingsChatSchema> => {
  const chat = isObject(v) && v.messages !== undefined;
  if (chat && v.input !== undefined) {
    ctx.addIssue({ code: "custom", message: "cannot be sent with messages: send a chat as messages or texts as input, not both", path: ["input"], input: v.input });
    return z.NEVER;
  }
  const r = (chat ? EmbeddingsChatSchema : EmbeddingsInputSchema).safeParse(v);
  if (r.success) return r.data;
  for (const issue of r.error.issues) ctx.addIssue({ code: "custom", message: issue.message, path: issue.path, input: issue.input });
  return z.NEVER;
});
export type EmbeddingsRequest = z.infer<typeof EmbeddingsRequestSchema>;
type EmbeddingsChatRequest = z.infer<typeof EmbeddingsChatSchema>;

/** Whether a parsed body is the chat shape (its loose index signature keeps `messages` from narrowing it). */
function isChat(body: EmbeddingsRequest): body is EmbeddingsChatRequest {
  return Array.isArray(body.messages);
}

/** What embedding a list of inputs needs beside them. */
export interface EmbedOptions {
  /** `truncate_prompt_tokens` (undefined or null: none). */
  truncate?: number | null;
  /** False: texts get no BOS and no appended end token (vLLM's `add_special_tokens`; default true). */
  addSpecialTokens?: boolean | null;
  priority?: number | null;
  sessionId?: string;
  /** The parameter naming each input in errors: `${param}[i]`, or `param` alone when `indexed` is false. */
  param: string;
  indexed: boolean;
}

/**
 * Submits one engine request per input (text, or token ids); throws ApiError for what cannot be
 * embedded: a model that pools otherwise, an empty input, a token outside the vocabulary, a text
 * longer than the context (unless truncated), a priority under fcfs.
 */
export function submitInputs(ctx: ServeContext, items: readonly (string | readonly number[])[], o: EmbedOptions): RequestHandle[] {
  const pooling = ctx.config.poolingType;
  if (pooling === "mean" || pooling === "cls" || pooling === "rank") {
    throw new ApiError(400, `This model pools its embeddings by ${pooling} (its file's pooling_type); this server pools the last token only, which would give other vectors`, "model", "unsupported_model");
  }
  checkPriority(ctx, o.priority);
  checkQueueRoom(ctx, items.length, o.param, `The ${o.param} list holds ${items.length} inputs`);
  const special = o.addSpecialTokens !== false;
  const paramOf = (i: number) => (o.indexed ? `${o.param}[${i}]` : o.param);
  const prompts = items.map((item, i) => {
    const param = paramOf(i);
    if (typeof item !== "string") {
      const ids = item as readonly number[];
      const bad = ids.findIndex((id) => id >= ctx.config.vocabSize);
      if (bad >= 0) throw new ApiError(400, `Token id ${ids[bad]} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, `${param}[${bad}]`, "invalid_value");
      return truncatedPrompt(ctx, [...ids], o.truncate, 0);
    }
    if (item === "") throw new ApiError(400, `An input to embed is empty; send at least one character`, param, "invalid_value");
    if (o.truncate === undefined || o.truncate === null) checkTextLength(ctx, item, param);
    const ids = ctx.tokenizer.encode(item, { addBos: ctx.config.addBos && special });
    // The token an embedding model's tokenizer ends texts with, which it pools at.
    const end = special ? ctx.config.appendEosTokenId : undefined;
    return truncatedPrompt(ctx, end === undefined || ids[ids.length - 1] === end ? ids : [...ids, end], o.truncate, 0);
  });
  const extra = { ...(o.sessionId ? { sessionId: o.sessionId } : {}), ...(o.priority ? { priority: o.priority } : {}) };
  // One at a time, so that a refusal (a prompt longer than the context) names its own input.
  const handles: RequestHandle[] = [];
  try {
    for (const [i, prompt] of prompts.entries()) handles.push(...submit(ctx, [{ prompt, maxTokens: 1, temperature: 0, embed: true, ...extra }], 1, paramOf(i), false));
  } catch (e) {
    for (const h of handles) h.cancel();
    throw e;
  }
  return handles;
}

/**
 * Throws a 400 naming `param` when `n` engine requests (one per text) are more than the engine's
 * queue holds (--max-waiting): they could never all be taken, and a 429 would only send the client
 * back to try again. `holds` opens the message ("The input list holds 6 inputs").
 */
export function checkQueueRoom(ctx: ServeContext, n: number, param: string, holds: string): void {
  const queue = ctx.engine.maxWaiting;
  if (queue !== undefined && n > queue) {
    throw new ApiError(400, `${holds}; this server queues at most ${queue} requests (--max-waiting), so split it into several`, param, "invalid_value");
  }
}

/** Throws a 400 naming `param` unless a list of `n` inputs holds from 1 to `max`. */
export function checkInputCount(n: number, param: string, max: number): void {
  if (n === 0) throw new ApiError(400, `The ${param} list is empty; send at least one input`, param, "invalid_value");
  if (n > max) throw new ApiError(400, `The ${param} list holds ${n} inputs; this server takes at most ${max} in one request, so split it into several`, param, "invalid_value");
}

/** Each input's pooled state once embedded (L2-normalized unless `normalize` is false), and the prompt tokens in all. */
export async function embeddingsOf(handles: readonly RequestHandle[], normalize = true): Promise<{ vectors: Float32Array[]; promptTokens: number }> {
  const results = await Promise.all(handles.map((h) => h.result));
  let promptTokens = 0;
  const vectors = results.map((r, index) => {
    // Cancelled without a fault (the server stopping past its drain): another replica, or this one
    // once back, can embed it, so a 503 the client retries rather than a 500.
    if (r.error === undefined && r.embedding === undefined && r.finishReason === "abort") {
      throw new ApiError(503, `Embedding input ${index} was cancelled before it was embedded (the server is shutting down); retry the request`, null, "cancelled");
    }
    if (r.error !== undefined || r.embedding === undefined) throw new ApiError(500, `Embedding input ${index} failed: ${r.error ?? r.finishReason}`, null, "internal_error");
    promptTokens += r.promptTokens;
    const v = Float32Array.from(r.embedding);
    if (normalize) {
      let norm = 0;
      for (const x of v) norm += x * x;
      norm = Math.sqrt(norm);
      if (norm > 0) for (let i = 0; i < v.length; i++) v[i] /= norm;
    }
    return v;
  });
  return { vectors, promptTokens };
}

/** Submits one engine request per input of a /v1/embeddings body. */
export function submitEmbeddings(ctx: ServeContext, body: EmbeddingsRequest): RequestHandle[] {
  const size = ctx.config.hiddenSize;
  if (body.dimensions !== undefined && body.dimensions !== null && body.dimensions !== size) {
    throw new ApiError(400, `This model's embeddings have ${size} dimensions and it was not trained for shorter ones; leave dimensions out or send ${size}, got dimensions = ${body.dimensions}`, "dimensions", "invalid_value");
  }
  const o = { truncate: body.truncate_prompt_tokens, addSpecialTokens: body.add_special_tokens, priority: body.priority, sessionId: body.user || undefined };
  if (isChat(body)) {
    // vLLM's chat embeddings: the template's text as the model reads it, without a generation
    // prompt unless asked (the template writes the special tokens; none are added after it).
    const turn = body.continue_final_message ? {} : { add_generation_prompt: body.add_generation_prompt ?? false };
    const { prompt, images } = chatPrompt(ctx, { ...body, ...turn });
    if (images) throw new ApiError(400, "Embeddings of messages with images are not supported: send text only", "messages", "unsupported_parameter");
    return submitInputs(ctx, [prompt], { ...o, param: "messages", indexed: false });
  }
  const input = body.input;
  const many = Array.isArray(input) && (typeof input[0] === "string" || Array.isArray(input[0]));
  if (Array.isArray(input) && input.length === 0) checkInputCount(0, "input", MAX_EMBEDDING_INPUTS);
  const items = (many ? input : [input]) as (string | number[])[];
  if (many) checkInputCount(items.length, "input", MAX_EMBEDDING_INPUTS);
  return submitInputs(ctx, items, { ...o, param: "input", indexed: many });
}

/** The response once every input is embedded (a 500 naming the engine's error if one failed). */
export async function embeddingsJson(ctx: ServeContext, body: EmbeddingsRequest, handles: readonly RequestHandle[]): Promise<Record<string, unknown>> {
  const { vectors, promptTokens } = await embeddingsOf(handles, body.normalize !== false);
  const data = vectors.map((v, index) => ({ object: "embedding", index, embedding: body.encoding_format === "base64" ? base64Of(v) : Array.from(v) }));
  return { object: "list", data, model: ctx.modelName, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } };
}

/** Base64 of `v`'s float32 values, little-endian (as OpenAI's API and client encode them). */
function base64Of(v: Float32Array): string {
  const bytes = new Uint8Array(v.length * 4);
  const view = new DataView(bytes.buffer);
  v.forEach((x, i) => view.setFloat32(i * 4, x, true));
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

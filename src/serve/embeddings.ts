/**
 * OpenAI's `POST /v1/embeddings` on the served model: each input's last token's hidden state after
 * the output norm (last-token pooling, as vLLM pools decoder models and as Qwen3-Embedding and
 * e5-mistral are trained), L2-normalized unless `normalize` (vLLM's extension) is false; as float
 * arrays, or as base64 of little-endian float32 (what the openai client asks for by default).
 * Inputs go through the engine as requests that generate nothing (GenerateRequest.embed), so they
 * share its batching, prefix cache and priorities.
 */
import { z } from "zod";
import type { RequestHandle } from "../engine/engine-types.ts";
import { ApiError } from "./errors.ts";
import { checkPriority, checkTextLength, submit, type ServeContext, truncatedPrompt } from "./openai.ts";
import { priorityField, sessionKey, truncatePromptTokensField } from "./schemas.ts";

/** The most inputs one request may hold. */
export const MAX_EMBEDDING_INPUTS = 256;

const tokenIds = z.array(z.number().int().min(0)).min(1);

/** POST /v1/embeddings */
export const EmbeddingsRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.string()).min(1).max(MAX_EMBEDDING_INPUTS), tokenIds, z.array(tokenIds).min(1).max(MAX_EMBEDDING_INPUTS)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: sessionKey.nullish(),
  // vLLM's extensions: unit length (default) or the raw pooled state, and the scheduling priority.
  normalize: z.boolean().nullish(),
  priority: priorityField,
  // vLLM's: embed only each input's last this-many tokens (-1: as many as the context holds).
  truncate_prompt_tokens: truncatePromptTokensField,
});
export type EmbeddingsRequest = z.infer<typeof EmbeddingsRequestSchema>;

/** What embedding a list of inputs needs beside them. */
export interface EmbedOptions {
  /** `truncate_prompt_tokens` (undefined or null: none). */
  truncate?: number | null;
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
  const prompts = items.map((item, i) => {
    const param = o.indexed ? `${o.param}[${i}]` : o.param;
    if (typeof item !== "string") {
      const ids = item as readonly number[];
      const bad = ids.findIndex((id) => id >= ctx.config.vocabSize);
      if (bad >= 0) throw new ApiError(400, `Token id ${ids[bad]} is outside the vocabulary (0..${ctx.config.vocabSize - 1})`, `${param}[${bad}]`, "invalid_value");
      return truncatedPrompt(ctx, [...ids], o.truncate);
    }
    if (item === "") throw new ApiError(400, `An input to embed is empty; send at least one character`, param, "invalid_value");
    if (o.truncate === undefined || o.truncate === null) checkTextLength(ctx, item, param);
    const ids = ctx.tokenizer.encode(item, { addBos: ctx.config.addBos });
    // The token an embedding model's tokenizer ends texts with, which it pools at.
    const end = ctx.config.appendEosTokenId;
    return truncatedPrompt(ctx, end === undefined || ids[ids.length - 1] === end ? ids : [...ids, end], o.truncate);
  });
  const extra = { ...(o.sessionId ? { sessionId: o.sessionId } : {}), ...(o.priority ? { priority: o.priority } : {}) };
  return submit(ctx, prompts.map((prompt) => ({ prompt, maxTokens: 1, temperature: 0, embed: true, ...extra })), 1, o.param, false);
}

/** Each input's pooled state once embedded (L2-normalized unless `normalize` is false), and the prompt tokens in all. */
export async function embeddingsOf(handles: readonly RequestHandle[], normalize = true): Promise<{ vectors: Float32Array[]; promptTokens: number }> {
  const results = await Promise.all(handles.map((h) => h.result));
  let promptTokens = 0;
  const vectors = results.map((r, index) => {
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
  const input = body.input;
  const many = Array.isArray(input) && (typeof input[0] === "string" || Array.isArray(input[0]));
  const items = (many ? input : [input]) as (string | number[])[];
  return submitInputs(ctx, items, { truncate: body.truncate_prompt_tokens, priority: body.priority, sessionId: body.user || undefined, param: "input", indexed: many });
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

/**
 * vLLM's `POST /score` and `POST /rerank` (also under `/v1/`, and `/v2/rerank`) for the served model
 * used as an embedding model: a pair's score is the cosine similarity of the two texts' embeddings
 * (embeddings.ts: last-token pooling), as vLLM scores with embedding models (a bi-encoder; cross-
 * encoders, which read both texts at once, are not served here). Rerank orders documents by their
 * score against the query (Jina's and Cohere's shape).
 */
import { z } from "zod";
import type { RequestHandle } from "../engine/engine-types.ts";
import { embeddingsOf, submitInputs } from "./embeddings.ts";
import { ApiError } from "./errors.ts";
import type { ServeContext } from "./openai.ts";
import { priorityField, truncatePromptTokensField } from "./schemas.ts";
import { checkModel } from "./tokenize.ts";

/** The most texts one score or rerank request may hold. */
export const MAX_SCORE_TEXTS = 256;

const texts = z.union([z.string(), z.array(z.string()).min(1).max(MAX_SCORE_TEXTS)]);
const common = {
  model: z.string().min(1).nullish(),
  truncate_prompt_tokens: truncatePromptTokensField,
  priority: priorityField,
};

/** POST /score: `text_1` against `text_2` (one against many, or pairwise). */
export const ScoreRequestSchema = z.looseObject({ ...common, text_1: texts, text_2: texts });
export type ScoreRequest = z.infer<typeof ScoreRequestSchema>;

/** POST /rerank: `documents` ordered by their score against `query`, the best `top_n`. */
export const RerankRequestSchema = z.looseObject({
  ...common, query: z.string(), documents: z.array(z.string()).min(1).max(MAX_SCORE_TEXTS), top_n: z.number().int().min(1).nullish(), return_documents: z.boolean().nullish(),
});
export type RerankRequest = z.infer<typeof RerankRequestSchema>;

/** A submitted score or rerank: the handles of its distinct texts, and which text each side of each pair is. */
export interface SubmittedScores {
  handles: RequestHandle[];
  pairs: [number, number][];
}

/** Embeds each distinct text once and pairs them as `/score` asks: one against many, many against one, or pairwise. */
export function submitScore(ctx: ServeContext, body: ScoreRequest): SubmittedScores {
  checkModel(ctx, body.model);
  const left = typeof body.text_1 === "string" ? [body.text_1] : body.text_1;
  const right = typeof body.text_2 === "string" ? [body.text_2] : body.text_2;
  if (left.length > 1 && right.length > 1 && left.length !== right.length) {
    throw new ApiError(400, `text_1 and text_2 must be as long as each other when both are lists, got ${left.length} and ${right.length}`, "text_2", "invalid_value");
  }
  const n = Math.max(left.length, right.length);
  const opts = { truncate: body.truncate_prompt_tokens, priority: body.priority };
  const first = submitInputs(ctx, left, { ...opts, param: "text_1", indexed: typeof body.text_1 !== "string" });
  let second: RequestHandle[];
  try {
    second = submitInputs(ctx, right, { ...opts, param: "text_2", indexed: typeof body.text_2 !== "string" });
  } catch (e) {
    for (const h of first) h.cancel();
    throw e;
  }
  const handles = [...first, ...second];
  const pairs = Array.from({ length: n }, (_, i): [number, number] => [left.length === 1 ? 0 : i, left.length + (right.length === 1 ? 0 : i)]);
  return { handles, pairs };
}

/** Embeds the query and each document. */
export function submitRerank(ctx: ServeContext, body: RerankRequest): SubmittedScores {
  checkModel(ctx, body.model);
  const handles = submitInputs(ctx, [body.query, ...body.documents], { truncate: body.truncate_prompt_tokens, priority: body.priority, param: "documents", indexed: true });
  return { handles, pairs: body.documents.map((_, i): [number, number] => [0, i + 1]) };
}

/** Each pair's cosine similarity, and the prompt tokens embedded. */
async function scores(s: SubmittedScores): Promise<{ scores: number[]; promptTokens: number }> {
  const { vectors, promptTokens } = await embeddingsOf(s.handles);
  return { scores: s.pairs.map(([a, b]) => dot(vectors[a], vectors[b])), promptTokens };
}

/** The /score response: one score per pair, in order. */
export async function scoreJson(ctx: ServeContext, s: SubmittedScores): Promise<Record<string, unknown>> {
  const r = await scores(s);
  return {
    id: `score-${crypto.randomUUID()}`, object: "list", created: Math.floor(Date.now() / 1000), model: ctx.modelName,
    data: r.scores.map((score, index) => ({ index, object: "score", score })), usage: { prompt_tokens: r.promptTokens, total_tokens: r.promptTokens },
  };
}

/** The /rerank response: the best `top_n` documents (all by default), best first, with their index and text. */
export async function rerankJson(ctx: ServeContext, body: RerankRequest, s: SubmittedScores): Promise<Record<string, unknown>> {
  const r = await scores(s);
  const ranked = r.scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score).slice(0, body.top_n ?? r.scores.length);
  return {
    id: `rerank-${crypto.randomUUID()}`, model: ctx.modelName, usage: { total_tokens: r.promptTokens },
    results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(body.return_documents === false ? {} : { document: { text: body.documents[index] } }) })),
  };
}

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/**
 * vLLM's `POST /score` and `POST /rerank` (also under `/v1/`, and `/v2/rerank`) for the served model
 * used as an embedding model: a pair's score is the cosine similarity of the two texts' embeddings
 * (embeddings.ts: last-token pooling), as vLLM scores with embedding models (a bi-encoder; cross-
 * encoders, which read both texts at once, are not served here). Rerank orders documents by their
 * score against the query (Jina's and Cohere's shape).
 */
import { z } from "zod";
import type { RequestHandle } from "../engine/engine-types.ts";
import { checkInputCount, checkQueueRoom, embeddingsOf, submitInputs } from "./embeddings.ts";
import { ApiError } from "./errors.ts";
import type { ServeContext } from "./openai.ts";
import { priorityField, truncatePromptTokensField } from "./schemas.ts";
import { checkModel } from "./tokenize.ts";

/** The most texts one score or rerank request may hold. */
export const MAX_SCORE_TEXTS = 256;

// Lists' lengths are checked in code (checkInputCount), which names the limit.
const texts = z.union([z.string(), z.array(z.string())], { error: "must be a text or a list of texts" });
const common = {
  model: z.string().min(1).nullish(),
  truncate_prompt_tokens: truncatePromptTokensField,
  priority: priorityField,
};

/** The names vLLM's `/score` takes its two sides by, newest first: one pair per request. */
const SCORE_SIDES = [["queries", "documents"], ["data_1", "data_2"], ["text_1", "text_2"]] as const;
type ScoreSide = (typeof SCORE_SIDES)[number][number];

/**
 * POST /score: the first side against the second (one against many, or pairwise), named as any
 * vLLM version names them: `queries` and `documents`, `data_1` and `data_2`, or `text_1` and `text_2`.
 */
export const ScoreRequestSchema = z.looseObject({
  ...common, queries: texts.optional(), documents: texts.optional(), data_1: texts.optional(), data_2: texts.optional(), text_1: texts.optional(), text_2: texts.optional(),
}).superRefine((body, ctx) => {
  const sides = scoreSides(body);
  for (const side of sides) {
    if (body[side] === undefined) ctx.addIssue({ code: "custom", message: `the two sides to score are queries and documents, data_1 and data_2, or text_1 and text_2, each a text or a list of texts`, path: [side], input: undefined });
  }
});
export type ScoreRequest = z.infer<typeof ScoreRequestSchema>;

/** The pair of fields a /score body names its sides by (text_1 and text_2 when it names none). */
function scoreSides(body: Partial<Record<ScoreSide, unknown>>): readonly [ScoreSide, ScoreSide] {
  return SCORE_SIDES.find(([a, b]) => body[a] !== undefined || body[b] !== undefined) ?? SCORE_SIDES[2];
}

/** A document to rerank: its text, or Cohere's and Jina's `{"text": ...}` object. */
const rerankDocument = z.union([z.string(), z.looseObject({ text: z.string() })], { error: "must be a text or an object with a text" });

/**
 * POST /rerank: `documents` ordered by their score against `query`, the best `top_n` (vLLM's: 0,
 * its default, or less returns them all).
 */
export const RerankRequestSchema = z.looseObject({
  ...common, query: z.string(), documents: z.array(rerankDocument), top_n: z.number().int().nullish(), return_documents: z.boolean().nullish(),
});
export type RerankRequest = z.infer<typeof RerankRequestSchema>;

/** A submitted score or rerank: the handles of its texts (one per text as sent, repeats included), and which text each side of each pair is. */
export interface SubmittedScores {
  handles: RequestHandle[];
  pairs: [number, number][];
}

/** Embeds each text (a repeat too: the prefix cache makes it cheap) and pairs them as `/score` asks: one against many, many against one, or pairwise. */
export function submitScore(ctx: ServeContext, body: ScoreRequest): SubmittedScores {
  checkModel(ctx, body.model);
  const [name1, name2] = scoreSides(body);
  // The schema saw to it that both fields of the pair are there.
  const text1 = body[name1] ?? [];
  const text2 = body[name2] ?? [];
  const left = typeof text1 === "string" ? [text1] : text1;
  const right = typeof text2 === "string" ? [text2] : text2;
  if (left.length > 1 && right.length > 1 && left.length !== right.length) {
    throw new ApiError(400, `${name1} and ${name2} must be as long as each other when both are lists, got ${left.length} and ${right.length}`, name2, "invalid_value");
  }
  checkInputCount(left.length, name1, MAX_SCORE_TEXTS);
  checkInputCount(right.length, name2, MAX_SCORE_TEXTS);
  // Each side fits the engine's queue by itself; both together must too.
  checkQueueRoom(ctx, left.length + right.length, name2, `${name1} and ${name2} hold ${left.length + right.length} texts in all`);
  const n = Math.max(left.length, right.length);
  const opts = { truncate: body.truncate_prompt_tokens, priority: body.priority };
  const first = submitInputs(ctx, left, { ...opts, param: name1, indexed: typeof text1 !== "string" });
  let second: RequestHandle[];
  try {
    second = submitInputs(ctx, right, { ...opts, param: name2, indexed: typeof text2 !== "string" });
  } catch (e) {
    for (const h of first) h.cancel();
    throw e;
  }
  const handles = [...first, ...second];
  const pairs = Array.from({ length: n }, (_, i): [number, number] => [left.length === 1 ? 0 : i, left.length + (right.length === 1 ? 0 : i)]);
  return { handles, pairs };
}

/** Each document's text. */
function documentTexts(body: RerankRequest): string[] {
  return body.documents.map((d) => (typeof d === "string" ? d : d.text));
}

/** Embeds the query and each document (a refusal names `query` or `documents[i]`). */
export function submitRerank(ctx: ServeContext, body: RerankRequest): SubmittedScores {
  checkModel(ctx, body.model);
  checkInputCount(body.documents.length, "documents", MAX_SCORE_TEXTS);
  checkQueueRoom(ctx, 1 + body.documents.length, "documents", `The query and documents hold ${1 + body.documents.length} texts in all`);
  const opts = { truncate: body.truncate_prompt_tokens, priority: body.priority };
  const query = submitInputs(ctx, [body.query], { ...opts, param: "query", indexed: false });
  let documents: RequestHandle[];
  try {
    documents = submitInputs(ctx, documentTexts(body), { ...opts, param: "documents", indexed: true });
  } catch (e) {
    for (const h of query) h.cancel();
    throw e;
  }
  return { handles: [...query, ...documents], pairs: body.documents.map((_, i): [number, number] => [0, i + 1]) };
}

/**
 * Each pair's cosine similarity, and the prompt tokens embedded. The unit vectors are rounded to
 * float32, so a text against itself can come out a hair over 1: kept within [-1, 1].
 */
async function scores(s: SubmittedScores): Promise<{ scores: number[]; promptTokens: number }> {
  const { vectors, promptTokens } = await embeddingsOf(s.handles);
  return { scores: s.pairs.map(([a, b]) => Math.min(1, Math.max(-1, dot(vectors[a], vectors[b])))), promptTokens };
}

/** The /score response: one score per pair, in order. */
export async function scoreJson(ctx: ServeContext, s: SubmittedScores): Promise<Record<string, unknown>> {
  const r = await scores(s);
  return {
    id: `score-${crypto.randomUUID()}`, object: "list", created: Math.floor(Date.now() / 1000), model: ctx.modelName,
    data: r.scores.map((score, index) => ({ index, object: "score", score })), usage: { prompt_tokens: r.promptTokens, total_tokens: r.promptTokens },
  };
}

/**
 * The /rerank response: the best `top_n` documents (all when it is left out, 0 or less, as vLLM),
 * best first (ties in the order given), with their index and text.
 */
export async function rerankJson(ctx: ServeContext, body: RerankRequest, s: SubmittedScores): Promise<Record<string, unknown>> {
  const r = await scores(s);
  const texts = documentTexts(body);
  const topN = body.top_n !== undefined && body.top_n !== null && body.top_n > 0 ? body.top_n : r.scores.length;
  const ranked = r.scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score).slice(0, topN);
  return {
    id: `rerank-${crypto.randomUUID()}`, model: ctx.modelName, usage: { total_tokens: r.promptTokens },
    results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(body.return_documents === false ? {} : { document: { text: texts[index] } }) })),
  };
}

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

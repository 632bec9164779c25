/**
 * The app's scoring and tokenizer routes: vLLM's `/score` and `/rerank` (generations, counted in
 * flight like the others), `/tokenize` and `/detokenize`, and Anthropic's `count_tokens`.
 */
import type { Hono } from "hono";
import type { RequestHandle } from "../engine/engine-types.ts";
import type { RouteKit } from "./app-kit.ts";
import { countMessageTokens } from "./messages.ts";
import { CountTokensRequestSchema } from "./messages-schema.ts";
import { rerankJson, RerankRequestSchema, scoreJson, ScoreRequestSchema, submitRerank, submitScore } from "./score.ts";
import type { Submitted } from "./serve-context.ts";
import { detokenize, DetokenizeRequestSchema, tokenize, TokenizeRequestSchema } from "./tokenize.ts";

/** Adds the score, rerank, tokenize, detokenize and count_tokens routes to `app`. */
export function addTokenRoutes(app: Hono, kit: RouteKit): void {
  const { generation, readBody, ctxFor, parse, readImages, whole } = kit;
  // vLLM's score and rerank routes, with and without the version prefix.
  const scoring = (handles: RequestHandle[]): Submitted => ({ kind: "completion", handles, perPrompt: 1, n: 1, output: null });
  for (const path of ["/score", "/v1/score"]) {
    app.post(path, (c) => generation(async (end) => {
      const body = await readBody(c, ScoreRequestSchema);
      const ctx = ctxFor(body.model);
      const s = submitScore(ctx, body);
      return whole(c, scoring(s.handles), end, () => scoreJson(ctx, s));
    }));
  }
  for (const path of ["/rerank", "/v1/rerank", "/v2/rerank"]) {
    app.post(path, (c) => generation(async (end) => {
      const body = await readBody(c, RerankRequestSchema);
      const ctx = ctxFor(body.model);
      const s = submitRerank(ctx, body);
      return whole(c, scoring(s.handles), end, () => rerankJson(ctx, body, s));
    }));
  }
  app.post("/tokenize", async (c) => {
    const body = await readBody(c, TokenizeRequestSchema);
    const ctx = ctxFor(body.model);
    const preparedImages = await readImages(body, "messages");
    return c.json(tokenize({ ...ctx, preparedImages }, body));
  });
  app.post("/detokenize", async (c) => {
    const body = await readBody(c, DetokenizeRequestSchema);
    return c.json(detokenize(ctxFor(body.model), body));
  });
  app.post("/v1/messages/count_tokens", async (c) => {
    const [body, ctx] = await parse(c, CountTokensRequestSchema);
    return c.json(countMessageTokens(ctx, body));
  });
}

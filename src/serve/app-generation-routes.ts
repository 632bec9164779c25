/**
 * The app's generation routes: chat completions, completions, the Responses API's `POST
 * /v1/responses` (background runs included), Anthropic's messages, and embeddings; each counted in
 * flight and refused with a 503 while the server drains (app-kit.ts `generation`).
 */
import type { Hono } from "hono";
import type { RouteKit } from "./app-kit.ts";
import { submitChat } from "./chat-submit.ts";
import { submitCompletion } from "./completion-submit.ts";
import { embeddingsJson, EmbeddingsRequestSchema, submitEmbeddings } from "./embeddings.ts";
import { respondMessageJson, respondMessageStream, submitMessages } from "./messages.ts";
import { MessagesRequestSchema, threadRefusal } from "./messages-schema.ts";
import { respondJson, respondStream, type ResponsesState, submitResponse } from "./responses.ts";
import { ResponsesRequestSchema } from "./responses-schema.ts";
import { ChatRequestSchema, CompletionRequestSchema } from "./schemas.ts";

/** Adds the generation routes to `app`; `state` keeps the Responses API's stored turns, conversations and background runs. */
export function addGenerationRoutes(app: Hono, kit: RouteKit, state: ResponsesState): void {
  const { generation, parse, respond, whole, sseOnceTaken, followSse } = kit;
  app.post("/v1/chat/completions", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, ChatRequestSchema);
    return respond(c, ctx, body, submitChat(ctx, body), end);
  }));
  app.post("/v1/completions", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, CompletionRequestSchema);
    return respond(c, ctx, body, submitCompletion(ctx, body), end);
  }));
  app.post("/v1/responses", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, ResponsesRequestSchema);
    const turn = submitResponse(ctx, state, body);
    if (body.background) {
      // Counted in flight until it finishes, whoever is listening.
      const queued = state.background.start(ctx, state, turn, end);
      return body.stream ? followSse(state.background.follow(turn.id, -1)!) : c.json(queued);
    }
    return body.stream ? sseOnceTaken(c, turn.submitted.handles, () => respondStream(ctx, state, turn), end, turn.submitted.params) : whole(c, turn.submitted, end, () => respondJson(ctx, state, turn));
  }));
  app.post("/v1/messages", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, MessagesRequestSchema);
    // Refused with the details Anthropic's clients read (a code the error bodies of errors.ts do not carry).
    const unthreaded = threadRefusal(body);
    if (unthreaded) {
      end();
      return c.json(unthreaded, 400);
    }
    // Anthropic's betas, comma-separated (one changes the thinking budget's bound: messages.ts).
    const betas = (c.req.header("anthropic-beta") ?? "").split(",").map((b) => b.trim()).filter((b) => b !== "");
    const turn = submitMessages(ctx, body, betas);
    return body.stream ? sseOnceTaken(c, turn.submitted.handles, () => respondMessageStream(ctx, turn), end) : whole(c, turn.submitted, end, () => respondMessageJson(ctx, turn));
  }));
  app.post("/v1/embeddings", (c) => generation(async (end) => {
    const [body, ctx] = await parse(c, EmbeddingsRequestSchema);
    const handles = submitEmbeddings(ctx, body);
    return whole(c, { kind: "completion", handles, perPrompt: 1, n: 1, output: null }, end, () => embeddingsJson(ctx, body, handles));
  }));
}

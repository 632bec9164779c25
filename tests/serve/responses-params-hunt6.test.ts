/**
 * A Responses turn's refusals found after submit (the engine's, a worker's) name the Responses API's
 * fields, as its submit-time errors already did: `input`, `max_output_tokens`, `text.format`, not the
 * chat path's `messages`, `max_completion_tokens`, `response_format`.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { ContextLengthError, type GenerateResult, RequestParamError } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { serveContextOf } from "../../src/serve/app-options.ts";
import { ConversationStore } from "../../src/serve/conversation-store.ts";
import { failure } from "../../src/serve/respond.ts";
import { BackgroundRuns } from "../../src/serve/responses-background.ts";
import type { ResponsesRequest } from "../../src/serve/responses-schema.ts";
import { ResponseStore } from "../../src/serve/response-store.ts";
import { submitResponse } from "../../src/serve/responses.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);

test("submitResponse() names a later refusal's field as the Responses API does (input, max_output_tokens, text.format)", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 32 });
  try {
    const ctx = serveContextOf({ engine, model, modelName: "stories260K" });
    const state = { responses: new ResponseStore(8), conversations: new ConversationStore(8), background: new BackgroundRuns() };
    const body = {
      model: "stories260K", input: "Once upon a time", max_output_tokens: 4, store: false,
      text: { format: { type: "json_schema", name: "s", schema: { type: "object", properties: { a: { type: "string" } }, required: ["a"] } } },
    } as unknown as ResponsesRequest;
    const turn = submitResponse(ctx, state, body);
    const r = await turn.submitted.handles[0].result;
    const refusedBy = (refused: Error) => failure([{ ...r, refused } as GenerateResult], turn.submitted.params);
    assert.equal(refusedBy(new RequestParamError("too many", "maxTokens"))?.param, "max_output_tokens");
    assert.equal(refusedBy(new RequestParamError("nests too deeply", "grammar"))?.param, "text.format");
    assert.equal(refusedBy(new ContextLengthError("too long"))?.param, "input");
  } finally {
    await engine.stop();
  }
});

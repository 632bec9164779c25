/**
 * Bug hunt: the engine's parameter refusals (RequestParamError) named no field, so the server answered
 * them with `"param": null`; and error paths were spelled two ways (`logit_bias[5]` beside
 * `logit_bias.-1`). Now the engine names its own field, the server maps it to the API's (one engine,
 * a `--workers 2` cluster, and a refusal a worker thread sends back), and every path spells a list
 * index in brackets and an object's key after a dot.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { startThreadCluster } from "../../src/cluster/create-cluster.ts";
import { refusalOf, rejection } from "../../src/cluster/worker-protocol.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { ApiError, paramPath } from "../../src/serve/errors.ts";
import { paramNames } from "../../src/serve/generation-request.ts";
import { awaitTaken, refusalError } from "../../src/serve/refusals.ts";
import type { ChatRequest, CompletionRequest } from "../../src/serve/schemas.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const M = "stories260K";
const MESSAGES = [{ role: "user" as const, content: "Once upon a time" }];

/** The 400 a request gets: its param and message (fails the test when it is not a 400). */
async function refusal(call: Promise<unknown>): Promise<{ param: string | null | undefined; message: string }> {
  try {
    await call;
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    return { param: e.param, message: e.message };
  }
  assert.fail("the request was answered");
}

for (const workers of [1, 2]) test(`the engine's refusals answer with the field as the API names it (openai client, ${workers === 1 ? "one engine" : "--workers 2 threads"})`, async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...(workers > 1 ? { workers, transport: "threads" as const } : {}) });
  const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
  const complete = (extra: Record<string, unknown>, stream = false) =>
    client.completions.create({ model: M, prompt: "Once upon a time", max_tokens: 4, stream, ...extra } as OpenAI.CompletionCreateParamsNonStreaming);
  const chat = (extra: Record<string, unknown>, stream = false) =>
    client.chat.completions.create({ model: M, messages: MESSAGES, max_completion_tokens: 4, stream, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  try {
    const cases: [string, () => Promise<unknown>, string, RegExp][] = [
      ["completion allowed_token_ids", () => complete({ allowed_token_ids: [1, 999999] }), "allowed_token_ids", /Token 999999 in allowed_token_ids is outside/],
      ["completion stop_token_ids, streamed", () => complete({ stop_token_ids: [999999] }, true), "stop_token_ids", /Token 999999 in stop_token_ids/],
      ["chat logit_bias", () => chat({ logit_bias: { "999999": 1 } }), "logit_bias", /Token 999999 in logit_bias/],
      ["chat logit_bias, n = 2", () => chat({ logit_bias: { "512": 1 }, n: 2 }), "logit_bias", /Token 512 in logit_bias/],
      ["completion min_tokens above max_tokens", () => complete({ min_tokens: 9 }), "min_tokens", /at most max_tokens \(4\), got min_tokens = 9/],
      ["chat min_tokens above max_completion_tokens, streamed", () => chat({ min_tokens: 9 }, true), "min_tokens", /got min_tokens = 9/],
    ];
    for (const [name, call, param, message] of cases) {
      const e = await refusal(call());
      assert.equal(e.param, param, `${name}: ${e.message}`);
      assert.match(e.message, message, name);
    }
    // The server still answers what is right.
    const ok = await complete({ allowed_token_ids: [1, 2], min_tokens: 2, temperature: 0 });
    assert.equal(ok.usage?.completion_tokens, 4);
  } finally {
    await s.shutdown();
  }
});

test("a refusal a worker thread's engine sends back keeps its field and reaches the client named as the body names it", async () => {
  const cl = await startThreadCluster(model, modelPath, "reference", { planner: "none", engine: { numBlocks: 64 }, workers: 1 });
  try {
    const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });
    const cases: [GenerateRequest, ChatRequest | CompletionRequest, "chat" | "completion", string][] = [
      [{ prompt, maxTokens: 2, grammar: { kind: "choice", choices: [] } }, { model: M, messages: MESSAGES, structured_outputs: { choice: ["a"] } } as ChatRequest, "chat", "structured_outputs"],
      [{ prompt, maxTokens: 2, grammar: { kind: "choice", choices: [] } }, { model: M, prompt: "x", response_format: { type: "json_object" } } as CompletionRequest, "completion", "response_format"],
      [{ prompt, maxTokens: 2, reasoningBudget: 2 }, { model: M, messages: MESSAGES } as ChatRequest, "chat", "thinking_token_budget"],
    ];
    for (const [req, body, kind, param] of cases) {
      const h = cl.submit(req);
      const refused = await h.refusal;
      assert.ok(refused instanceof RequestParamError, String(refused));
      await assert.rejects(awaitTaken([h], paramNames(body, kind)), (e: unknown) => e instanceof ApiError && e.status === 400 && e.param === param, param);
    }
  } finally {
    await cl.stop();
  }
});

test("rejection() and refusalOf(): a RequestParamError's field crosses the worker protocol, also as JSON (TCP workers)", () => {
  const sent = rejection(7, new RequestParamError("The min_tokens must be at most max_tokens (4), got min_tokens = 9", "minTokens"));
  const back = refusalOf(JSON.parse(JSON.stringify(sent)));
  assert.ok(back instanceof RequestParamError);
  assert.equal(back.field, "minTokens");
  assert.equal(refusalError(back)?.param, "min_tokens");
  // Unnamed, it stays unnamed; chat's names win over the defaults.
  assert.equal(refusalOf(JSON.parse(JSON.stringify(rejection(8, new RequestParamError("odd"))))) instanceof RequestParamError, true);
  assert.equal(refusalError(new RequestParamError("odd"))?.param, null);
  const chatNames = paramNames({ model: M, messages: MESSAGES, logprobs: true, top_logprobs: 2 } as ChatRequest, "chat");
  assert.equal(refusalError(new RequestParamError("x", "logprobs"), chatNames)?.param, "top_logprobs");
  assert.equal(refusalError(new RequestParamError("x", "maxTokens"), chatNames)?.param, "max_tokens");
  assert.equal(refusalError(new RequestParamError("x", "prompt"), chatNames)?.param, "messages");
});

test("paramPath(): a list index in brackets, an object's key after a dot, whatever the key holds", () => {
  assert.equal(paramPath(["messages", 0, "content"]), "messages[0].content");
  assert.equal(paramPath(["prompt", 1]), "prompt[1]");
  assert.equal(paramPath(["logit_bias", "5"]), "logit_bias.5");
  assert.equal(paramPath(["logit_bias", "-1"]), "logit_bias.-1");
  assert.equal(paramPath([]), null);
});

test("schema errors spell their paths one way through the server (openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 32 });
  const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
  const chat = (extra: Record<string, unknown>) => client.chat.completions.create({ model: M, messages: MESSAGES, max_tokens: 2, ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  try {
    assert.equal((await refusal(chat({ logit_bias: { "5": 101 } }))).param, "logit_bias.5", "a key, not an index");
    assert.equal((await refusal(chat({ logit_bias: { "-1": 1 } }))).param, "logit_bias.-1");
    assert.equal((await refusal(chat({ messages: [...MESSAGES, { role: "user", content: 5 }] }))).param, "messages[1].content");
    const prompt = await refusal(client.completions.create({ model: M, prompt: ["a", 5] as unknown as string[], max_tokens: 2 }));
    assert.match(String(prompt.param), /^prompt\[1\]/);
  } finally {
    await s.shutdown();
  }
});

/**
 * How the OpenAI endpoints answer what they cannot serve: requests the engine fails mid-stream,
 * prompts far over the context, parameters we cannot honour, malformed union fields, wrong
 * methods, oversized session keys. In-process (`app.request`) against stories260K.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { GenerateRequest, GenerateResult, RequestHandle, ServingEngine, StreamDelta } from "../../src/engine/engine-types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { LoadedModel, Tokenizer } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { createApp } from "../../src/serve/app.ts";
import { describe } from "../../src/serve/errors.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const engine = createEngine(createReferenceBackend(), model, { numBlocks: 64, maxModelLen: 256 });
const app = createApp({ engine, model, modelName: "stories260K" });

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function post(path: string, body: unknown, a = app): Promise<{ status: number; json: ErrorBody & Record<string, unknown> }> {
  const res = await a.request(path, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

const chat = (extra: Record<string, unknown>) => post("/v1/chat/completions", { model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, ...extra });
const completion = (extra: Record<string, unknown>) => post("/v1/completions", { model: "stories260K", prompt: "Once upon a time", max_tokens: 2, ...extra });

/** Asserts a 400 naming `param` with `code`, whose message matches `message`. */
function assert400(r: { status: number; json: ErrorBody }, param: string, code: string, message: RegExp): void {
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.equal(r.json.error.param, param, JSON.stringify(r.json));
  assert.equal(r.json.error.code, code, JSON.stringify(r.json));
  assert.match(r.json.error.message, message);
  assert.match(r.json.error.message, /^[A-Z]/, "sentence case");
}

/** A serving engine whose every request streams one token, then ends as `result` says. */
function scriptedEngine(result: Partial<GenerateResult>): ServingEngine {
  const stub = {
    maxModelLen: 2048,
    submit(_req: GenerateRequest): RequestHandle {
      async function* stream(): AsyncGenerator<StreamDelta> {
        yield { text: " upon", tokenIds: [1] };
      }
      const full: GenerateResult = { text: " upon", tokenIds: [1], finishReason: "abort", promptTokens: 2, completionTokens: 1, cachedTokens: 0, ...result };
      return { id: 1, stream: stream(), result: Promise.resolve(full), cancel() {} };
    },
    markToolWait() {},
  };
  return stub as unknown as ServingEngine;
}

/**
 * Reads a streamed body to its end, failing if it is still open after `ms`: a deadline against a hang
 * (the bug was a stream left open for good), generous for a loaded CI machine.
 */
async function readAll(res: Response, ms = 30_000): Promise<string> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let all = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the stream is still open after ${ms} ms; so far: ${JSON.stringify(all)}`)), ms);
  });
  try {
    for (;;) {
      const { value, done } = await Promise.race([reader.read(), timeout]);
      if (done) return all;
      all += dec.decode(value);
    }
  } finally {
    clearTimeout(timer);
    if (!all.endsWith("[DONE]\n\n")) await reader.cancel().catch(() => {});
  }
}

test("completeStream() ends a request the engine failed with an SSE error event and [DONE], not a hang", async () => {
  const failing = createApp({ engine: scriptedEngine({ error: "BackendError: device lost" }), model, modelName: "stories260K" });
  for (const path of ["/v1/completions", "/v1/chat/completions"]) {
    const body = { model: "stories260K", prompt: "Once", messages: [{ role: "user", content: "Hi" }], max_tokens: 3, stream: true };
    const res = await failing.request(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    assert.equal(res.status, 200);
    const events = (await readAll(res)).trim().split("\n\n").map((e) => e.replace(/^data: /, ""));
    assert.equal(events.at(-1), "[DONE]");
    const err = (JSON.parse(events.at(-2)!) as ErrorBody).error;
    assert.equal(err.code, "engine_error");
    assert.equal(err.type, "server_error");
    assert.match(err.message, /Generation failed: BackendError: device lost/);
    assert.ok(events.some((e) => e.includes(" upon")), "the text before the failure was streamed");
  }
});

test("completeStream() ends a request the server aborted (no error) with finish_reason abort and [DONE]", async () => {
  const aborted = createApp({ engine: scriptedEngine({}), model, modelName: "stories260K" });
  const res = await aborted.request("/v1/completions", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: "Once", stream: true }),
  });
  const events = (await readAll(res)).trim().split("\n\n");
  assert.equal(events.at(-1), "data: [DONE]");
  assert.match(events.at(-2)!, /"finish_reason":"abort"/);
});

test("respondStream() ends a response the engine failed with response.failed, and one the server aborted with response.incomplete", async () => {
  const post = (a: ReturnType<typeof createApp>, stream: boolean) =>
    a.request("/v1/responses", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", input: "Hi", stream }) });
  const failing = createApp({ engine: scriptedEngine({ error: "BackendError: device lost" }), model, modelName: "stories260K" });
  const events = (await readAll(await post(failing, true))).trim().split("\n\n").map((e) => JSON.parse(e.split("\ndata: ")[1]) as { type: string; delta?: string; response?: { status: string; error: { message: string } } });
  assert.equal(events[0].type, "response.created");
  assert.ok(events.some((e) => e.type === "response.output_text.delta" && e.delta === " upon"), "the text before the failure was streamed");
  const last = events.at(-1)!;
  assert.equal(last.type, "response.failed");
  assert.equal(last.response!.status, "failed");
  assert.match(last.response!.error.message, /Generation failed: BackendError: device lost/);
  const whole = await post(failing, false);
  assert.equal(whole.status, 500);
  assert.equal(((await whole.json()) as ErrorBody).error.code, "engine_error");

  const aborted = createApp({ engine: scriptedEngine({}), model, modelName: "stories260K" });
  const cut = (await readAll(await post(aborted, true))).trim().split("\n\n").at(-1)!;
  assert.match(cut, /^event: response.incomplete\n/);
  assert.match(cut, /"incomplete_details":\{"reason":"cancelled"\}/);
});

test("submitCompletion() refuses a 2 MB prompt as context_length_exceeded without tokenizing it", async () => {
  let encoded = 0;
  const tokenizer: Tokenizer = Object.create(model.tokenizer);
  tokenizer.encode = (text, options) => {
    encoded++;
    return model.tokenizer.encode(text, options);
  };
  const counted: LoadedModel = { ...model, tokenizer };
  const big = createApp({ engine, model: counted, modelName: "stories260K", maxBodyBytes: 8 * 1024 * 1024 });
  const text = "Once upon a time there was a little girl. ".repeat(50_000);
  const r = await post("/v1/completions", { model: "stories260K", prompt: text, max_tokens: 1 }, big);
  assert400(r, "prompt", "context_length_exceeded", /The prompt has at least \d+ tokens \(2100000 characters\); this model's maximum context length is 256 tokens/);
  const c = await post("/v1/chat/completions", { model: "stories260K", messages: [{ role: "user", content: text }], max_tokens: 1 }, big);
  assert400(c, "messages", "context_length_exceeded", /at least \d+ tokens/);
  // The count of encode() calls is the check (the tokenizer's only way from text to ids), not how long
  // the answers took: that is for the benchmarks, and a loaded CI machine is slow.
  assert.equal(encoded, 0, "the text was never tokenized");
  // A prompt near the limit is still tokenized and counted exactly.
  const near = await post("/v1/completions", { model: "stories260K", prompt: "hi ".repeat(300), max_tokens: 1 }, big);
  assert400(near, "prompt", "context_length_exceeded", /The prompt has \d+ tokens;/);
  assert.equal(encoded, 1);
});

test("Tokenizer.maxCharsPerToken() bounds the tokens of stories260K's encode() from below", () => {
  const perToken = model.tokenizer.maxCharsPerToken!();
  assert.ok(perToken !== undefined && perToken >= 1);
  for (const text of ["Once upon a time", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "ünïcödé 🙂 text\n\n\tand  spaces", " the the the the the"]) {
    assert.ok(model.tokenizer.encode(text).length >= Math.ceil(text.length / perToken), text);
  }
});

test("sampleRow() through the server: temperature 1e-320 generates what temperature 0 does", async () => {
  const greedy = await completion({ temperature: 0, max_tokens: 12 });
  const tiny = await completion({ temperature: 1e-320, max_tokens: 12, seed: 3 });
  assert.equal(tiny.status, 200, JSON.stringify(tiny.json));
  const text = (r: { json: Record<string, unknown> }) => (r.json.choices as { text: string }[])[0].text;
  assert.equal(text(tiny), text(greedy));
});

test("checkUnsupported() and chatGrammar() refuse what cannot be honoured: schemas outside the subset, best_of below n, suffix, biases of tokens the model lacks", async () => {
  assert400(await chat({ logit_bias: { "50256": -100 } }), "logit_bias", "invalid_value", /Token 50256 in logit_bias is outside this model's vocabulary of 512 tokens/);
  assert400(await completion({ logit_bias: { "512": 1 } }), "logit_bias", "invalid_value", /Token 512 in logit_bias/);
  assert400(await chat({ presence_penalty: 2.5 }), "presence_penalty", "invalid_value", /<=2 \(got 2.5\)/);
  assert400(await chat({ logit_bias: { "x": 1 } }), "logit_bias.x", "invalid_value", /keys must be token ids, got the key "x"/);
  assert400(await chat({ logit_bias: { "5": 101 } }), "logit_bias.5", "invalid_value", /<=100 \(got 101\)/);
  assert400(await chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "iri" } } } }), "response_format", "invalid_value", /^The response_format schema cannot be followed: the schema's "format" "iri" at # is not supported by constrained decoding \(supported: date, /);
  assert400(await chat({ response_format: { type: "json_schema" } }), "response_format", "invalid_value", /needs a "json_schema" object/);
  assert400(await chat({ response_format: { type: "xml" } }), "response_format", "invalid_value", /type must be "text", "json_object", "json_schema" or "structural_tag", got "xml"/);
  assert400(await completion({ best_of: 2, n: 3 }), "best_of", "invalid_value", /The best_of must be at least n, got best_of = 2 and n = 3/);
  assert400(await completion({ best_of: 0 }), "best_of", "invalid_value", /got 0/);
  assert400(await completion({ suffix: "The end." }), "suffix", "unsupported_parameter", /suffix = "The end\."/);
  for (const r of [
    await chat({ presence_penalty: 0, frequency_penalty: 0, logit_bias: {}, response_format: { type: "text" } }),
    await chat({ response_format: { type: "json_object" } }),
    await chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "integer" } } } } } }),
    await completion({ presence_penalty: 0, frequency_penalty: null, logit_bias: null, best_of: 1, suffix: "" }),
  ]) assert.equal(r.status, 200, JSON.stringify(r.json));
});

test("ChatMessageSchema needs content, except on an assistant message with tool_calls", async () => {
  assert400(await chat({ messages: [{ role: "user" }] }), "messages[0].content", "missing_required_parameter", /a user message needs content \(it is missing\)/);
  assert400(await chat({ messages: [{ role: "system", content: "Be brief." }, { role: "user", content: null }] }), "messages[1].content", "invalid_value", /got null/);
  assert400(await chat({ messages: [{ role: "assistant", content: null }, { role: "user", content: "Hi" }] }), "messages[0].content", "invalid_value", /without tool_calls needs content/);
  const call = { id: "call_1", type: "function", function: { name: "f", arguments: "{}" } };
  const ok = await chat({ messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "ok" }] });
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
});

test("schemaError() explains union fields: content, stop, tool_choice and prompt", async () => {
  assert400(await chat({ messages: [{ role: "user", content: 5 }] }), "messages[0].content", "invalid_value", /content must be a string or an array of text and image parts \(got 5\)/);
  const image = [{ type: "image_url", image_url: { url: "https://x/y.png" } }];
  // An image part is well formed; this model has no vision projector to read it (tests/serve/vision-server.test.ts).
  assert400(await chat({ messages: [{ role: "user", content: image }] }), "messages", "invalid_value", /This model reads text only: image parts need a vision projector/);
  assert400(await chat({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }] }), "messages[0].content[0]", "invalid_value", /only text and image_url parts are supported, got a part of type "input_audio"/);
  assert400(await chat({ stop: Array.from({ length: 65 }, (_, i) => `s${i}`) }), "stop", "invalid_value", /at most 64 stop sequences are allowed, got 65/);
  assert400(await chat({ stop: ["a", 7] }), "stop[1]", "invalid_value", /stop sequences must be strings/);
  assert400(await chat({ tool_choice: "bogus" }), "tool_choice", "invalid_value", /must be "none", "auto", "required", \{"type": "function", "function": \{"name": "..."\}\} or \{"type": "allowed_tools"/);
  assert400(await completion({ prompt: ["a", 2] }), "prompt[1]", "invalid_value", /the prompts must all be of one kind/);
  assert400(await completion({ prompt: [1.5] }), "prompt[0]", "invalid_value", /token ids must be non-negative integers \(got 1.5\)/);
  assert400(await completion({ prompt: [[1, 2], [3, 1.5]] }), "prompt[1][1]", "invalid_value", /token ids must be non-negative integers/);
  assert400(await completion({ prompt: [[1, -2]] }), "prompt[0][1]", "invalid_value", /non-negative integers \(got -2\)/);
  assert400(await post("/v1/completions", { model: "stories260K" }), "prompt", "missing_required_parameter", /a prompt is required \(it is missing\)/);
  for (const prompt of ["Once", ["Once"], [1, 2, 3], [[1, 2, 3]]]) assert.equal((await completion({ prompt })).status, 200, JSON.stringify(prompt));
});

test("submitChat() and submitCompletion() word their refusals in sentence case", async () => {
  assert400(await chat({ top_logprobs: 2 }), "top_logprobs", "invalid_value", /^Asking for top_logprobs needs logprobs = true, got top_logprobs = 2$/);
  assert400(await completion({ max_tokens: 0 }), "max_tokens", "invalid_value", /^A max_tokens of 0 generates nothing; it is only allowed with echo = true \(to score the prompt\)$/);
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }];
  assert400(
    await chat({ tools, tool_choice: { type: "function", function: { name: "missing" } } }),
    "tool_choice", "invalid_value", /^The function "missing" named by tool_choice is not among the request's tools$/,
  );
  assert400(await chat({ tool_choice: "required" }), "tool_choice", "invalid_value", /^Forcing a tool call with tool_choice "required" needs at least one function in tools$/);
});

test("createApp() answers 405 with an Allow header for a wrong method on a known route", async () => {
  for (const [method, path, allow] of [["GET", "/v1/chat/completions", "POST"], ["PUT", "/v1/completions", "POST"], ["POST", "/v1/models", "GET, HEAD"], ["DELETE", "/health", "GET, HEAD"]]) {
    const res = await app.request(path, { method });
    assert.equal(res.status, 405, `${method} ${path}`);
    assert.equal(res.headers.get("allow"), allow);
    const err = ((await res.json()) as ErrorBody).error;
    assert.equal(err.code, "method_not_allowed");
    assert.match(err.message, new RegExp(`^${method} is not allowed on ${path}; use ${allow.split(",")[0]}$`));
  }
  assert.equal((await app.request("/v1/nothing-here")).status, 404);
});

test("createApp() serves GET /v1/models/{id}, 404 model_not_found for an unknown id", async () => {
  const res = await app.request("/v1/models/stories260K");
  assert.equal(res.status, 200);
  const card = (await res.json()) as { id: string; object: string; max_model_len: number };
  assert.deepEqual([card.id, card.object, card.max_model_len], ["stories260K", "model", 256]);
  const missing = await app.request("/v1/models/gpt-4o");
  assert.equal(missing.status, 404);
  const err = ((await missing.json()) as ErrorBody).error;
  assert.deepEqual([err.code, err.param], ["model_not_found", "model"]);
  assert.match(err.message, /The model 'gpt-4o' does not exist/);
});

test("ChatRequestSchema caps prompt_cache_key and user at MAX_SESSION_KEY_CHARS characters", async () => {
  assert400(await chat({ prompt_cache_key: "k".repeat(513) }), "prompt_cache_key", "invalid_value", /must be at most 512 characters, got 513 characters/);
  const big = createApp({ engine, model, modelName: "stories260K", maxBodyBytes: 4 * 1024 * 1024 });
  assert400(await post("/v1/completions", { model: "stories260K", prompt: "Once", user: "u".repeat(1_500_000) }, big), "user", "invalid_value", /got 1500000 characters/);
  assert.equal((await chat({ prompt_cache_key: "k".repeat(512) })).status, 200);
});

test("describe() quotes a value 100 000 levels deep without overflowing the stack: a bad deep field is a 400, not a 500", async () => {
  const deep = "[".repeat(100_000) + "]".repeat(100_000);
  const r = await post("/v1/completions", `{"model": "stories260K", "prompt": "Hi", "max_tokens": 1, "logit_bias": ${deep}}`);
  assert400(r, "logit_bias", "invalid_value", /^Invalid value for 'logit_bias': .* \(got \[\[\[\[.*\.\.\.\)$/);
  assert.equal(describe(JSON.parse(deep)), `${"[".repeat(57)}...`);
  assert.equal(describe({ a: [1, undefined, "b"], c: undefined }), '{"a":[1,null,"b"]}', "as JSON.stringify writes it");
  assert.equal(describe(undefined), "undefined");
});

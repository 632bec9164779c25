import assert from "node:assert/strict";
import fc from "fast-check";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadModel } from "../../src/model/load.ts";
import { createApp } from "../../src/serve/app.ts";
import { listen } from "../../src/serve/listen.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);

/** A small context keeps the (rare) valid fuzz bodies cheap to generate for. */
function makeApp(schedulerSteps?: number) {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 64, maxModelLen: 48, ...(schedulerSteps ? { schedulerSteps } : {}) });
  return { engine, app: createApp({ engine, model, modelName: "stories260K", maxBodyBytes: 64 * 1024 }) };
}

const anyValue = fc.oneof(fc.anything(), fc.string(), fc.integer(), fc.double(), fc.constant(null), fc.boolean(), fc.array(fc.anything(), { maxLength: 3 }));
const message = fc.record({ role: fc.oneof(fc.constantFrom("user", "system", "assistant", "tool", "developer"), anyValue), content: fc.oneof(fc.string({ maxLength: 40 }), anyValue) }, { requiredKeys: [] });
/** Bodies close to valid: every known field present or not, with a valid or an arbitrary value. */
const nearValid = fc.record(
  {
    model: fc.oneof(fc.constant("stories260K"), anyValue),
    messages: fc.oneof(fc.array(message, { maxLength: 3 }), anyValue),
    prompt: fc.oneof(
      fc.string({ maxLength: 40 }), fc.array(fc.integer({ min: -5, max: 600 }), { maxLength: 8 }), fc.array(fc.string({ maxLength: 20 }), { maxLength: 3 }),
      fc.array(fc.array(fc.integer({ min: -1, max: 600 }), { maxLength: 5 }), { maxLength: 3 }), anyValue,
    ),
    max_tokens: fc.oneof(fc.integer({ min: -2, max: 60 }), anyValue),
    max_completion_tokens: fc.oneof(fc.integer({ min: -2, max: 60 }), anyValue),
    temperature: fc.oneof(fc.double({ min: -1, max: 3, noNaN: true }), anyValue),
    top_p: fc.oneof(fc.double({ min: -1, max: 2, noNaN: true }), anyValue),
    seed: fc.oneof(fc.integer(), anyValue),
    stop: fc.oneof(fc.string({ maxLength: 3 }), fc.array(fc.string({ maxLength: 3 }), { maxLength: 6 }), anyValue),
    n: fc.oneof(fc.integer({ min: -1, max: 3 }), anyValue),
    stream: fc.oneof(fc.boolean(), anyValue),
    stream_options: fc.oneof(fc.record({ include_usage: fc.oneof(fc.boolean(), anyValue) }), anyValue),
    prompt_cache_key: fc.oneof(fc.string(), anyValue),
    user: fc.oneof(fc.string(), anyValue),
    logprobs: fc.oneof(fc.integer({ min: -1, max: 21 }), anyValue),
    echo: fc.oneof(fc.boolean(), anyValue),
    best_of: fc.oneof(fc.integer({ min: -1, max: 4 }), anyValue),
    prompt_logprobs: fc.oneof(fc.integer({ min: -1, max: 21 }), anyValue),
    response_format: fc.oneof(fc.constant({ type: "json_object" }), fc.constant({ type: "json_schema", json_schema: { name: "x", schema: { enum: ["yes", "no"] } } }), anyValue),
    structured_outputs: fc.oneof(
      fc.record({
        choice: fc.oneof(fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }), anyValue), regex: fc.oneof(fc.constantFrom("[a-c]{1,3}", "(a", "a|b", "x*"), fc.string({ maxLength: 6 }), anyValue),
        json: fc.oneof(fc.constant({ type: "integer" }), fc.constant('{"enum": [1]}'), anyValue), json_object: fc.oneof(fc.boolean(), anyValue), disable_any_whitespace: fc.oneof(fc.boolean(), anyValue),
      }, { requiredKeys: [] }),
      anyValue,
    ),
    guided_choice: fc.oneof(fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }), anyValue),
    guided_regex: fc.oneof(fc.string({ maxLength: 6 }), anyValue),
    min_p: fc.oneof(fc.double({ min: -0.5, max: 1.5, noNaN: true }), anyValue),
    repetition_penalty: fc.oneof(fc.double({ min: -1, max: 3, noNaN: true }), anyValue),
    thinking_token_budget: fc.oneof(fc.integer({ min: -2, max: 8 }), anyValue),
    continue_final_message: fc.oneof(fc.boolean(), anyValue),
    add_generation_prompt: fc.oneof(fc.boolean(), anyValue),
    return_token_strs: fc.oneof(fc.boolean(), anyValue),
    stop_token_ids: fc.oneof(fc.array(fc.integer({ min: -1, max: 600 }), { maxLength: 3 }), anyValue),
    min_tokens: fc.oneof(fc.integer({ min: -1, max: 8 }), anyValue),
    tokens: fc.oneof(fc.array(fc.integer({ min: -2, max: 600 }), { maxLength: 6 }), anyValue),
  },
  { requiredKeys: [] },
);
const inputItem = fc.oneof(
  message,
  fc.record({ type: fc.constantFrom("message", "function_call", "function_call_output", "reasoning", "item_reference", "input_image"), role: fc.oneof(fc.constant("user"), anyValue), content: fc.oneof(fc.string({ maxLength: 20 }), fc.array(fc.record({ type: fc.constantFrom("input_text", "output_text", "input_image"), text: fc.oneof(fc.string({ maxLength: 10 }), anyValue) }), { maxLength: 2 }), anyValue), call_id: fc.oneof(fc.constantFrom("c1", ""), anyValue), name: fc.oneof(fc.constant("f"), anyValue), arguments: fc.oneof(fc.constant("{}"), anyValue), output: fc.oneof(fc.string({ maxLength: 10 }), anyValue), summary: fc.oneof(fc.constant([{ type: "summary_text", text: "s" }]), anyValue) }, { requiredKeys: [] }),
);
/** Responses API bodies close to valid. */
const nearValidResponses = fc.record(
  {
    model: fc.oneof(fc.constant("stories260K"), anyValue),
    input: fc.oneof(fc.string({ maxLength: 40 }), fc.array(inputItem, { maxLength: 4 }), anyValue),
    instructions: fc.oneof(fc.string({ maxLength: 20 }), anyValue),
    previous_response_id: fc.oneof(fc.constant("resp_x"), anyValue),
    tools: fc.oneof(fc.constant([{ type: "function", name: "f", parameters: { type: "object" } }]), fc.constant([{ type: "web_search" }]), anyValue),
    tool_choice: fc.oneof(fc.constantFrom("auto", "none", "required"), fc.constant({ type: "function", name: "f" }), anyValue),
    text: fc.oneof(fc.constant({ format: { type: "json_object" } }), fc.constant({ format: { type: "json_schema", name: "x", schema: { enum: ["yes", "no"] } } }), anyValue),
    max_output_tokens: fc.oneof(fc.integer({ min: -2, max: 60 }), anyValue),
    max_tool_calls: fc.oneof(fc.integer({ min: -1, max: 3 }), anyValue),
    parallel_tool_calls: fc.oneof(fc.boolean(), anyValue),
    temperature: fc.oneof(fc.double({ min: -1, max: 3, noNaN: true }), anyValue),
    stream: fc.oneof(fc.boolean(), anyValue),
    store: fc.oneof(fc.boolean(), anyValue),
    metadata: fc.oneof(fc.dictionary(fc.string({ maxLength: 4 }), fc.string({ maxLength: 4 }), { maxKeys: 3 }), anyValue),
    reasoning: fc.oneof(fc.constant({ effort: "low" }), anyValue),
    include: fc.oneof(fc.constant(["reasoning.encrypted_content"]), anyValue),
    truncation: fc.oneof(fc.constantFrom("auto", "disabled"), anyValue),
    conversation: fc.oneof(fc.constant("conv_x"), fc.constant({ id: "conv_x" }), anyValue),
  },
  { requiredKeys: [] },
);
/** Conversations API bodies (a new conversation's items and metadata) close to valid. */
const nearValidConversation = fc.record(
  { items: fc.oneof(fc.array(inputItem, { maxLength: 3 }), anyValue), metadata: fc.oneof(fc.dictionary(fc.string({ maxLength: 4 }), fc.string({ maxLength: 4 }), { maxKeys: 3 }), anyValue) },
  { requiredKeys: [] },
);
/** A Messages API content block, often valid, sometimes of a kind the server refuses or with bad fields. */
const messageBlock = fc.record(
  {
    type: fc.constantFrom("text", "tool_use", "tool_result", "thinking", "redacted_thinking", "image"),
    text: fc.oneof(fc.string({ maxLength: 10 }), anyValue), thinking: fc.oneof(fc.string({ maxLength: 10 }), anyValue),
    id: fc.oneof(fc.constant("toolu_1"), anyValue), name: fc.oneof(fc.constant("f"), anyValue), input: fc.oneof(fc.constant({ a: 1 }), anyValue),
    tool_use_id: fc.oneof(fc.constant("toolu_1"), anyValue), content: fc.oneof(fc.string({ maxLength: 10 }), fc.constant([{ type: "text", text: "r" }]), anyValue),
    is_error: fc.oneof(fc.boolean(), anyValue),
  },
  { requiredKeys: ["type"] },
);
/** Anthropic Messages API bodies close to valid. */
const nearValidMessages = fc.record(
  {
    model: fc.oneof(fc.constant("stories260K"), anyValue),
    max_tokens: fc.oneof(fc.integer({ min: -1, max: 6 }), anyValue),
    messages: fc.oneof(
      fc.array(fc.record({ role: fc.oneof(fc.constantFrom("user", "assistant", "system"), anyValue), content: fc.oneof(fc.string({ maxLength: 30 }), fc.array(messageBlock, { maxLength: 3 }), anyValue) }), { maxLength: 3 }),
      anyValue,
    ),
    system: fc.oneof(fc.string({ maxLength: 20 }), fc.constant([{ type: "text", text: "s" }]), anyValue),
    tools: fc.oneof(fc.constant([{ name: "f", input_schema: { type: "object" } }]), fc.constant([{ type: "web_search_20250305", name: "web_search" }]), anyValue),
    tool_choice: fc.oneof(fc.constant({ type: "any" }), fc.constant({ type: "tool", name: "f" }), fc.constant({ type: "none" }), anyValue),
    stop_sequences: fc.oneof(fc.array(fc.string({ maxLength: 3 }), { maxLength: 3 }), anyValue),
    temperature: fc.oneof(fc.double({ min: -1, max: 2, noNaN: true }), anyValue),
    stream: fc.oneof(fc.boolean(), anyValue),
    metadata: fc.oneof(fc.constant({ user_id: "u" }), anyValue),
    thinking: fc.oneof(fc.constant({ type: "enabled", budget_tokens: 1024 }), anyValue),
  },
  { requiredKeys: [] },
);
/** Embeddings bodies close to valid: text, texts, token ids (some outside the vocabulary), and the options. */
const nearValidEmbeddings = fc.record(
  {
    model: fc.oneof(fc.constant("stories260K"), anyValue),
    input: fc.oneof(fc.string({ maxLength: 30 }), fc.array(fc.string({ maxLength: 10 }), { maxLength: 3 }), fc.array(fc.integer({ min: -1, max: 600 }), { maxLength: 4 }), fc.array(fc.array(fc.nat(600), { maxLength: 3 }), { maxLength: 2 }), anyValue),
    encoding_format: fc.oneof(fc.constantFrom("float", "base64"), anyValue),
    dimensions: fc.oneof(fc.integer({ min: 0, max: 80 }), anyValue),
    normalize: fc.oneof(fc.boolean(), anyValue),
  },
  { requiredKeys: [] },
);
/** Score and rerank bodies close to valid. */
const nearValidScore = fc.record(
  {
    model: fc.oneof(fc.constant("stories260K"), anyValue),
    text_1: fc.oneof(fc.string({ maxLength: 10 }), fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), anyValue),
    text_2: fc.oneof(fc.string({ maxLength: 10 }), fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), anyValue),
    query: fc.oneof(fc.string({ maxLength: 10 }), anyValue),
    documents: fc.oneof(fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), anyValue),
    top_n: fc.oneof(fc.integer({ min: -1, max: 4 }), anyValue),
    truncate_prompt_tokens: fc.oneof(fc.integer({ min: -2, max: 600 }), anyValue),
  },
  { requiredKeys: [] },
);
/** Valid bodies with one known field replaced by an arbitrary value (or left valid). */
const oneMutation = fc.tuple(
  fc.record({ max_tokens: fc.integer({ min: 1, max: 6 }), temperature: fc.constantFrom(0, 0.7), stream: fc.boolean(), prompt: fc.string({ maxLength: 30 }) }),
  fc.option(fc.tuple(fc.constantFrom("model", "messages", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "stream", "stream_options", "user"), anyValue)),
).map(([v, m]) => {
  const b: Record<string, unknown> = { model: "stories260K", ...v, messages: [{ role: "user", content: v.prompt || "hi" }] };
  if (m) b[m[0]] = m[1];
  return JSON.stringify(b);
});
const body = fc.oneof(
  oneMutation,

  nearValid.map((b) => JSON.stringify(b)),
  nearValidResponses.map((b) => JSON.stringify(b)),
  nearValidConversation.map((b) => JSON.stringify(b)),
  nearValidMessages.map((b) => JSON.stringify(b)),
  nearValidEmbeddings.map((b) => JSON.stringify(b)),
  nearValidScore.map((b) => JSON.stringify(b)),
  fc.json(),
  fc.string({ maxLength: 200 }),
  fc.uint8Array({ maxLength: 64 }).map((u) => new TextDecoder().decode(u)),
);
const path = fc.constantFrom("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/conversations", "/v1/messages", "/v1/messages/count_tokens", "/tokenize", "/detokenize", "/v1/embeddings", "/score", "/rerank");

/**
 * Posts `runs` generated bodies to the app in-process; asserts none gets a 5xx and every error has
 * OpenAI's shape (Anthropic's on /v1/messages: the same `error.message` and `error.type`). Returns how many got each status.
 */
async function fuzzBodies(app: ReturnType<typeof createApp>, runs: number, seed: number): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(path, body, async (p, b) => {
      const res = await app.request(p, { method: "POST", headers: { "content-type": "application/json" }, body: b });
      const text = await res.text();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status < 500, `${p} answered ${res.status} to ${b.slice(0, 200)}: ${text.slice(0, 200)}`);
      if (res.status >= 400) {
        const parsed = JSON.parse(text) as { type?: string; error: { message: string; type: string } };
        if (p.startsWith("/v1/messages")) assert.equal(parsed.type, "error", `Anthropic's error shape on ${p}: ${text.slice(0, 200)}`);
        const err = parsed.error;
        assert.equal(typeof err.message, "string");
        assert.equal(typeof err.type, "string");
      }
    }),
    { numRuns: runs, seed },
  );
  return statuses;
}

test("API fuzzing (fast-check, in-process): thousands of malformed bodies, never a 5xx", async () => {
  const { app, engine } = makeApp();
  const statuses = await fuzzBodies(app, 2000, 7);
  assert.ok((statuses.get(400) ?? 0) > 1000, `most bodies are refused with 400: ${JSON.stringify([...statuses])}`);
  assert.ok((statuses.get(200) ?? 0) > 0, `some near-valid bodies are served: ${JSON.stringify([...statuses])}`);
  assert.equal(engine.pool.numUsedBlocks(), 0);
  const big = await app.request("/v1/completions", { method: "POST", body: JSON.stringify({ model: "stories260K", prompt: "a".repeat(70_000) }) });
  assert.equal(big.status, 413);
  await engine.stop();
});

test("API fuzzing with multi-step decoding, three bodies at once: never a 5xx, groups run ahead, every block back", async () => {
  // Groups of 4 steps hold whatever the bodies ask together (penalties, masks, grammars, stop strings, n > 1).
  const { app, engine } = makeApp(4);
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(fc.array(fc.tuple(path, body), { minLength: 3, maxLength: 3 }), async (trio) => {
      await Promise.all(trio.map(async ([p, b]) => {
        const res = await app.request(p, { method: "POST", headers: { "content-type": "application/json" }, body: b });
        const text = await res.text();
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        assert.ok(res.status < 500, `${p} answered ${res.status} to ${b.slice(0, 200)}: ${text.slice(0, 200)}`);
      }));
    }),
    { numRuns: 1000, seed: 23 },
  );
  assert.ok((statuses.get(200) ?? 0) > 0, `some near-valid bodies are served: ${JSON.stringify([...statuses])}`);
  assert.ok(engine.metrics.stepsRunAhead > 0, "some steps ran ahead");
  assert.equal(engine.pool.numUsedBlocks(), 0);
  await engine.stop();
});

test("API fuzzing over a real socket: malformed bodies get 4xx and the server stays up", async () => {
  const { app, engine } = makeApp();
  const srv = await listen(app.fetch, "127.0.0.1", 0);
  try {
    const url = `http://127.0.0.1:${srv.port}`;
    const samples = fc.sample(fc.tuple(path, body), { numRuns: 150, seed: 11 });
    for (const [p, b] of samples) {
      const res = await fetch(url + p, { method: "POST", headers: { "content-type": "application/json" }, body: b });
      await res.text();
      assert.ok(res.status < 500, `${p} answered ${res.status} to ${b.slice(0, 200)}`);
    }
    const health = await fetch(`${url}/health`);
    assert.equal(health.status, 200);
    await health.text();
    assert.equal(engine.pool.numUsedBlocks(), 0);
  } finally {
    await engine.stop();
    await srv.close();
  }
});

test("API fuzzing (fast-check) against a cluster with a prefill worker: never a 5xx, every block back", async () => {
  const cluster = createCluster(createReferenceBackend(), model, {
    workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", routerOptions: { localPrefillThreshold: 0 },
    engine: { numBlocks: 64, maxModelLen: 48 },
  });
  const app = createApp({ engine: cluster, model, modelName: "stories260K", maxBodyBytes: 64 * 1024 });
  const statuses = await fuzzBodies(app, 600, 13);
  assert.ok((statuses.get(200) ?? 0) > 0, `some near-valid bodies are served: ${JSON.stringify([...statuses])}`);
  assert.ok(cluster.counters.prefillHandoffs > 0, "served bodies went through the prefill worker");
  assert.equal(cluster.stats().kvUsedBlocks, 0);
  await cluster.stop();
});

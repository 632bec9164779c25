/**
 * The Responses API end to end: the real `openai` client (`responses.create`, `responses.stream`,
 * `responses.retrieve`, `responses.inputItems.list`, `responses.delete`) against the real server,
 * serving scripted models whose greedy answers are a tool call ("…!"), "Sunny." ("….") or reasoning
 * then text then two calls ("…?", tests/serve/reasoning-model.ts).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { LoadedModel } from "../../src/model/config.ts";
import type { ReasoningParserName } from "../../src/serve/reasoning.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import * as reasoner from "./reasoning-model.ts";
import { model, modelPath } from "./scripted-server.ts";

interface Served {
  modelPath: string;
  model: LoadedModel;
  reasoningParser?: ReasoningParserName;
  maxStoredResponses?: number;
}

async function withServer(o: Served, fn: (client: OpenAI, url: string) => Promise<void>) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent", ...o });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}
const scripted: Served = { modelPath, model };

const WEATHER: OpenAI.Responses.FunctionTool = {
  type: "function", name: "get_weather", description: "Current weather", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" } } },
};
const functionCalls = (r: OpenAI.Responses.Response) => r.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call");

/** The prompt tokens the chat API counts for `messages`: what a Responses turn must send the model. */
async function chatPromptTokens(client: OpenAI, messages: OpenAI.ChatCompletionMessageParam[], tools?: OpenAI.ChatCompletionTool[]): Promise<number> {
  const r = await client.chat.completions.create({ model: "scripted", messages, ...(tools ? { tools } : {}), temperature: 0, max_tokens: 1 });
  return r.usage!.prompt_tokens;
}

test("POST /v1/responses answers text input with a message item, as the chat API answers the same messages", async () => {
  await withServer(scripted, async (client) => {
    const r = await client.responses.create({ model: "scripted", input: "How is it today.", instructions: "Be brief.", temperature: 0, max_output_tokens: 8 });
    assert.equal(r.object, "response");
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, "completed");
    assert.equal(r.output_text, "Sunny.");
    assert.equal(r.output.length, 1);
    const m = r.output[0] as OpenAI.Responses.ResponseOutputMessage;
    assert.equal(m.type, "message");
    assert.equal(m.role, "assistant");
    assert.deepEqual(m.content.map((c) => c.type), ["output_text"]);
    assert.equal(r.instructions, "Be brief.");
    // The instructions are the system message, before the input.
    const chatTokens = await chatPromptTokens(client, [{ role: "system", content: "Be brief." }, { role: "user", content: "How is it today." }]);
    assert.equal(r.usage!.input_tokens, chatTokens);
    assert.equal(r.usage!.output_tokens, 2, '"Sunny." and EOS');
    assert.equal(r.usage!.total_tokens, chatTokens + 2);
    // Cut by max_output_tokens: incomplete, and says why.
    const cut = await client.responses.create({ model: "scripted", input: "Weather!", tools: [WEATHER], temperature: 0, max_output_tokens: 2 });
    assert.equal(cut.status, "incomplete");
    assert.deepEqual(cut.incomplete_details, { reason: "max_output_tokens" });
  });
});

test("POST /v1/responses returns the output text's token log probabilities when included, whole and streamed, as the chat API does", async () => {
  await withServer(scripted, async (client) => {
    const ask = { model: "scripted", input: "How is it today.", temperature: 0, max_output_tokens: 8, include: ["message.output_text.logprobs" as const], top_logprobs: 2 };
    const whole = await client.responses.create(ask);
    const part = (whole.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    const chat = await client.chat.completions.create({ model: "scripted", messages: [{ role: "user", content: "How is it today." }], temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 2 });
    const chatEntries = chat.choices[0].logprobs!.content!;
    assert.equal(part.logprobs!.length, 1, "one entry per token of the text (EOS writes none)");
    assert.equal(part.logprobs![0].token, "Sunny.");
    assert.equal(part.logprobs![0].logprob, chatEntries[0].logprob);
    assert.deepEqual(part.logprobs![0].top_logprobs.map((t) => t.token), chatEntries[0].top_logprobs.map((t) => t.token));
    assert.equal(part.logprobs![0].top_logprobs.length, 2);

    const stream = client.responses.stream(ask);
    const deltas: OpenAI.Responses.ResponseTextDeltaEvent.Logprob[] = [];
    for await (const e of stream) if (e.type === "response.output_text.delta") deltas.push(...e.logprobs);
    const streamed = await stream.finalResponse();
    assert.deepEqual(deltas.map((d) => [d.token, d.logprob]), part.logprobs!.map((d) => [d.token, d.logprob]));
    const streamedPart = (streamed.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    assert.deepEqual(streamedPart.logprobs, part.logprobs);
    // Not asked: none.
    const plain = await client.responses.create({ ...ask, include: undefined, top_logprobs: undefined });
    assert.deepEqual(((plain.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs, []);
  });
});

test("POST /v1/responses returns a tool call as a function_call item, and previous_response_id continues with its output", async () => {
  await withServer(scripted, async (client, url) => {
    const first = await client.responses.create({ model: "scripted", input: "What is the weather in Paris!", tools: [WEATHER], temperature: 0 });
    const calls = functionCalls(first);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, "get_weather");
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: "Paris" });
    assert.match(calls[0].call_id, /^call_/);
    assert.equal(first.output_text, "");
    // The turn ended in a call: under agent retention its session now waits on the tool.
    const metrics = await (await fetch(`${url}/metrics`)).text();
    assert.match(metrics, /evolving:kv_sessions\{model_name="scripted",status="waiting-tool"\} 1/);

    const second = await client.responses.create({
      model: "scripted", previous_response_id: first.id, tools: [WEATHER], temperature: 0,
      input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "Rainy." }],
    });
    assert.equal(second.previous_response_id, first.id);
    assert.equal(second.output_text, "Sunny.");
    // The model saw the whole conversation: the same prompt as the chat API's for it.
    const chatTokens = await chatPromptTokens(client, [
      { role: "user", content: "What is the weather in Paris!" },
      { role: "assistant", content: null, tool_calls: [{ id: calls[0].call_id, type: "function", function: { name: "get_weather", arguments: calls[0].arguments } }] },
      { role: "tool", tool_call_id: calls[0].call_id, content: "Rainy." },
    ], [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description!, parameters: WEATHER.parameters! } }]);
    assert.equal(second.usage!.input_tokens, chatTokens);
    assert.ok(second.usage!.input_tokens_details.cached_tokens > 0, "the conversation's earlier turn came from the prefix cache");
    const idle = await (await fetch(`${url}/metrics`)).text();
    assert.match(idle, /status="waiting-tool"\} 0/, "the tool returned");

    // The same conversation sent whole, without a stored turn, gets the same answer and prompt.
    const whole = await client.responses.create({
      model: "scripted", tools: [WEATHER], temperature: 0, store: false,
      input: [
        { role: "user", content: "What is the weather in Paris!" },
        { type: "function_call", call_id: calls[0].call_id, name: "get_weather", arguments: calls[0].arguments },
        { type: "function_call_output", call_id: calls[0].call_id, output: "Rainy." },
      ],
    });
    assert.equal(whole.output_text, "Sunny.");
    assert.equal(whole.usage!.input_tokens, chatTokens);
    assert.equal((whole as unknown as { store: boolean }).store, false);
  });
});

test("responses.stream() builds the same response from the events as create() returns, in sequence", async () => {
  await withServer({ modelPath: reasoner.modelPath, model: reasoner.model, reasoningParser: "think" }, async (client) => {
    const tools: OpenAI.Responses.FunctionTool[] = ["get_weather", "get_time"].map((name) => ({ type: "function", name, parameters: { type: "object", properties: {} }, strict: false }));
    const ask = { model: "reasoner", input: "What is the weather?", tools, temperature: 0, max_output_tokens: 64 };
    const whole = await client.responses.create(ask);
    assert.deepEqual(whole.output.map((o) => o.type), ["reasoning", "message", "function_call", "function_call"]);
    const reasoning = whole.output[0] as OpenAI.Responses.ResponseReasoningItem;
    assert.equal(reasoning.content?.[0].text, reasoner.THOUGHTS.join(""));
    assert.ok(reasoning.content?.[0].text.includes(reasoner.DRAFT), "a call drafted while reasoning stays reasoning");
    assert.equal(whole.output_text, "Checking.");
    assert.deepEqual(functionCalls(whole).map((c) => c.name), ["get_weather", "get_time"]);
    assert.equal(whole.usage!.output_tokens_details.reasoning_tokens, reasoner.THOUGHTS.length + 2);

    const stream = client.responses.stream(ask);
    const types: string[] = [];
    const seqs: number[] = [];
    let textDeltas = "";
    for await (const e of stream) {
      types.push(e.type);
      seqs.push(e.sequence_number);
      if (e.type === "response.output_text.delta") textDeltas += e.delta;
    }
    const streamed = await stream.finalResponse();
    assert.deepEqual(seqs, seqs.map((_, i) => i), "sequence numbers count from 0 with no gap");
    assert.equal(types[0], "response.created");
    assert.equal(types[1], "response.in_progress");
    assert.equal(types[types.length - 1], "response.completed");
    assert.ok(types.includes("response.reasoning_text.delta"));
    assert.ok(types.includes("response.function_call_arguments.done"));
    assert.equal(textDeltas, "Checking.");
    const shape = (r: OpenAI.Responses.Response) => r.output.map((o) => {
      if (o.type === "function_call") return { type: o.type, name: o.name, arguments: o.arguments };
      // (The stream helper adds `parsed` to each text part.)
      if (o.type === "message") return { type: o.type, status: o.status, content: o.content.map((c) => ({ type: c.type, text: (c as { text: string }).text })) };
      if (o.type === "reasoning") return { type: o.type, content: o.content };
      return { type: o.type };
    });
    assert.deepEqual(shape(streamed), shape(whole));
    assert.equal(streamed.output_text, whole.output_text);
    // (The same prompt again: its cached tokens differ.)
    const counts = (r: OpenAI.Responses.Response) => [r.usage!.input_tokens, r.usage!.output_tokens, r.usage!.output_tokens_details.reasoning_tokens];
    assert.deepEqual(counts(streamed), counts(whole));

    // parallel_tool_calls false, and max_tool_calls, keep the first call only.
    for (const limit of [{ parallel_tool_calls: false }, { max_tool_calls: 1 }]) {
      const one = await client.responses.create({ ...ask, ...limit });
      assert.deepEqual(functionCalls(one).map((c) => c.name), ["get_weather"], JSON.stringify(limit));
      const s = client.responses.stream({ ...ask, ...limit });
      assert.deepEqual(functionCalls(await s.finalResponse()).map((c) => c.name), ["get_weather"], `streamed, ${JSON.stringify(limit)}`);
    }
  });
});

test("GET /v1/responses/{id}, its input_items and DELETE serve stored responses; store false keeps none", async () => {
  await withServer({ ...scripted, maxStoredResponses: 2 }, async (client) => {
    const r = await client.responses.create({ model: "scripted", input: [{ role: "user", content: "Hi." }, { role: "user", content: [{ type: "input_text", text: "Weather." }] }], temperature: 0, metadata: { run: "7" } });
    const got = await client.responses.retrieve(r.id);
    assert.equal(got.id, r.id);
    assert.deepEqual(got.output, r.output);
    assert.deepEqual(got.metadata, { run: "7" });
    const items = await client.responses.inputItems.list(r.id, { order: "asc" });
    assert.deepEqual(items.data.map((i) => (i as OpenAI.Responses.ResponseInputMessageItem).content.map((c) => (c as { text: string }).text).join("")), ["Hi.", "Weather."]);
    assert.ok(items.data.every((i) => typeof i.id === "string" && i.id.length > 0));
    const desc = await client.responses.inputItems.list(r.id);
    assert.deepEqual(desc.data.map((i) => i.id), items.data.map((i) => i.id).reverse(), "newest first by default, as OpenAI lists them");

    const deleted = await client.responses.delete(r.id) as unknown;
    assert.deepEqual(deleted, { id: r.id, object: "response", deleted: true });
    await assert.rejects(client.responses.retrieve(r.id), (e: unknown) => e instanceof OpenAI.NotFoundError && /not found/.test(e.message));
    await assert.rejects(
      client.responses.create({ model: "scripted", input: "Again.", previous_response_id: r.id }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "previous_response_not_found" && e.param === "previous_response_id",
    );
    const unstored = await client.responses.create({ model: "scripted", input: "Hi.", store: false, temperature: 0 });
    assert.equal((unstored as unknown as { store: boolean }).store, false);
    await assert.rejects(client.responses.retrieve(unstored.id), OpenAI.NotFoundError);

    // Two kept: a third evicts the least recently used, and a chain whose start is gone names it.
    const a = await client.responses.create({ model: "scripted", input: "One.", temperature: 0 });
    const b = await client.responses.create({ model: "scripted", input: "Two.", previous_response_id: a.id, temperature: 0 });
    await client.responses.create({ model: "scripted", input: "Three.", temperature: 0 });
    await assert.rejects(
      client.responses.create({ model: "scripted", input: "Four.", previous_response_id: b.id }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && e.message.includes(`it continues '${a.id}'`),
    );
  });
});

test("POST /v1/responses shows the model namespaced function tools by name and names the namespace in their calls; hosted tools are not shown", async () => {
  await withServer(scripted, async (client) => {
    const tools: OpenAI.Responses.Tool[] = [
      { type: "web_search" },
      { type: "namespace", name: "weather", description: "Weather tools", tools: [{ type: "function", name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters }] },
    ] as OpenAI.Responses.Tool[];
    const r = await client.responses.create({ model: "scripted", input: "What is the weather in Paris!", tools, temperature: 0 });
    const call = functionCalls(r)[0];
    assert.equal(call.name, "get_weather");
    assert.equal(call.namespace, "weather");
    // The prompt is the chat API's with the one function tool: web_search is not shown.
    const chatTokens = await chatPromptTokens(client, [{ role: "user", content: "What is the weather in Paris!" }], [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description!, parameters: WEATHER.parameters! } }]);
    assert.equal(r.usage!.input_tokens, chatTokens);
    const hostedOnly = await client.responses.create({ model: "scripted", input: "How is it today.", tools: [{ type: "web_search" }], temperature: 0, max_output_tokens: 4 });
    assert.equal(hostedOnly.usage!.input_tokens, await chatPromptTokens(client, [{ role: "user", content: "How is it today." }]));
    // The call comes back as input with its namespace, and the turn continues.
    const next = await client.responses.create({
      model: "scripted", tools, temperature: 0,
      input: [{ role: "user", content: "What is the weather in Paris!" }, call, { type: "function_call_output", call_id: call.call_id, output: "Rainy." }],
    });
    assert.equal(next.output_text, "Sunny.");
  });
});

test("POST /v1/responses refuses what it cannot honour with a 400 naming the field", async () => {
  await withServer(scripted, async (client, url) => {
    const bad = async (body: Record<string, unknown>, param: string, re: RegExp) => {
      const res = await fetch(`${url}/v1/responses`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "scripted", input: "Hi.", ...body }) });
      const json = await res.json() as { error: { message: string; param: string } };
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(json.error.param, param, json.error.message);
      assert.match(json.error.message, re);
    };
    await bad({ input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }, "input", /This model reads text only: image parts need a vision projector, loaded with --mmproj/);
    await bad({ input: [{ type: "item_reference", id: "msg_1" }] }, "input[0].id", /input\[0\] references item .msg_1., which no stored response or conversation holds/);
    await bad({ input: [{ type: "item_reference" }] }, "input[0].id", /an item_reference item needs a non-empty string id/);
    await bad({ input: [{ type: "function_call", call_id: "c1", name: "f" }] }, "input[0].arguments", /JSON string/);
    await bad({ input: [] }, "input", /empty/);
    await bad({ input: undefined }, "input", /required/);
    await bad({ tools: [{ type: "custom", name: "apply_patch" }] }, "tools[0].type", /only function and namespace tools.*custom/);
    await bad({ tools: [{ type: "namespace", name: "ns", tools: [{ type: "custom", name: "x" }] }] }, "tools[0].tools[0].type", /only function tools.*custom/);
    await bad({ tools: [WEATHER, { type: "namespace", name: "ns", tools: [WEATHER] }] }, "tools", /'get_weather' is given twice.*namespace 'ns'/);
    await bad({ tools: [{ type: "web_serach" }] }, "tools[0].type", /web_serach/);
    await bad({ tool_choice: { type: "function" } }, "tool_choice", /tool_choice must be/);
    await bad({ tools: [WEATHER], tool_choice: { type: "function", name: "nope" } }, "tool_choice", /nope/);
    // Quoted as sent, not as the chat request it becomes ({"type":"function","function":{...}}).
    await bad({ tool_choice: { type: "function", name: "nope" } }, "tool_choice", /tool_choice \{"type":"function","name":"nope"\} needs at least one function in tools/);
    await bad({ text: { format: { type: "yaml" } } }, "text.format.type", /yaml/);
    await bad({ text: { format: { type: "json_schema", name: "x", schema: { type: "object", properties: { a: { type: "strnig" } } } } } }, "text.format", /.+/);
    await bad({ background: true, store: false }, "store", /A background response must be stored/);
    await bad({ conversation: { id: "" } }, "conversation", /conversation must be/);
    await bad({ conversation: "conv_1", previous_response_id: "resp_1" }, "conversation", /cannot both be given/);
    await bad({ include: ["file_search_call.resluts"] }, "include[0]", /file_search_call\.resluts/);
    await bad({ top_logprobs: 21 }, "top_logprobs", /.+/);
    await bad({ previous_response_id: "resp_missing" }, "previous_response_id", /resp_missing/);
    await bad({ input: "x".repeat(50_000) }, "input", /maximum context length/);
    const wrongModel = await fetch(`${url}/v1/responses`, { method: "POST", body: JSON.stringify({ model: "gpt-5", input: "Hi." }) });
    assert.equal(wrongModel.status, 404);
    const put = await fetch(`${url}/v1/responses/resp_1`, { method: "PUT" });
    assert.equal(put.status, 405);
    assert.equal(put.headers.get("allow"), "GET, HEAD, DELETE");
    // The server is still up and answering.
    const ok = await client.responses.create({ model: "scripted", input: "Fine.", temperature: 0 });
    assert.equal(ok.output_text, "Sunny.");
  });
});

test("POST /v1/responses resolves item_reference input items to the stored items they name", async () => {
  await withServer(scripted, async (client, url) => {
    const first = await client.responses.create({ model: "scripted", input: "How is it today.", temperature: 0, max_output_tokens: 8 });
    const [asked] = (await client.responses.inputItems.list(first.id)).data;
    const answered = first.output[0];
    // Referencing the first turn's question and answer, then asking more, is that turn continued.
    const refs = [{ type: "item_reference", id: asked.id }, { type: "item_reference", id: answered.id }, { role: "user", content: "And tomorrow." }];
    const byRef = await client.responses.create({ model: "scripted", input: refs as OpenAI.Responses.ResponseInput, temperature: 0, max_output_tokens: 8 });
    const chained = await client.responses.create({ model: "scripted", input: "And tomorrow.", previous_response_id: first.id, temperature: 0, max_output_tokens: 8 });
    assert.equal(byRef.usage!.input_tokens, chained.usage!.input_tokens, "the same prompt either way");
    assert.equal(byRef.output_text, chained.output_text);
    // The turn's own input items list the items themselves, under ids of their own.
    const listed = (await client.responses.inputItems.list(byRef.id)).data;
    assert.equal(listed.length, 3);
    assert.deepEqual(listed.map((it) => it.type), ["message", "message", "message"]);
    assert.ok(!listed.some((it) => it.id === asked.id || it.id === answered.id));
    await assert.rejects(
      client.responses.create({ model: "scripted", input: [{ type: "item_reference", id: "msg_nothing" }] as OpenAI.Responses.ResponseInput, max_output_tokens: 4 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /input\[0\] references item 'msg_nothing', which no stored response or conversation holds/.test(e.message),
    );
    // A conversation's items may not be references.
    const res = await fetch(`${url}/v1/conversations`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ items: [{ type: "item_reference", id: asked.id }] }) });
    assert.equal(res.status, 400);
    assert.match(await res.text(), /item_reference items cannot be stored in a conversation/);
  });
});

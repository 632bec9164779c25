/**
 * The Conversations API and the Responses API's `conversation` and `truncation`, end to end: the real
 * `openai` client (`conversations.*`, `conversations.items.*`, `responses.create`/`stream`) against
 * the real server serving the scripted model (tests/serve/scripted-server.ts: "…!" → a get_weather
 * call, "…." → "Sunny.").
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

async function withServer(fn: (client: OpenAI, url: string) => Promise<void>, o: { maxConversations?: number; maxStoredMiB?: number } = {}) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent", modelPath, model, ...o });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

const WEATHER: OpenAI.Responses.FunctionTool = {
  type: "function", name: "get_weather", description: "Current weather", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" } } },
};
const CHAT_WEATHER: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: WEATHER.name, description: WEATHER.description!, parameters: WEATHER.parameters! } }];

/** Every item of a conversation, oldest first, through the client's auto-pagination (pages of 2). */
async function allItems(client: OpenAI, id: string): Promise<OpenAI.Conversations.ConversationItem[]> {
  const items: OpenAI.Conversations.ConversationItem[] = [];
  for await (const it of client.conversations.items.list(id, { order: "asc", limit: 2 })) items.push(it);
  return items;
}

/** The prompt tokens the chat API counts for `messages`. */
async function chatPromptTokens(client: OpenAI, messages: OpenAI.ChatCompletionMessageParam[], tools?: OpenAI.ChatCompletionTool[]): Promise<number> {
  const r = await client.chat.completions.create({ model: "scripted", messages, ...(tools ? { tools } : {}), temperature: 0, max_tokens: 1 });
  return r.usage!.prompt_tokens;
}

test("conversations.create(), retrieve(), update(), delete() and items.create(), list(), retrieve(), delete() keep a conversation's items", async () => {
  await withServer(async (client) => {
    const conv = await client.conversations.create({ items: [{ type: "message", role: "user", content: "Hello." }], metadata: { topic: "weather" } });
    assert.match(conv.id, /^conv_/);
    assert.equal(conv.object, "conversation");
    assert.deepEqual(conv.metadata, { topic: "weather" });
    assert.deepEqual(await client.conversations.retrieve(conv.id), conv);
    const updated = await client.conversations.update(conv.id, { metadata: { topic: "rain" } });
    assert.deepEqual(updated.metadata, { topic: "rain" });

    const added = await client.conversations.items.create(conv.id, {
      items: [
        { type: "message", role: "assistant", content: "Hi." },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Oslo"}' },
        { type: "function_call_output", call_id: "call_1", output: "Snow." },
      ],
    });
    assert.equal(added.data.length, 3);
    const items = await allItems(client, conv.id);
    assert.deepEqual(items.map((it) => it.type), ["message", "message", "function_call", "function_call_output"]);
    assert.deepEqual(items.slice(1).map((it) => it.id), added.data.map((it) => it.id));
    // String contents come back as text parts, each item with its own id.
    assert.deepEqual((items[0] as OpenAI.Conversations.Message).content, [{ type: "input_text", text: "Hello." }]);
    assert.deepEqual((items[1] as OpenAI.Conversations.Message).content, [{ type: "output_text", text: "Hi." }]);
    assert.equal(new Set(items.map((it) => it.id)).size, 4);
    // Newest first by default, paged with `after`.
    const page = await client.conversations.items.list(conv.id, { limit: 2 });
    assert.deepEqual(page.data.map((it) => it.id), [items[3].id, items[2].id]);
    assert.equal(page.has_more, true);
    const next = await client.conversations.items.list(conv.id, { limit: 2, after: items[2].id! });
    assert.deepEqual(next.data.map((it) => it.id), [items[1].id, items[0].id]);

    assert.deepEqual(await client.conversations.items.retrieve(items[2].id!, { conversation_id: conv.id }), items[2]);
    const after = await client.conversations.items.delete(items[1].id!, { conversation_id: conv.id });
    assert.equal(after.id, conv.id);
    assert.deepEqual((await allItems(client, conv.id)).map((it) => it.id), [items[0].id, items[2].id, items[3].id]);
    await assert.rejects(client.conversations.items.retrieve(items[1].id!, { conversation_id: conv.id }), (e: unknown) => e instanceof OpenAI.NotFoundError && e.message.includes(items[1].id!));

    const gone = await client.conversations.delete(conv.id);
    assert.deepEqual(gone, { id: conv.id, object: "conversation.deleted", deleted: true });
    await assert.rejects(client.conversations.retrieve(conv.id), (e: unknown) => e instanceof OpenAI.NotFoundError && e.message.includes(conv.id));
  });
});

test("POST /v1/responses with a conversation answers after its items and appends the turn's input and output to it", async () => {
  await withServer(async (client, url) => {
    const conv = await client.conversations.create({});
    const first = await client.responses.create({ model: "scripted", conversation: conv.id, input: "What is the weather in Paris!", tools: [WEATHER], temperature: 0 });
    assert.deepEqual(first.conversation, { id: conv.id });
    const call = first.output.find((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call")!;
    assert.equal(call.name, "get_weather");
    // The turn ended in a call: its session (the conversation) waits on the tool under agent retention.
    assert.match(await (await fetch(`${url}/metrics`)).text(), /status="waiting-tool"\} 1/);

    // The next turn sends only the tool's output: the conversation holds the rest. Streamed, this time.
    const stream = client.responses.stream({
      model: "scripted", conversation: { id: conv.id }, tools: [WEATHER], temperature: 0,
      input: [{ type: "function_call_output", call_id: call.call_id, output: "Rainy." }],
    });
    const second = await stream.finalResponse();
    assert.equal(second.output_text, "Sunny.");
    const chatTokens = await chatPromptTokens(client, [
      { role: "user", content: "What is the weather in Paris!" },
      { role: "assistant", content: null, tool_calls: [{ id: call.call_id, type: "function", function: { name: "get_weather", arguments: call.arguments } }] },
      { role: "tool", tool_call_id: call.call_id, content: "Rainy." },
    ], CHAT_WEATHER);
    assert.equal(second.usage!.input_tokens, chatTokens, "the model saw the whole conversation");
    assert.ok(second.usage!.input_tokens_details.cached_tokens > 0, "the first turn's KV was kept for the conversation");

    const items = await allItems(client, conv.id);
    assert.deepEqual(items.map((it) => it.type), ["message", "function_call", "function_call_output", "message"]);
    assert.equal(items[1].id, call.id, "output items keep their ids");
    assert.equal((items[1] as OpenAI.Responses.ResponseFunctionToolCall).call_id, call.call_id);
    assert.equal(items[3].id, second.output[0].id);
    // The response's own input items are the turn's, with the ids the conversation gives them.
    const inputs = await client.responses.inputItems.list(second.id);
    assert.deepEqual(inputs.data.map((it) => it.id), [items[2].id]);

    // A conversation edited between turns is answered as it now stands.
    await client.conversations.items.create(conv.id, { items: [{ type: "message", role: "user", content: "And tomorrow." }] });
    const third = await client.responses.create({ model: "scripted", conversation: conv.id, input: "Thanks.", tools: [WEATHER], temperature: 0, store: false });
    assert.equal(third.output_text, "Sunny.");
    assert.equal((await allItems(client, conv.id)).length, 7, "store false keeps the response, not the conversation, out of storage");
  });
});

test("POST /v1/responses refuses an unknown conversation with a 404, and with --max-conversations 0 none is created", async () => {
  await withServer(async (client, url) => {
    await assert.rejects(
      client.responses.create({ model: "scripted", conversation: "conv_missing", input: "Hi." }),
      (e: unknown) => e instanceof OpenAI.NotFoundError && e.param === "conversation" && e.message.includes("conv_missing"),
    );
    const conv = await client.conversations.create({});
    const bad = async (path: string, body: unknown, param: string, re: RegExp) => {
      const res = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const json = await res.json() as { error: { message: string; param: string } };
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal(json.error.param, param, json.error.message);
      assert.match(json.error.message, re);
    };
    await bad("/v1/conversations", { items: [{ role: "robot", content: "x" }] }, "items[0].role", /robot/);
    await bad(`/v1/conversations/${conv.id}/items`, { items: [] }, "items", /empty/);
    await bad(`/v1/conversations/${conv.id}`, { metadata: { k: "x".repeat(600) } }, "metadata.k", /.+/);
    const put = await fetch(`${url}/v1/conversations/${conv.id}/items`, { method: "PUT" });
    assert.equal(put.status, 405);
    assert.equal(put.headers.get("allow"), "GET, HEAD, POST");
    assert.equal((await client.conversations.items.list(conv.id)).data.length, 0, "nothing was added by the refused requests");
  });
  await withServer(async (client) => {
    await assert.rejects(client.conversations.create({}), (e: unknown) => e instanceof OpenAI.BadRequestError && /--max-conversations 0/.test(e.message));
  }, { maxConversations: 0 });
});

test("A conversation that would pass --max-stored-mib by itself is refused with a 400, and nothing is added", async () => {
  await withServer(async (client) => {
    // 0.002 MiB: 2097 characters of JSON for all conversations.
    const text = (n: number) => ({ type: "message" as const, role: "user" as const, content: "x".repeat(n) });
    const tooLarge = (param: string) => (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "conversation_too_large" && e.param === param;
    await assert.rejects(client.conversations.create({ items: [text(2100)] }), tooLarge("items"));
    const conv = await client.conversations.create({ items: [text(1200)] });
    await assert.rejects(client.conversations.items.create(conv.id, { items: [text(1200)] }), tooLarge("items"));
    await assert.rejects(client.responses.create({ model: "scripted", conversation: conv.id, input: `${"y".repeat(1200)}.` }), tooLarge("input"));
    assert.equal((await client.conversations.items.list(conv.id)).data.length, 1);
    // Room for a turn: answered and appended.
    const r = await client.responses.create({ model: "scripted", conversation: conv.id, input: "How is it.", temperature: 0 });
    assert.equal(r.output_text, "Sunny.");
    assert.equal((await client.conversations.items.list(conv.id)).data.length, 3);
  }, { maxStoredMiB: 0.002 });
});

test('POST /v1/responses with truncation "auto" drops the oldest exchanges, as few as fit the context; "disabled" refuses', async () => {
  await withServer(async (client) => {
    // Eight exchanges of about 300 tokens each: more than the scripted model's 2048-token context.
    const exchanges = Array.from({ length: 8 }, (_, i): OpenAI.Responses.ResponseInputItem[] => [
      { role: "user", content: `Question ${i}: ${"tell me more ".repeat(100)}.` },
      { role: "assistant", content: `Answer ${i}.` },
    ]);
    const input = [...exchanges.flat(), { role: "user" as const, content: "How is it now." }];
    const ask = { model: "scripted", instructions: "Be brief.", input, temperature: 0, max_output_tokens: 8 };
    await assert.rejects(client.responses.create(ask), (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded");
    const r = await client.responses.create({ ...ask, truncation: "auto" });
    assert.equal(r.truncation, "auto");
    assert.equal(r.output_text, "Sunny.", "the last message is still the one answered");
    // The prompt is the instructions and the last m exchanges, for the largest m that fits.
    const asChat = (m: number): OpenAI.ChatCompletionMessageParam[] => [
      { role: "system", content: "Be brief." },
      ...exchanges.slice(8 - m).flat().map((it) => it as OpenAI.ChatCompletionMessageParam),
      { role: "user", content: "How is it now." },
    ];
    let m = 0;
    for (const k of [1, 2, 3, 4, 5, 6, 7]) {
      try {
        if ((await chatPromptTokens(client, asChat(k))) + 8 <= 2048) m = k;
      } catch {
        break;
      }
    }
    assert.ok(m >= 1 && m < 7, `some but not all exchanges fit (m = ${m})`);
    assert.equal(r.usage!.input_tokens, await chatPromptTokens(client, asChat(m)));
  });
});

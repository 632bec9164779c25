/**
 * The OpenAI Agents SDK (`@openai/agents`) running agents against the real server: its Responses
 * model and its Chat Completions model, whole and streamed runs, runs chained by
 * `previousResponseId`, server-managed conversations (`conversationId`) and its
 * `OpenAIConversationsSession`, a forced tool call (`toolChoice: "required"`, which the SDK resets
 * after the call), a typed final output (`outputType`). The scripted model (tests/serve/scripted-server.ts) answers "…!" with a
 * get_weather call and "…." with "Sunny.", so a tool's output ending in "." closes the loop.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  Agent, type AgentInputItem, MemorySession, type Model, OpenAIChatCompletionsModel, OpenAIConversationsSession, OpenAIResponsesModel, run,
  setTracingDisabled, tool,
} from "@openai/agents";
import { z } from "zod";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

// Traces would otherwise be exported to OpenAI's servers.
setTracingDisabled(true);

async function withServer(fn: (client: OpenAI, url: string) => Promise<void>) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent", modelPath, model, jsonWhitespace: "compact" });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

/** An agent with one weather tool, and the cities the tool was called for. */
function weatherAgent(m: Model, settings: Agent["modelSettings"] = {}) {
  const cities: string[] = [];
  const getWeather = tool({
    name: "get_weather", description: "Current weather", parameters: z.object({ city: z.string() }),
    execute: ({ city }) => {
      cities.push(city);
      return Promise.resolve(`It is 21 degrees in ${city}.`);
    },
  });
  const agent = new Agent({ name: "weather", instructions: "Be brief.", model: m, tools: [getWeather], modelSettings: { temperature: 0, ...settings } });
  return { agent, cities };
}

const cachedTokens = (usage: { inputTokensDetails: Record<string, number>[] }) => usage.inputTokensDetails.reduce((s, d) => s + (d.cached_tokens ?? 0), 0);

for (const [name, make] of [["OpenAIResponsesModel", (c: OpenAI) => new OpenAIResponsesModel(c, "scripted")], ["OpenAIChatCompletionsModel", (c: OpenAI) => new OpenAIChatCompletionsModel(c, "scripted")]] as const) {
  test(`run() with ${name} calls the agent's tool and answers from its output, whole and streamed`, async () => {
    await withServer(async (client) => {
      const { agent, cities } = weatherAgent(make(client));
      const r = await run(agent, "What is the weather in Paris!");
      assert.deepEqual(cities, ["Paris"]);
      assert.deepEqual(r.newItems.map((i) => i.type), ["tool_call_item", "tool_call_output_item", "message_output_item"]);
      assert.equal(r.finalOutput, "Sunny.");
      assert.equal(r.rawResponses.length, 2, "two model calls: the call, then the answer");
      assert.ok(cachedTokens(r.rawResponses[1].usage) > 0, "the second call found the first's KV");

      const streamed = await run(agent, "What is the weather in Paris!", { stream: true });
      let text = "";
      for await (const chunk of streamed.toTextStream()) text += chunk;
      await streamed.completed;
      assert.equal(text, "Sunny.");
      assert.equal(streamed.finalOutput, "Sunny.");
      assert.deepEqual(cities, ["Paris", "Paris"]);
    });
  });
}

test("run() with previousResponseId continues the server's stored conversation, and a forced tool call is made once", async () => {
  await withServer(async (client) => {
    const { agent, cities } = weatherAgent(new OpenAIResponsesModel(client, "scripted"));
    const first = await run(agent, "What is the weather in Paris!");
    assert.match(first.lastResponseId!, /^resp_/);
    const next = await run(agent, "And tomorrow.", { previousResponseId: first.lastResponseId });
    assert.equal(next.finalOutput, "Sunny.");
    // Only the new message was sent; the server supplied the rest, and its KV.
    assert.ok(cachedTokens(next.rawResponses[0].usage) > 0);
    const stored = await client.responses.inputItems.list(next.lastResponseId!);
    assert.equal(stored.data.length, 1);

    // toolChoice "required" on a message that would not call a tool: the grammar forces the call, then
    // the SDK resets the choice so that the model can answer.
    const forced = weatherAgent(new OpenAIResponsesModel(client, "scripted"), { toolChoice: "required" });
    const r = await run(forced.agent, "Hello.", { maxTurns: 3 });
    assert.equal(forced.cities.length, 1, "one call, with the arguments its schema allows");
    assert.equal(r.finalOutput, "Sunny.");
    assert.deepEqual(cities, ["Paris"]);
  });
});

test("run() with conversationId, and OpenAIConversationsSession, keep the agent's history in the server's conversation", async () => {
  await withServer(async (client) => {
    const m = new OpenAIResponsesModel(client, "scripted");
    // Server-managed: each call sends only what is new.
    const conv = await client.conversations.create({});
    const { agent, cities } = weatherAgent(m);
    const r = await run(agent, "What is the weather in Paris!", { conversationId: conv.id });
    assert.equal(r.finalOutput, "Sunny.");
    const types = async (id: string) => {
      const items: string[] = [];
      for await (const it of client.conversations.items.list(id, { order: "asc" })) items.push(it.type);
      return items;
    };
    assert.deepEqual(await types(conv.id), ["message", "function_call", "function_call_output", "message"]);
    const again = await run(agent, "Thanks.", { conversationId: conv.id });
    assert.equal(again.finalOutput, "Sunny.");
    assert.ok(cachedTokens(again.rawResponses[0].usage) > 0, "the conversation is one session: its KV was kept");
    assert.equal((await types(conv.id)).length, 6);

    // Client-managed, stored on the server: the session sends the whole history each turn.
    const session = new OpenAIConversationsSession({ client });
    await run(agent, "What is the weather in Paris!", { session });
    const second = await run(agent, "Thanks.", { session });
    assert.equal(second.finalOutput, "Sunny.");
    const sessionId = await session.getSessionId();
    assert.deepEqual(await types(sessionId), ["message", "function_call", "function_call_output", "message", "message", "message"]);
    // The SDK reads the same history back as a local session records.
    const local = new MemorySession();
    await run(agent, "What is the weather in Paris!", { session: local });
    await run(agent, "Thanks.", { session: local });
    const shape = (items: AgentInputItem[]) => items.map((i) => `${i.type ?? "message"}:${"role" in i ? i.role : ""}`);
    assert.deepEqual(shape(await session.getItems()), shape(await local.getItems()));
    assert.deepEqual(cities, ["Paris", "Paris", "Paris"]);
  });
});

test('run() with the Responses model\'s other settings (truncation "auto", reasoning effort, store false) and an outputType is answered', async () => {
  await withServer(async (client) => {
    const { agent } = weatherAgent(new OpenAIResponsesModel(client, "scripted"), {
      truncation: "auto", reasoning: { effort: "low" }, store: false, parallelToolCalls: false, topP: 0.9, maxTokens: 8,
    });
    const r = await run(agent, "How is it today.");
    assert.equal(r.finalOutput, "Sunny.");
    // An outputType becomes text.format's JSON schema: the grammar makes the answer a value of it.
    const typed = new Agent({ name: "typed", model: new OpenAIResponsesModel(client, "scripted"), outputType: z.object({ sky: z.enum(["sunny", "rainy"]) }), modelSettings: { temperature: 0, maxTokens: 40 } });
    const out = (await run(typed, "How is it today.")).finalOutput!;
    assert.ok(out.sky === "sunny" || out.sky === "rainy", JSON.stringify(out));
  });
});

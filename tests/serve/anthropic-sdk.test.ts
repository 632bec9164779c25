/**
 * The Anthropic Messages API (`/v1/messages`, what Claude Code speaks) through the real
 * `@anthropic-ai/sdk` client against the real server: a tool loop (tool_use, then tool_result),
 * whole and streamed, with the session's KV found again; count_tokens; forced tool choice; stop
 * sequences; `x-api-key` auth; errors in Anthropic's shape. The scripted model
 * (tests/serve/scripted-server.ts) answers "…!" with a get_weather call and "…." with "Sunny.".
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

async function withServer(fn: (client: Anthropic, url: string) => Promise<void>, apiKey?: string) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent", modelPath, model, ...(apiKey ? { apiKey } : {}) });
  try {
    await fn(new Anthropic({ baseURL: s.url, apiKey: apiKey ?? "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

const TOOLS: Anthropic.Tool[] = [{ name: "get_weather", description: "Current weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
const ASK: Anthropic.MessageParam = { role: "user", content: "What is the weather in Paris!" };

test("messages.create() runs a tool loop: a tool_use block, then an answer from its tool_result, the session's KV found again", async () => {
  await withServer(async (client) => {
    const metadata = { user_id: "session-a" };
    const first = await client.messages.create({ model: "scripted", max_tokens: 64, system: "Be brief.", tools: TOOLS, messages: [ASK], metadata });
    assert.equal(first.stop_reason, "tool_use");
    assert.equal(first.content.length, 1);
    const use = first.content[0];
    assert.ok(use.type === "tool_use", JSON.stringify(first.content));
    assert.equal(use.name, "get_weather");
    assert.deepEqual(use.input, { city: "Paris" });
    assert.match(use.id, /^toolu_/);
    assert.match(first.id, /^msg_/);
    assert.ok(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);

    const second = await client.messages.create({
      model: "scripted", max_tokens: 64, system: "Be brief.", tools: TOOLS, metadata,
      messages: [ASK, { role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "It is 21 degrees." }] }],
    });
    assert.equal(second.stop_reason, "end_turn");
    assert.deepEqual(second.content, [{ type: "text", text: "Sunny." }]);
    // Anthropic counts cached input apart: the first turn's prompt came from the prefix cache.
    assert.ok(second.usage.cache_read_input_tokens! > 0, JSON.stringify(second.usage));
    const counted = await client.messages.countTokens({ model: "scripted", system: "Be brief.", tools: TOOLS, messages: [ASK, { role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "It is 21 degrees." }] }] });
    assert.equal(counted.input_tokens, second.usage.input_tokens + second.usage.cache_read_input_tokens!);
  });
});

test("messages.stream() builds the same message as messages.create(), from content block events", async () => {
  await withServer(async (client) => {
    const whole = await client.messages.create({ model: "scripted", max_tokens: 64, tools: TOOLS, messages: [ASK] });
    const stream = client.messages.stream({ model: "scripted", max_tokens: 64, tools: TOOLS, messages: [ASK] });
    const types: string[] = [];
    stream.on("streamEvent", (e) => types.push(e.type));
    const streamed = await stream.finalMessage();
    assert.equal(streamed.stop_reason, "tool_use");
    assert.deepEqual(streamed.content.map((b) => (b.type === "tool_use" ? { ...b, id: "" } : b)), whole.content.map((b) => (b.type === "tool_use" ? { ...b, id: "" } : b)));
    assert.deepEqual(types, ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    assert.equal(streamed.usage.output_tokens, whole.usage.output_tokens);

    let text = "";
    const answer = client.messages.stream({ model: "scripted", max_tokens: 64, messages: [{ role: "user", content: "Hello." }] });
    answer.on("text", (t) => (text += t));
    const done = await answer.finalMessage();
    assert.equal(text, "Sunny.");
    assert.deepEqual(done.content, [{ type: "text", text: "Sunny.", citations: null }].map(({ citations: _, ...b }) => b));
    assert.equal(done.stop_reason, "end_turn");
  });
});

test("messages.create() forces a named tool (tool_choice) and reports a stop sequence that ended the text", async () => {
  await withServer(async (client) => {
    const forced = await client.messages.create({ model: "scripted", max_tokens: 64, tools: TOOLS, tool_choice: { type: "tool", name: "get_weather" }, messages: [{ role: "user", content: "Hello." }] });
    assert.equal(forced.stop_reason, "tool_use");
    assert.equal(forced.content.at(-1)?.type, "tool_use");
    const cut = await client.messages.create({ model: "scripted", max_tokens: 64, stop_sequences: ["nny"], messages: [{ role: "user", content: "Hello." }] });
    assert.equal(cut.stop_reason, "stop_sequence");
    assert.equal(cut.stop_sequence, "nny");
    assert.deepEqual(cut.content, [{ type: "text", text: "Su" }]);
  });
});

test("POST /v1/messages answers a client's mistakes with Anthropic's error shape, and takes the key as x-api-key", async () => {
  await withServer(async (client, url) => {
    await assert.rejects(client.messages.create({ model: "other", max_tokens: 8, messages: [ASK] }), (e: unknown) => {
      assert.ok(e instanceof Anthropic.NotFoundError, String(e));
      assert.deepEqual(Object.keys(e.error as object), ["type", "error"]);
      assert.equal((e.error as { error: { type: string } }).error.type, "not_found_error");
      return true;
    });
    const image = { type: "image" as const, source: { type: "base64" as const, media_type: "image/png" as const, data: "AAAA" } };
    await assert.rejects(client.messages.create({ model: "scripted", max_tokens: 8, messages: [{ role: "user", content: [image] }] }), (e: unknown) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.match((e.error as { error: { message: string } }).error.message, /This model reads text only: image parts need a vision projector, loaded with --mmproj/);
      return true;
    });
    const noMax = await fetch(`${url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": "k" }, body: JSON.stringify({ model: "scripted", messages: [ASK] }) });
    assert.equal(noMax.status, 400);
    const body = await noMax.json() as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, "error");
    assert.equal(body.error.type, "invalid_request_error");
    assert.match(body.error.message, /max_tokens/);
    const serverTool = await fetch(`${url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "scripted", max_tokens: 8, messages: [ASK], tools: [{ type: "web_search_20250305", name: "web_search" }] }) });
    assert.equal(serverTool.status, 400);
    assert.match(((await serverTool.json()) as { error: { message: string } }).error.message, /web_search_20250305/);
    for (const name of ["get weather", "fs.read", "", "x".repeat(129)]) {
      const tools = [{ name, input_schema: { type: "object" as const } }];
      await assert.rejects(client.messages.create({ model: "scripted", max_tokens: 8, messages: [ASK], tools }), (e: unknown) => {
        assert.ok(e instanceof Anthropic.BadRequestError, `${JSON.stringify(name)}: ${String(e)}`);
        assert.match((e.error as { error: { message: string } }).error.message, /'tools\[0\]\.name'/);
        assert.doesNotMatch((e.error as { error: { message: string } }).error.message, /got .*\(got /, "the value is quoted once");
        return true;
      });
    }
    // Still serving after the mistakes.
    const ok = await client.messages.create({ model: "scripted", max_tokens: 16, messages: [{ role: "user", content: "Hello." }] });
    assert.equal(ok.stop_reason, "end_turn");
  });
  await withServer(async (client, url) => {
    const ok = await client.messages.create({ model: "scripted", max_tokens: 16, messages: [{ role: "user", content: "Hello." }] });
    assert.deepEqual(ok.content, [{ type: "text", text: "Sunny." }]);
    const wrong = new Anthropic({ baseURL: url, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrong.messages.create({ model: "scripted", max_tokens: 8, messages: [ASK] }), Anthropic.AuthenticationError);
  }, "secret-key");
});

test("POST /v1/messages refuses a forced tool_choice without tools or naming a tool not given", async () => {
  await withServer(async (client) => {
    for (const [tool_choice, tools, re] of [
      // The value is quoted as sent, not as the chat request it becomes ("required").
      [{ type: "any" }, undefined, /tool_choice \{"type":"any"\} needs at least one function in tools/],
      [{ type: "tool", name: "other" }, undefined, /tool_choice \{"type":"tool","name":"other"\} needs at least one function in tools/],
      [{ type: "tool", name: "other" }, TOOLS, /"other" named by tool_choice is not among the request's tools/],
    ] as const) {
      await assert.rejects(client.messages.create({ model: "scripted", max_tokens: 8, messages: [ASK], tool_choice, ...(tools ? { tools: [...tools] } : {}) }), (e: unknown) => {
        assert.ok(e instanceof Anthropic.BadRequestError, String(e));
        assert.match((e.error as { error: { message: string } }).error.message, re);
        return true;
      });
    }
  });
});

/**
 * The Anthropic Messages API's corners, through the real `@anthropic-ai/sdk` client against the real
 * server: Claude Code's per-request billing header kept out of the prompt (so the prefix cache
 * answers the next turn), `output_config.format` (structured outputs) followed rather than
 * ignored, `output_config.effort` given to the template, MCP servers refused by name, and separate
 * text blocks kept apart in the prompt.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { loadModel } from "../../src/model/load.ts";
import { chatRequestOfMessages } from "../../src/serve/messages.ts";
import { MessagesRequestSchema } from "../../src/serve/messages-schema.ts";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

type ServerOptions = Parameters<typeof startServer>[0];

async function withServer(fn: (client: Anthropic, url: string) => Promise<void>, o: Partial<ServerOptions> = {}) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, kvRetention: "agent", modelPath, model, ...o });
  try {
    await fn(new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

const badRequest = (re: RegExp) => (e: unknown) => {
  assert.ok(e instanceof Anthropic.BadRequestError, String(e));
  assert.match((e.error as { error: { message: string } }).error.message, re);
  return true;
};

/** Claude Code's first system block: its `cch` changes with every request. */
const billing = (nonce: string): Anthropic.TextBlockParam => ({ type: "text", text: `x-anthropic-billing-header: cc_version=2.1.177.01c; cc_entrypoint=cli; cch=${nonce};` });
const SYSTEM: Anthropic.TextBlockParam[] = [{ type: "text", text: "You are a weather agent. ".repeat(20), cache_control: { type: "ephemeral" } }];

test("Claude Code's billing header (a nonce per request) stays out of the prompt, so the next request reads its prefix from the cache", async () => {
  await withServer(async (client) => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Hello." }];
    const metadata = { user_id: "session-billing" };
    const first = await client.messages.create({ model: "scripted", max_tokens: 16, system: [billing("36ee5"), ...SYSTEM], messages, metadata });
    const second = await client.messages.create({ model: "scripted", max_tokens: 16, system: [billing("0aaa9"), ...SYSTEM], messages, metadata });
    const prompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0);
    assert.equal(second.usage.input_tokens + (second.usage.cache_read_input_tokens ?? 0), prompt);
    // All but the prompt's last, partly filled KV block comes from the first request.
    assert.ok(second.usage.cache_read_input_tokens! >= prompt - 16, JSON.stringify([first.usage, second.usage]));
    // The model never sees it: the prompt is the one without it (a system string too, as a proxy may flatten it).
    const counted = (system: string | Anthropic.TextBlockParam[]) => client.messages.countTokens({ model: "scripted", system, messages }).then((c) => c.input_tokens);
    assert.equal(await counted([billing("1"), ...SYSTEM]), await counted(SYSTEM));
    assert.equal(await counted(`${billing("2").text}\n${SYSTEM[0].text}`), await counted(SYSTEM[0].text));
    assert.equal(await counted(SYSTEM), prompt);
    // A system message between turns (as Claude Code sends them) drops it likewise.
    const between = (system: Anthropic.TextBlockParam[]) =>
      client.messages.countTokens({ model: "scripted", messages: [...messages, { role: "system", content: system } as unknown as Anthropic.MessageParam] }).then((c) => c.input_tokens);
    assert.equal(await between([billing("3"), ...SYSTEM]), await between(SYSTEM));
  });
});

test("text blocks of one user message, and of one tool result, reach the template apart (a newline between), not run together", async () => {
  await withServer(async (client) => {
    const count = (content: Anthropic.ContentBlockParam[]) =>
      client.messages.countTokens({ model: "scripted", messages: [{ role: "user", content }] }).then((c) => c.input_tokens);
    const text = (t: string): Anthropic.TextBlockParam => ({ type: "text", text: t });
    assert.equal(await count([text("<note>a</note>"), text("Hello.")]), await count([text("<note>a</note>\nHello.")]));
    const use: Anthropic.MessageParam = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] };
    const result = (content: Anthropic.TextBlockParam[]) =>
      client.messages.countTokens({ model: "scripted", messages: [{ role: "user", content: "Weather!" }, use, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content }] }] }).then((c) => c.input_tokens);
    assert.equal(await result([text("21 degrees"), text("sunny.")]), await result([text("21 degrees\nsunny.")]));
  });
});

const storiesPath = `${projectRoot}/models/stories260K.gguf`;
const stories = await loadModel(storiesPath);
const WHO = { type: "object", additionalProperties: false, required: ["name"], properties: { name: { enum: ["Lily", "Ben"] } } };

test("output_config.format (json_schema) constrains the answer, whole and streamed; its older output_format too", async () => {
  await withServer(async (client, url) => {
    const body = { model: "stories260K", max_tokens: 40, temperature: 0, messages: [{ role: "user" as const, content: "Once upon a time there was a little girl named" }] };
    const whole = await client.messages.create({ ...body, output_config: { format: { type: "json_schema", schema: WHO } } });
    assert.equal(whole.stop_reason, "end_turn");
    const text = whole.content.map((b) => (b.type === "text" ? b.text : "")).join("");
    assert.ok(["Lily", "Ben"].includes((JSON.parse(text) as { name: string }).name), text);
    const streamed = await client.messages.stream({ ...body, output_config: { format: { type: "json_schema", schema: WHO } } }).finalMessage();
    assert.deepEqual(streamed.content, whole.content.map((b) => ({ ...b, citations: null })).map(({ citations: _, ...b }) => b));
    // The structured-outputs beta's top-level name.
    const beta = await fetch(`${url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, output_format: { type: "json_schema", schema: WHO } }) });
    assert.deepEqual(((await beta.json()) as { content: unknown }).content, whole.content);

    await assert.rejects(client.messages.create({ ...body, output_config: { format: { type: "json_schema", schema: { type: "nonsense" } } } }), badRequest(/output_config\.format/));
    await assert.rejects(client.messages.create({ ...body, output_config: { format: { type: "xml" } as unknown as Anthropic.JSONOutputFormat } }), badRequest(/'output_config\.format\.type'/));
    // Beside tools the model may call, the answer is calls or text that follows the schema: union-grammar-hunt3.test.ts.
  }, { modelPath: storiesPath, model: stories });
});

test("mcp_servers (Anthropic's MCP connector, which runs tools server-side) is refused by name, not ignored", async () => {
  await withServer(async (client) => {
    const body = { model: "scripted", max_tokens: 8, messages: [{ role: "user" as const, content: "Hello." }], mcp_servers: [{ type: "url", url: "https://mcp.example.com/sse", name: "example" }] };
    await assert.rejects(client.messages.create(body as Anthropic.MessageCreateParamsNonStreaming), badRequest(/'mcp_servers'.*MCP/));
    const empty = await client.messages.create({ ...body, mcp_servers: [] } as Anthropic.MessageCreateParamsNonStreaming);
    assert.equal(empty.stop_reason, "end_turn");
  });
});

test("output_config.effort reaches the template as its reasoning_effort (gpt-oss's \"Reasoning: high\"); Anthropic's higher levels are high, unknown ones nothing", () => {
  const effortOf = (effort: unknown) => {
    const body = MessagesRequestSchema.parse({ model: "m", max_tokens: 8, messages: [{ role: "user", content: "Hi" }], output_config: { effort } });
    return (chatRequestOfMessages(body) as { reasoning_effort?: string }).reasoning_effort;
  };
  assert.deepEqual(["low", "medium", "high", "xhigh", "max", "turbo", null].map(effortOf), ["low", "medium", "high", "high", "high", undefined, undefined]);
});

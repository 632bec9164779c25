/**
 * The Responses API as a multi-turn agent drives it, through the real `openai` client against the
 * real server serving the scripted model (tests/serve/scripted-server.ts: "…!" is answered with a
 * get_weather call, "…." with "Sunny."; a 2048-token context).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

async function withServer(fn: (client: OpenAI) => Promise<void>) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, modelPath, model });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

const TOOLS: OpenAI.Responses.FunctionTool[] = [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];

/** The prompt tokens of a chat request with these messages. */
async function chatPromptTokens(client: OpenAI, messages: OpenAI.ChatCompletionMessageParam[]): Promise<number> {
  const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: TOOLS[0].parameters! } }];
  const c = await client.chat.completions.create({ model: "scripted", messages, tools, max_completion_tokens: 1, temperature: 0 });
  return c.usage!.prompt_tokens;
}

test('truncation "auto" drops an agent loop\'s oldest tool calls, keeping the instructions and the task, where "disabled" refuses', async () => {
  await withServer(async (client) => {
    // One user message, then eight tool calls whose outputs are about 300 tokens each: more than the 2048-token context.
    const steps = Array.from({ length: 8 }, (_, i): OpenAI.Responses.ResponseInputItem[] => [
      { type: "function_call", call_id: `call_${i}`, name: "get_weather", arguments: `{"city":"C${i}"}` },
      { type: "function_call_output", call_id: `call_${i}`, output: `Step ${i}: ${"rain and wind ".repeat(20)}${i === 7 ? "." : "!"}` },
    ]);
    const input = [{ role: "user" as const, content: "Plan my trip!" }, ...steps.flat()];
    const ask = { model: "scripted", instructions: "Be brief.", tools: TOOLS, input, temperature: 0, max_output_tokens: 8 };
    await assert.rejects(client.responses.create(ask), (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === "context_length_exceeded");
    const r = await client.responses.create({ ...ask, truncation: "auto" });
    assert.equal(r.status, "completed");
    assert.equal(r.output_text, "Sunny.", "the last tool output is still the one answered");
    // The prompt is the instructions, the task and the last m steps, for the largest m that fits.
    const asChat = (m: number): OpenAI.ChatCompletionMessageParam[] => [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Plan my trip!" },
      ...steps.slice(8 - m).flatMap(([call, output]): OpenAI.ChatCompletionMessageParam[] => {
        const c = call as OpenAI.Responses.ResponseFunctionToolCall;
        const o = output as OpenAI.Responses.ResponseInputItem.FunctionCallOutput;
        return [
          { role: "assistant", content: null, tool_calls: [{ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } }] },
          { role: "tool", tool_call_id: o.call_id!, content: o.output as string },
        ];
      }),
    ];
    let m = 0;
    for (const k of [1, 2, 3, 4, 5, 6, 7]) if ((await chatPromptTokens(client, asChat(k)).catch(() => Infinity)) + 8 <= 2048) m = k;
    assert.ok(m >= 1 && m < 7, `some but not all steps fit (m = ${m})`);
    assert.equal(r.usage!.input_tokens, await chatPromptTokens(client, asChat(m)));
  });
});

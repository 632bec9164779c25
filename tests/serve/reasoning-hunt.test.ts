/**
 * Reasoning requests end to end (the real `openai` client against the real server): an agent's
 * second turn under Qwen3's own chat template reuses the first turn's prompt and answer KV
 * (usage.prompt_tokens_details.cached_tokens), whichever field the client sends the reasoning
 * back in, and `reasoning_effort` takes OpenAI's values only.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { type ScriptedModelSpec, writeScriptedModel } from "../model/scripted-model.ts";

const TEMPLATE = readFileSync(new URL("./fixtures/qwen3-chat-template.jinja", import.meta.url), "utf8");
/** The reasoning, 40 tokens: long enough that losing its KV costs whole blocks. */
const THOUGHTS = Array.from({ length: 40 }, (_, i) => `${i === 0 ? "\n" : " "}Thought ${i}.${i === 39 ? "\n" : ""}`);
const CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
const chain = (...pieces: string[]): [string, string][] => pieces.slice(1).map((to, i) => [pieces[i], to]);
/** Qwen3's answer after `<|im_start|>assistant\n`: reasoning, then a Hermes call, each piece one token. */
const SPEC: ScriptedModelSpec = {
  pieces: ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "\n\n", CALL, ...THOUGHTS],
  literalPieces: true,
  next: [["\n", "<think>"], ...chain("<think>", ...THOUGHTS, "</think>"), ["</think>", "\n\n"], ["\n\n", "<tool_call>"], ["<tool_call>", CALL], [CALL, "</tool_call>"]],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
};
const dir = mkdtempSync(`${tmpdir()}/reasoning-hunt-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/qwen3-scripted.gguf`;
await writeScriptedModel(modelPath, SPEC);
const model = await loadModel(modelPath);

const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];

async function withServer(fn: (client: OpenAI) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, reasoningParser: "think" });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

test("chatRenderer() with Qwen3's template: turn 2 reuses turn 1's prompt and answer KV, with the reasoning sent back as reasoning_content or reasoning", async () => {
  await withServer(async (client) => {
    for (const field of ["reasoning_content", "reasoning"]) {
      const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: `Be brief (${field}).` }, { role: "user", content: "Weather in Paris?" }];
      const first = await client.chat.completions.create({ model: "qwen3-scripted", messages: ask, tools: TOOLS, temperature: 0, max_tokens: 64 });
      const m = first.choices[0].message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
      assert.equal(m.reasoning_content, THOUGHTS.join(""));
      assert.equal(first.choices[0].finish_reason, "tool_calls");
      // The answer's tokens less its EOS are in the cache after turn 1's prompt.
      const answered = first.usage!.prompt_tokens + first.usage!.completion_tokens - 1;
      const back = { role: "assistant", content: m.content, tool_calls: m.tool_calls, [field]: m.reasoning_content } as OpenAI.ChatCompletionAssistantMessageParam;
      const second = await client.chat.completions.create({
        model: "qwen3-scripted",
        messages: [...ask, back, { role: "tool", tool_call_id: m.tool_calls![0].id, content: "Sunny" }],
        tools: TOOLS, temperature: 0, max_tokens: 64,
      });
      const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
      // Whole blocks are shared: all but the last partial block of prompt and answer.
      assert.ok(cached >= answered - 16, `${field}: ${cached} cached of the ${answered} tokens of turn 1's prompt and answer`);
    }
  });
});

test("ChatRequestSchema refuses a reasoning_effort OpenAI does not take with a 400 naming it", async () => {
  await withServer(async (client) => {
    const ok = await client.chat.completions.create({ model: "qwen3-scripted", messages: [{ role: "user", content: "Hi" }], reasoning_effort: "low", max_tokens: 1 });
    assert.equal(ok.choices.length, 1);
    await assert.rejects(
      client.chat.completions.create({ model: "qwen3-scripted", messages: [{ role: "user", content: "Hi" }], reasoning_effort: "ultra" as "low", max_tokens: 1 }),
      (e: InstanceType<typeof OpenAI.APIError>) => e.status === 400 && /reasoning_effort/.test(String(e.param ?? e.message)) && e.message.includes('"ultra"'),
    );
  });
});

/**
 * chatPrompt() (src/serve/openai.ts) through /tokenize and a chat request: what of a chat request
 * reaches the model's template. tool_choice "none" still lists the tools (vLLM's default), so an
 * agent's tool-less last turn keeps its cached prefix; reasoning_effort is the template's variable.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

/** A template that writes what it was given: the effort, the tools' names, then the messages. */
const TEMPLATE = "effort={{ reasoning_effort | default('unset') }};tools={% for t in tools or [] %}{{ t.function.name }},{% endfor %};" +
  "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
const dir = mkdtempSync(`${tmpdir()}/chat-prompt-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = `${dir}/scripted.gguf`;
await writeScriptedModel(modelPath, { pieces: [], next: [[":", "o"], ["o", "k"], ["k", "<eos>"]], chatTemplate: TEMPLATE });
const model = await loadModel(modelPath);
const TOOLS: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
const MESSAGES = [{ role: "user", content: "Weather?" }];

async function rendered(url: string, extra: Record<string, unknown>): Promise<string> {
  const post = (path: string, body: unknown) => fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const tok = await post("/tokenize", { messages: MESSAGES, add_special_tokens: false, ...extra });
  assert.equal(tok.status, 200, await tok.clone().text());
  const { tokens } = await tok.json() as { tokens: number[] };
  const de = await post("/detokenize", { tokens });
  return (await de.json() as { prompt: string }).prompt;
}

test("chatPrompt() lists the tools under tool_choice none and gives the template reasoning_effort", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    assert.equal(await rendered(s.url, { tools: TOOLS }), "effort=unset;tools=get_weather,;user:Weather?;assistant:");
    assert.equal(await rendered(s.url, { tools: TOOLS, tool_choice: "none" }), "effort=unset;tools=get_weather,;user:Weather?;assistant:", "tool_choice none keeps the tools in the prompt");
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    // The same prompt either way, so the second turn's prompt is the first's: every whole block cached.
    const auto = await client.chat.completions.create({ model: "scripted", messages: MESSAGES as OpenAI.ChatCompletionMessageParam[], tools: TOOLS, temperature: 0, max_tokens: 4 });
    const none = await client.chat.completions.create({ model: "scripted", messages: MESSAGES as OpenAI.ChatCompletionMessageParam[], tools: TOOLS, tool_choice: "none", temperature: 0, max_tokens: 4 });
    assert.equal(none.usage!.prompt_tokens, auto.usage!.prompt_tokens);
    assert.equal(none.choices[0].message.tool_calls, undefined);
    // reasoning_effort reaches the template; chat_template_kwargs say last.
    assert.equal(await rendered(s.url, { reasoning_effort: "high" }), "effort=high;tools=;user:Weather?;assistant:");
    assert.equal(await rendered(s.url, { reasoning_effort: "high", chat_template_kwargs: { reasoning_effort: "low" } }), "effort=low;tools=;user:Weather?;assistant:");
  } finally {
    await s.shutdown();
  }
});

/**
 * The scripted model the tool-call and session tests serve: its greedy answer to a chat whose last
 * message ends in "!" is a Hermes-format call to get_weather; to one ending in "." it is "Sunny.".
 * `verbatimModel()` is the same model with a template that sends answers back token for token.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { type ScriptedModelSpec, writeScriptedModel } from "../model/scripted-model.ts";

/** The call's text between the tags. */
export const CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
/** Prompts end in "assistant" + the last character of the last message, so that character picks the answer. */
export const TEMPLATE = "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}" +
  "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %} call {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}{% endif %}\n{% endfor %}" +
  "{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";

const dir = mkdtempSync(`${tmpdir()}/scripted-server-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
/** Where the model file is written (a temp dir removed on exit). */
export const modelPath = `${dir}/scripted.gguf`;
// "…!" → a call to get_weather; "…." → the plain answer "Sunny.".
const SCRIPT: ScriptedModelSpec = {
  pieces: ["<tool_call>", CALL, "</tool_call>", "Sunny."],
  next: [["!", "<tool_call>"], ["<tool_call>", CALL], [CALL, "</tool_call>"], ["</tool_call>", "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
};
await writeScriptedModel(modelPath, SCRIPT);
/** The loaded model, shared by the servers of a test file. */
export const model = await loadModel(modelPath);

/**
 * A template that sends an assistant turn back as the model wrote it, right after the generation
 * prompt it answered (Qwen's templates do the same for tool calls). With the pieces literal, turn
 * N+1's prompt then starts with turn N's prompt and output tokens, as a real agent's does.
 */
export const VERBATIM_TEMPLATE = "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}" +
  "{% for m in messages %}{% if m.role == 'assistant' %}assistant{{ messages[loop.index0 - 1].content[-1:] }}{{ m.content }}" +
  '{% for c in m.tool_calls or [] %}<tool_call>\n{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}\n' +
  "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}";

let verbatim: Promise<{ modelPath: string; model: LoadedModel }> | undefined;
/** The same script with literal pieces and {@link VERBATIM_TEMPLATE} (written and loaded on first use). */
export function verbatimModel(): Promise<{ modelPath: string; model: LoadedModel }> {
  verbatim ??= (async () => {
    const path = `${dir}/verbatim.gguf`;
    await writeScriptedModel(path, { ...SCRIPT, literalPieces: true, chatTemplate: VERBATIM_TEMPLATE });
    return { modelPath: path, model: await loadModel(path) };
  })();
  return verbatim;
}
/** The one tool the model calls. */
export const TOOLS: OpenAI.ChatCompletionTool[] = [{
  type: "function",
  function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
}];


/**
 * Sends a session-less prompt (token ids) that needs all `freeBlocks` free KV blocks plus `evict`
 * cached ones, so exactly that many cached blocks must be evicted; checks it was served whole.
 */
export async function pressureKv(client: OpenAI, modelName: string, freeBlocks: number, evict: number, blockSize = 16): Promise<void> {
  const n = (freeBlocks + evict) * blockSize - 8;
  const prompt = Array.from({ length: n }, (_, i) => 100 + (i % 50));
  const c = await client.completions.create({ model: modelName, prompt, max_tokens: 1, temperature: 0 });
  assert.equal(c.usage!.prompt_tokens, n);
}

/**
 * The scripted model the tool-call and session tests serve: its greedy answer to a chat whose last
 * message ends in "!" is a Hermes-format call to get_weather; to one ending in "." it is "Sunny.".
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";

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
await writeScriptedModel(modelPath, {
  pieces: ["<tool_call>", CALL, "</tool_call>", "Sunny."],
  next: [["!", "<tool_call>"], ["<tool_call>", CALL], [CALL, "</tool_call>"], ["</tool_call>", "<eos>"], [".", "Sunny."], ["Sunny.", "<eos>"]],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
});
/** The loaded model, shared by the servers of a test file. */
export const model = await loadModel(modelPath);
/** The one tool the model calls. */
export const TOOLS: OpenAI.ChatCompletionTool[] = [{
  type: "function",
  function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { city: { type: "string" } } } },
}];


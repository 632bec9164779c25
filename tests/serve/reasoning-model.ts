/**
 * A scripted model that reasons, for the reasoning-parser and reasoning-KV tests. `<think>` and
 * `</think>` are single user-defined tokens, as in Qwen3's and DeepSeek-R1's vocabularies. Its
 * greedy answer to a chat whose last message ends in
 * - "?": `<think>` THOUGHTS `</think>` "\n\nChecking." then two Hermes calls (get_weather, get_time);
 * - "^": the template opens `<think>\n` itself (DeepSeek-R1's shape), the answer starts with the
 *   thoughts and only `</think>` appears, then the same text and calls;
 * - "!": the two calls alone; ".": "Sunny.".
 * The thoughts include a drafted `<tool_call>` (one token), which is reasoning, never a call.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type OpenAI from "openai";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import type { ChatMessageIn, ToolDef } from "../../src/serve/schemas.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ScriptedModelSpec, scriptedVocab, writeScriptedModel } from "../model/scripted-model.ts";

/** The first call's text between the tags (as in scripted-server.ts). */
export const CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n';
/** The second call, written whole as one token. */
export const SECOND_CALL = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>';
/** A call drafted inside the reasoning (one token). */
export const DRAFT = '<tool_call>{"name": "draft", "arguments": {}}</tool_call>';
/** The reasoning's pieces, in order: 36 thoughts with the draft after the fourth. */
export const THOUGHTS = Array.from({ length: 36 }, (_, i) => ` Thought ${i}.`);
THOUGHTS.splice(4, 0, DRAFT);
/** The text after `</think>`, before the calls. */
export const AFTER = "\n\nChecking.";

/** Role lines, then "assistant" + the last message's last character (+ an open `<think>` for "^"). */
export const TEMPLATE = "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}\n{% endif %}" +
  "{% for m in messages %}{{ m.role }}: {{ m.content }}{% for c in m.tool_calls or [] %} call {{ c.function.name }}{% endfor %}\n{% endfor %}" +
  // enable_thinking false (a request's chat_template_kwargs) asks for the plain answer, as Qwen3's and GLM-4.5's do.
  "{% if add_generation_prompt %}assistant{% if enable_thinking is defined and not enable_thinking %}.{% else %}" +
  "{{ messages[-1].content[-1:] }}{% if messages[-1].content[-1:] == '^' %}<think>\n{% endif %}{% endif %}{% endif %}";

const chain = (...pieces: string[]): [string, string][] => pieces.slice(1).map((to, i) => [pieces[i], to]);
const CALLS = ["<tool_call>", CALL, "</tool_call>", SECOND_CALL, "<eos>"];
const SPEC: ScriptedModelSpec = {
  pieces: ["<think>", "</think>", "<tool_call>", CALL, "</tool_call>", SECOND_CALL, DRAFT, AFTER, "Sunny.", ...THOUGHTS],
  literalPieces: true,
  next: [
    ["?", "<think>"],
    // "^": the prompt ends in "<think>\n", so the newline's successor starts the thoughts.
    ["\n", THOUGHTS[0]],
    ...chain("<think>", ...THOUGHTS, "</think>", AFTER, ...CALLS),
    ["!", "<tool_call>"],
    [".", "Sunny."],
    ["Sunny.", "<eos>"],
  ],
  chatTemplate: TEMPLATE,
  contextLength: 2048,
};

const dir = mkdtempSync(`${tmpdir()}/reasoning-model-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
/** Where the model file is written (a temp dir removed on exit). */
export const modelPath = `${dir}/reasoner.gguf`;
await writeScriptedModel(modelPath, SPEC);
/** The loaded model, shared by the servers of a test file. */
export const model = await loadModel(modelPath);
const vocab = scriptedVocab(SPEC);

/** The two tools the model calls. */
export const TOOLS: OpenAI.ChatCompletionTool[] = ["get_weather", "get_time"].map((name) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: {} } },
}));

/** The answer's token ids (EOS excluded) for a last message ending in `last` ("?", "^" or "!"). */
export function answerIds(last: "?" | "^" | "!"): number[] {
  const pieces = last === "!" ? CALLS.slice(0, -1) : [...(last === "?" ? ["<think>"] : []), ...THOUGHTS, "</think>", AFTER, ...CALLS.slice(0, -1)];
  return pieces.map((p) => vocab.idOf(p));
}

/** The prompt token ids the server builds for `messages` (and `tools`). */
export function promptIds(messages: OpenAI.ChatCompletionMessageParam[], tools?: OpenAI.ChatCompletionTool[]): number[] {
  const r = chatRenderer(TEMPLATE, {}).render(messages as ChatMessageIn[], tools as ToolDef[] | undefined);
  return model.tokenizer.encode(r.text, { addBos: model.config.addBos });
}

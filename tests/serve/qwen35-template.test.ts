/**
 * Qwen3.5's chat template as its checkpoints ship it (tests/serve/fixtures/qwen35-chat-template.jinja)
 * through chatRenderer(): tools in the system turn, Qwen3-Coder's XML calls, reasoning kept after the
 * last user query, `enable_thinking`; an agent's next turn extends the last prompt and answer (what
 * the recurrent state checkpoints and the KV cache reuse), and the `auto` parsers pick its formats.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "../harness.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { detectReasoningParser } from "../../src/serve/reasoning.ts";
import { detectToolCallFormat } from "../../src/serve/tool-call-detect.ts";
import type { ChatMessageIn, ToolDef } from "../../src/serve/schemas.ts";

const TEMPLATE = readFileSync(new URL("./fixtures/qwen35-chat-template.jinja", import.meta.url), "utf8");
const qwen35 = chatRenderer(TEMPLATE, { eos: "<|im_end|>" });
const TOOLS = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } } } }] as ToolDef[];
const render = (messages: unknown[], tools?: ToolDef[], variables?: Record<string, unknown>) =>
  qwen35.render(messages as ChatMessageIn[], tools, { add_generation_prompt: true, ...variables }).text;
const ASK = [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Paris?" }];
/** The model's answer after the generation prompt's `<think>\n`: reasoning, then a call in Qwen3-Coder's XML. */
const ANSWER = "I should call the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

test("chatRenderer() renders Qwen3.5's template: tools, the thinking generation prompt, and enable_thinking false", () => {
  const first = render(ASK, TOOLS);
  assert.ok(first.startsWith("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{"), first.slice(0, 120));
  assert.ok(first.includes("\n\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"));
  assert.ok(first.endsWith("<|im_start|>assistant\n<think>\n"));
  assert.ok(render(ASK, TOOLS, { enable_thinking: false }).endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
});

test("chatRenderer() gives Qwen3.5's template an agent's history so the next prompt extends the last prompt and answer", () => {
  const first = render(ASK, TOOLS);
  const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "days": 2}' } };
  const next = render([...ASK, { role: "assistant", content: "", reasoning_content: "I should call the tool.", tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "Sunny" }], TOOLS);
  assert.ok(next.startsWith(first + ANSWER + "<|im_end|>\n<|im_start|>user\n<tool_response>\nSunny\n</tool_response><|im_end|>\n"), JSON.stringify(next.slice(first.length)));
  assert.ok(next.endsWith("<|im_start|>assistant\n<think>\n"));
});

test("detectToolCallFormat() and detectReasoningParser() read Qwen3.5's template as qwen3_coder calls and <think> reasoning", () => {
  assert.equal(detectToolCallFormat(TEMPLATE, "qwen35"), "qwen3_coder");
  assert.equal(detectReasoningParser(TEMPLATE, "qwen35"), "think");
});

/**
 * Messages a client sends back to gpt-oss's chat template (tests/serve/fixtures/gpt-oss-chat-template.jinja)
 * through harmonyMessages(): `tool_calls: null` (as clients echo an answer without calls) renders as
 * a final answer, and an assistant message with several calls renders every call, each followed by
 * its own result named after its function.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "../harness.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { harmonyMessages, harmonyTools } from "../../src/serve/harmony-prompt.ts";
import type { ChatMessageIn, ToolDef } from "../../src/serve/schemas.ts";

const TEMPLATE = readFileSync(new URL("./fixtures/gpt-oss-chat-template.jinja", import.meta.url), "utf8");
const TOOLS = [
  { type: "function", function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time", description: "Current time" } },
];
const render = (messages: unknown[]) =>
  chatRenderer(TEMPLATE, { bos: "<|startoftext|>", eos: "<|return|>" }).render(harmonyMessages(messages as ChatMessageIn[]), TOOLS as ToolDef[]).text;
const turns = (text: string) => text.slice(text.indexOf("<|start|>user"));
const call = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } });
const USER = { role: "user", content: "Weather and time in Tokyo?" };

test("harmonyMessages(): an assistant message with tool_calls null renders as a final answer, not a failed call", () => {
  const text = render([USER, { role: "assistant", content: "Sunny.", tool_calls: null }, { role: "user", content: "Thanks" }]);
  assert.equal(turns(text), "<|start|>user<|message|>Weather and time in Tokyo?<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|end|>" +
    "<|start|>user<|message|>Thanks<|end|><|start|>assistant");
  // A final answer with tool_calls null after a call turn still counts as final: the call turn's analysis is dropped.
  const after = render([
    USER, { role: "assistant", content: null, reasoning_content: "Need the weather.", tool_calls: [call("c0", "get_weather", '{"city":"Tokyo"}')] },
    { role: "tool", tool_call_id: "c0", content: "18 C" }, { role: "assistant", content: "18 °C.", tool_calls: null }, { role: "user", content: "Thanks" },
  ]);
  assert.ok(!after.includes("Need the weather."), after);
  assert.ok(after.endsWith("<|start|>assistant<|channel|>final<|message|>18 °C.<|end|><|start|>user<|message|>Thanks<|end|><|start|>assistant"), after);
});

test("harmonyMessages(): several calls in one assistant message each render, followed by the result that answers it", () => {
  const text = render([
    USER,
    { role: "assistant", content: null, reasoning_content: "Need both.", tool_calls: [call("c0", "get_weather", '{"city":"Tokyo"}'), call("c1", "get_time", "{}")] },
    // The results in the other order than the calls: matched by tool_call_id.
    { role: "tool", tool_call_id: "c1", content: "09:00" },
    { role: "tool", tool_call_id: "c0", content: "18 C" },
  ]);
  assert.equal(turns(text), "<|start|>user<|message|>Weather and time in Tokyo?<|end|>" +
    "<|start|>assistant<|channel|>analysis<|message|>Need both.<|end|>" +
    // The template's tojson spaces the arguments.
    '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Tokyo"}<|call|>' +
    '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"18 C"<|end|>' +
    "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}<|call|>" +
    '<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>"09:00"<|end|>' +
    "<|start|>assistant");
});

test("harmonyMessages(): results that answer no call by id keep their order after the last call; one call is left as sent", () => {
  const split = harmonyMessages([
    USER, { role: "assistant", content: null, tool_calls: [call("c0", "get_weather", "{}"), call("c1", "get_time", "{}")] },
    { role: "tool", tool_call_id: "x", content: "A" }, { role: "tool", content: "B" }, { role: "user", content: "Go on" },
  ] as ChatMessageIn[]);
  assert.deepEqual(split.map((m) => [m.role, (m as { tool_calls?: { id: string }[] }).tool_calls?.map((c) => c.id) ?? m.content]), [
    ["user", USER.content], ["assistant", ["c0"]], ["assistant", ["c1"]], ["tool", "A"], ["tool", "B"], ["user", "Go on"],
  ]);
  const one = [USER, { role: "assistant", content: null, tool_calls: [call("c0", "get_weather", "{}")] }] as ChatMessageIn[];
  assert.deepEqual(harmonyMessages(one), one);
});

test("harmonyTools(): a function without a description renders with an empty comment instead of failing the template", () => {
  const tools = [{ type: "function", function: { name: "ping", parameters: { type: "object", properties: {} } } }] as ToolDef[];
  const renderer = chatRenderer(TEMPLATE, { bos: "<|startoftext|>", eos: "<|return|>" });
  assert.throws(() => renderer.render([USER as ChatMessageIn], tools), "the template itself fails on it");
  const text = renderer.render([USER as ChatMessageIn], harmonyTools(tools)).text;
  assert.match(text, /\/\/ \ntype ping = \(\) => any;/);
  // Tools that all have descriptions pass through as they are.
  assert.equal(harmonyTools(TOOLS as ToolDef[]), TOOLS);
});

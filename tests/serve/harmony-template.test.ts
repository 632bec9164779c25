/**
 * gpt-oss's own chat template (tests/serve/fixtures/gpt-oss-chat-template.jinja: the template
 * openai/gpt-oss-20b and -120b ship, Apache-2.0, as huggingface/transformers writes it in
 * convert_gpt_oss_weights_to_hf.py) through our renderer, and harmony answers read by our parser:
 * a multi-turn conversation with tool calls and tool results renders as harmony, and a call the model
 * writes comes back in the next turn's prompt as it was written (so its KV is reused) when written as
 * the template writes calls; a call written the cookbook's way is read the same, but the template
 * rewrites it, and the prompt repeats the answer only through its analysis message.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "../harness.ts";
import { type ChatOutputOptions, parseChatOutput } from "../../src/serve/chat-output.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { harmonyGrammarPrefix, harmonyMessages, harmonyStart } from "../../src/serve/harmony-prompt.ts";
import type { ChatMessageIn, ToolDef } from "../../src/serve/schemas.ts";

const TEMPLATE = readFileSync(new URL("./fixtures/gpt-oss-chat-template.jinja", import.meta.url), "utf8");
const render = (messages: unknown[], tools: unknown[] = TOOLS) => chatRenderer(TEMPLATE, { bos: "<|startoftext|>", eos: "<|return|>" }).render(messages as ChatMessageIn[], tools as ToolDef[]).text;
const TOOLS = [{
  type: "function",
  function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { location: { type: "string", description: "A city" }, unit: { type: "string", enum: ["c", "f"] } }, required: ["location"] } },
}];
const USER = [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Tokyo?" }];
const ANALYSIS = "<|channel|>analysis<|message|>Need the weather for Tokyo.<|end|>";
/** A call as gpt-oss's template writes one (recipient in the role header, `json`, arguments as tojson spaces them). */
const AS_TEMPLATE = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo"}';
/** A call as the harmony cookbook shows the model writing one (recipient in the channel header, `<|constrain|>json`). */
const AS_COOKBOOK = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}';

/** The server's reading of an answer to `prompt`: both harmony parsers, the request's tools given. */
const read = (prompt: string, answer: string) => {
  const o: ChatOutputOptions = { reasoning: true, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "harmony", harmony: harmonyStart(prompt) };
  return parseChatOutput(answer, o);
};

/** The assistant message a client sends back: the response's message (reasoning_content included), the call's id made by the server. */
function sentBack(parsed: ReturnType<typeof read>) {
  const tool_calls = parsed.calls.map((c, i) => ({ id: `call_${i}`, type: "function", function: { name: c.name, arguments: c.arguments } }));
  return { role: "assistant", content: parsed.content, reasoning_content: parsed.reasoning, tool_calls };
}

test("gpt-oss's template renders a multi-turn conversation with tools, calls and tool results as harmony", () => {
  const call = { id: "call_0", type: "function", function: { name: "get_weather", arguments: '{"location": "Tokyo"}' } };
  const text = render([
    ...USER,
    { role: "assistant", content: null, reasoning_content: "Need the weather.", tool_calls: [call] },
    { role: "tool", tool_call_id: "call_0", content: "18 C, sunny" },
    { role: "assistant", content: "18 °C and sunny.", reasoning_content: "Answer it." },
    { role: "user", content: "And Paris?" },
  ]);
  assert.ok(text.startsWith("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: "));
  assert.ok(text.includes("Calls to these tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// Current weather\ntype get_weather = (_: {\n// A city\nlocation: string,\nunit?: \"c\" | \"f\",\n}) => any;\n\n} // namespace functions<|end|>"), text);
  const turns = text.slice(text.indexOf("<|start|>user"));
  assert.equal(turns, "<|start|>user<|message|>Weather in Tokyo?<|end|>" +
    '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo"}<|call|>' +
    '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"18 C, sunny"<|end|>' +
    "<|start|>assistant<|channel|>final<|message|>18 °C and sunny.<|end|><|start|>user<|message|>And Paris?<|end|><|start|>assistant",
    "a call turn's analysis is dropped once a final answer follows, as gpt-oss's template does");
  assert.deepEqual(harmonyStart(text), { at: "header", header: "assistant" }, "the answer starts in the assistant's header");
});

test("A call written as gpt-oss's template writes calls round-trips: arguments read, and the next prompt repeats the answer", () => {
  const prompt = render(USER);
  const answer = ANALYSIS + AS_TEMPLATE;
  // The model's first message starts right at <|channel|>: the prompt holds its <|start|>assistant.
  const parsed = read(prompt, answer);
  assert.deepEqual(parsed, { reasoning: "Need the weather for Tokyo.", content: null, calls: [{ name: "get_weather", arguments: '{"location": "Tokyo"}' }] });
  const next = [...USER, sentBack(parsed), { role: "tool", tool_call_id: "call_0", content: "18 C" }];
  const turn2 = render(harmonyMessages(next as ChatMessageIn[]));
  assert.ok(turn2.startsWith(prompt + answer + "<|call|>"), "the next prompt holds the answer token for token, through its <|call|>");
  assert.ok(turn2.endsWith('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"18 C"<|end|><|start|>assistant'));
  // Without reasoning_content given to the template as its thinking, the prompt departs at the answer's first token.
  assert.ok(!render(next).startsWith(prompt + "<|channel|>"), "the check can fail");
  // The third turn, after the final answer: the template drops the call turn's analysis, as gpt-oss expects.
  const turn3 = render(harmonyMessages([...next, { role: "assistant", content: "18 °C." }, { role: "user", content: "Thanks" }] as ChatMessageIn[]));
  assert.ok(turn3.startsWith(prompt + AS_TEMPLATE.slice("<|start|>assistant".length)) && !turn3.includes("Need the weather"));
});

test("A call written the cookbook's way is read the same, but gpt-oss's template rewrites it: the next prompt repeats only the analysis", () => {
  const prompt = render(USER);
  const parsed = read(prompt, ANALYSIS + AS_COOKBOOK);
  assert.deepEqual(parsed.calls, [{ name: "get_weather", arguments: '{"location":"Tokyo"}' }]);
  assert.deepEqual(JSON.parse(parsed.calls[0].arguments), { location: "Tokyo" });
  const turn2 = render(harmonyMessages([...USER, sentBack(parsed), { role: "tool", tool_call_id: "call_0", content: "18 C" }] as ChatMessageIn[]));
  assert.ok(turn2.startsWith(prompt + ANALYSIS + "<|start|>assistant"), "the analysis message and the next message's start are reused");
  assert.ok(!turn2.startsWith(prompt + ANALYSIS + AS_COOKBOOK), "the call's header (and tojson's spacing of its arguments) differ");
  assert.ok(turn2.includes(AS_TEMPLATE), "the template writes the call its own way");
});

test("harmonyGrammarPrefix() constrains from the final message's body, wherever the prompt leaves the answer", () => {
  const json = { kind: "json" as const, schema: { type: "object" } };
  const both = { until: ["<|channel|>final", "<|message|>"], then: "" };
  assert.deepEqual(harmonyGrammarPrefix(harmonyStart("<|start|>user<|message|>hi<|end|><|start|>assistant"), json), both);
  assert.deepEqual(harmonyGrammarPrefix(harmonyStart("<|start|>assistant<|channel|>analysis<|message|>"), json), both, "inside the analysis");
  assert.deepEqual(harmonyGrammarPrefix(harmonyStart("<|start|>assistant<|channel|>final"), json), { until: ["<|message|>"], then: "" }, "the final header left open");
  assert.equal(harmonyGrammarPrefix(harmonyStart("<|start|>assistant<|channel|>final<|message|>"), json), undefined, "already in the final body");
  const forced = { kind: "tool_calls" as const, tools: [{ name: "f" }], parallel: false, format: "harmony" as const };
  assert.equal(harmonyGrammarPrefix(harmonyStart("<|start|>assistant"), forced), undefined, "a forced call's grammar writes the whole message");
  assert.equal(harmonyGrammarPrefix(harmonyStart("<|start|>assistant"), undefined), undefined);
});

/**
 * The reasoning parser (src/serve/reasoning.ts) and the chat-answer splitter built on it
 * (src/serve/chat-output.ts): whole and streamed, tags split across deltas, no end tag, a prompt
 * that opened `<think>`, tool calls inside reasoning, `parallel_tool_calls: false`, and "none".
 */
import assert from "node:assert/strict";
import { type ChatOutputOptions, ChatOutputStream, type ChatPart, parseChatOutput } from "../../src/serve/chat-output.ts";
import { detectReasoningParser, promptOpensReasoning, type ReasoningPart, ReasoningStream, reasoningTokenIds, splitReasoning } from "../../src/serve/reasoning.ts";
import { parseToolCalls } from "../../src/serve/tool-calls.ts";
import { test } from "../harness.ts";

const CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>';
const CALL2 = '<tool_call>{"name": "get_time"}</tool_call>';

/** Feeds `text` in deltas of `size` characters; returns the joined reasoning and content. */
function streamed(text: string, size: number, startsInReasoning = false): { reasoning: string; content: string; parts: ReasoningPart[] } {
  const s = new ReasoningStream(startsInReasoning);
  const parts: ReasoningPart[] = [];
  for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
  parts.push(...s.end());
  const pick = (k: ReasoningPart["kind"]) => parts.filter((p) => p.kind === k).map((p) => p.text).join("");
  return { reasoning: pick("reasoning"), content: pick("content"), parts };
}

test("ReasoningStream splits <think> across chunks: the same reasoning and content at every delta size", () => {
  const text = "<think>\nThe user wants x < y <thin k.\n</think>\n\nAnswer: x < y </thi and <think>again</think> done <th";
  const whole = splitReasoning(text);
  assert.deepEqual(whole, { reasoning: "\nThe user wants x < y <thin k.\nagain", content: "Answer: x < y </thi and done <th" });
  for (const size of [1, 2, 3, 5, 7, 11, 200]) {
    const s = streamed(text, size);
    assert.equal(s.reasoning, whole.reasoning, `delta size ${size}`);
    assert.equal(s.content, whole.content, `delta size ${size}`);
    assert.ok(s.parts.every((p) => p.text.length > 0), "no empty parts");
  }
});

test("ReasoningStream holds back only a tail that could still become the tag it waits for", () => {
  const s = new ReasoningStream();
  assert.deepEqual(s.push("Hi <th"), [{ kind: "content", text: "Hi " }]);
  assert.deepEqual(s.push("ink>I am "), [{ kind: "reasoning", text: "I am " }]);
  assert.deepEqual(s.push("sure </"), [{ kind: "reasoning", text: "sure " }], "inside, only a possible </think> is held");
  assert.deepEqual(s.push("b> <thi"), [{ kind: "reasoning", text: "</b> <thi" }], "<think> is no tag inside reasoning");
  assert.deepEqual(s.push("nk></think>\n"), [{ kind: "reasoning", text: "nk>" }], "whitespace after </think> is dropped");
  assert.deepEqual(s.push(" \nYes"), [{ kind: "content", text: "Yes" }]);
  assert.deepEqual(s.end(), []);
});

test("splitReasoning() with no end tag returns everything after <think> as reasoning", () => {
  assert.deepEqual(splitReasoning("<think>still thinking when max_tokens hit </thi"), { reasoning: "still thinking when max_tokens hit </thi", content: "" });
  assert.deepEqual(streamed("<think>abc </thi", 1), { reasoning: "abc </thi", content: "", parts: [{ kind: "reasoning", text: "a" }, { kind: "reasoning", text: "b" }, { kind: "reasoning", text: "c" }, { kind: "reasoning", text: " " }, { kind: "reasoning", text: "</thi" }] });
  assert.deepEqual(splitReasoning("<think></think>Hi"), { reasoning: "", content: "Hi" }, "an empty block is reasoning of no text");
  assert.deepEqual(splitReasoning("no tags </think> here"), { reasoning: null, content: "no tags </think> here" }, "a stray end tag stays text");
});

test("splitReasoning() starting inside reasoning (a prompt ending in an open <think>) needs only </think>", () => {
  assert.deepEqual(splitReasoning("Let me see.</think>\n\nIt is 4.", true), { reasoning: "Let me see.", content: "It is 4." });
  for (const size of [1, 4]) assert.deepEqual(streamed("a</think> b", size, true).reasoning, "a");
  assert.deepEqual(splitReasoning("Let me see.</think>\n\nIt is 4."), { reasoning: null, content: "Let me see.</think>\n\nIt is 4." }, "not opened: plain text");
});

test("promptOpensReasoning() is true only for a prompt that ends in an open <think>", () => {
  assert.equal(promptOpensReasoning("<｜User｜>hi<｜Assistant｜><think>\n"), true);
  assert.equal(promptOpensReasoning("<|im_start|>assistant\n<think>"), true);
  assert.equal(promptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"), false, "Qwen3 non-thinking mode");
  assert.equal(promptOpensReasoning("user: what does <think> do?\nassistant\n"), false, "a tag inside a message");
});

test("reasoningTokenIds() finds <think> and </think> only when each is a single token", () => {
  const vocab = ["<think>", "</think>", "<", "t", "h", "i", "n", "k", ">", "/"];
  const single = { encode: (t: string) => (vocab.includes(t) ? [vocab.indexOf(t)] : [...t].map((c) => vocab.indexOf(c))), decode: (ids: readonly number[]) => ids.map((i) => vocab[i]).join("") };
  assert.deepEqual(reasoningTokenIds(single), { start: 0, end: 1 });
  const split = { encode: (t: string) => [...t].map((c) => vocab.indexOf(c)), decode: single.decode };
  assert.equal(reasoningTokenIds(split), undefined);
});

const OPTS: ChatOutputOptions = { reasoning: true, startsInReasoning: false, toolCalls: true, parallelToolCalls: true };

test("parseChatOutput() parses tool calls from the content only: a <tool_call> inside reasoning is not a call", () => {
  const text = `<think>I could ${CALL2} first.</think>\n\nChecking. ${CALL}`;
  const r = parseChatOutput(text, OPTS);
  assert.equal(r.reasoning, `I could ${CALL2} first.`);
  assert.equal(r.content, "Checking. ");
  assert.deepEqual(r.calls, [{ name: "get_weather", arguments: '{"city":"Paris"}' }]);
  assert.deepEqual(parseChatOutput(`<think>x</think>${CALL}`, OPTS), { reasoning: "x", content: null, calls: [{ name: "get_weather", arguments: '{"city":"Paris"}' }] });
  assert.deepEqual(parseChatOutput("<think>only thoughts", OPTS), { reasoning: "only thoughts", content: null, calls: [] });
});

test("parseChatOutput() with reasoning off (--reasoning-parser none) returns the text as before", () => {
  const text = `<think>I could ${CALL2} first.</think>\n\nChecking. ${CALL}`;
  const off = { ...OPTS, reasoning: false };
  assert.deepEqual(parseChatOutput(text, off), { reasoning: null, ...parseToolCalls(text) });
  assert.equal(parseChatOutput(text, off).calls.length, 2, "the drafted call counts when reasoning is not split off");
  assert.deepEqual(parseChatOutput(text, { ...off, toolCalls: false }), { reasoning: null, content: text, calls: [] });
  assert.deepEqual(parseChatOutput("", { ...off, toolCalls: false }), { reasoning: null, content: "", calls: [] });
});

test("ChatOutputStream with parallelToolCalls false releases only the first call, whole or streamed", () => {
  const text = `<think>plan</think>Both. ${CALL}${CALL2} end`;
  const one = { ...OPTS, parallelToolCalls: false };
  assert.deepEqual(parseChatOutput(text, one).calls.map((c) => c.name), ["get_weather"]);
  assert.deepEqual(parseChatOutput(text, OPTS).calls.map((c) => c.name), ["get_weather", "get_time"]);
  for (const size of [1, 3, 8]) {
    const s = new ChatOutputStream(one);
    const parts: ChatPart[] = [];
    for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
    parts.push(...s.end());
    assert.deepEqual(parts.flatMap((p) => (p.kind === "call" ? [p.call.name] : [])), ["get_weather"], `delta size ${size}`);
    assert.equal(parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join(""), "Both.  end");
    assert.equal(parts.flatMap((p) => (p.kind === "reasoning" ? [p.text] : [])).join(""), "plan");
  }
});

test("detectReasoningParser() tells think, mistral and harmony from the chat template (gpt-oss from its architecture), none where nothing tells", () => {
  const qwen3 = "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}";
  const r1 = "{{'<｜Assistant｜><think>\\n'}}";
  const magistral = "{{- '[THINK]' + thinking + '[/THINK]' }}";
  assert.deepEqual([qwen3, r1, magistral].map((t) => detectReasoningParser(t, "qwen3")), ["think", "think", "mistral"]);
  assert.equal(detectReasoningParser("{% for m in messages %}{{ m.content }}{% endfor %}", "llama"), "none");
  assert.equal(detectReasoningParser(undefined, "llama"), "none");
  assert.equal(detectReasoningParser(undefined, "gpt-oss"), "harmony");
});

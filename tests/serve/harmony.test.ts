/**
 * gpt-oss's harmony answers (`--reasoning-parser harmony`, `--tool-call-parser harmony`): the parser
 * (src/serve/harmony.ts) through the chat-answer splitter, whole and in every delta size; malformed
 * and cut messages shown as written; where a prompt leaves the answer; the messages sent back to the
 * template; and the grammar of forced calls, read back by the parser.
 */
import assert from "node:assert/strict";
import { grammarComplete, grammarFeed, grammarStart, type OutputGrammar } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { type ChatOutputOptions, ChatOutputStream, type ChatPart, parseChatOutput } from "../../src/serve/chat-output.ts";
import { type HarmonyStart, startsInAnalysis } from "../../src/serve/harmony.ts";
import { harmonyMessages, harmonyStart } from "../../src/serve/harmony-prompt.ts";
import type { ChatMessageIn } from "../../src/serve/schemas.ts";
import { test } from "../harness.ts";

const AFTER_PROMPT = harmonyStart("<|start|>user<|message|>Weather in Tokyo?<|end|><|start|>assistant");
const opts = (o: Partial<ChatOutputOptions> = {}, start: HarmonyStart = AFTER_PROMPT): ChatOutputOptions =>
  ({ reasoning: true, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: "harmony", harmony: start, ...o });
const ANALYSIS = "<|channel|>analysis<|message|>Need the weather: <b>x</b> | y.<|end|>";
const CALL = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}';
const ROLE_CALL = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo"}';
const TOKYO = { name: "get_weather", arguments: '{"location":"Tokyo"}' };

/** The answer split in deltas of `size` characters, then put together again as parseChatOutput() would. */
function streamed(text: string, o: ChatOutputOptions, size: number) {
  const s = new ChatOutputStream(o);
  const parts: ChatPart[] = [];
  for (let i = 0; i < text.length; i += size) parts.push(...s.push(text.slice(i, i + size)));
  parts.push(...s.end());
  const pick = (kind: string) => parts.flatMap((p) => (p.kind === kind && "text" in p ? [p.text] : [])).join("");
  const calls = parts.flatMap((p) => (p.kind === "call" ? [p.call] : []));
  const content = pick("content");
  return { reasoning: s.sawReasoning ? pick("reasoning") : null, content: (calls.length > 0 && content.trim() === "") || (s.sawReasoning && content === "") ? null : content, calls };
}

test("parseChatOutput() with harmony: analysis is reasoning, final and preambles are content, a message to functions.NAME is a call", () => {
  const final = `${ANALYSIS}<|start|>assistant<|channel|>final<|message|>It is 18 °C.`;
  assert.deepEqual(parseChatOutput(final, opts()), { reasoning: "Need the weather: <b>x</b> | y.", content: "It is 18 °C.", calls: [] });
  assert.deepEqual(parseChatOutput(`${final}<|return|>`, opts()).content, "It is 18 °C.", "<|return|> ends it (when it reaches the text)");
  assert.deepEqual(parseChatOutput(ANALYSIS + CALL, opts()), { reasoning: "Need the weather: <b>x</b> | y.", content: null, calls: [TOKYO] });
  // The recipient in the role header (gpt-oss's template writes calls back so), the answer's first message with no `<|start|>`.
  const first = ' to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo"}';
  assert.deepEqual(parseChatOutput(first, opts()).calls, [{ name: "get_weather", arguments: '{"location": "Tokyo"}' }]);
  assert.deepEqual(parseChatOutput(ANALYSIS + ROLE_CALL + "<|call|>", opts()).calls, [{ name: "get_weather", arguments: '{"location": "Tokyo"}' }]);
  const preamble = `${ANALYSIS}<|start|>assistant<|channel|>commentary<|message|>Checking the weather.<|end|>${CALL}`;
  assert.deepEqual(parseChatOutput(preamble, opts()), { reasoning: "Need the weather: <b>x</b> | y.", content: "Checking the weather.", calls: [TOKYO] });
  const twice = `<|channel|>analysis<|message|>A.<|end|><|start|>assistant<|channel|>analysis<|message|>B.<|end|><|start|>assistant<|channel|>final<|message|>C.`;
  assert.deepEqual(parseChatOutput(twice, opts()), { reasoning: "A.B.", content: "C.", calls: [] });
  assert.deepEqual(parseChatOutput("<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>", opts()), { reasoning: "", content: null, calls: [] });
});

test("parseChatOutput() with harmony shows what is not a message it returns as written, never dropping it", () => {
  const written = (text: string, o = opts()) => assert.deepEqual(parseChatOutput(text, o), { reasoning: null, content: text, calls: [] }, JSON.stringify(text));
  written("Plain text from a model that is not writing harmony.");
  written("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>not json");
  written('<|channel|>commentary to=functions.get!weather<|message|>{"a": 1}');
  written('<|channel|>commentary to=functions. json<|message|>{"a": 1}');
  written('<|channel|>analysis to=python<|message|>print(1)<|end|>', opts({ reasoning: false }));
  written("<|channel|>fin", opts());
  // Cut by max_tokens inside a call: the reasoning before it stays reasoning, the call is text.
  const cut = parseChatOutput(ANALYSIS + CALL.slice(0, -4), opts());
  assert.deepEqual([cut.reasoning, cut.content, cut.calls], ["Need the weather: <b>x</b> | y.", CALL.slice(0, -4), []]);
  // Another role, text after an end tag: as written, and the messages after them still read.
  const stray = `${ANALYSIS} stray<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>OK`;
  assert.deepEqual(parseChatOutput(stray, opts()), { reasoning: "Need the weather: <b>x</b> | y.", content: " stray<|start|>user<|message|>hi<|end|>OK", calls: [] });
  // Reasoning not read (--reasoning-parser none): the analysis message as written; calls not read (no tools): as written.
  assert.deepEqual(parseChatOutput(ANALYSIS + CALL, opts({ reasoning: false })), { reasoning: null, content: ANALYSIS, calls: [TOKYO] });
  assert.deepEqual(parseChatOutput(ANALYSIS + CALL, opts({ toolCalls: false })), { reasoning: "Need the weather: <b>x</b> | y.", content: CALL, calls: [] });
  const two = `${ANALYSIS}${CALL}<|call|>${ROLE_CALL}`;
  assert.equal(parseChatOutput(two, opts()).calls.length, 2);
  assert.deepEqual(parseChatOutput(two, opts({ parallelToolCalls: false })).calls, [TOKYO], "parallel_tool_calls false keeps the first");
});

test("ChatOutputStream with harmony gives what parseChatOutput() gives at every delta size, releasing reasoning and content as they come", () => {
  const texts = [
    `${ANALYSIS}<|start|>assistant<|channel|>final<|message|>It is 18 °C. <|st art|> <|e`,
    ANALYSIS + CALL, ANALYSIS + ROLE_CALL + "<|call|><|start|>assistant<|channel|>final<|message|>x",
    `${ANALYSIS} stray<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>OK`,
    ANALYSIS + CALL.slice(0, -4), "<|channel|>commentary to=functions.f<|message|>{oops}<|end|>after", "assistant? plain <|start|",
  ];
  for (const text of texts) {
    for (const o of [opts(), opts({ reasoning: false }), opts({ toolCalls: false })]) {
      const whole = parseChatOutput(text, o);
      for (const size of [1, 2, 3, 5, 8, 13, 1000]) assert.deepEqual(streamed(text, o, size), whole, `${JSON.stringify(text)} in deltas of ${size}`);
    }
  }
  const s = new ChatOutputStream(opts());
  assert.deepEqual(s.push("<|channel|>analysis<|mess"), [], "a header is held until <|message|>");
  assert.deepEqual(s.push("age|>Thinking <|e"), [{ kind: "reasoning", text: "Thinking " }], "only a tail that may become an end tag is held");
  assert.deepEqual(s.push("nd|><|start|>assistant<|channel|>final<|message|>Hi"), [{ kind: "content", text: "Hi" }]);
  const c = new ChatOutputStream(opts());
  assert.deepEqual(c.push(CALL.slice(0, -2)), []);
  assert.deepEqual(c.push(CALL.slice(-2) + "<|call|>"), [{ kind: "call", call: TOKYO }], "a call is out as soon as it ends");
  assert.deepEqual(new ChatOutputStream(opts()).push("Hello"), [{ kind: "content", text: "Hello" }], "text that is no header is not held");
});

test("harmonyStart() finds where the prompt leaves the answer; the stream starts there", () => {
  assert.deepEqual(AFTER_PROMPT, { at: "header", header: "assistant" });
  const inFinal = harmonyStart("<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>");
  assert.deepEqual(inFinal, { at: "body", header: "assistant<|channel|>final" });
  assert.deepEqual(parseChatOutput("Hello.<|return|>", opts({}, inFinal)), { reasoning: null, content: "Hello.", calls: [] });
  const inAnalysis = harmonyStart("<|start|>assistant<|channel|>analysis<|message|>");
  assert.ok(startsInAnalysis(inAnalysis) && !startsInAnalysis(inFinal) && !startsInAnalysis(AFTER_PROMPT));
  assert.deepEqual(parseChatOutput("So.<|end|><|start|>assistant<|channel|>final<|message|>Hi", opts({}, inAnalysis)), { reasoning: "So.", content: "Hi", calls: [] });
  const between = harmonyStart("<|start|>assistant<|channel|>final<|message|>Hi<|end|>");
  assert.deepEqual(parseChatOutput("<|start|>assistant<|channel|>final<|message|>Again", opts({}, between)).content, "Again");
  assert.deepEqual(harmonyStart("no harmony here"), { at: "header", header: "assistant" });
});

test("harmonyMessages() gives an assistant message's reasoning_content to gpt-oss's template as its thinking", () => {
  const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } };
  const messages = [
    { role: "user", content: "Hi" },
    { role: "assistant", content: null, reasoning_content: "R1", tool_calls: [call] },
    { role: "assistant", content: "Done.", reasoning: "R2" },
    { role: "assistant", content: "Preamble.", reasoning_content: "R3", tool_calls: [call] },
    { role: "assistant", content: "x", thinking: "own", reasoning_content: "R4" },
  ] as ChatMessageIn[];
  const thinking = harmonyMessages(messages).map((m) => (m as { thinking?: string }).thinking);
  assert.deepEqual(thinking, [undefined, "R1", "R2", undefined, "own"]);
});

const WEATHER = { name: "get_weather", parameters: { type: "object", properties: { location: { type: "string" }, days: { type: "integer", minimum: 1 } }, required: ["location"] } };

test("grammarStart() writes a forced harmony call: an optional analysis message, then the call with its recipient in the role header", () => {
  const g: OutputGrammar = { kind: "tool_calls", format: "harmony", parallel: true, tools: [WEATHER, { name: "now" }] };
  const fits = (text: string) => grammarComplete(grammarFeed(grammarStart(g), text));
  const call = ' to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Tokyo", "days": 2}';
  const thought = "<|channel|>analysis<|message|>Need <it>.\nNow.<|end|><|start|>assistant";
  assert.ok(fits(call) && fits(thought + call) && fits(' to=functions.now<|channel|>commentary json<|message|>{"any": [1]}'));
  for (const bad of [
    call + call, // one call: <|call|> ends generation
    call.replace('"Tokyo"', "7"), call.replace('"Tokyo", ', "").replace("location", "days"), call.replace("get_weather", "get_wether"),
    `<|channel|>analysis<|message|>a<|end|>b<|end|><|start|>assistant${call}`, // the analysis holds no <|end|>
    `<|channel|>final<|message|>Hi`, CALL.replace("<|start|>assistant", ""), // no final answer, no channel-header form
  ]) assert.ok(!fits(bad), `accepted ${JSON.stringify(bad)}`);
  assert.equal(grammarForcedText(grammarFeed(grammarStart({ ...g, tools: [WEATHER] }), " "), 200).text, "to=functions.get_weather<|channel|>commentary json<|message|>{");
  assert.equal(grammarForcedText(grammarFeed(grammarStart(g), thought), 200).text, " to=functions.", "after the analysis, the call's header up to the name");
  // What the grammar accepts, the parser reads as the call it spells.
  assert.deepEqual(parseChatOutput(thought.slice(0, -"<|start|>assistant".length) + "<|start|>assistant" + call, opts()), {
    reasoning: "Need <it>.\nNow.", content: null, calls: [{ name: "get_weather", arguments: '{"location": "Tokyo", "days": 2}' }],
  });
});

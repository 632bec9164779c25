/**
 * Chat templates as real checkpoints ship them, through chatRenderer(): Qwen3's
 * (tests/serve/fixtures/qwen3-chat-template.jinja), and the tool-call lines of Llama 3.1's and DeepSeek-R1's.
 * What an agent needs: turn N+1's prompt extends turn N's prompt and answer (its KV is reused),
 * whatever form of the history the client sends back, and no message is dropped unseen.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "../harness.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { schemaError } from "../../src/serve/errors.ts";
import { type ChatMessageIn, ChatRequestSchema, type ToolDef } from "../../src/serve/schemas.ts";

const QWEN3_TEMPLATE = readFileSync(new URL("./fixtures/qwen3-chat-template.jinja", import.meta.url), "utf8");

const TOOLS = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }] as ToolDef[];
const qwen3 = chatRenderer(QWEN3_TEMPLATE, { eos: "<|im_end|>" });
const render = (messages: unknown[], tools?: ToolDef[]) => qwen3.render(messages as ChatMessageIn[], tools).text;
const ASK = [{ role: "system", content: "Be brief." }, { role: "user", content: "Weather in Paris?" }];
/** Qwen3's answer to ASK as the model writes it: its reasoning, then a Hermes call. */
const ANSWER = '<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const call = (args: unknown) => ({ id: "call_1", type: "function", function: { name: "get_weather", arguments: args } });

test("chatRenderer() gives Qwen3's template an assistant's `reasoning` (vLLM's field) as reasoning_content, so the next prompt extends the answer", () => {
  const first = render(ASK, TOOLS);
  for (const field of ["reasoning_content", "reasoning"]) {
    const next = render([...ASK, { role: "assistant", content: null, [field]: "I should call the tool.", tool_calls: [call('{"city": "Paris"}')] }, { role: "tool", tool_call_id: "call_1", content: "Sunny" }], TOOLS);
    assert.ok(next.startsWith(first + ANSWER), `history with ${field}: ${JSON.stringify(next.slice(first.length, first.length + ANSWER.length))}`);
  }
});

test("chatRenderer() gives templates empty or missing tool-call arguments as {} (vLLM's rule)", () => {
  for (const args of ["", null, undefined]) {
    const text = render([...ASK, { role: "assistant", content: "", tool_calls: [call(args)] }]);
    assert.ok(text.includes('{"name": "get_weather", "arguments": {}}'), `arguments ${JSON.stringify(args)}: ${text.slice(-120)}`);
  }
});

test("chatRenderer() drops an empty tool_calls list, which Llama 3.1's template takes as a call turn and refuses", () => {
  // Llama 3.1's own lines for an assistant message (meta-llama/Llama-3.1-8B-Instruct's template).
  const llama = chatRenderer(
    "{%- for message in messages %}{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}" +
      "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}" +
      "{%- elif 'tool_calls' in message %}{%- if not message.tool_calls|length == 1 %}{{- raise_exception(\"This model only supports single tool-calls at once!\") }}{%- endif %}" +
      "{%- set tool_call = message.tool_calls[0].function %}{{- '{\"name\": \"' + tool_call.name + '\", \"parameters\": ' + tool_call.arguments | tojson + '}<|eot_id|>' }}{%- endif %}{%- endfor %}",
    {},
  );
  const text = llama.render([{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello.", tool_calls: [] }] as unknown as ChatMessageIn[]).text;
  assert.equal(text, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>");
  // Two calls still meet the template's own refusal, named in a 400.
  assert.throws(
    () => llama.render([{ role: "assistant", content: "", tool_calls: [call("{}"), call("{}")] }] as unknown as ChatMessageIn[]),
    (e: Error & { status?: number }) => e.status === 400 && e.message.includes("This model only supports single tool-calls at once!"),
  );
});

test("chatRenderer() gives DeepSeek-R1's template, which joins arguments to text, the arguments as sent", () => {
  // DeepSeek-R1's call line (deepseek-ai/DeepSeek-R1's tokenizer_config.json): Python raises on a dict here.
  const deepseek = chatRenderer(
    "{%- for message in messages %}{%- if message['role'] == 'assistant' and message['tool_calls'] %}{%- for tool in message['tool_calls'] %}" +
      "{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}" +
      "{%- endfor %}{%- endif %}{%- endfor %}",
    {},
  );
  const args = '{"city":  "Paris"}';
  const text = deepseek.render([{ role: "assistant", content: "", tool_calls: [call(args)] }] as unknown as ChatMessageIn[]).text;
  assert.equal(text, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + args + "\n```<｜tool▁call▁end｜>");
});

test("chatRenderer() gives a template without a developer role a developer message as the system one", () => {
  const text = render([{ role: "developer", content: "Answer in French." }, { role: "user", content: "Hi" }]);
  assert.equal(text, "<|im_start|>system\nAnswer in French.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A template that reads developer messages itself (gpt-oss's) gets them as they are.
  const own = chatRenderer("{% for m in messages %}{{ m.role }}{% if m.role == 'developer' %}!{% endif %}{% endfor %}", {});
  assert.equal(own.render([{ role: "developer", content: "x" }] as ChatMessageIn[]).text, "developer!");
});

test("ChatRequestSchema refuses malformed assistant tool_calls, naming the field, before a template renders them", () => {
  const body = (toolCalls: unknown) => ({ model: "m", messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: null, tool_calls: toolCalls }] });
  const cases: [unknown, string][] = [
    ["abc", "messages[1].tool_calls"],
    [[null], "messages[1].tool_calls[0]"],
    [[{ id: "c", type: "function" }], "messages[1].tool_calls[0].function"],
    [[{ function: { name: 5, arguments: "{}" } }], "messages[1].tool_calls[0].function.name"],
    [[{ function: { name: "f", arguments: 5 } }], "messages[1].tool_calls[0].function.arguments"],
    [[{ id: 3, function: { name: "f", arguments: "{}" } }], "messages[1].tool_calls[0].id"],
  ];
  for (const [calls, param] of cases) {
    const b = body(calls);
    const r = ChatRequestSchema.safeParse(b);
    assert.ok(!r.success, `${JSON.stringify(calls)} is refused`);
    const e = schemaError(r.error, b);
    assert.equal(e.status, 400);
    assert.equal(e.param, param, e.message);
  }
  // What OpenAI's and vLLM's clients send stays accepted: text arguments, object arguments, none.
  for (const args of ['{"city": "Paris"}', { city: "Paris" }, undefined]) {
    assert.ok(ChatRequestSchema.safeParse(body([call(args)])).success, JSON.stringify(args));
  }
});

test("chatRenderer() with continueFinal cuts Qwen3's prompt right after a prefilled answer that also occurs in <|im_end|>", () => {
  for (const prefill of ["im", ">", "end", "Sure", ""]) {
    const text = qwen3.render([{ role: "user", content: "Hi" }, { role: "assistant", content: prefill }] as ChatMessageIn[], undefined, undefined, { continueFinal: true }).text;
    // Qwen3 writes the final assistant turn as an empty think block, then the answer.
    assert.equal(text, `<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n${prefill}`, `prefill ${JSON.stringify(prefill)}`);
  }
});

test("chatRenderer() gives DeepSeek-R1's template a call turn's missing content as null, so it writes the calls; a template that joins it to text gets \"\"", () => {
  // DeepSeek-R1's assistant branches (deepseek-ai/DeepSeek-R1's tokenizer_config.json): calls only when content `is none`.
  const deepseek = chatRenderer(
    "{%- for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}" +
      "{%- if message['role'] == 'assistant' and message['content'] is none %}{%- for tool in message['tool_calls'] %}" +
      "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}" +
      "{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}",
    {},
  );
  const args = '{"city": "Paris"}';
  const text = deepseek.render([{ role: "user", content: "Weather?" }, { role: "assistant", content: null, tool_calls: [call(args)] }] as unknown as ChatMessageIn[]).text;
  assert.equal(text, "<｜User｜>Weather?<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + args + "\n```<｜tool▁call▁end｜>");
  // Phi-3's line joins content to text, which null cannot be: it gets "", as vLLM gives it.
  const phi = chatRenderer("{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n'}}{% endfor %}", {});
  assert.equal(phi.render([{ role: "assistant", content: null, tool_calls: [call(args)] }] as unknown as ChatMessageIn[]).text, "<|assistant|>\n<|end|>\n");
  // Qwen3 writes a call turn the same either way (the last turn with its empty think block).
  assert.ok(render([...ASK, { role: "assistant", content: null, tool_calls: [call(args)] }]).includes('<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'));
});

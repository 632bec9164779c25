/** Tool-call arguments a client sends back reach the chat template with their numbers as written. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { chatRenderer } from "../../src/serve/chat-template.ts";
import { NumberLiterals } from "../../src/serve/exact-arguments.ts";
import type { ChatMessageIn } from "../../src/serve/schemas.ts";

/** Llama 3.1-like: the whole arguments object through tojson. */
const TOJSON = "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor %}{% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}";
/** Qwen3-Coder-like: each argument's value written by itself. */
const PER_VALUE = "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{% for k, v in c.function.arguments | items %}<{{ k }}>{% if v is mapping or v is sequence and v is not string %}{{ v | tojson }}{% else %}{{ v }}{% endif %}</{{ k }}>{% endfor %}{% endfor %}{% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}";

const ARGS = '{"message_id": 1234567890123456789, "ratio": 1.0, "nested": {"ids": [9007199254740993, -12345678901234567890]}, "n": 7, "note": "id 99999999999999999 in text"}';
const messages: ChatMessageIn[] = [
  { role: "user", content: "Reply to the message." },
  { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "reply", arguments: ARGS } }] },
] as ChatMessageIn[];

test("chatRenderer() renders tool-call arguments' big integers and 1.0 as the client wrote them (tojson)", () => {
  const text = chatRenderer(TOJSON, {}).render(messages, undefined, {}).text;
  assert.ok(text.includes('"message_id": 1234567890123456789'), text);
  assert.ok(text.includes('"ratio": 1.0'), text);
  assert.ok(text.includes('"ids": [9007199254740993, -12345678901234567890]'), text);
  assert.ok(text.includes('"n": 7'), text);
  assert.ok(text.includes('"note": "id 99999999999999999 in text"'), "a number inside a string is text");
  assert.ok(!text.includes("__evolving_number_"), text);
});

test("chatRenderer() renders each big integer argument as written where the template prints values one by one", () => {
  const text = chatRenderer(PER_VALUE, {}).render(messages, undefined, {}).text;
  assert.ok(text.includes("<message_id>1234567890123456789</message_id>"), text);
  assert.ok(text.includes("<ratio>1.0</ratio>"), text);
  assert.ok(text.includes("<n>7</n>"), text);
});

test("NumberLiterals.parse() refuses what JSON.parse refuses and leaves exact numbers as numbers", () => {
  const l = new NumberLiterals();
  assert.throws(() => l.parse('{"a": 01}'), SyntaxError);
  assert.deepEqual(l.parse('{"a": 1, "b": [0.5, -3], "c": "1.0"}'), { a: 1, b: [0.5, -3], c: "1.0" });
  assert.equal(l.restore("x"), "x");
});

test("chatRenderer() leaves a conversation that already holds the placeholder text to plain parsing", () => {
  const odd = [...messages, { role: "user", content: "what is __evolving_number_0__?" }] as ChatMessageIn[];
  const text = chatRenderer(TOJSON, {}).render(odd, undefined, {}).text;
  assert.ok(text.includes("what is __evolving_number_0__?"), "the client's text is not rewritten");
  assert.ok(text.includes('"n": 7'), text);
});

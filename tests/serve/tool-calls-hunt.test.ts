/**
 * Tool calls read from model output as clients need them: arguments exactly as the model wrote
 * them (a 19-digit id or 1e400 is not rounded by a trip through a double), a Hermes call whose
 * string arguments hold `</tool_call>`, and a Llama 3 answer that is JSON for the user rather than
 * a call — each whole and streamed in every split, and through a server with the real openai client.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import type { ToolCallSyntax } from "../../src/engine/grammar.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ChatOutputOptions, ChatOutputStream, parseChatOutput } from "../../src/serve/chat-output.ts";
import { startServer } from "../../src/serve/server.ts";
import { parseToolCalls } from "../../src/serve/tool-calls.ts";
import { compactJson } from "../../src/serve/tool-calls-json.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { TEMPLATE } from "./scripted-server.ts";

const dir = mkdtempSync(`${tmpdir()}/tool-calls-hunt-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const TOOLS = [{ name: "lookup", parameters: { type: "object", properties: { id: { type: "integer" }, q: { type: "string" } } } }];
const opts = (format: ToolCallSyntax): ChatOutputOptions => ({ reasoning: false, startsInReasoning: false, toolCalls: true, parallelToolCalls: true, toolCallFormat: format, tools: TOOLS });
/** A call's name and arguments text (Mistral's ids are random). */
const named = (calls: { name: string; arguments: string }[]) => calls.map((c) => [c.name, c.arguments]);

/** Checks that every split of `text` in two deltas, and one character at a time, streams what parseChatOutput() returns. */
function sameStreamed(text: string, o: ChatOutputOptions): void {
  const whole = parseChatOutput(text, o);
  const splits = [...Array.from({ length: text.length + 1 }, (_, i) => [text.slice(0, i), text.slice(i)]), [...text]];
  for (const deltas of splits) {
    const s = new ChatOutputStream(o);
    const parts = [...deltas.flatMap((d) => s.push(d)), ...s.end()];
    const content = parts.flatMap((p) => (p.kind === "content" ? [p.text] : [])).join("");
    assert.equal(content, whole.content ?? "", `content, deltas ${JSON.stringify(deltas.slice(0, 2))}`);
    assert.deepEqual(named(parts.flatMap((p) => (p.kind === "call" ? [p.call] : []))), named(whole.calls), `calls, deltas ${JSON.stringify(deltas.slice(0, 2))}`);
  }
}

test("parseChatOutput() keeps numbers in arguments as the model wrote them, in every format that re-reads JSON", () => {
  // 12345678901234567890 is not a double (it rounds to ...7000), and 1e400 overflows to Infinity, which JSON.stringify writes as null.
  const args = '{"id": 12345678901234567890, "q": "caf\\u00e9 \\"x\\"", "big": 1e400, "f": 1.50}';
  const compact = '{"id":12345678901234567890,"q":"café \\"x\\"","big":1e400,"f":1.50}';
  const answers: [ToolCallSyntax, string][] = [
    ["hermes", `<tool_call>\n{"name": "lookup", "arguments": ${args}}\n</tool_call>`],
    ["llama3_json", `{"name": "lookup", "parameters": ${args}}`],
    ["mistral_pre_v11", `[TOOL_CALLS] [{"name": "lookup", "arguments": ${args}}]`],
  ];
  for (const [format, text] of answers) {
    assert.deepEqual(named(parseChatOutput(text, opts(format)).calls), [["lookup", compact]], format);
    sameStreamed(text, opts(format));
  }
  // Key-value formats: a non-string argument is JSON, kept as written; a string one is raw text.
  const glm = "<tool_call>lookup\n<arg_key>id</arg_key>\n<arg_value>12345678901234567890</arg_value>\n<arg_key>q</arg_key>\n<arg_value>1e400</arg_value>\n<arg_key>n</arg_key>\n<arg_value>[1e400, 2.0]</arg_value>\n</tool_call>";
  assert.deepEqual(named(parseChatOutput(glm, opts("glm45")).calls), [["lookup", '{"id":12345678901234567890,"q":"1e400","n":[1e400,2.0]}']]);
  const qwen = "<tool_call>\n<function=lookup>\n<parameter=id>\n12345678901234567890\n</parameter>\n</function>\n</tool_call>";
  assert.deepEqual(named(parseChatOutput(qwen, opts("qwen3_coder")).calls), [["lookup", '{"id":12345678901234567890}']]);
});

test("compactJson() drops only whitespace outside strings and writes strings as JSON.stringify does", () => {
  assert.equal(compactJson(' {\n "a b" : [ 1 , -0.0e+5 , true , null ] ,\t"c": "x \\/ \\u0041 \\n" } '), '{"a b":[1,-0.0e+5,true,null],"c":"x / A \\n"}');
  for (const v of [{ a: [1, { b: "\u0001\"\\é🌍" }], c: null }, [], "s", 0.1]) assert.equal(compactJson(JSON.stringify(v, null, 2)), JSON.stringify(v));
});

test("ToolCallStream reads a Hermes call whose string arguments hold </tool_call>, whatever the delta boundaries", () => {
  const call = '<tool_call>\n{"name": "write", "arguments": {"path": "a.md", "text": "End a call with </tool_call>."}}\n</tool_call>';
  const r = parseToolCalls(`Writing.${call} Done.`);
  assert.deepEqual(r, { content: "Writing. Done.", calls: [{ name: "write", arguments: '{"path":"a.md","text":"End a call with </tool_call>."}' }] });
  // A block that is no call even read past the tag is text up to the first closing tag, so a good call after it stays a call.
  const bad = '<tool_call>{"name": "x" "</tool_call>';
  assert.deepEqual(parseToolCalls(`${bad}${call}`), { content: bad, calls: r.calls });
  for (const text of [`Writing.${call} Done.`, `${bad}${call}`, `${bad} tail`, '<tool_call>{"name": "w", "arguments": {"t": "</tool_call>'] as const) {
    sameStreamed(text, opts("hermes"));
  }
});

test("parseChatOutput() with glm45, qwen3_coder and minimax_m2 reads a raw string argument that holds the call's closing tag", () => {
  // The forced-call grammars let a raw string hold these tags; the call must still come back as a call.
  const cases: [ToolCallSyntax, string, string][] = [
    ["glm45", "<tool_call>lookup\n<arg_key>q</arg_key>\n<arg_value>a </tool_call> b</arg_value>\n</tool_call>", "a </tool_call> b"],
    ["qwen3_coder", "<tool_call>\n<function=lookup>\n<parameter=q>\na </tool_call> b\n</parameter>\n</function>\n</tool_call>", "a </tool_call> b"],
    ["minimax_m2", '<minimax:tool_call>\n<invoke name="lookup">\n<parameter name="q">a </invoke> b</parameter>\n</invoke>\n</minimax:tool_call>', "a </invoke> b"],
  ];
  for (const [format, text, q] of cases) {
    assert.deepEqual(named(parseChatOutput(`${text} tail`, opts(format)).calls), [["lookup", JSON.stringify({ q })]], format);
    sameStreamed(`${text} tail`, opts(format));
  }
  // Not a call even past the tag: text up to the first closing tag, and the good call after it is read.
  const bad = "<tool_call>lookup\n<arg_key>q<arg_value></tool_call>";
  assert.deepEqual(parseChatOutput(`${bad}<tool_call>lookup\n</tool_call>`, opts("glm45")), { reasoning: null, content: bad, calls: [{ name: "lookup", arguments: "{}" }] });
});

test("parseChatOutput() with llama3_json reads an object without parameters as text, not as a call that drops its keys", () => {
  const person = '{"name": "Ada", "age": 36}';
  assert.deepEqual(parseChatOutput(person, opts("llama3_json")), { reasoning: null, content: person, calls: [] });
  const call = '{"name": "lookup", "parameters": {}}';
  assert.deepEqual(parseChatOutput(`${call}; ${person}`, opts("llama3_json")), { reasoning: null, content: `; ${person}`, calls: [{ name: "lookup", arguments: "{}" }] }, "the calls end at the first object that is no call, the rest as written");
  assert.deepEqual(named(parseChatOutput('{"name": "lookup", "arguments": {"id": 1}}', opts("llama3_json")).calls), [["lookup", '{"id":1}']]);
  sameStreamed(`${call}; ${person}`, opts("llama3_json"));
});

test("chat completions with --tool-call-parser llama3_json: a JSON answer for the user is content, a call's 19-digit id is kept", async () => {
  // "…?" → a JSON answer with a "name" key; "…!" → a call whose id needs more digits than a double has.
  const person = '{"name": "Ada", "age": 36}';
  const call = '{"name": "lookup", "parameters": {"id": 12345678901234567890}}';
  const path = `${dir}/llama3.gguf`;
  await writeScriptedModel(path, { pieces: [person, call], next: [["?", person], [person, "<eos>"], ["!", call], [call, "<eos>"]], chatTemplate: TEMPLATE, contextLength: 1024 });
  const s = await startServer({ modelPath: path, model: await loadModel(path), host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, toolCallParser: "llama3_json" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const tools: OpenAI.ChatCompletionTool[] = [{ type: "function", function: { name: "lookup", parameters: TOOLS[0].parameters } }];
    const ask = (content: string) => client.chat.completions.create({ model: "llama3", messages: [{ role: "user", content }], tools, temperature: 0, max_tokens: 4 });
    const answer = (await ask("Who?")).choices[0];
    assert.deepEqual([answer.message.content, answer.message.tool_calls, answer.finish_reason], [person, undefined, "stop"]);
    const called = (await ask("Look it up!")).choices[0];
    assert.equal(called.finish_reason, "tool_calls");
    assert.equal((called.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments, '{"id":12345678901234567890}');
  } finally {
    await s.shutdown();
  }
});

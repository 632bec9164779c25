/**
 * A model that opens its own `<think>` block (Qwen3's shape: the prompt does not open it) reasons
 * before a forced tool call or a schema's answer, under `--reasoning-parser think`: the grammar may
 * start at once or after the reasoning (engine `MAY_THINK`), as vLLM constrains only what follows the
 * reasoning. Before, the grammar held the first token, so such a model could not reason at all.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { grammarComplete, grammarFeed, grammarStart, MAY_THINK, type OutputGrammar } from "../../src/engine/grammar.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath, THOUGHTS, TOOLS } from "./reasoning-model.ts";

type WithReasoning = { reasoning_content?: string | null };
const REASONING = THOUGHTS.join("");

async function withClient(fn: (client: OpenAI) => Promise<void>): Promise<void> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser: "think" });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

test("submitChat() with a forced tool call lets a model that opens its own <think> reason first, then holds the call", async () => {
  await withClient(async (client) => {
    const r = await client.chat.completions.create({
      model: "reasoner", messages: [{ role: "user", content: "What is the weather?" }], tools: TOOLS, tool_choice: "required", max_tokens: 200, temperature: 0,
    });
    const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.equal(m.reasoning_content, REASONING, "the reasoning was written, not cut by the grammar");
    assert.ok((m.tool_calls?.length ?? 0) >= 1, JSON.stringify(m));
    for (const c of m.tool_calls ?? []) {
      assert.ok(c.type === "function" && ["get_weather", "get_time"].includes(c.function.name), JSON.stringify(c));
      JSON.parse(c.function.arguments);
    }
    // (Past the reasoning the scripted model's own text is barred, so what it writes under the mask is
    // arbitrary but held: calls, and the opening of one more where max_tokens cut it.)
    assert.match(m.content ?? "", /^(\n\n)?(<tool_call>|$)/, "nothing but calls after the reasoning");
    // A model that answers at once is still held to the call (the grammar's own start is open too).
    const direct = await client.chat.completions.create({
      model: "reasoner", messages: [{ role: "user", content: "What is the weather!" }], tools: TOOLS, tool_choice: "required", max_tokens: 200, temperature: 0,
    });
    const d = direct.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.ok(!d.reasoning_content, JSON.stringify(d));
    assert.ok((d.tool_calls?.length ?? 0) >= 1, JSON.stringify(d));
    for (const c of d.tool_calls ?? []) assert.ok(c.type === "function" && ["get_weather", "get_time"].includes(c.function.name), JSON.stringify(c));
  });
});

test("submitChat() with a json_schema answer lets a model reason in its own <think> block first; the answer after it follows the schema", async () => {
  await withClient(async (client) => {
    const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
    const r = await client.chat.completions.create({
      model: "reasoner", messages: [{ role: "user", content: "What is the weather?" }], max_tokens: 120, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "s", schema, strict: true } },
    });
    const m = r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning;
    assert.equal(m.reasoning_content, REASONING);
    if (r.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(m.content ?? "").ok, "boolean", m.content ?? "");
    else assert.match(m.content ?? "", /^\{/, "what follows the reasoning starts the schema's object");
  });
});

test("grammarStart() with MAY_THINK takes the grammar at once or after a whole <think> block and a blank line, nothing else", () => {
  const g: OutputGrammar = { kind: "json", schema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false } };
  const whole = (text: string) => grammarComplete(grammarFeed(grammarStart(g, MAY_THINK), text));
  const alive = (text: string) => grammarFeed(grammarStart(g, MAY_THINK), text).length > 0;
  assert.ok(whole('{"ok":true}'));
  assert.ok(whole('<think>any {text} </thi at all</think>\n\n{"ok":false}'));
  assert.ok(alive("<think>still thinking"));
  assert.ok(!alive('x{"ok":true}'), "text before the grammar that opens no <think> is refused");
  assert.ok(!alive("<think>done</think>\n\nplain"), "after the reasoning the grammar holds");
  assert.ok(!whole("<think>done</think>\n\n"), "a reasoning block alone does not end the answer");
  assert.ok(!alive('{"ok":true}<think>'), "no reasoning after the answer");
});

test("a server with reasoningParser auto reads <think> reasoning where the chat template opens <think>, as with think", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser: "auto" });
  try {
    assert.equal(s.reasoningParser, "think");
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const r = await client.chat.completions.create({ model: "reasoner", messages: [{ role: "user", content: "What is the weather?" }], max_tokens: 200, temperature: 0 });
    assert.equal((r.choices[0].message as OpenAI.ChatCompletionMessage & WithReasoning).reasoning_content, REASONING);
  } finally {
    await s.shutdown();
  }
});

/**
 * Messages API details a Claude Code-like loop meets, through the real `@anthropic-ai/sdk` client:
 *
 * - A message the token budget ends reports `stop_reason: "max_tokens"`, even right after a complete
 *   `tool_use` block (the SDK's tool runner then stops rather than running the calls); a call the
 *   budget cut short is dropped, neither a `tool_use` block nor its markup as text (one whose JSON was
 *   whole, only its closing tag missing, is a call).
 * - `thinking.display: "omitted"` (Claude Code sends it): the model still reasons, but thinking
 *   blocks come back with an empty `thinking` and a signature, streamed without `thinking_delta`.
 * - Thinking blocks carry a signature, streamed as a `signature_delta` just before the block's
 *   `content_block_stop`; one sent back (ours, empty, or another server's) is never a 400, and an
 *   omitted block sent back gets its reasoning back from its signature.
 *
 * The reasoning model (tests/serve/reasoning-model.ts) answers "…?" with thinking, "\n\nChecking."
 * and two calls; the cut model here answers "…!" with "Let me check." and one call written in pieces.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import { loadModel } from "../../src/model/load.ts";
import { chatRequestOfMessages } from "../../src/serve/messages.ts";
import { MessagesRequestSchema } from "../../src/serve/messages-schema.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import * as reasoner from "./reasoning-model.ts";

type Server = Awaited<ReturnType<typeof startServer>>;

const dir = mkdtempSync(`${tmpdir()}/messages-polish-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const HALVES = ['\n{"name": "get_weather", "arguments": ', '{"city": "Paris"}}\n'];
const cutPath = `${dir}/cut.gguf`;
await writeScriptedModel(cutPath, {
  pieces: ["Let me check.", "<tool_call>", ...HALVES, "</tool_call>"],
  next: [["!", "Let me check."], ["Let me check.", "<tool_call>"], ["<tool_call>", HALVES[0]], [HALVES[0], HALVES[1]], [HALVES[1], "</tool_call>"], ["</tool_call>", "<eos>"]],
  chatTemplate: "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant{{ messages[-1].content[-1:] }}{% endif %}",
  contextLength: 512,
});
const cutModel = await loadModel(cutPath);

async function serve(which: "cut" | "reasoner", fn: (client: Anthropic) => Promise<void>) {
  const s: Server = which === "cut"
    ? await startServer({ modelPath: cutPath, model: cutModel, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 })
    : await startServer({ modelPath: reasoner.modelPath, model: reasoner.model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, reasoningParser: "think" });
  try {
    await fn(new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

const WEATHER: Anthropic.Tool[] = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
const BOTH: Anthropic.Tool[] = [...WEATHER, { name: "get_time", input_schema: { type: "object", properties: {} } }];

/** The message whole, and streamed with its events. */
async function both(client: Anthropic, body: Anthropic.MessageCreateParamsNonStreaming) {
  const whole = await client.messages.create(body);
  const events: Anthropic.MessageStreamEvent[] = [];
  const stream = client.messages.stream(body);
  stream.on("streamEvent", (e) => events.push(e));
  const streamed = await stream.finalMessage();
  return { whole, streamed, events };
}

test("Messages: a message max_tokens ends right after a complete tool_use reports max_tokens, whole and streamed", async () => {
  await serve("cut", async (client) => {
    const body = { model: "cut", tools: WEATHER, messages: [{ role: "user" as const, content: "Weather!" }] };
    const done = await client.messages.create({ ...body, max_tokens: 6 });
    assert.equal(done.stop_reason, "tool_use");
    // Five tokens: the text and the whole call, but the budget, not the model, ended the message.
    const { whole, streamed } = await both(client, { ...body, max_tokens: 5 });
    for (const m of [whole, streamed]) {
      assert.equal(m.stop_reason, "max_tokens");
      assert.equal(m.usage.output_tokens, 5);
      assert.deepEqual(m.content.map((b) => b.type), ["text", "tool_use"]);
      assert.deepEqual((m.content[1] as Anthropic.ToolUseBlock).input, { city: "Paris" });
    }
  });
});

test("Messages: a call max_tokens cuts short is dropped (no tool_use, no <tool_call> text), the text before it kept", async () => {
  await serve("cut", async (client) => {
    const body = { model: "cut", tools: WEATHER, messages: [{ role: "user" as const, content: "Weather!" }] };
    // Two tokens: the call's opening tag; three: half its JSON.
    for (const max_tokens of [2, 3]) {
      const { whole, streamed, events } = await both(client, { ...body, max_tokens });
      for (const m of [whole, streamed]) {
        assert.equal(m.stop_reason, "max_tokens");
        assert.equal(m.usage.output_tokens, max_tokens);
        assert.deepEqual(m.content.map((b) => (b.type === "text" ? { type: b.type, text: b.text } : b)), [{ type: "text", text: "Let me check." }], `max_tokens ${max_tokens}`);
      }
      assert.ok(!JSON.stringify(events).includes("tool_call"), JSON.stringify(events));
    }
    // Four: the call's JSON is whole, only its closing tag missing: a call, its input exact.
    const { whole: four } = await both(client, { ...body, max_tokens: 4 });
    assert.equal(four.stop_reason, "max_tokens");
    assert.deepEqual(four.content.map((b) => (b.type === "tool_use" ? b.input : b.type)), ["text", { city: "Paris" }]);
    // Without tools the text is the model's text: nothing is dropped.
    const plain = await client.messages.create({ model: "cut", max_tokens: 3, messages: body.messages });
    assert.equal(plain.stop_reason, "max_tokens");
    assert.deepEqual(plain.content, [{ type: "text", text: 'Let me check.<tool_call>' + HALVES[0] }]);
  });
});

test('Messages: thinking display "omitted" returns thinking blocks with empty thinking and a signature, streamed without thinking_delta', async () => {
  await serve("reasoner", async (client) => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What now?" }];
    const thinking = { type: "enabled" as const, budget_tokens: 1024, display: "omitted" as const };
    const shown = await client.messages.create({ model: "reasoner", max_tokens: 1100, tools: BOTH, messages, thinking: { type: "enabled", budget_tokens: 1024 } });
    const { whole, streamed, events } = await both(client, { model: "reasoner", max_tokens: 1100, tools: BOTH, messages, thinking });
    for (const m of [whole, streamed]) {
      assert.equal(m.stop_reason, "tool_use");
      assert.deepEqual(m.content.map((b) => b.type), ["thinking", "text", "tool_use", "tool_use"]);
      const block = m.content[0] as Anthropic.ThinkingBlock;
      assert.equal(block.thinking, "");
      assert.ok(block.signature.length > 0);
      // The model reasoned as much as before: only what is shown changed.
      assert.equal(m.usage.output_tokens, shown.usage.output_tokens);
    }
    const deltas = events.flatMap((e) => (e.type === "content_block_delta" ? [e.delta.type] : []));
    assert.ok(!deltas.includes("thinking_delta"), deltas.join());
    assert.deepEqual(events.slice(1, 4).map((e) => e.type === "content_block_delta" ? e.delta.type : e.type), ["content_block_start", "signature_delta", "content_block_stop"]);

    // Sent back (as Claude Code does), the empty block gets its reasoning back from its signature.
    const back = MessagesRequestSchema.parse({ model: "reasoner", max_tokens: 1100, messages: [...messages, { role: "assistant", content: whole.content }, { role: "user", content: "Go on." }] });
    const assistant = chatRequestOfMessages(back).messages[1] as { reasoning_content?: string };
    assert.equal(assistant.reasoning_content, (shown.content[0] as Anthropic.ThinkingBlock).thinking);
  });
});

test("Messages: thinking blocks carry a signature, streamed as a signature_delta before content_block_stop; any signature sent back is taken", async () => {
  await serve("reasoner", async (client) => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What now?" }];
    const body = { model: "reasoner", max_tokens: 1100, tools: BOTH, messages, thinking: { type: "enabled" as const, budget_tokens: 1024 } };
    const { whole, streamed, events } = await both(client, body);
    const block = whole.content[0] as Anthropic.ThinkingBlock;
    assert.match(block.thinking, /Thought 35\.$/);
    assert.ok(block.signature.length > 0);
    assert.deepEqual(streamed.content[0], block);
    const stop = events.findIndex((e) => e.type === "content_block_stop");
    const before = events[stop - 1];
    assert.ok(before.type === "content_block_delta" && before.delta.type === "signature_delta", JSON.stringify(before));
    assert.equal(events.filter((e) => e.type === "content_block_delta" && e.delta.type === "signature_delta").length, 1);

    const uses = whole.content.filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    const results: Anthropic.ContentBlockParam[] = uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: "ok" }));
    const sentBack: [string, string][] = [[block.thinking, block.signature], [block.thinking, ""], [block.thinking, "EqoBCkgIARABGAIiQL2UoU0b1OHYi+foreign"], ["", "text:!!not base64!!"], ["", ""]];
    for (const [thinking, signature] of sentBack) {
      const content = whole.content.map((b) => (b.type === "thinking" ? { ...b, thinking, signature } : b)) as Anthropic.ContentBlockParam[];
      const next = await client.messages.create({ ...body, messages: [...messages, { role: "assistant", content }, { role: "user", content: [...results, { type: "text", text: "Go on." }] }] });
      assert.equal(next.stop_reason, "end_turn", signature);
    }
  });
});

test('Messages: thinking.display takes "summarized", "omitted" and values this server does not know; a non-string is a 400 naming it', async () => {
  await serve("reasoner", async (client) => {
    const base = { model: "reasoner", max_tokens: 1100, messages: [{ role: "user" as const, content: "Hi." }] };
    for (const display of ["summarized", "omitted", null, "updates"]) {
      const r = await client.messages.create({ ...base, thinking: { type: "adaptive", display } as Anthropic.ThinkingConfigAdaptive });
      assert.equal(r.stop_reason, "end_turn", String(display));
    }
    await assert.rejects(client.messages.create({ ...base, thinking: { type: "adaptive", display: 1 } as unknown as Anthropic.ThinkingConfigAdaptive }), (e: unknown) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.match(e.apiMessage ?? "", /thinking\.display/);
      return true;
    });
  });
});

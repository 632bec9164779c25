/**
 * A request as Claude Code sends it (tests/serve/fixtures/claude-code-2.1.332-messages-request.json:
 * system blocks with cache_control, a "system" message after the user's, custom tools with
 * defer_loading, adaptive thinking, context_management, output_config, metadata.user_id carrying its
 * session id), replayed against the real server as Claude Code does: streamed, then the next turn
 * with the answer and a new user message appended. The scripted model (tests/serve/scripted-server.ts)
 * answers "Sunny." to a conversation whose last message ends in ".".
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";
import { postNamedEvents } from "./sse-events.ts";

type Json = Record<string, unknown>;
const captured = JSON.parse(readFileSync(`${projectRoot}/tests/serve/fixtures/claude-code-2.1.332-messages-request.json`, "utf8")) as Json & { messages: Json[] };

/** Posts `body` as Claude Code does (x-api-key, anthropic-version) and reads the stream's events. */
const streamed = (url: string, body: Json) =>
  postNamedEvents(`${url}/v1/messages`, body, { "x-api-key": "none", "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14" });

test("POST /v1/messages answers Claude Code's request streamed, and its next turn from the first turn's KV", async () => {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, kvRetention: "agent", modelPath, model });
  try {
    // Claude Code asks for 32000 tokens by default (4096 here: CLAUDE_CODE_MAX_OUTPUT_TOKENS); the scripted model's context is 2048.
    const body = { ...captured, max_tokens: 64 };
    const first = await streamed(s.url, body);
    assert.deepEqual(first.map((e) => e.name), ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
    const delta = first[2].data.delta as { type: string; text: string };
    assert.deepEqual(delta, { type: "text_delta", text: "Sunny." });
    const end = first[4].data as { delta: { stop_reason: string }; usage: { input_tokens: number; cache_read_input_tokens: number } };
    assert.equal(end.delta.stop_reason, "end_turn");

    const messages = [...captured.messages, { role: "assistant", content: [{ type: "text", text: "Sunny." }] }, { role: "user", content: [{ type: "text", text: "Thanks." }] }];
    const second = await streamed(s.url, { ...body, messages });
    const next = second[4].data as { delta: { stop_reason: string }; usage: { input_tokens: number; cache_read_input_tokens: number } };
    assert.equal(next.delta.stop_reason, "end_turn");
    // The same metadata.user_id (Claude Code's session) and prefix: the first turn's KV answers most of it.
    assert.ok(next.usage.cache_read_input_tokens >= end.usage.input_tokens - 64, JSON.stringify([end.usage, next.usage]));
  } finally {
    await s.shutdown();
  }
});

/**
 * The Messages API's streamed input usage: `message_start` splits the prompt into tokens read from
 * the prefix cache and the rest as the final `message_delta` (and the whole message) does, so a
 * client reading usage from the start of the stream (as Claude Code shows cache reads) sees the
 * cache hit.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";

interface Usage { input_tokens: number; cache_read_input_tokens: number; output_tokens: number }

test("/v1/messages streams message_start with the cache read the final usage reports", async () => {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, modelPath, model });
  try {
    const client = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });
    const content = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends.";
    const request = { model: "scripted", max_tokens: 4, messages: [{ role: "user" as const, content }] };
    const cold = await client.messages.create(request);
    assert.equal(cold.usage.cache_read_input_tokens, 0);
    const starts: Usage[] = [];
    const stream = client.messages.stream(request);
    for await (const event of stream) if (event.type === "message_start") starts.push({ ...event.message.usage } as Usage); // a copy: the SDK updates its snapshot from later events
    const final = await stream.finalMessage();
    assert.equal(starts.length, 1);
    const [start] = starts;
    assert.ok(start.cache_read_input_tokens > 0, `asked again, the prompt is read from the cache (start: ${JSON.stringify(start)})`);
    assert.equal(start.cache_read_input_tokens, final.usage.cache_read_input_tokens);
    assert.equal(start.input_tokens, final.usage.input_tokens);
    assert.equal(start.input_tokens + start.cache_read_input_tokens, cold.usage.input_tokens, "together, the whole prompt");
    assert.equal(start.output_tokens, 0);
  } finally {
    await s.shutdown();
  }
});

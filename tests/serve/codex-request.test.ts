/**
 * A request as Codex CLI sends it (tests/serve/fixtures/codex-0.171.0-responses-request.json:
 * function tools, a tool namespace, web_search, store false, encrypted reasoning asked for), replayed
 * against the real server as Codex does: streamed, then the next turn with the call and its output
 * appended to the same input. The scripted model (tests/serve/scripted-server.ts) calls get_weather
 * for a message ending in "!" and answers "Sunny." to one ending in ".".
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";
import { model, modelPath } from "./scripted-server.ts";
import { postNamedEvents } from "./sse-events.ts";

type Json = Record<string, unknown>;
const captured = JSON.parse(readFileSync(`${projectRoot}/tests/serve/fixtures/codex-0.171.0-responses-request.json`, "utf8")) as Json & { input: Json[] };

/** Posts `body` and reads the stream's events: each SSE event's name and its data. */
const streamed = (url: string, body: Json) => postNamedEvents(`${url}/v1/responses`, body, { accept: "text/event-stream" });

test("POST /v1/responses answers Codex CLI's request: a streamed call, then the next turn with its output, from the first turn's KV", async () => {
  // The scripted model's context is 2048 tokens; Codex's trimmed prompt takes 1755 of them (the template prints only tool names).
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, kvRetention: "agent", modelPath, model });
  try {
    const first = await streamed(s.url, captured);
    assert.deepEqual(first.slice(0, 2).map((e) => e.name), ["response.created", "response.in_progress"]);
    const done = first[first.length - 1];
    assert.equal(done.name, "response.completed");
    const response = done.data.response as Json & { output: Json[]; usage: Json; tools: Json[] };
    assert.equal(response.store, false);
    assert.deepEqual(response.tools, captured.tools, "the tools are echoed as given");
    const call = response.output.find((o) => o.type === "function_call")!;
    assert.equal(call.name, "get_weather");
    assert.deepEqual(first.map((e) => e.data.sequence_number), first.map((_, i) => i));

    // Codex keeps the conversation itself (store false): the next request repeats the input, then the
    // call as it came and the tool's output.
    const input = [...captured.input, call, { type: "function_call_output", call_id: call.call_id, output: "It is 21 degrees." }];
    const second = await streamed(s.url, { ...captured, input });
    const next = second[second.length - 1].data.response as Json & { output_text?: string; output: Json[]; usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } } };
    assert.equal(second[second.length - 1].name, "response.completed");
    const message = next.output.find((o) => o.type === "message") as { content: { text: string }[] };
    assert.equal(message.content[0].text, "Sunny.");
    // The same prompt_cache_key (Codex's session id) and prefix: the first turn's KV answers most of it.
    assert.ok(next.usage.input_tokens_details.cached_tokens >= (response.usage.input_tokens as number) - 64, JSON.stringify(next.usage));
  } finally {
    await s.shutdown();
  }
});

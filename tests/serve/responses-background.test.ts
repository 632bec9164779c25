/**
 * Background responses (`background: true`) through the real `openai` client against the real
 * server: polled until done, cancelled, streamed with the client hanging up and the stream resumed
 * with `starting_after`. The scripted model answers a message ending in "." with "Done." and one
 * ending in "~" with " a b a b …" until its token budget runs out.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";

async function withServer(fn: (client: OpenAI, url: string) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 1024 });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

/** Polls response `id` until it has finished. */
async function finished(client: OpenAI, id: string): Promise<OpenAI.Responses.Response> {
  for (let i = 0; i < 1000; i++) {
    const r = await client.responses.retrieve(id);
    if (r.status !== "queued" && r.status !== "in_progress") return r;
    await new Promise((wake) => setTimeout(wake, 10));
  }
  throw new Error(`Response ${id} did not finish`);
}

const rejects = async (p: Promise<unknown>, status: number, re: RegExp) => {
  const err = await p.then(() => null, (e: unknown) => e);
  assert.ok(err instanceof OpenAI.APIError && err.status === status, String(err));
  assert.match(err.message, re);
};

test("responses.create({ background: true }) answers queued at once; retrieve() follows it to completed, stored and continuable", async () => {
  await withServer(async (client) => {
    const started = await client.responses.create({ model: "looper", input: "Finish.", background: true });
    assert.ok(started.status === "queued" || started.status === "in_progress", started.status);
    assert.equal(started.background, true);
    assert.deepEqual(started.output, []);
    const done = await finished(client, started.id);
    assert.equal(done.status, "completed");
    assert.equal(done.output_text, "Done.");
    assert.equal(done.usage?.output_tokens, 2, "Done. and its end of text");
    const items = await client.responses.inputItems.list(started.id);
    assert.equal(items.data.length, 1);
    // The stored turn continues like any other.
    const next = await client.responses.create({ model: "looper", input: "Again.", previous_response_id: started.id });
    assert.equal(next.output_text, "Done.");
    assert.ok((next.usage?.input_tokens_details.cached_tokens ?? 0) > 0, "the first turn's KV was kept");
  });
});

test("responses.cancel() stops a background response: cancelled, tokens so far kept, and cancelling again returns it", async () => {
  await withServer(async (client) => {
    const started = await client.responses.create({ model: "looper", input: "Loop~", background: true, max_output_tokens: 6000 });
    await rejects(client.responses.create({ model: "looper", input: "Next.", previous_response_id: started.id }), 400, /is still in progress/);
    const cancelled = await client.responses.cancel(started.id);
    assert.equal(cancelled.status, "cancelled");
    assert.ok((cancelled.usage?.output_tokens ?? 0) < 6000, `stopped early: ${cancelled.usage?.output_tokens} tokens`);
    assert.equal((await client.responses.retrieve(started.id)).status, "cancelled");
    assert.deepEqual(await client.responses.cancel(started.id), cancelled);
    // Only background responses can be cancelled; unknown ones are not found.
    const plain = await client.responses.create({ model: "looper", input: "Finish." });
    await rejects(client.responses.cancel(plain.id), 400, /was not created with background = true/);
    await rejects(client.responses.cancel("resp_unknown"), 404, /not found/);
    await rejects(client.responses.create({ model: "looper", input: "Finish.", background: true, store: false }), 400, /must be stored/);
  });
});

test("a background response's stream survives the client hanging up, and retrieve({ stream, starting_after }) resumes it", async () => {
  await withServer(async (client) => {
    const stream = await client.responses.create({ model: "looper", input: "Loop~", background: true, stream: true, max_output_tokens: 300 });
    let id = "";
    let text = "";
    let last = -1;
    for await (const e of stream) {
      if (e.type === "response.created") id = e.response.id;
      last = e.sequence_number;
      if (e.type === "response.output_text.delta") {
        text += e.delta;
        break; // hang up
      }
    }
    assert.ok(id !== "" && text !== "");
    const resumed = await client.responses.retrieve(id, { stream: true, starting_after: last });
    const seqs: number[] = [];
    let final: OpenAI.Responses.ResponseStreamEvent | undefined;
    for await (const e of resumed) {
      seqs.push(e.sequence_number);
      if (e.type === "response.output_text.delta") text += e.delta;
      final = e;
    }
    assert.deepEqual(seqs, seqs.map((_, i) => last + 1 + i), "every event after the last one read, in order");
    assert.ok(final?.type === "response.incomplete", final?.type);
    assert.equal(final.response.usage?.output_tokens, 300, "the generation ran to its budget with no client listening");
    const message = final.response.output.find((it) => it.type === "message");
    assert.equal(text, message?.type === "message" && message.content[0].type === "output_text" ? message.content[0].text : null);
    assert.equal(text, " a b".repeat(150));
    // A plain stored response has no events to stream.
    const plain = await client.responses.create({ model: "looper", input: "Finish." });
    await rejects(client.responses.retrieve(plain.id, { stream: true }) as unknown as Promise<unknown>, 400, /has no events to stream/);
  });
});

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

/** Polls response `id` until it has finished (for up to 60 s: only a hang, on a loaded CI machine). */
async function finished(client: OpenAI, id: string): Promise<OpenAI.Responses.Response> {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
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
    // The message it was writing was cut: incomplete, as one cut by max_output_tokens is.
    assert.deepEqual(cancelled.output.map((it) => it.type === "message" ? it.status : it.type), cancelled.output.length > 0 ? ["incomplete"] : []);
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

test("a background response's stream numbers its events in order: response.in_progress before the first output events", async () => {
  await withServer(async (client) => {
    const stream = await client.responses.create({ model: "looper", input: "Loop~", background: true, stream: true, max_output_tokens: 5 });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), events.map((e) => `${e.sequence_number} ${e.type}`).join(", "));
    assert.deepEqual(events.slice(0, 4).map((e) => e.type), ["response.created", "response.queued", "response.in_progress", "response.output_item.added"]);
    const started = events[2];
    assert.ok(started.type === "response.in_progress");
    assert.deepEqual(started.response.output, [], "no output before its first item is added");
    // Resumed after the in_progress event, the stream neither repeats it nor skips anything.
    assert.ok(events[0].type === "response.created");
    const resumed = await client.responses.retrieve(events[0].response.id, { stream: true, starting_after: 2 });
    const seqs: number[] = [];
    for await (const e of resumed) seqs.push(e.sequence_number);
    assert.deepEqual(seqs, events.slice(3).map((e) => e.sequence_number));
  });
});

test("POST /v1/responses refuses background = true when the server keeps no responses (--max-stored-responses 0)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 1024, maxStoredResponses: 0 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    await rejects(client.responses.create({ model: "looper", input: "Finish.", background: true }), 400, /--max-stored-responses 0/);
    assert.equal((await client.responses.create({ model: "looper", input: "Finish." })).output_text, "Done.");
  } finally {
    await s.shutdown();
  }
});

test("respondJson() keeps nothing of a whole response whose client hung up: not stored, its conversation not extended", async () => {
  await withServer(async (client, url) => {
    const conversation = await client.conversations.create({ items: [{ role: "user", content: "Hello." }] });
    const hangUp = new AbortController();
    const sent = fetch(`${url}/v1/responses`, {
      method: "POST", headers: { "content-type": "application/json" }, signal: hangUp.signal,
      body: JSON.stringify({ model: "looper", input: "Loop~", conversation: conversation.id, max_output_tokens: 6000 }),
    }).catch((e: unknown) => e);
    // Hung up once the generation has started (the session's tokens are being written).
    for (let i = 0; i < 500; i++) {
      const metrics = await (await fetch(`${url}/metrics`)).text();
      if (/vllm:num_requests_running\{[^}]*\} 1/.test(metrics)) break;
      await new Promise((wake) => setTimeout(wake, 10));
    }
    hangUp.abort();
    assert.ok((await sent) instanceof Error);
    // Once the server has seen it go, the conversation holds what it held before, as after a stream hung up.
    for (let i = 0; i < 500; i++) {
      const metrics = await (await fetch(`${url}/metrics`)).text();
      if (/vllm:num_requests_running\{[^}]*\} 0/.test(metrics)) break;
      await new Promise((wake) => setTimeout(wake, 10));
    }
    await new Promise((wake) => setTimeout(wake, 50));
    const items = await client.conversations.items.list(conversation.id, { order: "asc" });
    assert.deepEqual(items.data.map((it) => it.type === "message" ? it.role : it.type), ["user"]);
    const next = await client.responses.create({ model: "looper", input: "Finish.", conversation: conversation.id });
    assert.equal(next.output_text, "Done.");
  });
});

/** namedEventStream() and completeStream(): events as SSE bytes; a client hanging up cancels; a failure while writing ends the stream instead of leaving it open. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import type { GenerateResult, RequestHandle } from "../../src/engine/engine-types.ts";
import { namedEventStream } from "../../src/serve/event-stream.ts";
import type { ServeContext, Submitted } from "../../src/serve/openai.ts";
import { completeStream } from "../../src/serve/respond.ts";

function fakeHandle(): RequestHandle & { cancelled: number } {
  const h = {
    id: 1, cancelled: 0, stream: (async function* () {})(), result: new Promise<GenerateResult>(() => {}),
    cancel() {
      h.cancelled++;
    },
  };
  return h;
}

test("namedEventStream() errors the stream (and cancels the request) when run() throws while the client is there", async () => {
  const handle = fakeHandle();
  let ran!: () => void;
  const finished = new Promise<void>((r) => (ran = r));
  const stream = namedEventStream<{ type: string }>(handle, async (send) => {
    send([{ type: "first" }]);
    await Promise.resolve();
    ran();
    throw new Error("formatting bug");
  });
  const reader = stream.getReader();
  const first = await reader.read();
  assert.equal(new TextDecoder().decode(first.value), 'event: first\ndata: {"type":"first"}\n\n');
  await finished;
  await new Promise((r) => setTimeout(r, 0));
  // An errored stream's read() is already rejected; an open one's is pending and loses the race.
  const open = Symbol("still open");
  await assert.rejects(Promise.race([reader.read(), Promise.resolve(open)]).then((r) => assert.notEqual(r, open, "the stream is still open")), /formatting bug/);
  assert.equal(handle.cancelled, 1);
});

test("namedEventStream() cancels the request when the client hangs up, and closes after run() when it stays", async () => {
  const gone = fakeHandle();
  const hungUp = namedEventStream<{ type: string }>(gone, () => new Promise<void>(() => {}));
  await hungUp.cancel();
  assert.equal(gone.cancelled, 1);
  const stays = fakeHandle();
  const text = await new Response(namedEventStream<{ type: string }>(stays, (send) => Promise.resolve(send([{ type: "a" }, { type: "b" }])))).text();
  assert.equal(text, 'event: a\ndata: {"type":"a"}\n\nevent: b\ndata: {"type":"b"}\n\n');
  assert.equal(stays.cancelled, 0);
});

test("completeStream() ends a chat stream with an error event and [DONE] (and cancels the request) when the generation's stream throws", async () => {
  const handle = fakeHandle();
  handle.stream = (async function* () {
    yield { text: "Hi", tokenIds: [5] };
    throw new Error("stream broke");
  })() as RequestHandle["stream"];
  const ctx = { modelName: "m", tokenizer: { decode: () => "", encode: () => [] } } as unknown as ServeContext;
  const submitted: Submitted = { kind: "chat", handles: [handle], perPrompt: 1, n: 1, output: null };
  const text = await new Response(completeStream(ctx, submitted, false)).text();
  const events = text.split("\n\n").filter((e) => e !== "");
  assert.equal(events.at(-1), "data: [DONE]", text);
  assert.match(events.at(-2)!, /^data: \{"error":\{"message":"The server failed while streaming the answer: stream broke","type":"server_error"/);
  assert.ok(handle.cancelled > 0, "the request is cancelled");
});

/**
 * Responses and Conversations API edge cases, through the real `openai` client (and plain HTTP where
 * the client hides the wire) against the real server serving the looper model
 * (tests/serve/looper-model.ts: "….": "Done."; "…~": " a b a b …" until the budget runs out).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { eventually } from "../eventually.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";
import type { RequestHandle, StreamDelta } from "../../src/engine/engine-types.ts";
import type { ChatOutputOptions } from "../../src/serve/chat-output.ts";
import { ConversationStore } from "../../src/serve/conversation-store.ts";
import type { ServeContext } from "../../src/serve/openai.ts";
import { ResponseStore } from "../../src/serve/response-store.ts";
import type { ResponsesState, ResponseTurn } from "../../src/serve/responses.ts";
import { BackgroundRuns } from "../../src/serve/responses-background.ts";

async function withServer(fn: (client: OpenAI, url: string) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 1024 });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

/** The status and error of a request that must fail. */
async function failure(p: Promise<unknown>): Promise<{ status: number; message: string; param: string | null | undefined }> {
  const err = await p.then(() => null, (e: unknown) => e);
  assert.ok(err instanceof OpenAI.APIError, `expected an API error, got ${String(err)}`);
  return { status: err.status!, message: err.message, param: err.param };
}

test("input_items and conversation items page back with before, as OpenAI's cursor lists do", async () => {
  await withServer(async (client) => {
    const input = ["a.", "b.", "c.", "d.", "e."].map((content) => ({ role: "user" as const, content }));
    const r = await client.responses.create({ model: "looper", input });
    const all = (await client.responses.inputItems.list(r.id, { order: "asc" })).data.map((it) => it.id!);
    assert.equal(all.length, 5);
    // The limit items just before the cursor, in the order asked for.
    const back = await client.responses.inputItems.list(r.id, { order: "asc", limit: 2, before: all[3] } as OpenAI.Responses.InputItemListParams);
    assert.deepEqual(back.data.map((it) => it.id), [all[1], all[2]]);
    assert.equal(back.has_more, true);
    const first = await client.responses.inputItems.list(r.id, { order: "asc", before: all[1] } as OpenAI.Responses.InputItemListParams);
    assert.deepEqual(first.data.map((it) => it.id), [all[0]]);
    assert.equal(first.has_more, false);
    const between = await client.responses.inputItems.list(r.id, { order: "desc", after: all[4], before: all[1] } as OpenAI.Responses.InputItemListParams);
    assert.deepEqual(between.data.map((it) => it.id), [all[3], all[2]]);
    const e = await failure(client.responses.inputItems.list(r.id, { before: "msg_nope" } as OpenAI.Responses.InputItemListParams));
    assert.equal(e.status, 400);
    assert.equal(e.param, "before");
    assert.match(e.message, /msg_nope/);

    const conv = await client.conversations.create({ items: input });
    const items = (await client.conversations.items.list(conv.id, { order: "desc" })).data.map((it) => (it as { id: string }).id);
    const page = await client.conversations.items.list(conv.id, { order: "desc", limit: 1, before: items[2] } as OpenAI.Conversations.ItemListParams);
    assert.deepEqual(page.data.map((it) => (it as { id: string }).id), [items[1]]);
  });
});

test("POST /v1/responses refuses a function_call_output whose call_id no earlier call has, as OpenAI does", async () => {
  await withServer(async (client) => {
    const call = { type: "function_call" as const, call_id: "call_1", name: "get_weather", arguments: "{}" };
    const e = await failure(client.responses.create({ model: "looper", input: [{ role: "user", content: "Hi." }, { type: "function_call_output", call_id: "call_x", output: "Rainy." }] }));
    assert.equal(e.status, 400);
    assert.equal(e.param, "input[1].call_id");
    assert.match(e.message, /No tool call found .*'call_x'/);
    // Its call given earlier in the input, or in the response it continues, the output is answered.
    const first = await client.responses.create({ model: "looper", input: [{ role: "user", content: "Hi." }, call, { type: "function_call_output", call_id: "call_1", output: "Rainy." }] });
    assert.equal(first.status, "completed");
    const next = await client.responses.create({ model: "looper", previous_response_id: first.id, input: [{ type: "function_call_output", call_id: "call_1", output: "Still." }] });
    assert.equal(next.status, "completed");
    // And in a conversation holding the call.
    const conv = await client.conversations.create({ items: [{ role: "user", content: "Hi." }, call] });
    const inConv = await client.responses.create({ model: "looper", conversation: conv.id, input: [{ type: "function_call_output", call_id: "call_1", output: "Rainy." }] });
    assert.equal(inConv.status, "completed");
    const stray = await failure(client.responses.create({ model: "looper", conversation: conv.id, input: [{ type: "function_call_output", call_id: "call_2", output: "Rainy." }] }));
    assert.equal(stray.status, 400);
  });
});

test("a deleted background response's events are gone too: streaming it again is a 404", async () => {
  await withServer(async (client, url) => {
    const started = await client.responses.create({ model: "looper", input: "Finish.", background: true });
    await eventually(async () => (await client.responses.retrieve(started.id)).status, (st) => st === "completed");
    const replay = await fetch(`${url}/v1/responses/${started.id}?stream=true`);
    assert.equal(replay.status, 200);
    assert.match(await replay.text(), /response\.completed/);
    await client.responses.delete(started.id);
    const gone = await fetch(`${url}/v1/responses/${started.id}?stream=true`);
    assert.equal(gone.status, 404, await gone.text());
  });
});

test("metadata past OpenAI's bounds is refused naming the bound and the key", async () => {
  await withServer(async (client) => {
    const long = "k".repeat(65);
    const key = await failure(client.responses.create({ model: "looper", input: "Hi.", metadata: { [long]: "v" } }));
    assert.equal(key.status, 400);
    assert.match(key.message, /metadata keys may be at most 64 characters, got the key "k{65}" \(65 characters\)/);
    const value = await failure(client.responses.create({ model: "looper", input: "Hi.", metadata: { k: "v".repeat(513) } }));
    assert.equal(value.param, "metadata.k");
    assert.match(value.message, /at most 512 characters, got 513/);
    const many = await failure(client.conversations.create({ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }));
    assert.match(many.message, /at most 16 keys, got 17/);
    const ok = await client.responses.create({ model: "looper", input: "Hi.", metadata: { ["k".repeat(64)]: "v".repeat(512) } });
    assert.equal(ok.status, "completed");
  });
});

test("tool_choice allowed_tools without function tools is refused as allowing, not forcing, a call", async () => {
  await withServer(async (client) => {
    const e = await failure(client.responses.create({ model: "looper", input: "Hi.", tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "f" }] } }));
    assert.equal(e.status, 400);
    assert.equal(e.param, "tool_choice");
    assert.match(e.message, /^400 Allowing tool calls with tool_choice/);
  });
});

test("a background response whose output fails to build is stored as failed, and its generation stopped; the server lives on", async () => {
  let cancelled = false;
  const handle: RequestHandle = {
    id: 1,
    stream: (async function* () {
      yield { text: "Hi", tokenIds: [1] } satisfies StreamDelta;
      throw new Error("a parser bug");
    })(),
    result: new Promise(() => {}),
    cancel: () => void (cancelled = true),
  };
  const output: ChatOutputOptions = { reasoning: false, startsInReasoning: false, toolCalls: false, parallelToolCalls: true };
  const turn: ResponseTurn = {
    id: "resp_bug", submitted: { kind: "chat", handles: [handle], perPrompt: 1, n: 1, output }, shell: { id: "resp_bug", background: true },
    store: true, inputItems: [], input: [], previousId: null, conversation: null, sessionId: undefined, maxToolCalls: Infinity,
    namespaceOf: new Map(), logprobs: false,
  };
  const runs = new BackgroundRuns();
  const state: ResponsesState = { responses: new ResponseStore(8), conversations: new ConversationStore(8), background: runs };
  let ended = 0;
  runs.start({} as ServeContext, state, turn, () => ended++);
  const done = await runs.cancel("resp_bug");
  assert.equal(done?.status, "failed");
  assert.match(String((done?.error as { message: string }).message), /a parser bug/);
  assert.ok(cancelled, "the generation was stopped");
  assert.equal(ended, 1);
  assert.equal(state.responses.get("resp_bug")?.response.status, "failed");
  assert.equal(runs.running("resp_bug"), false);
});

test("responses.create() without input answers a conversation as it stands, as OpenAI's optional input allows", async () => {
  await withServer(async (client) => {
    const conv = await client.conversations.create({});
    await client.conversations.items.create(conv.id, { items: [{ type: "message", role: "user", content: "Finish." }] });
    const r = await client.responses.create({ model: "looper", conversation: conv.id });
    assert.equal(r.output_text, "Done.");
    assert.deepEqual((await client.responses.inputItems.list(r.id)).data, []);
    const items = (await client.conversations.items.list(conv.id, { order: "asc" })).data;
    assert.deepEqual(items.map((it) => it.type), ["message", "message"], "the answer was appended");
    // A stored response continued as it stands.
    const next = await client.responses.create({ model: "looper", previous_response_id: r.id });
    assert.equal(next.status, "completed");
    // With nothing to answer, input is still required.
    const empty = await client.conversations.create({});
    for (const body of [{}, { conversation: empty.id }, { input: null }]) {
      const e = await failure(client.responses.create({ model: "looper", ...body } as OpenAI.Responses.ResponseCreateParamsNonStreaming));
      assert.equal(e.status, 400, JSON.stringify(body));
      assert.equal(e.param, "input");
      assert.match(e.message, /input is required/);
    }
  });
});

test("a background response cancelled in a conversation is kept as cancelled, and leaves the conversation as it was", async () => {
  await withServer(async (client) => {
    const conv = await client.conversations.create({ items: [{ type: "message", role: "user", content: "Finish." }] });
    const started = await client.responses.create({ model: "looper", conversation: conv.id, input: "Loop~", background: true, max_output_tokens: 6000 });
    const cancelled = await client.responses.cancel(started.id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal((await client.responses.retrieve(started.id)).status, "cancelled");
    const items = (await client.conversations.items.list(conv.id, { order: "asc" })).data;
    assert.deepEqual(items.map((it) => (it as OpenAI.Conversations.Message).content[0]), [{ type: "input_text", text: "Finish." }]);
    // A turn that completes is appended as before.
    const next = await client.responses.create({ model: "looper", conversation: conv.id, input: "Again.", background: true });
    await eventually(async () => (await client.responses.retrieve(next.id)).status, (st) => st === "completed");
    assert.equal((await client.conversations.items.list(conv.id)).data.length, 3);
  });
});

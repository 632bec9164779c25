/**
 * The Responses API's pure parts: input items → chat messages (responses-input.ts), chat answer parts
 * → output items and events (responses-output.ts), the stored-response LRU (response-store.ts) and the
 * conversation store (conversation-store.ts).
 */
import assert from "node:assert/strict";
import { ConversationStore } from "../../src/serve/conversation-store.ts";
import { itemsSize, jsonSize, ResponseStore, type StoredResponse, UnknownResponseError } from "../../src/serve/response-store.ts";
import { inputItemsOf, itemsToMessages } from "../../src/serve/responses-input.ts";
import { ResponseOutput } from "../../src/serve/responses-output.ts";
import type { InputItem } from "../../src/serve/responses-schema.ts";
import type { TokenLogprob } from "../../src/engine/logprobs.ts";
import { test } from "../harness.ts";

test("itemsToMessages() makes a turn's reasoning, text and calls one assistant message, and names each call's output", () => {
  const items: InputItem[] = [
    { role: "developer", content: "Use tools." },
    { role: "user", content: [{ type: "input_text", text: "Weather " }, { type: "input_text", text: "in Paris?" }] },
    { type: "reasoning", summary: [{ type: "summary_text", text: "short" }], content: [{ type: "reasoning_text", text: "I should call." }] },
    { type: "message", role: "assistant", content: [{ type: "output_text", text: "Checking." }] },
    { type: "function_call", call_id: "c1", name: "get_weather", arguments: '{"city":"Paris"}' },
    { type: "function_call", call_id: "c2", name: "get_time", arguments: "{}" },
    { type: "function_call_output", call_id: "c2", output: "12:00" },
    { type: "function_call_output", call_id: "c0", output: [{ type: "input_text", text: "late" }] },
    { role: "assistant", content: "Done." },
    { role: "assistant", content: [{ type: "refusal", refusal: "No." }] },
  ];
  const before = [{ role: "assistant", content: null, tool_calls: [{ id: "c0", type: "function", function: { name: "earlier", arguments: "{}" } }] }];
  assert.deepEqual(itemsToMessages(items, before as never), [
    { role: "developer", content: "Use tools." },
    { role: "user", content: "Weather in Paris?" },
    {
      role: "assistant", content: "Checking.", reasoning_content: "I should call.",
      tool_calls: [
        { id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
        { id: "c2", type: "function", function: { name: "get_time", arguments: "{}" } },
      ],
    },
    { role: "tool", tool_call_id: "c2", content: "12:00", name: "get_time" },
    { role: "tool", tool_call_id: "c0", content: "late", name: "earlier" },
    { role: "assistant", content: "Done." },
    { role: "assistant", content: "No." },
  ]);
  // A turn of calls alone has no content; reasoning alone has empty content; the summary stands in for missing text.
  assert.deepEqual(itemsToMessages([{ type: "function_call", call_id: "x", name: "f", arguments: "{}" }]), [
    { role: "assistant", content: null, tool_calls: [{ id: "x", type: "function", function: { name: "f", arguments: "{}" } }] },
  ]);
  assert.deepEqual(itemsToMessages([{ type: "reasoning", summary: [{ type: "summary_text", text: "hm" }] }, { role: "user", content: "Go." }]), [
    { role: "assistant", content: "", reasoning_content: "hm" },
    { role: "user", content: "Go." },
  ]);
});

test("inputItemsOf() lists string input as one user message and gives every item an id", () => {
  const [one] = inputItemsOf("Hi.");
  assert.equal(one.type, "message");
  assert.equal(one.role, "user");
  assert.deepEqual(one.content, [{ type: "input_text", text: "Hi." }]);
  assert.match(one.id as string, /^msg_/);
  const listed = inputItemsOf([{ id: "mine", role: "assistant", content: "Yo." }, { type: "function_call_output", call_id: "c", output: "1" }] as never);
  assert.equal(listed[0].id, "mine");
  assert.deepEqual(listed[0].content, [{ type: "output_text", text: "Yo." }]);
  assert.match(listed[1].id as string, /^fco_/);
});

test("ResponseOutput builds items and numbered events; whitespace before a call is dropped, an answer of whitespace kept", () => {
  const out = new ResponseOutput();
  const events = [
    ...out.push([{ kind: "reasoning", text: "Think" }, { kind: "reasoning", text: "ing." }, { kind: "content", text: "\n\n" }]),
    ...out.push([{ kind: "content", text: "Hello" }, { kind: "content", text: " world" }, { kind: "content", text: "\n" }]),
    ...out.push([{ kind: "call", call: { name: "f", arguments: '{"a":1}' } }, { kind: "content", text: " " }]),
    ...out.finish(true),
  ];
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.deepEqual(out.items.map((i) => i.type), ["reasoning", "message", "function_call"]);
  assert.equal(out.reasoningText, "Thinking.");
  assert.equal(out.outputText, "\n\nHello world\n", "held whitespace before text is kept");
  assert.deepEqual(out.calls.map((c) => c.name), ["f"]);
  assert.deepEqual(events.map((e) => e.type), [
    "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
    "response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
    "response.output_text.done", "response.content_part.done", "response.output_item.done",
    "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
  ]);
  const msgDone = events.filter((e) => e.type === "response.output_item.done")[1];
  assert.equal((msgDone.item as { status: string }).status, "completed");

  const blank = new ResponseOutput();
  blank.push([{ kind: "content", text: "  " }]);
  blank.finish(true);
  assert.equal(blank.outputText, "  ");
  const cut = new ResponseOutput();
  cut.push([{ kind: "content", text: "Partial" }]);
  cut.finish(false);
  assert.equal(cut.items[0].status, "incomplete");
  const one = new ResponseOutput(1);
  one.push([{ kind: "call", call: { name: "a", arguments: "{}" } }, { kind: "call", call: { name: "b", arguments: "{}" } }]);
  assert.deepEqual(one.calls.map((c) => c.name), ["a"], "max_tool_calls keeps the first");
});

test("ResponseOutput gives a text delta the log probabilities of the tokens that made it, not those of reasoning or calls", () => {
  const lp = (id: number): TokenLogprob => ({ id, logprob: -id, rank: 1, top: [] });
  const out = new ResponseOutput(Infinity, (lps) => lps.map((l) => ({ token: String(l.id), logprob: l.logprob })));
  const events = [
    ...out.push([{ kind: "reasoning", text: "Hmm." }], [lp(1)]),
    ...out.push([], [lp(2)]), // a token whose text the parser holds back
    ...out.push([{ kind: "content", text: "\n" }], [lp(3)]),
    ...out.push([{ kind: "content", text: "Hi" }], [lp(4)]),
    ...out.push([{ kind: "call", call: { name: "f", arguments: "{}" } }], [lp(5)]),
    ...out.push([{ kind: "content", text: "Bye" }], [lp(6)]),
    ...out.finish(true),
  ];
  const deltas = events.filter((e) => e.type === "response.output_text.delta").map((e) => [e.delta, (e.logprobs as { token: string }[]).map((l) => l.token)]);
  assert.deepEqual(deltas, [["\nHi", ["2", "3", "4"]], ["Bye", ["6"]]]);
  const messages = out.items.filter((i) => i.type === "message").map((i) => ((i.content as { logprobs: { token: string }[] }[])[0].logprobs).map((l) => l.token));
  assert.deepEqual(messages, [["2", "3", "4"], ["6"]]);
});

test("ResponseStore.conversation() walks a chain oldest first, keeps its turns recent, and names a missing turn", () => {
  const turn = (id: string, previousId: string | null): StoredResponse => ({
    id, previousId, sessionId: `s-${previousId ?? id}`, response: { id }, inputItems: [],
    input: [{ role: "user", content: `in ${id}` }], output: [{ role: "assistant", content: `out ${id}` }],
  });
  const store = new ResponseStore(3);
  store.put(turn("a", null));
  store.put(turn("b", "a"));
  store.put(turn("x", null));
  const { messages, sessionId } = store.conversation("b");
  assert.deepEqual(messages.map((m) => m.content), ["in a", "out a", "in b", "out b"]);
  assert.equal(sessionId, "s-a", "the newest turn's session");
  // Walking the chain made a and b recent: the next put evicts x, not a.
  store.put(turn("c", "b"));
  assert.equal(store.get("x"), undefined);
  assert.deepEqual(store.conversation("c").messages.length, 6);
  store.put(turn("y", null));
  store.put(turn("z", null));
  assert.throws(() => store.conversation("c"), (e: unknown) => e instanceof UnknownResponseError && e.id === "b", "a and b went first; b is the first missing walking back");
  assert.equal(store.delete("c"), true);
  assert.equal(store.delete("c"), false);
  const none = new ResponseStore(0);
  none.put(turn("a", null));
  assert.equal(none.size, 0);
  assert.throws(() => new ResponseStore(-1), /non-negative integer, got -1/);
});

test("ResponseStore.put() forgets the least recently used turns past its size bound and keeps no turn larger than the bound", () => {
  const turn = (id: string, text: string): StoredResponse => ({
    id, previousId: null, sessionId: id, response: { id }, inputItems: [], input: [{ role: "user", content: text }], output: [],
  });
  const one = jsonSize(turn("a", "x".repeat(100)));
  const store = new ResponseStore(100, 2.5 * one);
  store.put(turn("a", "x".repeat(100)));
  store.put(turn("b", "x".repeat(100)));
  assert.equal(store.heldSize, 2 * one);
  store.get("a");
  store.put(turn("c", "x".repeat(100)));
  assert.deepEqual(["a", "b", "c"].map((id) => store.get(id) !== undefined), [true, false, true], "b was the least recently used");
  store.put(turn("huge", "x".repeat(1000)));
  assert.equal(store.get("huge"), undefined);
  assert.equal(store.heldSize, 2 * one, "a turn too large by itself evicts nothing");
  store.delete("a");
  assert.equal(store.heldSize, one);
  assert.throws(() => new ResponseStore(1, 0), /size bound must be positive, got 0/);
});

test("ConversationStore.append() forgets the least recently used conversations past the size bound, the one appended to last", () => {
  const item = (text: string) => ({ type: "message", role: "user", content: [{ type: "input_text", text }] });
  const size = itemsSize([{ ...item("x".repeat(100)), id: "msg_00000000000000000000000000000000" }]);
  const store = new ConversationStore(10, 3.5 * size);
  const a = store.create([item("x".repeat(100))], {}, 0);
  const b = store.create([item("x".repeat(100))], {}, 0);
  assert.equal(store.heldSize, 2 * size);
  assert.equal(a.size, size);
  assert.ok(store.fits(a, [item("x".repeat(100))]));
  assert.ok(!store.fits(a, Array.from({ length: 3 }, () => item("x".repeat(100)))), "four items would pass the bound by themselves");
  store.append(a, [item("x".repeat(100))]);
  store.append(a, [item("x".repeat(100))]);
  assert.equal(store.get(b.id), undefined, "b went to make room");
  assert.equal(store.get(a.id), a);
  assert.equal(store.heldSize, 3 * size);
  store.removeItem(a, 0);
  assert.equal(a.items.length, 2);
  assert.equal(store.heldSize, 2 * size);
  store.append(a, Array.from({ length: 3 }, () => item("x".repeat(100))));
  assert.equal(store.get(a.id), undefined, "a conversation over the bound by itself is forgotten too");
  assert.equal(store.heldSize, 0);
  // Past the count, the oldest goes.
  const few = new ConversationStore(2);
  const first = few.create([], {}, 0);
  few.create([], {}, 0);
  few.create([], {}, 0);
  assert.equal(few.get(first.id), undefined);
  assert.equal(few.size, 2);
});

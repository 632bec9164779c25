import assert from "node:assert/strict";
import { ReasoningSpans } from "../../src/engine/reasoning-spans.ts";
import { test } from "../harness.ts";

const TAGS = { start: 1, end: 2 };

/** Spans after generating `tokens` from position `from` on. */
function spans(tokens: number[], from = 10, openAt?: number): ReasoningSpans {
  const s = new ReasoningSpans(TAGS, openAt);
  tokens.forEach((t, i) => s.push(t, from + i));
  return s;
}

test("ReasoningSpans marks <think> through </think> (tags included), several spans, and an open one", () => {
  const s = spans([5, 1, 5, 5, 2, 5, 1, 5]); // positions 10..17: reasoning 11–14 and 16 on
  assert.deepEqual([10, 11, 14, 15, 16, 17].map((p) => s.overlaps(p, p + 1)), [false, true, true, false, true, true]);
  assert.equal(s.overlaps(0, 11), false);
  assert.equal(s.overlaps(15, 16), false);
  assert.equal(s.overlaps(12, 100), true);
  assert.equal(s.inside, true);
  assert.equal(s.count(18), 4 + 2);
});

test("ReasoningSpans ignores </think> outside reasoning and <think> inside it, as the text parser does", () => {
  const s = spans([2, 5, 1, 1, 5, 2, 2]); // stray end at 10; start at 12; the nested start at 13 is text; end at 15; stray end at 16
  assert.deepEqual([10, 11, 12, 13, 15, 16].map((p) => s.overlaps(p, p + 1)), [false, false, true, true, true, false]);
  assert.equal(s.inside, false);
});

test("ReasoningSpans opened by the prompt starts at the first generated position", () => {
  const s = spans([5, 5, 2, 5], 10, 10);
  assert.deepEqual([9, 10, 12, 13].map((p) => s.overlaps(p, p + 1)), [false, true, true, false]);
  assert.throws(() => new ReasoningSpans({ start: 3, end: 3 }), /Reasoning start and end must be different tokens, got 3 for both/);
});

// Harmony (gpt-oss): <|channel|> = 1, <|end|> = 2, "analysis" encoded as 7 8, <|message|> = 3, <|call|> = 4, <|start|> = 6.
const HARMONY = { start: 1, end: 2, harmony: { analysis: [7, 8], message: 3, alsoEnd: [4, 6] } };

test("ReasoningSpans with harmony marks an analysis message from its <|channel|> through its <|end|>, not a final or commentary one", () => {
  const s = new ReasoningSpans(HARMONY);
  // 10–15: <|channel|> analysis <|message|> thought <|end|>; 16 <|start|> 17 "assistant"; 18–21: <|channel|> final(9) <|message|> answer.
  [1, 7, 8, 3, 5, 2, 6, 5, 1, 9, 3, 5].forEach((t, i) => s.push(t, 10 + i));
  assert.deepEqual([10, 13, 15, 16, 18, 20, 21].map((p) => s.overlaps(p, p + 1)), [true, true, true, false, false, false, false]);
  assert.equal(s.count(22), 6, "the header, the thought and the end tag");
  assert.equal(s.inside, false);
});

test("ReasoningSpans with harmony: a header broken off or naming another channel opens nothing; <|call|> and <|start|> also end an analysis", () => {
  const s = new ReasoningSpans(HARMONY);
  // <|channel|> analysis(7 only) <|message|>: not the channel's whole name; <|channel|> 7 8 5 <|message|>: a recipient or type between.
  [1, 7, 3, 5, 1, 7, 8, 5, 3, 5].forEach((t, i) => s.push(t, 10 + i));
  assert.equal(s.count(20), 0);
  [1, 7, 8, 3, 5, 4].forEach((t, i) => s.push(t, 20 + i));
  assert.equal(s.count(26), 6, "closed by <|call|>");
  [1, 7, 8, 3, 6, 5].forEach((t, i) => s.push(t, 26 + i));
  assert.deepEqual([s.count(32), s.inside, s.overlaps(31, 32)], [11, false, false], "closed by <|start|>");
  const open = new ReasoningSpans(HARMONY, 10);
  [5, 5, 2, 1, 9, 3].forEach((t, i) => open.push(t, 10 + i));
  assert.deepEqual([open.count(16), open.overlaps(13, 16)], [3, false], "a prompt that opened the analysis message");
});

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

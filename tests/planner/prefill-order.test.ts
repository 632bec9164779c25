import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { prefillOrder } from "../../planner/prefill-order.ts";

const queue = [
  { left: 40_000, enqueuedAt: 0 }, // a session's cold first turn
  { left: 600, enqueuedAt: 1 }, // a continuation after a tool call
  { left: 3_000, enqueuedAt: 2 },
  { left: 600, enqueuedAt: 0.5 },
];

test("prefillOrder() keeps queue order for fcfs", () => {
  assert.deepEqual(prefillOrder(queue, 5, { order: "fcfs", agingTokensPerS: 2000 }), [0, 1, 2, 3]);
});

test("prefillOrder() serves the least uncached work first, ties by arrival", () => {
  assert.deepEqual(prefillOrder(queue, 2, { order: "short-first", agingTokensPerS: 0 }), [3, 1, 2, 0]);
});

test("prefillOrder() ages long jobs so they are not starved", () => {
  // Every waiting job gains credit at the same rate, so what counts is arrival: at 2000 tokens/s the
  // cold prompt goes ahead of a short turn that arrived more than 20 s after it...
  const later = [...queue, { left: 600, enqueuedAt: 20.5 }];
  assert.deepEqual(prefillOrder(later, 21, { order: "short-first", agingTokensPerS: 2000 }), [3, 1, 2, 0, 4]);
  // ...but not ahead of one that arrived 19 s after it, nor without aging.
  const soon = [...queue, { left: 600, enqueuedAt: 19 }];
  assert.deepEqual(prefillOrder(soon, 21, { order: "short-first", agingTokensPerS: 2000 }), [3, 1, 2, 4, 0]);
  assert.equal(prefillOrder(later, 21, { order: "short-first", agingTokensPerS: 0 }).at(-1), 0);
});

test("prefillOrder() rejects negative aging with a message quoting it", () => {
  assert.throws(() => prefillOrder(queue, 0, { order: "short-first", agingTokensPerS: -1 }), /non-negative .*got -1/);
});

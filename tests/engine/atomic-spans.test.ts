/** spanChunk(): prefill chunks that never cut an image whose rows attend both ways. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { spanChunk } from "../../src/engine/atomic-spans.ts";

test("spanChunk() stops a chunk before a span it would end inside, and leaves chunks clear of spans alone", () => {
  const spans: [number, number][] = [[10, 20], [30, 34]];
  assert.equal(spanChunk(spans, 0, 15, 100), 10);
  assert.equal(spanChunk(spans, 0, 8, 100), 8);
  assert.equal(spanChunk(spans, 0, 20, 100), 20, "ending at a span's end cuts nothing");
  assert.equal(spanChunk(spans, 20, 12, 100), 10, "stops before the second span");
  assert.equal(spanChunk(spans, 0, 40, 100), 40, "covering both whole");
  assert.equal(spanChunk(undefined, 0, 15, 100), 15);
});

test("spanChunk() grows a chunk that starts in a span to its end, past the budget, never past the pending tokens", () => {
  const spans: [number, number][] = [[10, 20], [20, 26]];
  assert.equal(spanChunk(spans, 10, 4, 100), 10, "from the span's start: all of it");
  assert.equal(spanChunk(spans, 16, 2, 100), 4, "from inside it (a cache hit ending there): the rest");
  assert.equal(spanChunk(spans, 10, 12, 100), 10, "grown past the first, stopped before cutting the adjacent second");
  assert.equal(spanChunk(spans, 10, 16, 100), 16, "both whole");
  assert.equal(spanChunk(spans, 16, 2, 3), 3, "no more than is pending");
});

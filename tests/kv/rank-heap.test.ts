import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { RankHeap } from "../../kv/index.ts";

const score = fc.oneof(
  fc.constantFrom(0, -0, 1, 2, Infinity, -Infinity),
  fc.double({ noNaN: true }),
);

/** The ranking AgentAwarePolicy used before the heap: a full Array sort with this comparator. */
function sortedKeys(keys: string[], scores: number[]): string[] {
  const pairs = keys.map((k, i) => [k, scores[i]] as const);
  pairs.sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1));
  return pairs.map((p) => p[0]);
}

function drain(heap: RankHeap): string[] {
  const got: string[] = [];
  for (let k = heap.peek(); k !== undefined; heap.pop(), k = heap.peek()) got.push(k);
  return got;
}

test("RankHeap pops keys in the order of the full comparator sort, ties and infinities included", () => {
  fc.assert(fc.property(fc.uniqueArray(fc.string({ maxLength: 3 }), { maxLength: 60 }), fc.array(score, { minLength: 60, maxLength: 60 }), (keys, all) => {
    const scores = all.slice(0, keys.length);
    const expected = sortedKeys(keys, scores);
    const heap = new RankHeap();
    heap.reset([...keys], [...scores]);
    assert.deepEqual(drain(heap), expected);
    assert.equal(heap.size, 0);
  }), { numRuns: 300 });
});

test("RankHeap ranks every key once when some scores are NaN", () => {
  const heap = new RankHeap();
  heap.reset(["a", "b", "c", "d"], [2, NaN, 1, 0]);
  assert.deepEqual([...drain(heap)].sort(), ["a", "b", "c", "d"]);
});

test("RankHeap.push() ranks a late key among the rest", () => {
  const h = new RankHeap();
  h.reset(["a", "b", "c"], [3, 1, 5]);
  h.push("d", 2);
  h.push("e", 0);
  h.push("f", NaN);
  const out: string[] = [];
  for (let k = h.peek(); k !== undefined; h.pop(), k = h.peek()) out.push(k);
  assert.deepEqual(out, ["e", "b", "d", "a", "c", "f"]);
});

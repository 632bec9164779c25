import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { BlockHashTable, chainHashes, GlobalBlockIndex, LruList } from "../../kv/index.ts";

type Op = { kind: "set" | "delete" | "get"; key: number; value: number };

// Few distinct keys (so deletes and re-inserts hit present keys), spread from tiny ids to 53-bit hashes.
const key = fc.oneof(
  fc.integer({ min: 0, max: 40 }),
  fc.integer({ min: 0, max: 40 }).map((k) => k * 4294967296),
  fc.integer({ min: 0, max: 40 }).map((k) => Number.MAX_SAFE_INTEGER - k),
);
const op = fc.record({ kind: fc.constantFrom<Op["kind"]>("set", "delete", "get"), key, value: fc.integer() });

test("BlockHashTable matches Map under random set/delete/get sequences", () => {
  fc.assert(fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
    const t = new BlockHashTable<number>();
    const m = new Map<number, number>();
    for (const o of ops) {
      if (o.kind === "set") { t.set(o.key, o.value); m.set(o.key, o.value); }
      else if (o.kind === "delete") assert.equal(t.delete(o.key), m.delete(o.key));
      else assert.equal(t.get(o.key), m.get(o.key));
      assert.equal(t.size, m.size);
    }
    for (const [k, v] of m) { assert.equal(t.get(k), v); assert.ok(t.has(k)); }
  }), { numRuns: 200 });
});

test("BlockHashTable keeps every key through growth and mass deletion", () => {
  const t = new BlockHashTable<number>();
  const keys = chainHashes(Array.from({ length: 5000 }, (_, i) => i), 1);
  keys.forEach((k, i) => t.set(k, i));
  assert.equal(t.size, 5000);
  for (let i = 0; i < keys.length; i += 2) assert.ok(t.delete(keys[i]));
  assert.equal(t.size, 2500);
  keys.forEach((k, i) => assert.equal(t.get(k), i % 2 === 0 ? undefined : i));
});

test("LruList.forBlockHashes() evicts in the same order as a Map-backed LruList", () => {
  fc.assert(fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
    const fast = LruList.forBlockHashes<number>();
    const ref = new LruList<number, number>();
    for (const o of ops) {
      if (o.kind === "set") { fast.set(o.key, o.value); ref.set(o.key, o.value); }
      else if (o.kind === "delete") assert.equal(fast.delete(o.key), ref.delete(o.key));
      else assert.equal(fast.shift(), ref.shift());
      assert.equal(fast.size, ref.size);
      assert.equal(fast.oldest(), ref.oldest());
    }
  }), { numRuns: 100 });
});

test("GlobalBlockIndex.overlaps() does not depend on earlier calls", () => {
  const index = new GlobalBlockIndex();
  const a = chainHashes([1, 2, 3, 4], 1);
  const b = chainHashes([9, 8, 7], 1);
  index.apply({ kind: "stored", workerId: "w0", tier: "device", time: 0, hashes: a, parentHash: null, blockSize: 1 });
  index.apply({ kind: "stored", workerId: "w1", tier: "device", time: 0, hashes: b.slice(0, 1), parentHash: null, blockSize: 1 });
  index.apply({ kind: "stored", workerId: "w1", tier: "host", time: 0, hashes: b.slice(1), parentHash: b[0], blockSize: 1 });
  const first = index.overlaps(b);
  assert.deepEqual(index.overlaps(a).get("w0"), { device: 4, deviceOrHost: 4 });
  assert.equal(index.overlaps(a).get("w1"), undefined);
  assert.deepEqual(index.overlaps(b), first);
  assert.deepEqual(first.get("w1"), { device: 1, deviceOrHost: 3 });
});

test("GlobalBlockIndex.removeWorker() forgets one worker's blocks on every tier and keeps the others'", () => {
  const index = new GlobalBlockIndex();
  const a = chainHashes([1, 2, 3, 4], 1);
  index.apply({ kind: "stored", workerId: "w0", tier: "device", time: 0, hashes: a, parentHash: null, blockSize: 1 });
  index.apply({ kind: "stored", workerId: "w1", tier: "device", time: 0, hashes: a.slice(0, 2), parentHash: null, blockSize: 1 });
  index.apply({ kind: "stored", workerId: "w1", tier: "host", time: 0, hashes: a.slice(2), parentHash: a[1], blockSize: 1 });
  index.apply({ kind: "stored", workerId: "w1", tier: "device", time: 0, hashes: chainHashes([7, 7], 1), parentHash: null, blockSize: 1 });
  index.removeWorker("w1");
  assert.equal(index.overlaps(a).get("w1"), undefined);
  assert.deepEqual(index.overlaps(a).get("w0"), { device: 4, deviceOrHost: 4 });
  assert.equal(index.size, 4, "blocks only the removed worker held are gone");
  index.removeWorker("nobody");
  // A worker that comes back under the same name starts from what it reports anew.
  index.apply({ kind: "stored", workerId: "w1", tier: "device", time: 1, hashes: a.slice(0, 1), parentHash: null, blockSize: 1 });
  assert.deepEqual(index.overlaps(a).get("w1"), { device: 1, deviceOrHost: 1 });
});

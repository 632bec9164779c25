import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { NO_SLOT, RecordTable } from "../../kv/record-table.ts";
import { HolderTable } from "../../kv/holder-table.ts";

// Few distinct keys (so deletes and re-inserts hit present keys), spread from tiny ids to 53-bit hashes.
const key = fc.oneof(
  fc.integer({ min: 0, max: 40 }),
  fc.integer({ min: 0, max: 40 }).map((k) => k * 4294967296),
  fc.integer({ min: 0, max: 40 }).map((k) => Number.MAX_SAFE_INTEGER - k),
);

test("RecordTable keeps each key's record fields and side value like a Map through inserts, deletes and growth", () => {
  const op = fc.record({ kind: fc.constantFrom("put", "delete", "get"), key, a: fc.integer(), b: fc.double({ noNaN: true }) });
  fc.assert(fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
    const t = new RecordTable<string>(3);
    const m = new Map<number, [number, number, string]>();
    for (const o of ops) {
      const slot = t.find(o.key);
      assert.equal(slot !== NO_SLOT, m.has(o.key));
      if (o.kind === "put") {
        const s = slot === NO_SLOT ? t.insert(o.key) : slot;
        t.recs[s * 3 + 1] = o.a;
        t.recs[s * 3 + 2] = o.b;
        t.side[s] = `v${o.a}`;
        m.set(o.key, [o.a, o.b, `v${o.a}`]);
      } else if (o.kind === "delete" && slot !== NO_SLOT) {
        t.delete(slot);
        m.delete(o.key);
      }
      assert.equal(t.size, m.size);
    }
    for (const [k, [a, b, v]] of m) {
      const s = t.find(k);
      assert.deepEqual([t.recs[s * 3 + 1], t.recs[s * 3 + 2], t.side[s]], [a, b, v], `record of ${k}`);
    }
    assert.deepEqual(t.keyList().sort((x, y) => x - y), [...m.keys()].sort((x, y) => x - y));
  }), { numRuns: 200 });
});

test("RecordTable.insert() gives a new key a zeroed record, also in a slot a deleted key used", () => {
  const t = new RecordTable<number>(2);
  const s = t.insert(7);
  t.recs[s * 2 + 1] = 42;
  t.side[s] = 1;
  t.delete(s);
  const again = t.insert(7);
  assert.equal(t.recs[again * 2 + 1], 0);
  assert.equal(t.side[again], undefined);
});

test("HolderTable keeps each hash's list like a Map of arrays, inline or not, removal moving the last into the hole", () => {
  const op = fc.record({ kind: fc.constantFrom("push", "remove"), key, v: fc.integer({ min: 0, max: 1000 }), i: fc.nat() });
  fc.assert(fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
    const t = new HolderTable();
    const m = new Map<number, number[]>();
    for (const o of ops) {
      if (o.kind === "push") {
        t.push(o.key, o.v);
        m.set(o.key, [...(m.get(o.key) ?? []), o.v]);
      } else {
        const list = m.get(o.key);
        if (list === undefined) { assert.equal(t.find(o.key), NO_SLOT); continue; }
        const i = o.i % list.length;
        t.removeAt(t.find(o.key), i);
        list[i] = list[list.length - 1];
        list.pop();
        if (list.length === 0) m.delete(o.key);
      }
      assert.equal(t.size, m.size);
    }
    for (const [k, list] of m) {
      const s = t.find(k);
      assert.equal(t.length(s), list.length);
      assert.deepEqual(Array.from({ length: list.length }, (_, i) => t.get(s, i)), list, `holders of ${k}`);
    }
  }), { numRuns: 200 });
});

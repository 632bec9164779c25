import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { BlockPool, chainHashes, GlobalBlockIndex, type KvEvent, SessionTracker, type Tier } from "../../kv/index.ts";

// The fast paths the simulator uses must agree with the plain ones they replace.

const WORKERS = ["w0", "w1", "w2"];
const event = fc.record({
  kind: fc.constantFrom("stored", "removed", "moved"),
  worker: fc.integer({ min: 0, max: 2 }),
  tier: fc.constantFrom<Tier>("device", "host"),
  block: fc.integer({ min: 0, max: 5 }),
});

/** Reference: hash → worker → tier bits, and contiguous runs computed block by block. */
function naiveOverlaps(state: Map<number, Map<string, number>>, hashes: number[]): Map<string, { device: number; deviceOrHost: number }> {
  const out = new Map<string, { device: number; deviceOrHost: number }>();
  const first = state.get(hashes[0]);
  if (first === undefined) return out;
  for (const w of first.keys()) {
    let any = 0;
    while (any < hashes.length && ((state.get(hashes[any])?.get(w) ?? 0) & 3) !== 0) any++;
    let dev = 0;
    while (dev < any && ((state.get(hashes[dev])?.get(w) ?? 0) & 1) !== 0) dev++;
    out.set(w, { device: dev, deviceOrHost: any });
  }
  return out;
}

test("GlobalBlockIndex.overlaps() and overlapsBySlot() match a per-worker walk under random events", () => {
  const hashes = chainHashes([1, 2, 3, 4, 5, 6], 1);
  fc.assert(fc.property(fc.array(event, { maxLength: 80 }), (evs) => {
    const index = new GlobalBlockIndex();
    for (const w of WORKERS) index.workerSlot(w); // slots exist before the walk, as in the simulator
    const state = new Map<number, Map<string, number>>();
    for (const e of evs) {
      const h = hashes[e.block];
      const workerId = WORKERS[e.worker];
      const bit = e.tier === "device" ? 1 : 2;
      const ev: KvEvent = e.kind === "stored"
        ? { kind: "stored", workerId, tier: e.tier, time: 0, hashes: [h], parentHash: null, blockSize: 1 }
        : e.kind === "removed"
        ? { kind: "removed", workerId, tier: e.tier, time: 0, hashes: [h] }
        : { kind: "moved", workerId, from: "device", to: e.tier, time: 0, hashes: [h] };
      index.apply(ev);
      const per = state.get(h) ?? new Map<string, number>();
      const bits = e.kind === "removed" ? (per.get(workerId) ?? 0) & ~bit : (per.get(workerId) ?? 0) | bit;
      if (bits === 0) per.delete(workerId);
      else per.set(workerId, bits);
      if (per.size === 0) state.delete(h);
      else state.set(h, per);
      for (const w of WORKERS) assert.equal(index.tiersOf(h, w), state.get(h)?.get(w) ?? 0);
    }
    const want = naiveOverlaps(state, hashes);
    const got = index.overlaps(hashes);
    assert.deepEqual(new Map([...got].sort()), new Map([...want].sort()));
    const slots = index.overlapsBySlot(hashes);
    for (const w of WORKERS) {
      const s = index.workerSlot(w);
      assert.equal(slots.device[s], want.get(w)?.device ?? 0);
      assert.equal(slots.deviceOrHost[s], want.get(w)?.deviceOrHost ?? 0);
    }
  }), { numRuns: 300 });
});

test("BlockPool.matchPrefixHashed() acquires the same blocks as matchPrefix()", () => {
  const make = () => new BlockPool({ numBlocks: 8, blockSize: 1, clock: () => 0 });
  const fill = (p: BlockPool, tokens: number[]) => {
    const ids = p.allocate(tokens.length);
    tokens.forEach((t, i) => p.commitBlock(ids[i], i === 0 ? null : ids[i - 1], [t]));
    p.release(ids);
  };
  const a = make(), b = make();
  for (const p of [a, b]) { fill(p, [1, 2, 3]); fill(p, [1, 2, 9, 9]); }
  for (const q of [[1, 2, 3, 4], [1, 2, 9], [7], [1, 2, 9, 9, 9]]) {
    const m1 = a.matchPrefix(q);
    const m2 = b.matchPrefixHashed(q, chainHashes(q, 1));
    assert.deepEqual(m2, m1, `query ${q}`);
    a.release(m1.blockIds);
    b.release(m2.blockIds);
  }
});

test("SessionTracker.handle() scores like returnProbability() and goes stale on forget()", () => {
  const s = new SessionTracker();
  s.turnStarted("a", 0);
  const h = s.handle("a")!;
  s.turnEnded("a", 5, "bash");
  s.turnStarted("a", 8);
  s.turnEnded("a", 9, "bash");
  for (const now of [9.5, 12, 40]) assert.equal(s.returnProbabilityOf(h, now, 30), s.returnProbability("a", now, 30));
  assert.ok(s.returnProbabilityOf(h, 12, 30) > 0);
  assert.equal(SessionTracker.isStale(h), false);
  s.forget("a");
  assert.equal(SessionTracker.isStale(h), true);
  assert.equal(s.handle("a"), undefined);
  assert.equal(s.returnProbability("a", 12, 30), 0);
});

test("SessionTracker.statusCounts() kept as sessions change equals a count of the sessions under random calls", () => {
  const op = fc.record({
    kind: fc.constantFrom("start", "end-tool", "end-idle", "forget", "prune", "pruneToSize"),
    session: fc.integer({ min: 0, max: 7 }),
    dt: fc.integer({ min: 0, max: 50 }),
  });
  fc.assert(fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
    const t = new SessionTracker();
    let now = 0;
    for (const o of ops) {
      now += o.dt;
      const id = `s${o.session}`;
      if (o.kind === "start") t.turnStarted(id, now);
      else if (o.kind === "end-tool") t.turnEnded(id, now, "bash");
      else if (o.kind === "end-idle") t.turnEnded(id, now, null);
      else if (o.kind === "forget") t.forget(id);
      else if (o.kind === "prune") t.prune(now, 60);
      else t.pruneToSize(o.session);
      const recount = { running: 0, "waiting-tool": 0, idle: 0 };
      for (let k = 0; k < 8; k++) {
        const s = t.status(`s${k}`);
        if (s !== undefined) recount[s]++;
      }
      assert.deepEqual(t.statusCounts(), recount);
    }
  }));
});

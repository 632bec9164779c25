/**
 * The KV layer fed degenerate inputs, as a real server can produce them: a clock that goes backwards
 * or is not a number, a predicted return time that is NaN, corrupt block hashes in KV events, and a
 * reasoning block reused turn after turn in a pool that seldom fills.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import {
  AgentAwarePolicy, BlockHashTable, GlobalBlockIndex, KvStateError, prefetchStartTime, SeededRng, SessionTracker, slotOf,
} from "../../kv/index.ts";

test("SessionTracker learns no tool gap from a clock that went backwards", () => {
  const t = new SessionTracker({ priorToolGapS: 3 });
  t.turnStarted("s", 0);
  t.turnEnded("s", 100, "bash");
  t.turnStarted("s", 90); // the clock stepped back 10 s
  t.turnEnded("s", 95, "bash");
  assert.ok(Math.abs(t.predictedGapS("s") - 3) < 1e-9, `gap ${t.predictedGapS("s")}: still the prior, no gap was measured`);
  t.turnEnded("o", 96, "bash"); // another session waiting on the same tool
  assert.ok(Math.abs(t.predictedGapS("o") - 3) < 1e-9, `gap ${t.predictedGapS("o")}: the tool was not taught a 1 ms gap`);
});

test("SessionTracker refuses a NaN time with a typed error instead of stamping a session it could never prune", () => {
  const t = new SessionTracker();
  t.turnStarted("s", 1);
  assert.throws(() => t.turnEnded("s", NaN, "bash"), (e: unknown) => e instanceof KvStateError && /got NaN/.test(e.message));
  assert.throws(() => t.turnStarted("s", Infinity), KvStateError);
  assert.equal(t.status("s"), "running");
  t.turnEnded("s", 2, null);
  assert.equal(t.prune(1000, 60), 1);
  assert.equal(t.size, 0);
});

test("prefetchStartTime() of an unknown (NaN) return time is now, never NaN", () => {
  assert.equal(prefetchStartTime(NaN, 0.2, 10), 10);
  assert.equal(prefetchStartTime(20, NaN, 10), 10);
  assert.equal(prefetchStartTime(5, 0.2, 10), 10, "a return time in the past: at once");
  assert.equal(prefetchStartTime(20, 1, 10, 0.5), 18.5);
});

test("AgentAwarePolicy scores stay finite after an eviction at a NaN time", () => {
  const sessions = new SessionTracker();
  const policy = new AgentAwarePolicy(sessions);
  sessions.turnStarted("a", 0);
  sessions.turnEnded("a", 1, "bash");
  sessions.turnStarted("b", 0);
  sessions.turnEnded("b", 1, null);
  for (let id = 0; id < 6; id++) policy.add({ id, hash: 100 + id, meta: { sessionId: id < 3 ? "a" : "b" }, depth: id % 3 }, 1);
  assert.notEqual(policy.evict(NaN), undefined);
  assert.notEqual(policy.evict(5), undefined);
  assert.ok(Number.isFinite(policy.score("a", 6)) && Number.isFinite(policy.score("b", 6)), `${policy.score("a", 6)} ${policy.score("b", 6)}`);
  assert.ok(policy.score("a", 6) > policy.score("b", 6), "the tool-waiting session still outranks the idle one");
});

test("AgentAwarePolicy keeps its dropped-block stack bounded when a reasoning block is reused every turn", () => {
  const sessions = new SessionTracker();
  const policy = new AgentAwarePolicy(sessions);
  sessions.turnEnded("s", 0, null);
  const reasoning = { hash: 7, meta: { sessionId: "s", type: "reasoning" as const }, depth: 3 };
  for (let turn = 0; turn < 10_000; turn++) {
    policy.add({ id: 5, ...reasoning }, turn); // released after the turn: worth nothing, first to go
    policy.remove(5); // the client sent its thinking back: a prefix hit takes it again
  }
  policy.add({ id: 5, ...reasoning }, 10_000);
  const stack = (policy as unknown as { droppedStack: number[] }).droppedStack;
  assert.ok(stack.length <= 128, `${stack.length} entries for 1 dropped block`);
  assert.equal(policy.evict(10_001), 5);
  assert.equal(policy.evict(10_001), undefined);
});

test("AgentAwarePolicy evicts dropped reasoning blocks latest-released first, however often they were reused", () => {
  const sessions = new SessionTracker();
  sessions.turnEnded("s", 0, null);
  const policy = new AgentAwarePolicy(sessions);
  const rng = new SeededRng(11);
  const addedAt = new Map<number, number>(); // dropped id → when it was last added
  for (let step = 0; step < 20_000; step++) {
    const r = rng.next(), id = Math.floor(rng.next() * 40);
    if (r < 0.5) {
      policy.add({ id, hash: id, meta: { sessionId: "s", type: "reasoning" }, depth: 0 }, step);
      addedAt.set(id, step);
    } else if (r < 0.9) {
      policy.remove(id);
      addedAt.delete(id);
    } else {
      let want: number | undefined, latest = -1;
      for (const [k, t] of addedAt) if (t > latest) { latest = t; want = k; }
      assert.equal(policy.evict(step), want, `step ${step}`);
      if (want !== undefined) addedAt.delete(want);
    }
  }
  assert.ok((policy as unknown as { droppedStack: number[] }).droppedStack.length <= 2 * addedAt.size + 64);
});

test("GlobalBlockIndex skips corrupt hashes in KV events instead of corrupting its table", () => {
  const index = new GlobalBlockIndex();
  // A hash whose home slot in a fresh table is the one −1 (the free-slot marker) maps to.
  let h = 0;
  while (slotOf(h, 28) !== slotOf(-1, 28)) h++;
  index.apply({ kind: "stored", workerId: "A", tier: "device", time: 0, hashes: [-1, NaN], parentHash: null, blockSize: 16 });
  index.apply({ kind: "removed", workerId: "A", tier: "device", time: 0, hashes: [123] }); // never stored
  index.apply({ kind: "stored", workerId: "B", tier: "device", time: 1, hashes: [h], parentHash: null, blockSize: 16 });
  assert.equal(index.size, 1);
  assert.deepEqual([...index.overlaps([h]).keys()], ["B"], "no phantom holder");
  index.apply({ kind: "removed", workerId: "B", tier: "device", time: 2, hashes: [h] });
  index.apply({ kind: "removed", workerId: "B", tier: "device", time: 2, hashes: [h] }); // removed twice
  assert.equal(index.size, 0);
  assert.equal(index.overlaps([h]).size, 0);
  assert.equal(index.overlaps([]).size, 0);
});

test("BlockHashTable refuses keys it could not find again with a typed error", () => {
  const t = new BlockHashTable<string>();
  assert.throws(() => t.set(-1, "x"), (e: unknown) => e instanceof KvStateError && /got -1/.test(e.message));
  assert.throws(() => t.add(NaN, "x"), KvStateError);
  assert.equal(t.size, 0);
  t.set(5, "y");
  assert.equal(t.get(5), "y");
});

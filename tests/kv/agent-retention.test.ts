import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { AgentAwarePolicy, BlockPool, LruPolicy, type RetentionPolicy, SessionTracker } from "../../kv/index.ts";

/** Two sessions each cache 2 blocks; then one new 2-block allocation forces two evictions. */
function scenario(policy: RetentionPolicy, sessions: SessionTracker, now: { t: number }) {
  const pool = new BlockPool({ numBlocks: 4, blockSize: 1, clock: () => now.t, policy });
  const fill = (sid: string, base: number) => {
    sessions.turnStarted(sid, now.t);
    const ids = pool.allocate(2);
    pool.commitBlock(ids[0], null, [base], { sessionId: sid, type: "system" });
    pool.commitBlock(ids[1], ids[0], [base + 1], { sessionId: sid, type: "tool-output" });
    return ids;
  };
  // The tool-waiting session finishes its turn first, so LRU sees it as the older one.
  const waiting = fill("tool-waiter", 10);
  now.t = 1;
  sessions.turnEnded("tool-waiter", now.t, "run_tests");
  pool.release(waiting);
  const idle = fill("idle", 20);
  now.t = 2;
  sessions.turnEnded("idle", now.t, null);
  pool.release(idle);
  now.t = 3;
  pool.allocate(2);
  return { waiter: pool.cachedPrefixTokens([10, 11]), idle: pool.cachedPrefixTokens([20, 21]) };
}

test("AgentAwarePolicy keeps a session waiting on a short tool call over an idle one", () => {
  const sessions = new SessionTracker({ priorToolGapS: 2, priorIdleGapS: 120 });
  const kept = scenario(new AgentAwarePolicy(sessions), sessions, { t: 0 });
  assert.deepEqual(kept, { waiter: 2, idle: 0 });
  // LRU, for contrast, drops the waiter because it was freed earlier.
  const s2 = new SessionTracker();
  const lru = scenario(new LruPolicy(), s2, { t: 0 });
  assert.deepEqual(lru, { waiter: 0, idle: 2 });
});

test("AgentAwarePolicy evicts reasoning blocks of a finished turn before anything else", () => {
  const sessions = new SessionTracker();
  const t = { v: 0 };
  const pool = new BlockPool({ numBlocks: 3, blockSize: 1, clock: () => t.v, policy: new AgentAwarePolicy(sessions) });
  sessions.turnStarted("s", 0);
  const ids = pool.allocate(3);
  pool.commitBlock(ids[0], null, [1], { sessionId: "s", type: "system" });
  pool.commitBlock(ids[1], ids[0], [2], { sessionId: "s", type: "reasoning" });
  pool.commitBlock(ids[2], null, [9], { sessionId: "other", type: "user" });
  sessions.turnEnded("s", 1, "grep");
  t.v = 1;
  pool.release([ids[0]]);
  pool.release([ids[1]]);
  pool.release([ids[2]]);
  pool.allocate(1);
  assert.equal(pool.cachedPrefixTokens([1, 2]), 1, "the reasoning block went first");
  assert.equal(pool.cachedPrefixTokens([9]), 1);
});

test("SessionTracker learns tool gaps and predicts returns", () => {
  const s = new SessionTracker({ priorToolGapS: 3 });
  for (let i = 0; i < 10; i++) {
    s.turnStarted("a", i * 100);
    s.turnEnded("a", i * 100 + 1, "pytest");
  }
  s.turnStarted("a", 1000);
  s.turnEnded("a", 1001, "pytest");
  // Observed gaps were 99 s: prediction moves far from the 3 s prior.
  assert.ok(s.predictedGapS("a") > 40, `gap ${s.predictedGapS("a")}`);
  assert.equal(s.status("a"), "waiting-tool");
  const soon = s.returnProbability("a", 1002, 10);
  const later = s.returnProbability("a", 1002, 200);
  assert.ok(soon < later && later <= 1 && soon >= 0);
  s.turnStarted("b", 0);
  s.turnEnded("b", 1, null);
  assert.ok(s.returnProbability("b", 2, 10) < 0.1);
  assert.equal(s.returnProbability("missing", 0, 10), 0);
});

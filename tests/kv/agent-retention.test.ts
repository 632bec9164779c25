import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { AgentAwarePolicy, BlockPool, LruPolicy, type RetentionPolicy, SessionTracker } from "../../kv/index.ts";

/** Starts a turn of session `sid` and fills two chained blocks with tokens `base`, `base + 1`; returns their ids. */
function filler(pool: BlockPool, sessions: SessionTracker, now: { t: number }): (sid: string, base: number) => number[] {
  return (sid, base) => {
    sessions.turnStarted(sid, now.t);
    const ids = pool.allocate(2);
    pool.commitBlock(ids[0], null, [base], { sessionId: sid, type: "system" });
    pool.commitBlock(ids[1], ids[0], [base + 1], { sessionId: sid, type: "tool-output" });
    return ids;
  };
}

/** Two sessions each cache 2 blocks; then one new 2-block allocation forces two evictions. */
function scenario(policy: RetentionPolicy, sessions: SessionTracker, now: { t: number }) {
  const pool = new BlockPool({ numBlocks: 4, blockSize: 1, clock: () => now.t, policy });
  const fill = filler(pool, sessions, now);
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

test("AgentAwarePolicy.sessionMoved() ranks a session that continued elsewhere below an idle one, until it runs here again", () => {
  const run = (moved: boolean, back: boolean) => {
    const sessions = new SessionTracker({ priorToolGapS: 2, priorIdleGapS: 120 });
    const policy = new AgentAwarePolicy(sessions);
    const now = { t: 0 };
    const pool = new BlockPool({ numBlocks: 6, blockSize: 1, clock: () => now.t, policy });
    const fill = filler(pool, sessions, now);
    const waiting = fill("tool-waiter", 10);
    sessions.turnEnded("tool-waiter", 1, "run_tests");
    now.t = 1;
    pool.release(waiting);
    const idle = fill("idle", 20);
    sessions.turnEnded("idle", 2, null);
    now.t = 2;
    pool.release(idle);
    if (moved) policy.sessionMoved("tool-waiter", now.t);
    if (back) {
      // The session's next turn ran here after all: its blocks are live again, then released.
      now.t = 3;
      const hit = pool.matchPrefix([10, 11]);
      sessions.turnStarted("tool-waiter", now.t);
      sessions.turnEnded("tool-waiter", 4, "run_tests");
      now.t = 4;
      pool.release(hit.blockIds);
    }
    now.t = 5;
    pool.allocate(4);
    return { waiter: pool.cachedPrefixTokens([10, 11]), idle: pool.cachedPrefixTokens([20, 21]) };
  };
  assert.deepEqual(run(false, false), { waiter: 2, idle: 0 }, "a tool waiter outranks an idle session");
  assert.deepEqual(run(true, false), { waiter: 0, idle: 2 }, "moved away: its copy here goes first");
  assert.deepEqual(run(true, true), { waiter: 2, idle: 0 }, "it ran here again: no longer stale");
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

test("AgentAwarePolicy evicts session-less blocks least recently released first", () => {
  const sessions = new SessionTracker();
  const t = { v: 0 };
  const pool = new BlockPool({ numBlocks: 4, blockSize: 1, clock: () => t.v, policy: new AgentAwarePolicy(sessions) });
  const chain = (base: number) => {
    const ids = pool.allocate(2);
    pool.commitBlock(ids[0], null, [base]);
    pool.commitBlock(ids[1], ids[0], [base + 1]);
    return ids;
  };
  const old = chain(10);
  const young = chain(20);
  pool.release(old);
  t.v = 5;
  pool.release(young);
  t.v = 6;
  pool.allocate(1);
  assert.deepEqual([pool.cachedPrefixTokens([10, 11]), pool.cachedPrefixTokens([20, 21])], [1, 2], "the older chain's tail went first");
  pool.allocate(1);
  assert.deepEqual([pool.cachedPrefixTokens([10, 11]), pool.cachedPrefixTokens([20, 21])], [0, 2]);
});

test("AgentAwarePolicy considers a session released after the last ranking at once", () => {
  const sessions = new SessionTracker({ priorToolGapS: 2 });
  const t = { v: 0 };
  // Long re-ranking interval: without joining the ranking, the newcomer would wait behind the waiter.
  const pool = new BlockPool({ numBlocks: 6, blockSize: 1, clock: () => t.v, policy: new AgentAwarePolicy(sessions, { rerankS: 1000 }) });
  const turn = (sid: string, base: number, n: number) => {
    sessions.turnStarted(sid, t.v);
    const ids = pool.allocate(n);
    ids.forEach((id, i) => pool.commitBlock(id, i === 0 ? null : ids[i - 1], [base + i], { sessionId: sid }));
    return ids;
  };
  const waiter = turn("waiter", 10, 2);
  const first = turn("first-idle", 20, 2);
  sessions.turnEnded("waiter", 0, "grep");
  sessions.turnEnded("first-idle", 0, null);
  pool.release(waiter);
  pool.release(first);
  const late = turn("late-idle", 30, 2);
  pool.allocate(2); // ranks [first-idle, waiter] and evicts first-idle
  t.v = 1;
  sessions.turnEnded("late-idle", 1, null);
  pool.release(late);
  pool.allocate(2);
  assert.equal(pool.cachedPrefixTokens([10, 11]), 2, "the tool waiter kept its blocks");
  assert.equal(pool.cachedPrefixTokens([30, 31]), 0, "the session released after the ranking went instead");
});

test("SessionTracker.prune() forgets sessions quiet for longer than the limit, never running ones", () => {
  const s = new SessionTracker();
  s.turnStarted("running", 0);
  s.turnStarted("old", 0);
  s.turnEnded("old", 1, null);
  s.turnStarted("recent", 0);
  s.turnEnded("recent", 50, "grep");
  assert.equal(s.prune(100, 60), 1);
  assert.deepEqual([s.status("running"), s.status("old"), s.status("recent")], ["running", undefined, "waiting-tool"]);
  assert.equal(s.size, 2);
});

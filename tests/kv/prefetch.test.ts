import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { AgentAwarePolicy, BlockPool, LruPolicy, prefetchBlockCount, type RetentionPolicy, SessionTracker } from "../../kv/index.ts";

/**
 * A 10-block pool holding, all evictable: 4 blocks of "waiter" (waiting on a tool, back in about
 * 2 s: worth keeping) and 4 of "gone" (a session nobody tracks: worth nothing); 2 blocks free.
 */
function setup() {
  const now = { t: 0 };
  const sessions = new SessionTracker({ priorToolGapS: 2, priorIdleGapS: 120 });
  const policy = new AgentAwarePolicy(sessions);
  const pool = new BlockPool({ numBlocks: 10, blockSize: 1, clock: () => now.t, policy });
  const fill = (sid: string, base: number) => {
    sessions.turnStarted(sid, now.t);
    const ids = pool.allocate(4);
    for (let i = 0; i < 4; i++) pool.commitBlock(ids[i], i === 0 ? null : ids[i - 1], [base + i], { sessionId: sid, type: "tool-output" });
    return ids;
  };
  const waiter = fill("waiter", 10);
  const gone = fill("gone", 20);
  now.t = 1;
  sessions.turnEnded("waiter", now.t, "run_tests");
  pool.release(waiter);
  sessions.forget("gone");
  pool.release(gone);
  now.t = 2;
  return { now, sessions, policy, pool, free: pool.numFreeBlocks() - policy.size };
}

test("prefetchBlockCount() takes free blocks and blocks ranked below the prefetch, never a more valuable one", () => {
  const { now, sessions, policy, pool, free } = setup();
  assert.equal(free, 2);
  // An idle session's blocks are worth less than the waiter's and more than an untracked session's.
  sessions.turnStarted("idle", 0);
  sessions.turnEnded("idle", 1, null);
  assert.ok(policy.blockValue("idle", 0, now.t) < policy.blockValue("waiter", 3, now.t));
  assert.ok(policy.blockValue("idle", 0, now.t) > policy.blockValue("gone", 3, now.t));
  // It wants 8: 2 free plus the 4 untracked blocks; the waiter's 4 rank above it and stay.
  const n = prefetchBlockCount(policy, "idle", 0, 8, free, now.t);
  assert.equal(n, 6);
  policy.rerank();
  pool.allocate(n);
  assert.equal(pool.cachedPrefixTokens([10, 11, 12, 13]), 4, "the more valuable session's chain is untouched");
  assert.equal(pool.cachedPrefixTokens([20, 21, 22, 23]), 0, "the worthless one made the room");
});

test("prefetchBlockCount() takes only free blocks for a prefetch worth no more than anything cached", () => {
  const { now, policy, free } = setup();
  // A session nobody tracks is worth nothing: it would displace nothing, not even the other such session.
  assert.equal(prefetchBlockCount(policy, "stranger", 0, 8, free, now.t), free);
  assert.equal(prefetchBlockCount(policy, "stranger", 0, 1, free, now.t), 1, "what fits in free blocks is taken whole");
  // A policy that cannot rank a prefetch (LRU) leaves it the free blocks only.
  assert.equal(prefetchBlockCount(new LruPolicy(), "x", 0, 8, 3, now.t), 3);
  assert.equal(prefetchBlockCount(new LruPolicy(), "x", 0, 8, -1, now.t), 0);
});

test("prefetchBlockCount() shortens a chain until it is worth what it displaces", () => {
  // Deeper blocks cost more to recompute, so a long chain outranks groups a shorter one does not.
  // Here a chain's deepest block at depth d is worth d + 1; evictable: 2 blocks worth 1.5, 4 worth 6.5.
  const policy: RetentionPolicy = {
    add() {}, remove() {}, evict: () => undefined, size: 6,
    blockValue: (_s, depth) => depth + 1,
    evictableBelow: (v, _now, max) => Math.min(max, (v > 1.5 ? 2 : 0) + (v > 6.5 ? 4 : 0)),
  };
  // 8 blocks (worth 8) would displace all 6, but 6 blocks are worth only 6: they may not displace the
  // group worth 6.5. 2 blocks (worth 2) displace the two worth 1.5, consistently.
  assert.equal(prefetchBlockCount(policy, "s", 0, 8, 0, 0), 2);
  assert.equal(prefetchBlockCount(policy, "s", 0, 8, 1, 0), 7, "with a free block, 7 blocks (worth 7) outrank every evictable one");
  assert.equal(prefetchBlockCount(policy, "s", 6, 4, 0, 0), 4, "a chain continuing deep is worth 10: it takes all it wants");
});

/**
 * A session whose turn ended in a tool call keeps its KV from the moment the server reports the call,
 * also when blocks must be evicted before the retention policy's next periodic re-ranking. The engine
 * releases a finished request's blocks while its session is idle (the server parses the answer for
 * calls only afterwards, then calls Engine.markToolWait); the agent-aware policy ranks a group that
 * appears between re-rankings with its score at release. Unless the tool wait makes the policy
 * re-rank, the session keeps the score of a session that just went idle, the lowest of all, for up to
 * AgentAwarePolicy's re-ranking interval (2 s): exactly when a fast tool's result comes back.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const BS = 16;

/** `n` token ids from a pattern picked by `seed` (all in the vocab). */
const tokens = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 2 + ((i * 7 + seed * 13) % 400));

test("Engine.markToolWait() protects the session's KV at once, not from the policy's next re-ranking", async () => {
  let nowMs = 0;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 41, now: () => nowMs });
  const turn = async (prompt: number[], sessionId: string, atMs: number) => {
    nowMs = atMs;
    return await e.submit({ prompt, maxTokens: 1, temperature: 0, ignoreEos: true, sessionId }).result;
  };
  try {
    // Two sessions that got final answers (idle): B (10 blocks), then P1, which fills the pool.
    await turn(tokens(10 * BS, 1), "b", 0);
    await turn(tokens(31 * BS - 8, 2), "p1", 1000);
    assert.equal(e.pool.numCachedBlocks(), 40);
    // A's turn evicts B's deepest blocks (the policy ranks its sessions now), then ends in a tool call.
    const a = tokens(4 * BS + 3, 3);
    const a1 = await turn(a, "a", 1500);
    e.markToolWait("a", "grep");
    assert.equal(e.sessions!.status("a"), "waiting-tool");
    // Half a second later, within the policy's re-ranking interval, another prompt needs 5 cached blocks.
    await turn(tokens(5 * BS - 8, 4), "p2", 2000);
    // A's tool returns: its 4 full blocks must still be cached (idle B and P1 had plenty to give).
    const a2 = await turn([...a, ...a1.tokenIds, ...tokens(20, 5)], "a", 2500);
    assert.equal(a2.cachedTokens, 4 * BS, `A's next turn found ${a2.cachedTokens} cached tokens`);
  } finally {
    await e.stop();
  }
});

import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool } from "../../kv/index.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { Sequence, SequenceHints } from "../../src/engine/sequence.ts";

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

/** Runs one sequence alone to `outputs` generated tokens (by default token = 900 + position); returns it. */
function run(sched: Scheduler, id: number, prompt: number[], outputs: number, hints: SequenceHints = {}, token = (pos: number) => 900 + pos): Sequence {
  const seq = sched.submit(id, prompt, hints);
  while (!sched.idle) {
    const plan = sched.schedule();
    const sampled = new Map(plan.entries.filter((e) => e.sample).map((e) => [e.seqId, token(e.startPos + e.tokens.length)]));
    for (const s of sched.commit(plan, sampled)) if (s.numOutput >= outputs) sched.finish(s.id, "length");
  }
  return seq;
}

test("poolBlockManager() commit types a block \"output\" when it holds a generated token", () => {
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const sched = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0 });
  // Prompt 6 tokens, 7 outputs: 12 tokens computed (the last sampled one never is), blocks 0..2 committed.
  const a = run(sched, 1, range(6), 7, { sessionId: "s" });
  assert.deepEqual(pool.probePrefix(a.tokens).metas, [{ sessionId: "s" }, { sessionId: "s", type: "output" }, { sessionId: "s", type: "output" }]);
  // A prompt ending on a block boundary: the next block is the first output block. No session: type only.
  const b = run(sched, 2, range(8, 100), 5);
  assert.deepEqual(pool.probePrefix(b.tokens).metas, [undefined, undefined, { type: "output" }]);
});

test("poolBlockManager() release hands a shared cached block to the session that used it last", () => {
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const sched = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0 });
  const a = run(sched, 1, range(6), 3, { sessionId: "a" });
  assert.deepEqual(pool.probePrefix(a.tokens).metas, [{ sessionId: "a" }, { sessionId: "a", type: "output" }]);
  // b reuses a's whole chain (a's answer included) and goes on: both blocks are now b's, still typed.
  const b = run(sched, 2, [...a.tokens, 7, 7], 1, { sessionId: "b" });
  assert.equal(b.numCachedPrompt, 8);
  assert.deepEqual(pool.probePrefix(a.tokens).metas, [{ sessionId: "b" }, { sessionId: "b", type: "output" }]);
});

const THINK = { start: 7001, end: 7002 };

test("poolBlockManager() commit types a block \"reasoning\" when a generated token in it lies between <think> and </think>", () => {
  const pool = new BlockPool({ numBlocks: 32, blockSize: 4, clock: () => 0 });
  const sched = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0, reasoningTokens: THINK });
  // Prompt 6 tokens; <think> at 7, thoughts 8..13, </think> at 14, answer from 15 on.
  const out = (pos: number) => (pos === 7 ? THINK.start : pos === 14 ? THINK.end : 900 + pos);
  const a = run(sched, 1, range(6), 16, { sessionId: "s" }, out);
  const types = pool.probePrefix(a.tokens).metas.map((m) => m?.type);
  // Blocks of positions 0–3 | 4–7 | 8–11 | 12–15 | 16–19 (21 computed: 5 full blocks).
  assert.deepEqual(types, [undefined, "reasoning", "reasoning", "reasoning", "output"]);
  assert.equal(a.reasoning?.count(a.tokens.length), 8, "<think>, six thoughts and </think>");
  // The prompt left <think> open: the first generated token is reasoning, and </think> closes it.
  const b = run(sched, 2, range(8, 100), 9, { sessionId: "r", startsInReasoning: true }, (pos) => (pos === 11 ? THINK.end : 900 + pos));
  assert.deepEqual(pool.probePrefix(b.tokens).metas.map((m) => m?.type), [undefined, undefined, "reasoning", "output"]);
  // Without the tokens configured, the same output is all "output" blocks.
  const plain = new Scheduler(poolBlockManager(new BlockPool({ numBlocks: 32, blockSize: 4, clock: () => 0 })), { watermarkBlocks: 0 });
  assert.equal(run(plain, 3, range(6), 16, {}, out).reasoning, undefined);
});

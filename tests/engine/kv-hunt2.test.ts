/** KV lifecycle: blocks a busy engine must let go, and host-tier state a late tool-wait mark needs. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { headOfKv, type HostKv } from "../../src/engine/kv-copy.ts";
import type { StepRunner } from "../../src/engine/engine-runner.ts";
import { HandoffTails } from "../../src/engine/handoff-tails.ts";
import { importPrefix, PrefixTransferError } from "../../src/engine/prefix-transfer.ts";
import { BlockPool } from "../../kv/index.ts";
import { greedy, model, run, STORY } from "../cluster/fixtures.ts";

const OTHER = model.tokenizer.encode("The dog ran to the big red ball and the cat sat on the mat all day long.", { addBos: true });

/** Runs `req` on `e`, reading the blocks in use it reports after each streamed token; `onToken` runs first. */
async function usedPerToken(e: Engine, req: GenerateRequest, onToken: (i: number) => void = () => {}): Promise<number[]> {
  const h = e.submit(req);
  const used: number[] = [];
  for await (const _ of h.stream) {
    onToken(used.length);
    used.push(e.stats().kvUsedBlocks);
  }
  assert.equal((await h.result).finishReason, "length");
  return used;
}

test("Engine busy decoding lets go of a hand-off block nobody took once its hold (60 s) runs out", async () => {
  const pre = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  await run(pre, { ...greedy(STORY), maxTokens: 1, prefillOnly: true });
  const prefix = await pre.exportPrefix(STORY, true);
  assert.ok(prefix !== null && prefix.tail === true);
  await pre.stop();
  // What one request holds alone, token by token.
  const alone = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const expected = await usedPerToken(alone, greedy(OTHER, 40));
  await alone.stop();
  let nowMs = 0;
  const dec = createEngine(createReferenceBackend(), model, { numBlocks: 64, now: () => nowMs });
  dec.importPrefix(prefix);
  assert.equal(dec.pool.numUsedBlocks(), 1, "the hand-off's last block is held for its request");
  // The request never comes (its client went away); the engine stays busy with another past the hold.
  const used = await usedPerToken(dec, greedy(OTHER, 40), (i) => (nowMs = i >= 5 ? 61_000 : 0));
  assert.deepEqual(used.slice(0, 5), expected.slice(0, 5).map((n) => n + 1));
  assert.deepEqual(used.slice(8), expected.slice(8), "the block went back while the engine was busy");
  await dec.stop();
});

test("Engine prefetches a session whose tool wait is marked after the loop ran on (a worker hears it over IPC)", async () => {
  let nowMs = 0;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 12, kvOffloadBlocks: 64, now: () => nowMs });
  await run(e, { ...greedy(STORY, 8), sessionId: "agent" });
  // Another request steps the loop before the mark arrives: the session is idle, not gone.
  await run(e, greedy([1, 2, 3], 2));
  e.markToolWait("agent", "run_tests"); // no history: predicted back 3 s later (the tool prior)
  const long = model.tokenizer.encode("The dog ran to the big red ball and the cat sat on the mat all day long. ".repeat(9), { addBos: true }).slice(0, 160);
  await run(e, greedy(long, 4));
  const story = STORY.slice(0, -1);
  const full = Math.floor(story.length / 16) * 16;
  const left = e.pool.cachedPrefixTokens(story);
  assert.ok(left < full, `some of the session's blocks left the device (${left} of ${full} tokens stay)`);
  nowMs = 2500;
  await run(e, greedy([1, 2, 3], 1));
  assert.equal(e.pool.cachedPrefixTokens(story), full, "prefetched within a second of the predicted return");
  assert.equal(e.stats().kvPrefetchedBlocks, (full - left) / 16);
  await e.stop();
});

test("Engine.importPrefix() of a prefix whose KV is short refuses it with every block still free", async () => {
  const a = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  await run(a, greedy(STORY, 2));
  const prefix = await a.exportPrefix(STORY);
  assert.ok(prefix !== null && prefix.tokens.length === 32);
  await a.stop();
  const b = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  assert.throws(() => b.importPrefix({ ...prefix, kv: headOfKv(prefix.kv, 16) }), (e) => e instanceof PrefixTransferError && /needs KV of at least 32 tokens, got 16/.test(e.message));
  assert.equal(b.pool.numUsedBlocks(), 0);
  // The whole prefix still imports, and serves a hit.
  assert.equal(b.importPrefix(prefix), 2);
  assert.equal(b.pool.numUsedBlocks(), 0);
  assert.equal((await run(b, greedy(STORY, 2))).result.cachedTokens, 32);
  await b.stop();
});

test("importPrefix() whose block write fails gives back the blocks it took and its hold on the cached prefix", () => {
  const pool = new BlockPool({ numBlocks: 8, blockSize: 4, clock: () => 0 });
  const fail = { writeBlocks: () => { throw new Error("Device lost"); } } as unknown as StepRunner;
  const kv: HostKv = { numTokens: 8, dtype: "f32", k: [new Float32Array(8)], v: [new Float32Array(8)] };
  const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
  // The first block is cached already: the import continues it.
  const [first] = pool.tryAllocate(1)!;
  pool.commitBlock(first, null, tokens.slice(0, 4), undefined, null);
  pool.release([first]);
  assert.throws(() => importPrefix(pool, fail, { tokens, blockSize: 4, kv }), /Device lost/);
  assert.equal(pool.numUsedBlocks(), 0);
  assert.equal(pool.numFreeBlocks(), 8);
  const tail = { tokens: [...tokens, 9], blockSize: 4, kv: { ...kv, numTokens: 12, k: [new Float32Array(12)], v: [new Float32Array(12)] }, tail: true };
  assert.throws(() => importPrefix(pool, fail, tail), /Device lost/);
  assert.equal(pool.numUsedBlocks(), 0);
  // The full blocks are written; the write of the hand-off's last block fails.
  let writes = 0;
  const failSecond = { writeBlocks: () => { if (writes++ > 0) throw new Error("Device lost"); } } as unknown as StepRunner;
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 4, ttlS: 60 });
  assert.throws(() => importPrefix(pool, failSecond, tail, undefined, Infinity, tails), /Device lost/);
  assert.equal(writes, 2);
  assert.equal(tails.size, 0);
  assert.equal(pool.numUsedBlocks(), 0);
});

/** A hand-off's last block: kept by the prefill, sent with the prompt, taken by the decode's admission. */
import { namespaceRoot } from "../../kv/index.ts";
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool } from "../../kv/index.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { HandoffTails } from "../../src/engine/handoff-tails.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { SchedulerConfig } from "../../src/engine/scheduler-types.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { stepShapeOf } from "../../src/engine/step-record.ts";
import { greedy, model, oneEngine, run, STORY } from "../cluster/fixtures.ts";

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

function store(maxBlocks = 8, ttlS = 10) {
  const released: number[] = [];
  const clock = { t: 0 };
  const tails = new HandoffTails((ids) => released.push(...ids), () => clock.t, { maxBlocks, ttlS });
  return { tails, released, clock };
}

test("HandoffTails.take() gives the block kept for exactly that prompt, once", () => {
  const { tails, released } = store();
  tails.keep([1, 2, 3], 7);
  assert.equal(tails.has([1, 2, 3]), true);
  assert.equal(tails.has([1, 2]), false);
  assert.equal(tails.take([1, 2, 4]), null);
  const v = tails.version;
  assert.equal(tails.take([1, 2, 3]), 7);
  assert.notEqual(tails.version, v);
  assert.equal(tails.take([1, 2, 3]), null);
  assert.deepEqual(released, [], "a taken block's reference passes to the taker");
});

test("HandoffTails.take() gives a block only in the cache namespace it was kept in", () => {
  const { tails } = store();
  const lora = namespaceRoot("lora:a"), other = namespaceRoot("lora:b");
  tails.keep([1, 2, 3], 7, lora);
  tails.keep([1, 2, 3], 8);
  assert.equal(tails.has([1, 2, 3], other), false);
  assert.equal(tails.take([1, 2, 3], other), null, "another adapter's prompt takes nothing");
  assert.equal(tails.take([1, 2, 3]), 8, "the base model's takes its own");
  assert.equal(tails.take([1, 2, 3]), null, "and not the adapter's");
  assert.equal(tails.has([1, 2, 3], lora), true);
  assert.equal(tails.take([1, 2, 3], lora), 7);
});

test("HandoffTails lets go of blocks past their TTL and the oldest beyond maxBlocks", () => {
  const { tails, released, clock } = store(2, 10);
  tails.keep([1], 10);
  clock.t = 5;
  tails.keep([2], 20);
  clock.t = 8;
  tails.keep([3], 30);
  assert.deepEqual(released, [10], "the oldest made room");
  assert.equal(tails.size, 2);
  clock.t = 16;
  assert.equal(tails.has([2]), false, "held 11 s > 10 s");
  assert.equal(tails.take([3]), 30);
  assert.deepEqual(released, [10, 20]);
  tails.keep([4], 40);
  tails.clear();
  assert.deepEqual(released, [10, 20, 40]);
  assert.throws(() => new HandoffTails(() => {}, () => 0, { maxBlocks: 1, ttlS: 0 }), /ttlS > 0/);
});

test("HandoffTails.secondsToExpiry() says when an idle engine must wake, and prune() lets the block go then", () => {
  const { tails, released, clock } = store(4, 10);
  assert.equal(tails.secondsToExpiry(), undefined, "nothing held: no wake-up");
  tails.keep([1], 10);
  clock.t = 3;
  tails.keep([2], 20);
  assert.equal(tails.secondsToExpiry(), 7, "the oldest, kept at 0, is out at 10");
  clock.t = 10.5;
  assert.equal(tails.secondsToExpiry(), 0);
  tails.prune();
  assert.deepEqual(released, [10], "no keep or take needed");
  assert.equal(tails.secondsToExpiry(), 2.5);
});

test("HandoffTails.keep() of identical prompts holds a block for each, taken one per hand-off", () => {
  const { tails, released } = store();
  tails.keep([4, 5], 40);
  tails.keep([4, 5], 41);
  tails.keep([4, 6], 42);
  assert.equal(tails.size, 3);
  const taken = [tails.take([4, 5]), tails.take([4, 5])];
  assert.deepEqual(taken.sort(), [40, 41], "each of two identical hand-offs finds its own block");
  assert.equal(tails.take([4, 5]), null);
  assert.equal(tails.has([4, 6]), true);
  assert.deepEqual(released, []);
});

/** A pool whose cache holds `prompt`'s blocks before its last, and a tail store holding a block for its end. */
function handedOff(prompt: number[], config: Partial<SchedulerConfig> = {}) {
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 4, ttlS: 60 });
  const before = Math.ceil(prompt.length / 4) - 1;
  const ids = pool.tryAllocate(before + 1)!;
  for (let b = 0; b < before; b++) pool.commitBlock(ids[b], b > 0 ? ids[b - 1] : null, prompt.slice(b * 4, b * 4 + 4));
  pool.release(ids.slice(0, before));
  tails.keep(prompt, ids[before]);
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { maxBatchTokens: 64, ...config });
  return { pool, tails, sched, tailBlock: ids[before] };
}

for (const length of [10, 12]) {
  test(`Scheduler admits a handed-off prompt of ${length} tokens with all but its last token computed, as a decode`, () => {
    const prompt = range(length, 100);
    const { pool, tails, sched, tailBlock } = handedOff(prompt);
    const seq = sched.submit(1, prompt);
    assert.equal(sched.queueState().waitingPrefillTokens, 1, "only the last token is left to compute");
    const plan = sched.schedule();
    assert.deepEqual(plan.entries.map((e) => [e.startPos, e.tokens, e.prefill, e.sample]), [[length - 1, [prompt[length - 1]], false, true]]);
    assert.equal(plan.entries[0].blockTable.at(-1), tailBlock);
    assert.equal(plan.numPrefillTokens, 0);
    assert.equal(stepShapeOf(plan.entries).decodeSeqs, 1);
    assert.equal(seq.numCachedPrompt, length - 1);
    assert.equal(tails.size, 0);
    sched.commit(plan, new Map([[1, 5]]));
    sched.finish(1, "length");
    assert.equal(pool.numUsedBlocks(), 0, "the last block went back with the sequence");
    assert.equal(pool.cachedPrefixTokens(prompt), Math.floor(length / 4) * 4, "and was cached once full");
  });
}

test("Scheduler.lookAhead() leaves a handed-off prompt's first token alone", () => {
  const prompt = range(10, 100);
  const { sched } = handedOff(prompt);
  sched.submit(1, prompt);
  const first = sched.schedule();
  assert.equal(first.entries[0].prefill, false, "fed as a decode");
  assert.equal(sched.lookAhead(first, 3), 0, "its first token is its time to first token");
  assert.equal(first.entries[0].lookahead, undefined);
  sched.commit(first, new Map([[1, 5]]));
  const next = sched.schedule();
  assert.equal(sched.lookAhead(next, 3), 3, "a decode after it may");
  sched.commit(next, new Map([[1, 9]]), new Map([[1, [6, 7, 8]]]));
  assert.deepEqual(sched.get(1)!.tokens.slice(10), [5, 6, 7, 8, 9]);
});

test("Scheduler without the last block held prefills a handed-off prompt's end", () => {
  const prompt = range(10, 100);
  const { tails, sched, pool } = handedOff(prompt);
  pool.release([tails.take(prompt)!]);
  sched.submit(1, prompt);
  const plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.startPos, e.tokens.length, e.prefill]), [[8, 2, true]]);
});

test("Scheduler with split steps admits a handed-off prompt in a decode step, never a prefill step", () => {
  const prompt = range(10, 100);
  const { sched } = handedOff(prompt, { stepMixing: "split" });
  sched.submit(2, range(6, 500));
  let plan = sched.schedule();
  sched.commit(plan, new Map([[2, 1]]));
  sched.submit(1, prompt);
  sched.submit(3, range(9, 700));
  plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.prefill]), [[3, true]], "a prefill step takes the new prompt only");
  sched.commit(plan, new Map([[3, 1]]));
  plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.prefill]), [[2, false], [3, false], [1, false]], "the decode step takes the handed-off one");
});

test("Scheduler.finish() of a waiting handed-off prompt lets its last block go", () => {
  const prompt = range(10, 100);
  const { sched, tails, pool } = handedOff(prompt);
  sched.submit(1, prompt);
  sched.finish(1, "abort");
  assert.equal(tails.size, 0);
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Scheduler.finish() of a prefill-only sequence keeps the block its prompt ended in", () => {
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 4, ttlS: 60 });
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { maxBatchTokens: 64 });
  const prompt = range(10, 100);
  sched.submit(1, prompt, { prefillOnly: true });
  const plan = sched.schedule();
  const table = [...plan.entries[0].blockTable];
  sched.commit(plan, new Map([[1, 5]]));
  assert.equal(sched.idle, true, "the prefill ended at its first token");
  assert.equal(pool.numUsedBlocks(), 1);
  assert.equal(tails.take(prompt), table[2]);
});

test("Scheduler.finish() of a prefill-role sequence nobody hands off keeps no block (serve --role prefill leaves the pool idle)", () => {
  const pool = new BlockPool({ numBlocks: 16, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 4, ttlS: 60 });
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { maxBatchTokens: 64, role: "prefill" });
  sched.submit(1, range(10, 100));
  const plan = sched.schedule();
  const [done] = sched.commit(plan, new Map([[1, 5]]));
  assert.equal(done.finishReason, "prefill_done");
  assert.equal(sched.idle, true, "the prefill role ends a sequence at its first token");
  assert.equal(tails.size, 0, "no block is held for a hand-off that no request asked for");
  assert.equal(pool.numUsedBlocks(), 0);
});

test("Engine.exportPrefix() of a hand-off sends the prompt's partial last block, and the decoding engine generates from it", async () => {
  const expected = await oneEngine(greedy(STORY));
  const engines = Array.from({ length: 3 }, () => createEngine(createReferenceBackend(), model, { numBlocks: 64 }));
  const [pre, dec, poisoned] = engines;
  const r = await run(pre, { ...greedy(STORY), maxTokens: 1, prefillOnly: true });
  assert.equal(r.result.finishReason, "prefill_done");
  const prefix = await pre.exportPrefix(STORY, true);
  assert.ok(prefix !== null && prefix.tail === true);
  assert.equal(prefix.tokens.length, STORY.length);
  assert.equal(prefix.kv.numTokens, Math.ceil(STORY.length / 16) * 16);
  assert.equal(pre.stats().kvUsedBlocks, 0, "the prefill worker let its last block go once sent");
  assert.equal(dec.importPrefix(prefix), Math.ceil(STORY.length / 16));
  const moved = await run(dec, greedy(STORY));
  assert.deepEqual(moved.streamed, expected);
  assert.equal(dec.stats().prefixHitTokens, STORY.length - 1);
  // The last block's bytes are what the decode reads: zeroed, it generates something else.
  const width = prefix.kv.k[0].length / prefix.kv.numTokens;
  const from = (Math.ceil(STORY.length / 16) - 1) * 16 * width;
  for (const layer of [...prefix.kv.k, ...prefix.kv.v]) layer.fill(0, from);
  poisoned.importPrefix(prefix);
  const bad = await run(poisoned, greedy(STORY));
  assert.equal(poisoned.stats().prefixHitTokens, STORY.length - 1);
  assert.notDeepEqual(bad.streamed, expected);
  await Promise.all(engines.map((e) => e.stop()));
});

test("Scheduler with split steps prefills a handed-off prompt whose cached blocks were evicted, in a prefill step", () => {
  const prompt = range(10, 100);
  const { sched, pool } = handedOff(prompt, { stepMixing: "split" });
  sched.submit(2, range(6, 500));
  sched.commit(sched.schedule(), new Map([[2, 1]]));
  // Evict the cached blocks before the held one: take every free block, then give them back uncached.
  const all = pool.tryAllocate(pool.numFreeBlocks())!;
  pool.release(all);
  assert.equal(pool.cachedPrefixTokens(prompt), 0);
  sched.submit(1, prompt);
  assert.equal(sched.queueState().waitingPrefillTokens, 10, "nothing of it is cached any more");
  const plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.tokens.length, e.prefill]), [[1, 10, true]], "a prefill step takes it whole");
});

test("Scheduler lets go of the block held for a handed-off prompt whose cached blocks were evicted, when it admits the prompt", () => {
  const prompt = range(10, 100);
  const { sched, pool, tails } = handedOff(prompt);
  // Evict the cached blocks before the held one: take every free block, then give them back uncached.
  pool.release(pool.tryAllocate(pool.numFreeBlocks())!);
  assert.equal(pool.cachedPrefixTokens(prompt), 0);
  sched.submit(1, prompt);
  const plan = sched.schedule();
  assert.deepEqual(plan.entries.map((e) => [e.seqId, e.tokens.length, e.prefill]), [[1, 10, true]], "prefilled whole");
  assert.equal(tails.size, 0, "the held block went: nothing can take it any more");
  sched.commit(plan, new Map([[1, 5]]));
  sched.finish(1, "length");
  assert.equal(pool.numUsedBlocks(), 0, "no block stays in use at idle");
});

test("Scheduler lets go of blocks held for hand-offs before it preempts a running sequence for room", () => {
  const pool = new BlockPool({ numBlocks: 8, blockSize: 4, clock: () => 0 });
  const tails = new HandoffTails((ids) => pool.release(ids), () => 0, { maxBlocks: 4, ttlS: 60 });
  const held = pool.allocate(2)!;
  tails.keep(range(6, 500), held[0]);
  tails.keep(range(7, 600), held[1]);
  const sched = new Scheduler(poolBlockManager(pool, undefined, tails), { maxBatchTokens: 64, watermarkBlocks: 0 });
  sched.submit(1, range(12, 100));
  sched.submit(2, range(12, 200));
  const prefill = sched.schedule();
  assert.deepEqual(prefill.entries.map((e) => e.tokens.length), [12, 12], "both prompts fill their three blocks");
  sched.commit(prefill, new Map([[1, 5], [2, 6]]));
  assert.equal(pool.numFreeBlocks(), 0, "the two hand-off blocks and six of the prompts' fill the pool");
  // Each decode needs a fourth block: the held hand-off blocks go, not the second sequence.
  const decode = sched.schedule();
  assert.deepEqual(decode.preempted, []);
  assert.deepEqual(decode.entries.map((e) => e.seqId), [1, 2]);
  assert.equal(tails.size, 0);
});

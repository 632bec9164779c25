import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { kvBytesPerBlock, resolveKvDtype } from "../../src/engine/kv-cache.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import type { KvEvent } from "../../kv/index.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const STORY = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.", { addBos: true });
const greedy = (prompt: number[], maxTokens = 8): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });
const filler = (i: number) => model.tokenizer.encode(`The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), { addBos: true });

async function run(e: Engine, req: GenerateRequest) {
  const h = e.submit(req);
  for await (const _ of h.stream) { /* drain */ }
  return await h.result;
}

/** Runs STORY, pushes it out of a 12-block device cache with other prompts, then runs it again. */
async function evictAndReturn(kvOffloadBlocks: number) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 12, kvOffloadBlocks });
  const events: KvEvent[] = [];
  e.kvEvents.subscribe((ev) => events.push(ev));
  const first = await run(e, greedy(STORY));
  for (let i = 0; i < 4; i++) await run(e, greedy(filler(i), 4));
  const again = await run(e, greedy(STORY));
  const stats = e.stats();
  await e.stop();
  return { first, again, stats, events };
}

test("Engine with kvOffloadBlocks moves evicted KV to host memory and back: a returning prompt hits and generates the same", async () => {
  const without = await evictAndReturn(0);
  assert.equal(without.again.cachedTokens, 0, "without a host tier the evicted prompt is recomputed");
  const withHost = await evictAndReturn(64);
  const full = Math.floor((STORY.length - 1) / 16) * 16;
  assert.ok(full > 0);
  assert.equal(withHost.again.cachedTokens, full, "the prompt's blocks came back from host memory");
  assert.deepEqual(withHost.again.tokenIds, withHost.first.tokenIds);
  assert.deepEqual(withHost.again.tokenIds, without.again.tokenIds);
  assert.ok(withHost.stats.kvOffloadedBlocks >= full / 16);
  assert.equal(withHost.stats.kvRestoredBlocks, full / 16);
  assert.ok(withHost.stats.kvHostBlocks > 0 && withHost.stats.kvHostBlocks <= 64);
  // The reference backend takes f16 caches ("auto"): the copies hold 2 bytes a value.
  const perBlock = kvBytesPerBlock(model.config, 16, resolveKvDtype(createReferenceBackend(), model.config));
  assert.equal(perBlock, kvBytesPerBlock(model.config, 16, "f16"));
  assert.ok(withHost.stats.kvHostBytes > 0 && withHost.stats.kvHostBytes % perBlock === 0, `${withHost.stats.kvHostBytes} bytes`);
  assert.ok(withHost.stats.kvHostBytes <= withHost.stats.kvHostBlocks * perBlock);
  assert.ok(withHost.events.some((ev) => ev.kind === "moved" && ev.to === "host"), "the router hears of the move to host");
});

test("Engine's host KV tier keeps at most its capacity", async () => {
  const r = await evictAndReturn(2);
  assert.ok(r.stats.kvOffloadedBlocks > 2);
  assert.ok(r.stats.kvHostBlocks <= 2);
  assert.equal(r.stats.kvHostCapacityBlocks, 2);
  // Copies the tier dropped past its capacity no longer count.
  assert.ok(r.stats.kvHostBytes > 0 && r.stats.kvHostBytes <= 2 * kvBytesPerBlock(model.config, 16, "f16"), `${r.stats.kvHostBytes} bytes`);
});

test("Engine prefetches a tool-waiting session's offloaded blocks shortly before its predicted return", async () => {
  let nowMs = 0;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 12, kvOffloadBlocks: 64, now: () => nowMs });
  await run(e, { ...greedy(STORY), sessionId: "agent" });
  e.markToolWait("agent", "run_tests"); // no history: predicted back 3 s later (the tool prior)
  // A long session-less prompt needs all but one block: the waiting session's blocks move to host memory.
  const long = model.tokenizer.encode("The dog ran to the big red ball and the cat sat on the mat all day long. ".repeat(9), { addBos: true }).slice(0, 160);
  await run(e, greedy(long, 4));
  const story = STORY.slice(0, -1);
  const full = Math.floor(story.length / 16) * 16;
  const left = e.pool.cachedPrefixTokens(story);
  assert.ok(left < full, `some of the session's blocks left the device (${left} of ${full} tokens stay)`);
  const moved = (full - left) / 16;
  assert.ok(e.stats().kvOffloadedBlocks >= moved);
  const poke = () => run(e, greedy([1, 2, 3], 1)); // any request makes the loop plan a step
  nowMs = 1500;
  await poke();
  assert.equal(e.pool.cachedPrefixTokens(story), left, "not yet: the return is 1.5 s away");
  nowMs = 2500;
  await poke();
  assert.equal(e.pool.cachedPrefixTokens(story), full, "prefetched within a second of the predicted return");
  assert.equal(e.stats().kvPrefetchedBlocks, moved);
  // The next turn then starts from those blocks.
  const next = await run(e, { ...greedy([...STORY, ...model.tokenizer.encode(" The tests passed.", { addBos: false })]), sessionId: "agent" });
  assert.ok(next.cachedTokens >= full);
  assert.equal(e.stats().kvRestoredBlocks, e.stats().kvPrefetchedBlocks, "nothing was left to restore on arrival");
  await e.stop();
});

test("Engine.exportPrefix() sends the blocks its host tier holds after the device prefix; imported elsewhere they generate what recomputing does", async () => {
  const story = STORY.slice(0, -1);
  const full = Math.floor(story.length / 16) * 16;
  /** Runs STORY on a 12-block engine, then pushes it out of the device cache with other prompts. */
  const holder = async (kvOffloadBlocks: number) => {
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 12, kvOffloadBlocks });
    await run(e, greedy(STORY));
    for (let i = 0; i < 4; i++) await run(e, greedy(filler(i), 4));
    return e;
  };
  const withHost = await holder(64);
  const onDevice = withHost.pool.cachedPrefixTokens(story);
  assert.ok(onDevice < full, "some of the prompt's blocks left the device");
  const prefix = await withHost.exportPrefix(story);
  assert.ok(prefix !== null);
  assert.equal(prefix.tokens.length, full, "device and host blocks together cover the prompt's full blocks");
  assert.deepEqual(prefix.tokens, story.slice(0, full));
  const dropped = await holder(0);
  const devOnly = await dropped.exportPrefix(story);
  assert.ok((devOnly?.tokens.length ?? 0) < full, "without a host tier only the device blocks would move");

  const peer = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  assert.equal(peer.importPrefix(prefix), full / 16);
  const moved = await run(peer, greedy(STORY));
  assert.equal(moved.cachedTokens, full);
  const fresh = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const recomputed = await run(fresh, greedy(STORY));
  assert.equal(recomputed.cachedTokens, 0);
  assert.deepEqual(moved.tokenIds, recomputed.tokenIds);
  // The host part's bytes are what the hit reads: zeroed, the same hit generates something else.
  const poisoned = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  for (const layer of [...prefix.kv.k, ...prefix.kv.v]) layer.fill(0, (layer.length / full) * onDevice);
  poisoned.importPrefix(prefix);
  const bad = await run(poisoned, greedy(STORY));
  assert.equal(bad.cachedTokens, full);
  assert.notDeepEqual(bad.tokenIds, recomputed.tokenIds);
  await Promise.all([withHost, dropped, peer, fresh, poisoned].map((e) => e.stop()));
});

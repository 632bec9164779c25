import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BlockPool, type BlockHasher, chainHashes, hashBlock, type KvEvent, KvCapacityError, namespaceRoot } from "../../kv/index.ts";

function pool(numBlocks: number, extra: { hasher?: BlockHasher; events?: KvEvent[] } = {}): BlockPool {
  let t = 0;
  return new BlockPool({
    numBlocks, blockSize: 2, clock: () => t++, hasher: extra.hasher,
    events: extra.events ? (e) => extra.events!.push(e) : undefined,
  });
}

/** Fills a sequence: matches its cached prefix, allocates the rest, commits every full block. */
function runSequence(p: BlockPool, tokens: number[]): { ids: number[]; cached: number } {
  const m = p.matchPrefix(tokens);
  const need = Math.ceil(tokens.length / p.blockSize) - m.blockIds.length;
  const ids = [...m.blockIds, ...p.allocate(need)];
  for (let b = m.blockIds.length; b < Math.floor(tokens.length / p.blockSize); b++) {
    p.commitBlock(ids[b], b === 0 ? null : ids[b - 1], tokens.slice(b * 2, b * 2 + 2));
  }
  return { ids, cached: m.numTokens };
}

test("hashBlock() is deterministic and chains on the parent", () => {
  const a = hashBlock(null, [1, 2, 3]);
  assert.equal(a, hashBlock(null, [1, 2, 3]));
  assert.notEqual(a, hashBlock(null, [1, 2, 4]));
  assert.notEqual(hashBlock(a, [5]), hashBlock(null, [5]));
  assert.ok(Number.isSafeInteger(a) && a >= 0);
  const hs = chainHashes([1, 2, 3, 4, 5], 2);
  assert.deepEqual(hs, [hashBlock(null, [1, 2]), hashBlock(hashBlock(null, [1, 2]), [3, 4])]);
});

test("hashBlock() shows no collisions over 200k distinct short blocks", () => {
  const seen = new Set<number>();
  for (let i = 0; i < 200_000; i++) seen.add(hashBlock(i % 7 === 0 ? null : i, [i, i >> 3]));
  assert.equal(seen.size, 200_000);
});

test("BlockPool.matchPrefix() reuses blocks freed but still cached", () => {
  const p = pool(8);
  const first = runSequence(p, [1, 2, 3, 4, 5]);
  assert.equal(first.cached, 0);
  p.release(first.ids);
  assert.equal(p.numFreeBlocks(), 8);
  const second = runSequence(p, [1, 2, 3, 4, 9, 9]);
  assert.equal(second.cached, 4);
  assert.deepEqual(second.ids.slice(0, 2), first.ids.slice(0, 2));
  assert.equal(p.refCount(second.ids[0]), 1);
});

test("BlockPool.share() and release() keep reference counts exact", () => {
  const p = pool(4);
  const ids = p.allocate(2);
  p.share(ids);
  assert.equal(p.refCount(ids[0]), 2);
  p.release(ids);
  assert.equal(p.numFreeBlocks(), 2);
  p.release(ids);
  assert.equal(p.numFreeBlocks(), 4);
  assert.throws(() => p.release(ids), /reference count is already 0/);
  assert.throws(() => p.allocate(5), KvCapacityError);
  assert.equal(p.tryAllocate(5), null);
});

test("BlockPool evicts least recently freed cached blocks first (LruPolicy)", () => {
  const events: KvEvent[] = [];
  const p = pool(4, { events });
  const a = runSequence(p, [1, 1, 2, 2]);
  p.release(a.ids);
  const b = runSequence(p, [3, 3, 4, 4]);
  p.release(b.ids);
  // Touch a again so b becomes the least recently used.
  const a2 = runSequence(p, [1, 1, 2, 2]);
  assert.equal(a2.cached, 4);
  p.release(a2.ids);
  runSequence(p, [7, 7]);
  assert.equal(p.cachedPrefixTokens([1, 1, 2, 2]), 4);
  assert.equal(p.cachedPrefixTokens([3, 3, 4, 4]), 2, "b's tail block goes first");
  const removed = events.filter((e) => e.kind === "removed");
  assert.equal(removed.length, 1);
  assert.equal(events.filter((e) => e.kind === "stored").length, 5);
});

test("BlockPool.matchPrefix() compares tokens on a forced hash collision", () => {
  const constant: BlockHasher = () => 42;
  const p = pool(8, { hasher: constant });
  const a = runSequence(p, [1, 2]);
  p.release(a.ids);
  // Same hash, different tokens: must be a miss, and the colliding block is not indexed.
  const b = runSequence(p, [3, 4]);
  assert.equal(b.cached, 0);
  assert.ok(p.collisions() >= 1);
  assert.equal(p.cachedPrefixTokens([1, 2]), 2);
  assert.equal(p.cachedPrefixTokens([3, 4]), 0);
});

test("BlockPool.matchPrefix() rejects a child whose indexed parent is another chain", () => {
  // Parent blocks [1,2] and [5,6] collide; their children are both [3,4] so the child hash also collides.
  const hasher: BlockHasher = (parent, tokens) => (tokens[0] === 1 || tokens[0] === 5 ? 7 : (parent ?? 0) + tokens[0]);
  const p = pool(8, { hasher });
  const a = p.allocate(1);
  p.commitBlock(a[0], null, [1, 2]); // indexed
  const b = p.allocate(2);
  assert.equal(p.commitBlock(b[0], null, [5, 6]), null); // collides: not indexed
  assert.equal(p.commitBlock(b[1], b[0], [3, 4]), null); // parent uncached: not indexed
  assert.equal(p.cachedPrefixTokens([1, 2, 3, 4]), 2, "b's child must not extend a's chain");
});

test("BlockPool keeps its invariants under random operations", () => {
  let seed = 12345;
  const rand = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n);
  const p = pool(32);
  const live: number[][] = [];
  for (let step = 0; step < 2000; step++) {
    if (live.length > 0 && rand(3) === 0) {
      p.release(live.splice(rand(live.length), 1)[0]);
    } else {
      const len = 1 + rand(9);
      const tokens = Array.from({ length: len }, (_, i) => (i < 4 ? rand(2) : rand(5)));
      const m = p.matchPrefix(tokens);
      const need = Math.ceil(len / 2) - m.blockIds.length;
      const fresh = p.tryAllocate(need);
      if (fresh === null) { p.release(m.blockIds); continue; }
      const ids = [...m.blockIds, ...fresh];
      for (let b = m.blockIds.length; b < Math.floor(len / 2); b++) {
        p.commitBlock(ids[b], b === 0 ? null : ids[b - 1], tokens.slice(2 * b, 2 * b + 2));
      }
      live.push(ids);
    }
    const refs = new Map<number, number>();
    for (const seq of live) for (const id of seq) refs.set(id, (refs.get(id) ?? 0) + 1);
    for (let id = 0; id < 32; id++) assert.equal(p.refCount(id), refs.get(id) ?? 0);
    assert.equal(p.numUsedBlocks(), refs.size);
  }
  for (const seq of live) p.release(seq);
  assert.equal(p.numFreeBlocks(), 32);
});

test("BlockPool.probePrefix() returns the matched blocks' metas without acquiring or reviving them", () => {
  const p = new BlockPool({ numBlocks: 4, blockSize: 2, clock: () => 0 });
  const ids = p.allocate(3);
  p.commitBlock(ids[0], null, [1, 2], { sessionId: "s" });
  p.commitBlock(ids[1], ids[0], [3, 4]);
  p.commitBlock(ids[2], ids[1], [5, 6], { sessionId: "s", type: "output" });
  p.release(ids.slice(1)); // blocks 1 and 2 cached but evictable, block 0 still in use
  const free = p.numFreeBlocks();
  const probe = p.probePrefix([1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(probe, { numTokens: 6, metas: [{ sessionId: "s" }, undefined, { sessionId: "s", type: "output" }] });
  assert.deepEqual(ids.map((id) => p.refCount(id)), [1, 0, 0], "reference counts unchanged");
  assert.equal(p.numFreeBlocks(), free, "evictable blocks stay evictable");
  assert.equal(p.probePrefix([1, 2, 3, 4, 5, 6], 2).numTokens, 4, "maxBlocks caps the walk");
  assert.deepEqual(p.probePrefix([1, 2, 9, 9]), { numTokens: 2, metas: [{ sessionId: "s" }] });
  assert.equal(p.probePrefix([1, 2, 3, 4, 5, 6]).numTokens, p.cachedPrefixTokens([1, 2, 3, 4, 5, 6]));
  // Still evictable: allocating every free block evicts the probed ones.
  assert.equal(p.allocate(free).length, 3);
  assert.equal(p.probePrefix([1, 2, 3, 4, 5, 6]).numTokens, 2);
});

test("BlockPool.matchPrefix() finds a namespace's blocks only under its root (namespaceRoot)", () => {
  const p = pool(16);
  const tokens = [1, 2, 3, 4, 5, 6, 7];
  const lora = namespaceRoot("lora:abc");
  const salted = namespaceRoot("salt:t1", lora);
  assert.notEqual(lora, namespaceRoot("lora:abd"));
  assert.notEqual(salted, namespaceRoot("salt:t1"));
  const m = p.matchPrefix(tokens, Infinity, lora);
  assert.equal(m.numTokens, 0);
  const ids = [...m.blockIds, ...p.allocate(4)];
  for (let b = 0; b < 3; b++) p.commitBlock(ids[b], b === 0 ? null : ids[b - 1], tokens.slice(b * 2, b * 2 + 2), undefined, lora);
  assert.equal(p.cachedPrefixTokens(tokens, Infinity, lora), 6);
  assert.equal(p.cachedPrefixTokens(tokens), 0, "no root: none of the namespace's blocks");
  assert.equal(p.cachedPrefixTokens(tokens, Infinity, salted), 0, "a nested namespace is another one");
  assert.equal(p.probePrefix(tokens, Infinity, lora).numTokens, 6);
  // The namespace's chain hashes are chainHashes from the root, as the host tier and routers compute them.
  assert.deepEqual(p.matchPrefix(tokens, Infinity, lora).hashes, chainHashes(tokens, 2, hashBlock, lora));
  // The same tokens without a root get blocks of their own, and both stay cached side by side.
  assert.equal(runSequence(p, tokens).cached, 0);
  assert.equal(runSequence(p, tokens).cached, 6);
  assert.equal(p.cachedPrefixTokens(tokens, Infinity, lora), 6);
});

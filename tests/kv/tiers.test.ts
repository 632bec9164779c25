import assert from "node:assert/strict";
import { test } from "../harness.ts";
import {
  BlockPool, chainHashes, decideTransfer, GlobalBlockIndex, type KvEvent, prefetchStartTime, TierCache,
} from "../../kv/index.ts";

test("TierCache keeps device evictions and continues a prefix match on host", () => {
  const events: KvEvent[] = [];
  const index = new GlobalBlockIndex();
  const sink = (e: KvEvent) => { events.push(e); index.apply(e); };
  const host = new TierCache({ tier: "host", capacityBlocks: 8, bandwidthBytesPerS: 1e9, latencyS: 1e-5 }, "w0", sink);
  const pool = new BlockPool({
    numBlocks: 2, blockSize: 1, clock: () => 0, workerId: "w0", events: sink,
    onEvict: (b) => host.offload(b.hash, { parentHash: b.parentHash, tokens: b.tokens, meta: b.meta }, 0),
  });
  const ids = pool.allocate(2);
  pool.commitBlock(ids[0], null, [5]);
  pool.commitBlock(ids[1], ids[0], [6]);
  pool.release(ids);
  pool.allocate(2); // evicts both to host
  assert.equal(pool.numCachedBlocks(), 0);
  assert.equal(host.size, 2);
  const hashes = chainHashes([5, 6], 1);
  assert.equal(host.matchContinuation(null, hashes, (i) => [[5, 6][i]]), 2);
  assert.equal(host.matchContinuation(null, hashes, (i) => [[5, 7][i]]), 1, "tokens are compared");
  const o = index.overlaps(hashes).get("w0")!;
  assert.deepEqual(o, { device: 0, deviceOrHost: 2 });
  assert.ok(events.some((e) => e.kind === "moved"));
});

test("GlobalBlockIndex.overlaps() counts contiguous device prefixes per worker", () => {
  const idx = new GlobalBlockIndex();
  idx.apply({ kind: "stored", workerId: "a", tier: "device", time: 0, hashes: [1, 2, 3], parentHash: null, blockSize: 16 });
  idx.apply({ kind: "stored", workerId: "b", tier: "device", time: 0, hashes: [1, 3], parentHash: null, blockSize: 16 });
  const o = idx.overlaps([1, 2, 3]);
  assert.equal(o.get("a")!.device, 3);
  assert.equal(o.get("b")!.device, 1);
  idx.apply({ kind: "removed", workerId: "a", tier: "device", time: 1, hashes: [2] });
  assert.equal(idx.overlaps([1, 2, 3]).get("a")!.device, 1);
});

test("decideTransfer() picks the cheaper of transfer and recompute", () => {
  const fast = decideTransfer({ blocks: 100, bytesPerBlock: 1e6, linkBandwidthBytesPerS: 1e11, linkLatencyS: 1e-5, recomputeS: 0.5 });
  assert.equal(fast.choice, "transfer");
  assert.ok(Math.abs(fast.transferS - (1e-5 + 1e-3)) < 1e-9);
  const slow = decideTransfer({ blocks: 100, bytesPerBlock: 1e6, linkBandwidthBytesPerS: 1e8, linkLatencyS: 1e-5, recomputeS: 0.5 });
  assert.equal(slow.choice, "recompute");
  assert.equal(prefetchStartTime(10, 2, 0, 0.5), 7.5);
  assert.equal(prefetchStartTime(1, 2, 0), 0);
});

test("TierCache.spillTo() moves a full host tier's oldest blocks into the remote store instead of dropping them", () => {
  const events: KvEvent[] = [];
  const sink = (e: KvEvent) => events.push(e);
  const remote = new TierCache({ tier: "remote", capacityBlocks: 8, bandwidthBytesPerS: 1e8, latencyS: 1e-4 }, "store", sink);
  const host = new TierCache({ tier: "host", capacityBlocks: 2, bandwidthBytesPerS: 1e9, latencyS: 1e-5 }, "w0", sink);
  host.spillTo(remote);
  const hashes = chainHashes([5, 6, 7], 1);
  hashes.forEach((h, i) => host.offload(h, { parentHash: i === 0 ? null : hashes[i - 1], tokens: [[5, 6, 7][i]], meta: {} }, i));
  assert.equal(host.size, 2);
  assert.equal(remote.size, 1, "the oldest host block went down, not away");
  assert.equal(remote.matchContinuation(null, hashes, (i) => [[5, 6, 7][i]]), 1);
  assert.equal(host.matchContinuation(hashes[0], hashes.slice(1), (i) => [[6, 7][i]]), 2, "host continues after the remote block");
  assert.ok(events.some((e) => e.kind === "moved" && e.from === "host" && e.to === "remote" && e.hashes[0] === hashes[0]));
  assert.ok(events.some((e) => e.kind === "removed" && e.tier === "host" && e.hashes[0] === hashes[0]));
  assert.ok(remote.transferSeconds(1, 1e6) > host.transferSeconds(1, 1e6), "the remote link is slower");
  // Without a lower tier the same overflow drops the block.
  const lone = new TierCache({ tier: "host", capacityBlocks: 2, bandwidthBytesPerS: 1e9, latencyS: 1e-5 }, "w1");
  hashes.forEach((h, i) => lone.offload(h, { parentHash: i === 0 ? null : hashes[i - 1], tokens: [[5, 6, 7][i]], meta: {} }, i));
  assert.equal(lone.matchContinuation(null, hashes, (i) => [[5, 6, 7][i]]), 0);
});

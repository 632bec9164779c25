/**
 * GlobalBlockIndex with state events (KvStateEvent): for a model with recurrent state a worker's
 * overlap reaches only as far as its deepest state checkpoint within its run of blocks.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { GlobalBlockIndex, type KvEvent } from "../../kv/index.ts";

const stored = (workerId: string, hashes: number[], tier: "device" | "host" = "device"): KvEvent => ({ kind: "stored", workerId, tier, time: 0, hashes, parentHash: null, blockSize: 16 });
const state = (workerId: string, hash: number, kept = true): KvEvent => ({ kind: "state", workerId, time: 0, hash, kept });

/** a: blocks 1–5 on device, states after 2 and 4; b: blocks 1–2 only, a state after 5; c: 1–3 on device, 4–5 on host, a state after 5. */
function threeWorkers(): GlobalBlockIndex {
  const idx = new GlobalBlockIndex();
  for (const e of [
    stored("a", [1, 2, 3, 4, 5]), state("a", 2), state("a", 4),
    stored("b", [1, 2]), state("b", 5),
    stored("c", [1, 2, 3]), stored("c", [4, 5], "host"), state("c", 5),
  ]) idx.apply(e);
  return idx;
}

test("GlobalBlockIndex.overlaps() cuts each run back to the worker's deepest state checkpoint when stateful", () => {
  const idx = threeWorkers();
  const chain = [1, 2, 3, 4, 5, 6];
  assert.deepEqual(Object.fromEntries(idx.overlaps(chain)), {
    a: { device: 5, deviceOrHost: 5 }, b: { device: 2, deviceOrHost: 2 }, c: { device: 3, deviceOrHost: 5 },
  });
  // b's state follows a block it does not hold: no hit at all; c's follows host blocks: a hit once they are back.
  assert.deepEqual(Object.fromEntries(idx.overlaps(chain, true)), { a: { device: 4, deviceOrHost: 4 }, c: { device: 0, deviceOrHost: 5 } });
  // A prompt ending before a's deeper state takes the shallower one.
  assert.deepEqual(idx.overlaps([1, 2, 3], true).get("a"), { device: 2, deviceOrHost: 2 });
  const bySlot = idx.overlapsBySlot(chain, true);
  assert.deepEqual([...["a", "b", "c"].map((w) => [bySlot.device[idx.workerSlot(w)], bySlot.deviceOrHost[idx.workerSlot(w)]])], [[4, 4], [0, 0], [0, 5]]);
});

test("GlobalBlockIndex.apply() forgets a state checkpoint that went, and removeWorker() every one of the worker's", () => {
  const idx = threeWorkers();
  idx.apply(state("a", 4, false));
  idx.apply(state("a", 9, false)); // never kept: nothing changes
  assert.deepEqual(idx.overlaps([1, 2, 3, 4, 5], true).get("a"), { device: 2, deviceOrHost: 2 });
  idx.removeWorker("c");
  // The next new worker takes c's slot, holding c's blocks again but none of its states.
  idx.apply(stored("d", [1, 2, 3, 4, 5]));
  assert.equal(idx.overlaps([1, 2, 3, 4, 5], true).get("d"), undefined);
  assert.deepEqual(idx.overlaps([1, 2, 3, 4, 5]).get("d"), { device: 5, deviceOrHost: 5 });
  idx.apply(state("d", 3));
  assert.deepEqual(idx.overlaps([1, 2, 3, 4, 5], true).get("d"), { device: 3, deviceOrHost: 3 });
});

/** The global block index in a long-lived cluster whose workers come and go under fresh names. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { chainHashes, GlobalBlockIndex } from "../../kv/index.ts";

test("GlobalBlockIndex.removeWorker() forgets the name and gives its slot to the next new worker", () => {
  const index = new GlobalBlockIndex();
  const a = chainHashes([1, 2, 3], 1);
  index.apply({ kind: "stored", workerId: "stays", tier: "device", time: 0, hashes: a, parentHash: null, blockSize: 1 });
  // A thousand short-lived workers (pods restarted under new names), one at a time.
  for (let i = 0; i < 1000; i++) {
    const id = `pod-${i}`;
    index.apply({ kind: "stored", workerId: id, tier: "device", time: i, hashes: a.slice(0, 2), parentHash: null, blockSize: 1 });
    assert.deepEqual(index.overlaps(a).get(id), { device: 2, deviceOrHost: 2 });
    index.removeWorker(id);
  }
  assert.equal(index.workerCount, 1, "only the worker that stayed is known by name");
  const slots = new Set([index.workerSlot("new-a"), index.workerSlot("new-b")]);
  assert.ok([...slots].every((s) => s < 3), `slots are reused, got ${[...slots].join(", ")}`);
  // The reused slot starts empty: nothing of the removed workers' blocks shows under the new name.
  assert.deepEqual([...index.overlaps(a).keys()], ["stays"]);
  const bySlot = index.overlapsBySlot(a);
  assert.equal(bySlot.device[index.workerSlot("new-a")], 0);
  assert.equal(bySlot.device[index.workerSlot("stays")], 3);
  index.apply({ kind: "stored", workerId: "new-b", tier: "host", time: 2000, hashes: a, parentHash: null, blockSize: 1 });
  assert.deepEqual(index.overlaps(a).get("new-b"), { device: 0, deviceOrHost: 3 });
  assert.equal(index.tiersOf(a[0], "pod-999"), 0);
});

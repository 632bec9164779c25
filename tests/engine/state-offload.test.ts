/**
 * HostStateTier (state-offload.ts) on its own: StateCheckpoints tells it of checkpoints taken for others
 * (not of one a decoding sequence moves on from); it reads them to the host, keeps `capacity` of them by
 * worth then last use, never restores one whose read failed, and writes back for an admitted prompt the
 * longest held state within its cached blocks that reaches past its device checkpoints, never over a
 * checkpoint the step's other prompts restore from.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { StateCheckpoints } from "../../src/engine/state-checkpoints.ts";
import { HostStateTier } from "../../src/engine/state-offload.ts";
import type { HostState } from "../../src/engine/state-copy.ts";
import { Sequence } from "../../src/engine/sequence.ts";

const state = (x: number): HostState => ({ conv: [Float32Array.of(x)], ssm: [] });
const settled = () => new Promise((r) => setTimeout(r, 0));

test("StateCheckpoints.onEvict is told of a checkpoint taken for another, not of one its sequence moves on from", () => {
  const cps = new StateCheckpoints(1, 4);
  const told: number[][] = [];
  cps.onEvict = (_id, cp) => told.push([...cp.tokens]);
  const a = cps.reserveDecode(7, 4)!;
  cps.settle(a, [1, 2, 3, 4]);
  // The same sequence moves on: its old checkpoint is replaced in place, not evicted.
  const b = cps.reserveDecode(7, 8)!;
  cps.settle(b, [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.deepEqual(told, []);
  // Another's prompt takes it.
  cps.reserve([9, 9, 9, 9]);
  assert.deepEqual(told, [[1, 2, 3, 4, 5, 6, 7, 8]]);
});

test("HostStateTier keeps its capacity by worth then last use, restores the longest state a prompt's blocks reach, never one whose read failed, never over a checkpoint being restored from", async () => {
  const reads = new Map<number, Promise<HostState>>([[0, Promise.resolve(state(0))], [1, Promise.resolve(state(1))], [2, Promise.reject(new Error("lost"))], [3, Promise.resolve(state(3))]]);
  const tier = new HostStateTier(2, { readState: (id) => reads.get(id)! }, (s) => (s === "keep" ? 1 : 0));
  tier.evicted(0, { tokens: [1, 2, 3, 4], root: null, sessionId: "keep" });
  tier.evicted(1, { tokens: [1, 2, 3, 4, 5, 6, 7, 8], root: null, sessionId: undefined });
  tier.evicted(2, { tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9], root: null, sessionId: "keep" });
  await settled();
  // Three for two places: the one of no worth went (the failed read is worth keeping until it is known to have failed).
  assert.equal(tier.stats().held, 2);
  const written: [number, unknown][] = [];
  const write = (id: number, v: HostState) => written.push([id, v.conv[0][0]]);
  const device = new StateCheckpoints(2, 4);
  const seq = new Sequence(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 10], 0);
  // Blocks cached through 12 tokens: the 12-token state's read failed, the 8-token one went: the 4-token one comes back.
  assert.deepEqual(tier.restore(seq, 12, 0, new Set(), device, write), { id: 0, length: 4 });
  assert.deepEqual(written, [[0, 0]]);
  assert.deepEqual(device.longest(seq.tokens, 12), { id: 0, length: 4 }, "written into a device checkpoint, settled");
  // Nothing longer than the device's own: none.
  assert.equal(tier.restore(seq, 12, 4, new Set(), device, write), undefined);
  // A failed read goes first when room is needed.
  tier.evicted(3, { tokens: [5, 5, 5, 5], root: null, sessionId: undefined });
  await settled();
  // Never over a checkpoint this step's prompts restore from: with both avoided, none.
  const other = new Sequence(2, [5, 5, 5, 5, 6], 1);
  device.reserve([7, 7, 7, 7]);
  device.settle(1);
  assert.equal(tier.restore(other, 4, 0, new Set([0, 1]), device, write), undefined);
  assert.deepEqual(tier.restore(other, 4, 0, new Set([0]), device, write), { id: 1, length: 4 });
  assert.deepEqual(written.at(-1), [1, 3]);
  assert.deepEqual(tier.stats(), { held: 2, capacity: 2, offloaded: 4, restored: 2 });
});

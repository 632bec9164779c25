import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { ClusterWorker, queuedAhead } from "../../src/cluster/cluster-worker.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { model } from "./fixtures.ts";

test("ClusterWorker.observeStep() gives the planner and router each step's cycle, not just its forward", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 16, workerId: "w0" });
  const w = new ClusterWorker(localWorkerEngine(engine), "mixed", 1000);
  const decode = { prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 4, decodeAttnTokens: 200 };
  for (let i = 0; i < 30; i++) w.observeStep({ ...decode, seconds: 0.002, cycleSeconds: 0.005 });
  w.observeStep({ prefillTokens: 100, prefillAttnPairs: 5050, decodeSeqs: 0, decodeAttnTokens: 0, seconds: 0.05, cycleSeconds: 0.1 });
  const near = (a: number, b: number) => Math.abs(a - b) < 1e-9;
  const snap = w.snapshot();
  assert.ok(near(snap.decodeStepS, 0.005), `decodeStepS ${snap.decodeStepS}`);
  assert.ok(near(snap.decodeBusyS, 30 * 0.005), `decodeBusyS ${snap.decodeBusyS}`);
  assert.ok(near(snap.prefillBusyS, 0.1), `prefillBusyS ${snap.prefillBusyS}`);
  const ewma = w.candidate(undefined).decodeStepS;
  assert.ok(ewma > 0.0049 && ewma < 0.00501, `the router's EWMA ${ewma} converges on the cycle`);
  // A step log without cycles (an older worker) still counts its forwards.
  w.observeStep({ ...decode, seconds: 0.002 });
  assert.ok(near(w.snapshot().decodeStepS, 0.002));
  await engine.stop();
});

test("ClusterWorker.candidate() counts only the prefill queued at a request's priority or more urgent", () => {
  const q = { waitingPrefillTokens: 900, oldestWaitS: 0, decoding: 0, prefilling: 0, waitingDecodes: 0 };
  assert.equal(queuedAhead(q, -1), 0, "all of it at 0: an urgent request waits behind none");
  assert.equal(queuedAhead(q, 0), 900);
  assert.equal(queuedAhead(q, 2), 900);
  const split = { ...q, prefillByPriority: [[-1, 100], [0, 300], [4, 500]] as [number, number][] };
  assert.deepEqual([-2, -1, 0, 3, 4].map((p) => queuedAhead(split, p)), [0, 100, 400, 400, 900]);
  const fake = { ...localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 16, workerId: "w1" })), queueState: () => split };
  const w = new ClusterWorker(fake, "mixed", 1000);
  assert.equal(w.candidate(undefined).queuedPrefillTokens, 900, "no priority: the whole queue, as before");
  assert.equal(w.candidate(undefined, -1).queuedPrefillTokens, 100);
  void fake.stop();
});

/** Bug hunt: the cluster's control loop (role flips in flight, dead workers in the planner's snapshot, refused requests). */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Cluster } from "../../src/cluster/cluster.ts";
import { createCluster, type CreateClusterOptions } from "../../src/cluster/create-cluster.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { RequestParamError } from "../../src/engine/engine-types.ts";
import { greedy, model, oneEngine, run, ScriptedPlanner, STORY } from "./fixtures.ts";

function cluster(o: Partial<CreateClusterOptions> & { workers: number }): Cluster {
  return createCluster(createReferenceBackend(), model, { planner: "none", engine: { numBlocks: 64 }, ...o });
}

test("Cluster flips its last decode worker to prefill with hand-offs in flight: they finish alike, and later requests are still served", async () => {
  const expected = await oneEngine(greedy(STORY));
  const planner = new ScriptedPlanner([[{ kind: "flip", workerId: "worker-1", to: "prefill" }]]);
  const cl = cluster({ workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, planner });
  const inFlight = [0, 1, 2].map(() => run(cl, greedy(STORY)));
  await new Promise((r) => setTimeout(r, 5));
  cl.tick();
  assert.deepEqual(cl.workerStatuses().map((w) => w.role), ["prefill", "prefill"]);
  for (const r of await Promise.all(inFlight)) {
    assert.equal(r.result.error, undefined);
    assert.deepEqual(r.streamed, expected);
  }
  // No worker has the decode role now, yet every engine can run a whole request: one is served, not refused.
  const after = await run(cl, greedy(STORY));
  assert.deepEqual(after.streamed, expected);
  assert.deepEqual(cl.workers.map((w) => w.inFlight), [0, 0]);
  await cl.stop();
});

test("Cluster shows the planner a worker that can serve no more as off, not serving", async () => {
  const engines = ["worker-0", "worker-1"].map((workerId) => localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId })));
  let alive = true;
  Object.defineProperty(engines[1], "alive", { get: () => alive });
  const planner = new ScriptedPlanner([]);
  const cl = new Cluster(engines, { bytesPerBlock: 1024, planner });
  cl.tick();
  alive = false;
  cl.tick();
  assert.deepEqual(planner.seen.map((s) => s.workers.map((w) => w.state)), [["serving", "serving"], ["serving", "off"]]);
  await cl.stop();
});

test("Cluster.submit() refused by the worker spends no new-session budget and counts no prompt tokens", async () => {
  const planner = new ScriptedPlanner([[{ kind: "admission", holdNewSessions: false, maxHoldS: 0, newSessions: 1 }]]);
  const cl = cluster({ workers: 2, planner });
  cl.tick();
  // min_tokens above max_tokens: the worker refuses it as the client's mistake (HTTP 400).
  assert.throws(() => cl.submit({ ...greedy(STORY, 2), minTokens: 5, sessionId: "bad" }), RequestParamError);
  assert.equal(cl.metrics.promptTokens, 0, "a refused prompt is not served");
  const ok = await run(cl, { ...greedy(STORY, 2), sessionId: "good" });
  assert.equal(ok.result.completionTokens, 2, "the one new session the planner admitted is this one");
  assert.equal(cl.metrics.promptTokens, STORY.length);
  await cl.stop();
});

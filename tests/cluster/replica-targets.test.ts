import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { assignReplicas, type ReplicaWorker } from "../../src/cluster/replica-targets.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import type { Role } from "../../planner/types.ts";
import { greedy, model, run, ScriptedPlanner, STORY } from "./fixtures.ts";
import { type OfflineProfile, SlaProfilePlanner } from "../../planner/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";

const w = (id: string, role: Role, load = 0, parked = false): ReplicaWorker => ({ id, role, parked, load });
/** "role" or "role parked" for each worker, in order. */
const show = (m: Map<string, { role: Role; parked: boolean }>) => [...m.values()].map((p) => `${p.role}${p.parked ? " parked" : ""}`);

test("assignReplicas() parks the least loaded workers of a pool over its target", () => {
  const m = assignReplicas([w("p0", "prefill", 5), w("p1", "prefill", 1), w("d0", "decode", 3), w("d1", "decode", 0), w("d2", "decode", 9)], 1, 2);
  assert.deepEqual(show(m), ["prefill", "prefill parked", "decode", "decode parked", "decode"]);
});

test("assignReplicas() takes back parked workers of the role first, then mixed, then the other role's", () => {
  const workers = [w("p0", "prefill"), w("d0", "decode"), w("dp", "decode", 0, true), w("m", "mixed"), w("pp", "prefill", 0, true)];
  assert.deepEqual(show(assignReplicas(workers, 1, 2)), ["prefill", "decode", "decode", "mixed parked", "prefill parked"], "the parked decode worker serves again");
  assert.deepEqual(show(assignReplicas(workers, 1, 3)), ["prefill", "decode", "decode", "decode", "prefill parked"], "then the mixed one becomes decode");
  assert.deepEqual(show(assignReplicas(workers, 1, 4)), ["prefill", "decode", "decode", "decode", "decode"], "then the parked prefill worker");
  assert.deepEqual(show(assignReplicas(workers, 2, 2)), ["prefill", "decode", "decode", "mixed parked", "prefill"]);
});

test("assignReplicas() keeps at least one decoding worker and never more workers than there are", () => {
  const workers = [w("a", "prefill"), w("b", "prefill"), w("c", "decode")];
  assert.deepEqual(show(assignReplicas(workers, 3, 0)), ["prefill", "prefill", "decode"], "decode 0 is clamped to 1; prefill to what is left");
  assert.deepEqual(show(assignReplicas(workers, 9, 9)), ["decode", "decode", "decode"], "decode first: all three decode, no prefill left");
  assert.deepEqual(show(assignReplicas([w("m", "mixed")], 1, 1)), ["decode"]);
  assert.deepEqual(show(assignReplicas(workers, NaN, NaN)), ["prefill parked", "prefill parked", "decode"], "no number: none wanted, one decoding");
  assert.deepEqual(show(assignReplicas(workers, Infinity, 1)), ["prefill", "prefill", "decode"]);
});

test("Cluster applies the SLA planner's replica targets: parked workers get no new request and serve again when wanted", async () => {
  const planner = new ScriptedPlanner([[{ kind: "replicas", prefill: 0, decode: 1 }], [{ kind: "replicas", prefill: 0, decode: 2 }]]);
  const decisions: boolean[] = [];
  const c = createCluster(createReferenceBackend(), model, {
    workers: 2, roles: ["decode", "decode"], planner, engine: { numBlocks: 64 }, onDecision: (d) => decisions.push(d.changed),
  });
  try {
    // Load one worker, then let the target of one decode worker park the other (the least loaded).
    const busy = c.submit(greedy(STORY, 64));
    const busyWorker = c.workers.find((x) => x.inFlight > 0)!;
    c.tick();
    const parked = c.workers.filter((x) => x.parked);
    assert.equal(parked.length, 1);
    assert.notEqual(parked[0].id, busyWorker.id, "the idle worker is parked, not the one with work");
    assert.equal(c.workerStatuses().find((s) => s.id === parked[0].id)!.parked, true);
    for (let i = 0; i < 4; i++) {
      const h = c.submit(greedy([...STORY.slice(0, 5), 100 + i], 2));
      assert.equal(parked[0].inFlight, 0, "nothing reaches the parked worker, though the other is busy");
      await h.result;
    }
    await busy.result;
    c.tick();
    assert.equal(c.workers.filter((x) => x.parked).length, 0, "a target of two decode workers takes it back");
    assert.deepEqual(decisions, [true, true]);
    // With both serving, requests spread again (the router's load term sends some to the other).
    const handles = [0, 1, 2, 3].map((i) => c.submit(greedy([...STORY.slice(0, 3), 200 + i], 24)));
    assert.ok(c.workers.every((x) => x.inFlight > 0), "both workers take requests again");
    await Promise.all(handles.map((h) => h.result));
  } finally {
    await c.stop();
  }
});

test("Cluster with replicaStartS: a worker a replica target takes back starts first, and gets requests only after its start-up", async () => {
  let nowMs = 0;
  const planner = new ScriptedPlanner([[{ kind: "replicas", prefill: 0, decode: 1 }], [{ kind: "replicas", prefill: 0, decode: 2 }]]);
  const c = createCluster(createReferenceBackend(), model, { workers: 2, roles: ["decode", "decode"], planner, engine: { numBlocks: 64 }, now: () => nowMs, replicaStartS: 60 });
  try {
    c.tick();
    const parked = c.workers.find((x) => x.parked)!;
    nowMs = 1000;
    c.tick();
    assert.equal(parked.parked, false);
    assert.deepEqual(c.workerStatuses().map((s) => s.starting ?? false), c.workers.map((x) => x === parked), "the worker taken back is starting");
    const busy = c.submit(greedy(STORY, 32));
    const h = c.submit(greedy([...STORY.slice(0, 4), 300], 2));
    assert.equal(parked.inFlight, 0, "a starting worker gets nothing, though the other is busy");
    await Promise.all([busy.result, h.result]);
    c.tick();
    assert.equal(planner.seen.at(-1)!.workers.find((w) => w.id === parked.id)!.state, "starting", "the planner sees it starting");
    nowMs = 61_000;
    assert.equal(c.workerStatuses().find((s) => s.id === parked.id)!.starting, undefined);
    const handles = [0, 1, 2, 3].map((i) => c.submit(greedy([...STORY.slice(0, 3), 400 + i], 24)));
    assert.ok(parked.inFlight > 0, "after its start-up it serves");
    await Promise.all(handles.map((x) => x.result));
  } finally {
    await c.stop();
  }
});

test("Cluster.addWorker() and removeWorker() let an SLA planner with a budget of the workers present place joiners at once and refill a pool a leaver left short", async () => {
  const profile: OfflineProfile = {
    profiledIsl: 1000, profiledOsl: 70,
    prefill: [{ isl: 1000, tokensPerS: 10_000, ttftS: 0.1 }],
    decode: [{ context: 1000, batch: 32, itlS: 0.04, tokensPerS: 800 }],
  };
  const p = new SlaProfilePlanner({ profile, maxWorkers: "present", startupDelayS: 0 });
  const c = createCluster(createReferenceBackend(), model, { workers: 2, roles: ["prefill", "decode"], planner: p, engine: { numBlocks: 64 } });
  const joiner = (id: string) => localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId: id }));
  const places = () => c.workers.map((w) => `${w.id}:${w.role}${w.parked ? " parked" : ""}`);
  try {
    // 3600 requests in 180 s at ISL 1000, OSL 70: 20k prefill tok/s and 1400 decode tok/s want two
    // prefill and two decode workers; the two present get one of each.
    const two = c.workers.map((w) => w.snapshot(0));
    assert.deepEqual(p.tick({
      now: 180, windowS: 180, workers: two, arrivals: 0, arrivedPromptTokens: 0, arrivedUncachedTokens: 0, arrivedOutputTokens: 0,
      completions: Array.from({ length: 3600 }, () => ({ isl: 1000, osl: 70, ttftS: 0.2, itlS: 0.04 })),
    }), [{ kind: "replicas", prefill: 1, decode: 1 }]);
    const [a, b] = c.workers.map((w) => w.id);
    c.addWorker(joiner("w-c"));
    assert.deepEqual(places(), [`${a}:prefill`, `${b}:decode`, "w-c:decode"], "three present: the wanted 2 + 2 scaled to 1 + 2");
    c.addWorker(joiner("w-d"));
    assert.deepEqual(places().at(-1), "w-d:prefill", "four present: 2 + 2");
    c.addWorker(joiner("w-e"));
    assert.deepEqual(places().at(-1), "w-e:mixed parked", "a fifth is spare, as a fixed budget's would be");
    assert.equal((await run(c, greedy(STORY, 4))).streamed.length, 4, "the pools serve");
    assert.ok(await c.removeWorker(a));
    assert.deepEqual(places(), [`${b}:decode`, "w-c:decode", "w-d:prefill", "w-e:prefill"], "the spare one refills the prefill pool");
  } finally {
    await c.stop();
  }
});

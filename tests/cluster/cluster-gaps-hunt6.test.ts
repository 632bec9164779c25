/**
 * Bug hunt: gaps in the multi-worker cluster. A refusal that only the worker's engine finds (it
 * arrives after `submit` returned) spends none of the planner's new-session budget and leaves the
 * session unplaced; the cluster's ITL histogram observes each gap between a request's tokens as they
 * reach the front, not each request's mean gap; an in-place LoRA reload that fails keeps the old
 * adapter serving; a NATS worker whose join fails is never routed to, and is counted.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { eventually } from "../eventually.ts";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Cluster } from "../../src/cluster/cluster.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import { announceWorker, connectControlPlane, watchWorkers } from "../../src/cluster/nats-membership.ts";
import { RemoteEngine } from "../../src/cluster/remote-engine.ts";
import { WorkerDirectory } from "../../src/cluster/worker-directory.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import type { ToWorker } from "../../src/cluster/worker-protocol.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { type GenerateResult, NoWorkerError, type RequestHandle, RequestParamError, SessionRefusedError } from "../../src/engine/engine-types.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import type { PlannerAction } from "../../planner/types.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { ApiError } from "../../src/serve/errors.ts";
import { loadAdapterInto } from "../../src/serve/lora.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { greedy, model, run, ScriptedPlanner, scriptedPort, STORY } from "./fixtures.ts";
import { startNatsServer } from "./nats-server.ts";


/** A cluster of one scripted remote worker; `rid()` is the id of the request last sent to it. */
async function scriptedCluster(script: PlannerAction[][] = []) {
  const { port, sent, reply } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  const cl = new Cluster([remote], { bytesPerBlock: 1024, planner: new ScriptedPlanner(script) });
  const rid = () => (sent.filter((m) => m.op === "submit").at(-1) as Extract<ToWorker, { op: "submit" }>).rid;
  return { cl, reply, rid };
}

const budget = (newSessions: number): PlannerAction => ({ kind: "admission", holdNewSessions: false, maxHoldS: 0, newSessions, rejectAfterHold: true });
const turn = (sessionId: string) => ({ prompt: [1, 2, 3], maxTokens: 4, temperature: 0, sessionId });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const finished = (n: number): GenerateResult => ({
  text: "x".repeat(n), tokenIds: Array.from({ length: n }, (_, i) => 5 + i), finishReason: "length", promptTokens: 3, completionTokens: n, cachedTokens: 0, firstTokenS: 0.001, lastTokenS: 0.002,
});

test("Cluster: a request a remote worker refuses spends no new-session budget, leaves its session new and counts no finish", async () => {
  const { cl, reply, rid } = await scriptedCluster([[budget(1)]]);
  try {
    cl.tick();
    const bad = cl.submit(turn("a"));
    reply({ op: "rejected", rid: rid(), name: "RequestParamError", message: "A grammar with no choice" });
    assert.ok(await bad.refusal instanceof RequestParamError);
    await bad.result;
    // The one new session the planner admitted this tick is still to come.
    const good = cl.submit(turn("b"));
    reply({ op: "accepted", rid: rid() });
    assert.equal(await good.refusal, undefined);
    // "a" was never placed: its retry is a new session, and the budget is spent now: it waits at the
    // door, and the next tick (no new budget) turns it away.
    const retry = cl.submit(turn("a"));
    reply({ op: "result", rid: rid(), result: finished(2) });
    await good.result;
    cl.tick();
    assert.ok(await retry.refusal instanceof SessionRefusedError);
    assert.equal(cl.metrics.promptTokens, 3, "the refused prompt was not served");
    assert.deepEqual([...cl.metrics.finished], [["length", 1]], "a refusal is no finished request");
  } finally {
    await cl.stop();
  }
});

test("Cluster: a remote refusal that comes after the planner's next tick gives nothing back to the new budget", async () => {
  const { cl, reply, rid } = await scriptedCluster([[budget(1)], [budget(1)]]);
  try {
    cl.tick();
    const bad = cl.submit(turn("a"));
    cl.tick(); // a fresh budget of 1
    reply({ op: "rejected", rid: rid(), name: "EngineOverloadedError", message: "1 requests are already waiting" });
    await bad.result;
    assert.equal(cl.metrics.rejected, 1);
    const ok = cl.submit(turn("b"));
    const late = cl.submit(turn("c"));
    ok.cancel();
    reply({ op: "result", rid: rid(), result: { ...finished(0), finishReason: "abort" } });
    await ok.result;
    cl.tick();
    assert.ok(await late.refusal instanceof SessionRefusedError, "the tick's budget of 1 went to b");
  } finally {
    await cl.stop();
  }
});

test("Cluster: the ITL histogram observes each gap between a remote request's tokens, not their mean", async () => {
  const { cl, reply, rid } = await scriptedCluster();
  try {
    const h: RequestHandle = cl.submit({ prompt: [1, 2, 3], maxTokens: 4, temperature: 0 });
    const r = rid();
    reply({ op: "accepted", rid: r });
    // Gaps of ~0, ~0 and 300 ms: their mean (100 ms) is none of them. The first three arrive in one
    // synchronous run (no timer between them a loaded machine could stretch past 50 ms).
    const t0 = performance.now();
    reply({ op: "delta", rid: r, delta: { text: "a", tokenIds: [5] } });
    reply({ op: "delta", rid: r, delta: { text: "b", tokenIds: [6] } });
    reply({ op: "delta", rid: r, delta: { text: "c", tokenIds: [7] } });
    await sleep(300);
    reply({ op: "delta", rid: r, delta: { text: "d", tokenIds: [8] } });
    const decodeS = (performance.now() - t0) / 1000;
    reply({ op: "result", rid: r, result: { ...finished(4), firstTokenS: 0.001, lastTokenS: 0.31 } });
    await h.result;
    const itl = cl.metrics.itl;
    const at = (bound: number) => itl.counts[itl.bounds.indexOf(bound)];
    assert.equal(itl.count, 3, "one gap per token after the first");
    assert.equal(at(0.05), 2, `two gaps of a few ms, got buckets ${itl.counts}`);
    assert.equal(at(0.2), 2, "and one far longer");
    // Bounded by the time measured around the deltas, not by a guess at how long sleep(300) takes.
    assert.ok(itl.sum >= 0.3 && itl.sum <= decodeS + 1e-3, `the gaps add up to the decode time (${decodeS} s), got ${itl.sum}`);
  } finally {
    await cl.stop();
  }
});

for (const handOff of [false, true]) test(`Cluster of in-process workers: one ITL observation per gap between tokens, as one engine's${handOff ? ", after a hand-off" : ""}`, async () => {
  const cl = createCluster(createReferenceBackend(), model, {
    planner: "none", engine: { numBlocks: 64 },
    ...(handOff ? { workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 } } : { workers: 1 }),
  });
  try {
    const { result } = await run(cl, greedy(STORY, 8));
    assert.equal(result.completionTokens, 8);
    if (handOff) assert.equal(cl.counters.prefillHandoffs, 1);
    assert.equal(cl.metrics.itl.count, 7);
    assert.ok(cl.metrics.itl.sum > 0);
  } finally {
    await cl.stop();
  }
});

const loraDir = mkdtempSync(`${tmpdir()}/cluster-gaps-hunt6-`);
process.on("exit", () => rmSync(loraDir, { recursive: true, force: true }));
const loraPath = async (seed: number) => {
  const path = `${loraDir}/${seed}.gguf`;
  await writeFile(path, loraGgufBytes(model.config, { seed, rank: 4, alpha: 8, targets: [{ layer: 0, target: "wq" }, { layer: 1, target: "wv" }], magnitude: 0.5 }));
  return path;
};

test("an in-place LoRA reload that a worker cannot load keeps the old adapter serving on every worker; one that all load swaps it in", async () => {
  const [oldPath, newPath] = [await loraPath(61), await loraPath(62)];
  const engines = ["worker-0", "worker-1"].map((workerId) => createEngine(createReferenceBackend(), model, { numBlocks: 64, workerId }));
  const workers = engines.map(localWorkerEngine);
  let refuse = false;
  const load = workers[1].loadAdapter;
  workers[1].loadAdapter = (name, adapter) => (refuse ? Promise.reject(new Error("No such file on this machine")) : load(name, adapter));
  const cl = new Cluster(workers, { bytesPerBlock: 1024 });
  const oracle = async (path: string) => {
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
    e.loadAdapter("x", await loadLoraAdapter(path, model.config));
    const out = (await run(e, { ...greedy(STORY, 8), adapter: "x" })).streamed;
    await e.stop();
    return out;
  };
  const [before, after] = [await oracle(oldPath), await oracle(newPath)];
  assert.notDeepEqual(before, after, "the two adapters answer differently");
  const served = async () => {
    const outs = [];
    // One request per worker (a session each, so both are used).
    for (const sessionId of ["s0", "s1", "s2", "s3"]) outs.push((await run(cl, { ...greedy(STORY, 8), adapter: "a", sessionId })).streamed);
    return outs;
  };
  try {
    await loadAdapterInto(cl, model, "a", oldPath);
    refuse = true;
    await assert.rejects(loadAdapterInto(cl, model, "a", newPath, true), (e: unknown) => e instanceof ApiError && e.status === 400 && /worker-1 could not load the LoRA adapter "a"/.test(e.message));
    assert.deepEqual(cl.adapterNames(), ["a"], "the name stays loaded");
    assert.ok(cl.workers.every((w) => w.adapters.has("a")), "on every worker");
    assert.deepEqual(engines.map((e) => e.adapterNames()), [["a"], ["a"]], "the new one was let go where it loaded");
    for (const out of await served()) assert.deepEqual(out, before, "the old adapter serves on");
    refuse = false;
    await loadAdapterInto(cl, model, "a", newPath, true);
    assert.deepEqual(cl.adapterNames(), ["a"]);
    for (const out of await served()) assert.deepEqual(out, after, "the new adapter serves");
    // (The old one goes once its last request has; poll, with a deadline only against a hang.)
    await eventually(() => engines.every((e) => e.adapterNames().length === 1 && !e.adapterNames().includes("a")), (done) => done);
    assert.ok(engines.every((e) => e.adapterNames().length === 1 && !e.adapterNames().includes("a")), `the old one is unloaded, got ${JSON.stringify(engines.map((e) => e.adapterNames()))}`);
    await cl.unloadAdapter("a");
    assert.deepEqual(engines.map((e) => e.adapterNames()), [[], []]);
    await loadAdapterInto(cl, model, "a", oldPath);
    assert.deepEqual((await served())[0], before, "and the name loads again");
  } finally {
    await cl.stop();
  }
});

/** Waits for `cond`; the deadline only turns a hang into a failure, so it is generous. */
async function until(what: string, cond: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting until ${what}`);
    await sleep(20);
  }
}

test("watchWorkers() over a real NATS server: a worker whose join fails is never in the cluster, is logged and counted, and is tried again later", async () => {
  const nats = await startNatsServer();
  const nc = await connectControlPlane(nats.url, "gaps-test");
  const cl = new Cluster([], { bytesPerBlock: 1024, shape: { maxModelLen: 512, blockSize: 16 } });
  const lines: string[] = [];
  const refused = localWorkerEngine(createEngine(createReferenceBackend(), model, { numBlocks: 16, blockSize: 32, workerId: "w-odd" }));
  const started = performance.now();
  const watch = watchWorkers(nc, cl, {
    clusterName: "gaps", retryMs: 300, checkMs: 50, log: (l) => lines.push(l),
    connect: (id) => (id === "w-odd" ? Promise.resolve(refused) : Promise.reject(new Error("connect ECONNREFUSED"))),
  });
  const gone = announceWorker(nc, "gaps", { id: "w-gone", addr: "127.0.0.1:9" }, 50);
  const odd = announceWorker(nc, "gaps", { id: "w-odd", addr: "127.0.0.1:10" }, 50);
  try {
    await until("both joins failed", () => cl.counters.joinFailures >= 2);
    assert.deepEqual(cl.workers, [], "no worker whose join failed is in the cluster");
    assert.throws(() => cl.submit(greedy(STORY, 2)), NoWorkerError, "nothing is routed to them");
    assert.ok(lines.some((l) => /Worker "w-gone" at 127\.0\.0\.1:9 could not join: connect ECONNREFUSED/.test(l)), lines.join("\n"));
    assert.ok(lines.some((l) => /Worker "w-odd" at 127\.0\.0\.1:10 was refused: .*KV blocks of 32 tokens/.test(l)), lines.join("\n"));
    assert.equal(refused.alive, false, "the refused worker's engine was stopped");
    // Heartbeats keep coming: each is tried again once its pause is over, not at every beat.
    await until("a retry", () => cl.counters.joinFailures >= 4);
    await sleep(100);
    // Each of the two is tried at most once per 300 ms pause since the watch began (plus one try of
    // slack each), however long a loaded machine made this take; every 50 ms beat would be 6 times that.
    const failures = cl.counters.joinFailures;
    const pauses = Math.floor((performance.now() - started) / 300);
    assert.ok(failures <= 2 * (pauses + 2), `retried every 300 ms, not every 50 ms beat: ${failures} failures in ${pauses} pauses`);
    assert.equal(cl.counters.joined, 0);
  } finally {
    watch.stop();
    await gone.leave();
    await odd.leave();
    await nc.close();
    nats.stop();
    await cl.stop();
  }
});

test("WorkerDirectory forgets a worker whose join failed once it leaves, and failed workers gone quiet past their retry time", () => {
  const dir = new WorkerDirectory({ retryMs: 100 });
  const ready = (id: string) => ({ id, addr: "h:1", state: "ready" as const });
  for (let i = 0; i < 50; i++) {
    dir.observe(ready(`w${i}`), 0);
    dir.failed(`w${i}`, 0);
  }
  assert.equal(dir.size, 50);
  assert.equal(dir.observe({ ...ready("w0"), state: "leaving" }, 10), null);
  assert.equal(dir.status("w0"), undefined, "a failed worker that leaves is forgotten");
  // Past their retry time a failed entry means nothing (the next beat joins at once): the next failure sweeps them.
  dir.observe(ready("late"), 500);
  dir.failed("late", 500);
  assert.equal(dir.size, 1);
  assert.equal(dir.status("late"), "failed");
  assert.deepEqual(dir.observe(ready("w7"), 501), { kind: "join", id: "w7", addr: "h:1" });
});

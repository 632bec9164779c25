import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { RemoteEngine } from "../../src/cluster/remote-engine.ts";
import type { ToWorker } from "../../src/cluster/worker-protocol.ts";
import type { ThreadPort } from "../../src/runtime/threads.ts";
import { scriptedPort } from "./fixtures.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


test("RemoteEngine.submit() times the first and last tokens where the cluster receives them, not on the worker's clock", async () => {
  const { port, sent, reply } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  const h = remote.submit({ prompt: [1, 2, 3], maxTokens: 2, temperature: 0 });
  const submit = sent.find((m) => m.op === "submit");
  assert.ok(submit !== undefined && submit.op === "submit");
  // The worker is mid-step: the request waits in its queue before its own clock starts.
  await sleep(60);
  reply({ op: "delta", rid: submit.rid, delta: { text: "a", tokenIds: [5] } });
  await sleep(30);
  reply({ op: "delta", rid: submit.rid, delta: { text: "b", tokenIds: [6] } });
  reply({
    op: "result", rid: submit.rid,
    result: { text: "ab", tokenIds: [5, 6], finishReason: "length", promptTokens: 3, completionTokens: 2, cachedTokens: 0, firstTokenS: 0.001, lastTokenS: 0.002 },
  });
  const r = await h.result;
  assert.ok(r.firstTokenS !== undefined && r.firstTokenS >= 0.055, `first token at ${r.firstTokenS} s counts the wait in the worker's queue`);
  assert.ok(r.lastTokenS !== undefined && r.lastTokenS - r.firstTokenS >= 0.025, `last token at ${r.lastTokenS} s`);
  assert.deepEqual(r.tokenIds, [5, 6]);
  await remote.stop();
});

test("RemoteEngine.over() asks the worker to load the model quantized as the cluster's own copy is", async () => {
  const { port, sent } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf", quantize: "q8_0" }, "reference", {}, () => {});
  const init = sent.find((m) => m.op === "init");
  assert.deepEqual(init && { path: init.modelPath, quantize: init.quantize }, { path: "model.gguf", quantize: "q8_0" });
  await remote.stop();
});

test("RemoteEngine.submit() keeps the worker's result as it is when no token came back", async () => {
  const { port, sent, reply } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  const h = remote.submit({ prompt: [1, 2, 3], maxTokens: 2 });
  const submit = sent.find((m) => m.op === "submit");
  assert.ok(submit !== undefined && submit.op === "submit");
  reply({ op: "result", rid: submit.rid, result: { text: "", tokenIds: [], finishReason: "abort", promptTokens: 3, completionTokens: 0, cachedTokens: 0 } });
  const r = await h.result;
  assert.equal(r.firstTokenS, undefined);
  assert.equal(r.finishReason, "abort");
  await remote.stop();
});

test("RemoteEngine.stats() of a worker that died drops its last report's load and keeps its counters", async () => {
  const { port, reply, fail } = scriptedPort();
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  const h = remote.submit({ prompt: [1, 2, 3], maxTokens: 20, temperature: 0 });
  const busy = (s: ReturnType<typeof remote.stats>) => ({
    stats: { ...s, waiting: 1, running: 3, kvUsedBlocks: 5, steps: 7, preemptions: 2 },
    queue: { waitingPrefillTokens: 40, oldestWaitS: 1, decoding: 3, prefilling: 0, waitingDecodes: 1 }, freeBlocks: 11, sessions: { running: 3, idle: 2 },
    stepMixing: "mixed" as const, finished: [], promptTokens: 0, generationTokens: 0, events: [], steps: [],
  });
  reply({ op: "state", state: busy(remote.stats()) });
  assert.equal(remote.stats().running, 3);
  fail(new Error("read ECONNRESET"));
  assert.equal(remote.alive, false);
  assert.match((await h.result).error ?? "", /ECONNRESET/);
  const s = remote.stats();
  assert.deepEqual([s.waiting, s.running, s.kvUsedBlocks, s.kvTotalBlocks], [0, 0, 0, 0], "a dead worker holds no requests and no KV");
  assert.deepEqual([s.steps, s.preemptions], [7, 2], "its counters stay");
  assert.equal(remote.queueState().decoding, 0);
  assert.deepEqual(remote.sessionStatusCounts(), { running: 0, idle: 0 });
  // A report that was still on its way changes nothing.
  reply({ op: "state", state: busy(remote.stats()) });
  assert.equal(remote.stats().running, 0);
  await remote.stop();
});

test("RemoteEngine.stop() lets go of a worker that never answers (a stopped or cut-off process) after its grace period, and closes the port", async () => {
  const s = scriptedPort();
  let stopAsked = false;
  let closed = false;
  const port: ThreadPort = {
    ...s.port,
    // The worker process is frozen: the stop is sent, no reply ever comes, the connection stays up.
    post: (m, transfer) => ((m as ToWorker).op === "stop" ? void (stopAsked = true) : s.port.post(m, transfer)),
    close: () => Promise.resolve(void (closed = true)),
  };
  const remote = await RemoteEngine.over(port, "w0", { path: "model.gguf" }, "reference", {}, () => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<string>((r) => (timer = setTimeout(r, 5000, "still waiting")));
  const outcome = await Promise.race([remote.stop(0).then(() => "stopped"), hung]);
  clearTimeout(timer);
  assert.equal(outcome, "stopped");
  assert.ok(stopAsked, "the worker was asked to stop first");
  assert.ok(closed, "the port is closed");
  assert.equal(remote.alive, false);
});

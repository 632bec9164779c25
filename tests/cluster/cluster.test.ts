import assert from "node:assert/strict";
import { sharedRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { clusterPlanner, createCluster, type CreateClusterOptions, remoteKvDtype, warmUpWorkers } from "../../src/cluster/create-cluster.ts";
import { type PeerTransferMode, peerTransferOptions } from "../../src/cluster/cluster-router.ts";
import type { Cluster, ClusterDecision } from "../../src/cluster/cluster.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { RequestHandle } from "../../src/engine/engine-types.ts";
import type { StepRecord } from "../../src/engine/step-record.ts";
import { readTextFile } from "../../src/runtime/fs.ts";
import { greedy, model, oneEngine, run, ScriptedPlanner, STORY } from "./fixtures.ts";
import { mixedWorkerSteps, snap } from "../planner/snapshots.ts";
import { OnlinePlanner } from "../../planner/online-planner.ts";

const golden = JSON.parse(await readTextFile(`${sharedRoot}/reference/stories260K-greedy.json`)) as { prompt_ids_with_bos: number[]; greedy20: number[] };

function cluster(o: Partial<CreateClusterOptions> & { workers: number }): Cluster {
  return createCluster(createReferenceBackend(), model, { planner: "none", engine: { numBlocks: 64 }, ...o });
}

/** worker-0 prefills, worker-1 decodes, and every prompt is handed off. */
function prefillDecodeCluster(onStep?: CreateClusterOptions["onStep"]): Cluster {
  return cluster({ workers: 2, roles: ["prefill", "decode"], router: "kv-aware", routerOptions: { localPrefillThreshold: 0 }, onStep });
}

test("Engine.importPrefix() makes another engine's cached prefix a hit that generates what recomputing does", async () => {
  const a = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const b = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const c = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const first = await run(a, greedy(STORY));
  const prefix = await a.exportPrefix(STORY);
  assert.ok(prefix !== null);
  const blocks = Math.floor(STORY.length / 16);
  assert.equal(prefix.tokens.length, blocks * 16);
  assert.equal(b.importPrefix(prefix), blocks);
  assert.equal(b.importPrefix(prefix), 0, "blocks already held are not written again");
  const moved = await run(b, greedy(STORY));
  assert.equal(moved.result.cachedTokens, Math.floor((STORY.length - 1) / 16) * 16);
  assert.deepEqual(moved.streamed, first.streamed);
  // The moved bytes are what the hit reads: a prefix with its KV zeroed generates something else.
  for (const layer of [...prefix.kv.k, ...prefix.kv.v]) layer.fill(0);
  c.importPrefix(prefix);
  const poisoned = await run(c, greedy(STORY));
  assert.equal(poisoned.result.cachedTokens, moved.result.cachedTokens);
  assert.notDeepEqual(poisoned.streamed, first.streamed);
  await Promise.all([a.stop(), b.stop(), c.stop()]);
});

test("Cluster hands off a prompt scored for its log probabilities and returns them as one engine does", async () => {
  const req = { ...greedy(STORY, 4), promptLogprobs: 2 };
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  const alone = (await run(e, req)).result;
  await e.stop();
  const cl = prefillDecodeCluster();
  // Twice: the second time the prompt's blocks are cached on both workers, and still nothing is taken from them.
  for (const round of [1, 2]) {
    const h = cl.submit(req);
    let first: import("../../src/engine/engine-types.ts").StreamDelta | undefined;
    for await (const d of h.stream) first ??= d;
    const r = await h.result;
    assert.equal(cl.counters.prefillHandoffs, round, "the prompt went through the prefill worker");
    assert.equal(r.promptLogprobs!.length, STORY.length);
    assert.equal(r.promptLogprobs![0], null);
    r.promptLogprobs!.slice(1).forEach((lp, i) => {
      const want = alone.promptLogprobs![i + 1]!;
      assert.equal(lp!.id, STORY[i + 1]);
      assert.ok(Math.abs(lp!.logprob - want.logprob) < 1e-6, `round ${round}, position ${i + 1}`);
      assert.deepEqual(lp!.top.map(([id]) => id), want.top.map(([id]) => id));
    });
    assert.deepEqual(first!.promptLogprobs, r.promptLogprobs, "the first delta carries them");
    assert.deepEqual(r.tokenIds, alone.tokenIds);
    assert.equal(r.cachedTokens, 0);
    // The decode worker takes the handed-off KV, computing only the last prompt token again.
    const dec = cl.workers[1].engine.stats();
    assert.equal(dec.prefixHitTokens, round * (STORY.length - 1));
  }
  await cl.stop();
});

test("Cluster hands a prefill from a prefill worker to a decode worker and streams what one engine would", async () => {
  const expected = await oneEngine(greedy(STORY));
  const decodeSteps: StepRecord[] = [];
  const cl = prefillDecodeCluster((id, r) => id === "worker-1" && decodeSteps.push(r));
  const { streamed, result } = await run(cl, greedy(STORY));
  assert.deepEqual(streamed, expected);
  assert.deepEqual(result.tokenIds, expected);
  assert.equal(cl.counters.prefillHandoffs, 1);
  const [pre, dec] = cl.workers;
  assert.equal(dec.id, "worker-1");
  assert.equal(pre.engine.metrics.finished.get("prefill_done"), 1, "the prefill worker stopped at the first token");
  assert.ok(STORY.length % 16 !== 0, "the prompt ends in a partial block");
  assert.equal(dec.engine.stats().prefixHitTokens, STORY.length - 1, "the decode worker started from the moved KV, the partial last block included");
  assert.equal(decodeSteps.length, expected.length);
  assert.deepEqual(decodeSteps.map((s) => s.prefillTokens), expected.map(() => 0), "the last prompt token was computed as a decode, in no prefill step");
  assert.equal(result.cachedTokens, 0, "the client is told what was cached before it asked: nothing");
  const again = await run(cl, greedy(STORY));
  assert.deepEqual(again.streamed, expected);
  const moved = Math.floor((STORY.length - 1) / 16) * 16;
  assert.equal(again.result.cachedTokens, moved, "asked again, the prompt was cached on the prefill worker");
  assert.equal(cl.metrics.ttft.count, 2);
  assert.equal(cl.metrics.finished.get("length"), 2);
  // A prompt shorter than a block moves only its last block and still decodes the golden tokens.
  const short = await run(cl, greedy(golden.prompt_ids_with_bos, 20));
  assert.deepEqual(short.streamed, golden.greedy20);
  assert.equal(cl.counters.prefillHandoffs, 3);
  assert.ok(decodeSteps.every((s) => s.prefillTokens === 0), "no hand-off left the decode worker a prefill");
  await cl.stop();
});

test("Cluster hands off identical prompts sent at once, each with its own last block", async () => {
  const expected = await oneEngine(greedy(STORY));
  const decodeSteps: StepRecord[] = [];
  const cl = prefillDecodeCluster((id, r) => id === "worker-1" && decodeSteps.push(r));
  const runs = await Promise.all([0, 1, 2].map(() => run(cl, greedy(STORY))));
  for (const r of runs) assert.deepEqual(r.streamed, expected);
  assert.equal(cl.counters.prefillHandoffs, 3);
  assert.ok(decodeSteps.length > 0);
  assert.deepEqual(decodeSteps.filter((s) => s.prefillTokens > 0), [], "every copy started from its moved last block, none prefilled on the decode worker");
  await cl.stop();
});

test("Cluster lets go of a hand-off cancelled as its prefill ends, moving nothing", async () => {
  const expected = await oneEngine(greedy(STORY));
  let handle: RequestHandle | undefined;
  const cl = prefillDecodeCluster((id, r) => id === "worker-0" && r.prefillTokens > 0 && handle?.cancel());
  handle = cl.submit(greedy(STORY));
  const result = await handle.result;
  assert.equal(result.finishReason, "abort");
  assert.equal(result.error, undefined, "a cancel is not an error");
  const [pre, dec] = cl.workers;
  assert.equal(pre.engine.metrics.finished.get("prefill_done"), 1, "the prefill had ended when the cancel came");
  assert.equal(cl.counters.movedBlocks, 0, "no KV moved for a request no one waits for");
  assert.equal(pre.engine.stats().kvUsedBlocks, 0, "the block held for the hand-off was let go at once");
  assert.equal(dec.engine.stats().kvUsedBlocks, 0);
  // The cluster goes on serving, the prefill worker's cached prompt included.
  handle = undefined;
  const again = await run(cl, greedy(STORY));
  assert.deepEqual(again.streamed, expected);
  await cl.stop();
});

test("Cluster sends a session's next turn to the worker that holds its KV", async () => {
  const cl = cluster({ workers: 3 });
  const t1 = await run(cl, { ...greedy(STORY, 8), sessionId: "s1" });
  const holder = cl.workers.findIndex((w) => w.engine.stats().prefixQueriedTokens > 0);
  const turn2 = [...STORY, ...t1.result.tokenIds, ...model.tokenizer.encode(" Then it rained.", { addBos: false })];
  const t2 = await run(cl, { ...greedy(turn2, 8), sessionId: "s1" });
  assert.ok(t2.result.cachedTokens >= Math.floor(STORY.length / 16) * 16, `turn 2 reused turn 1's KV (cached ${t2.result.cachedTokens})`);
  assert.equal(cl.workers.filter((w) => w.engine.stats().prefixQueriedTokens > 0).length, 1, "both turns ran on one worker");
  assert.ok(cl.workers[holder].engine.stats().prefixHitTokens > 0);
  await cl.stop();
});

test("Cluster pulls a session's prefix to a peer when the holder is busy (peer transfer)", async () => {
  const cl = cluster({ workers: 2, routerOptions: { peerMoveS: 0 } });
  await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  const holder = cl.workers.find((w) => w.engine.stats().prefixQueriedTokens > 0)!;
  const other = cl.workers.find((w) => w !== holder)!;
  // Make the holder look busy: a long queue of uncached prompts on it.
  const busy = Array.from({ length: 6 }, (_, i) => holder.engine.submit(greedy(model.tokenizer.encode(`Filler ${i} `.repeat(40), { addBos: true }), 2)));
  const t2 = await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  assert.equal(cl.counters.prefixMoves, 1, "the prefix moved instead of being recomputed");
  assert.ok(other.engine.stats().prefixHitTokens > 0, "the peer served the turn from the moved blocks");
  assert.equal(t2.result.cachedTokens, Math.floor((STORY.length - 1) / 16) * 16);
  await Promise.all(busy.map((h) => h.result));
  await cl.stop();
});

test("Cluster pulls a session's prefix from its worker after that worker flipped to prefill", async () => {
  const cl = cluster({ workers: 2, routerOptions: { peerMoveS: 0 } });
  await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  const holder = cl.workers.find((w) => w.engine.stats().prefixQueriedTokens > 0)!;
  const other = cl.workers.find((w) => w !== holder)!;
  // The planner gives the holder to prefill: the session's next turn decodes elsewhere, its KV still there.
  holder.role = "prefill";
  const t2 = await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  assert.equal(cl.counters.prefixMoves, 1, "the prefix moved from the prefill-role holder instead of being recomputed");
  assert.equal(t2.result.cachedTokens, Math.floor((STORY.length - 1) / 16) * 16);
  assert.ok(other.engine.stats().prefixHitTokens > 0, "the decoding worker served the turn from the moved blocks");
  assert.deepEqual(t2.streamed, await oneEngine(greedy(STORY, 4)));
  await cl.stop();
});

test("Cluster spreads concurrent new sessions whose prompts share a system prompt's blocks", async () => {
  const cl = cluster({ workers: 4, engine: { numBlocks: 256 } });
  const system = "You are a helpful coding agent. You can read files and run commands in the shell. Always explain. ";
  await run(cl, { ...greedy(model.tokenizer.encode(system + "Warm up.", { addBos: true }), 4), sessionId: "warm" });
  // Twelve sessions arrive at once: only the warm session's worker holds the system prompt's blocks.
  const turns = Array.from({ length: 12 }, (_, i) =>
    run(cl, { ...greedy(model.tokenizer.encode(system + `Task number ${i}: fix the bug in file ${i}.`, { addBos: true }), 8), sessionId: `s${i}` }));
  const done = await Promise.all(turns);
  const served = cl.workers.map((w) => w.engine.stats().prefixQueriedTokens > 0);
  assert.deepEqual(served, [true, true, true, true], "every worker took some of the sessions");
  assert.ok(done.every((t) => t.result.cachedTokens > 0), "each took the shared blocks from a cache (its own or pulled)");
  assert.ok(cl.workers.every((w) => w.handoffTokens === 0), "no hand-off is counted as pending once all are done");
  await cl.stop();
});

/** Runs session s1's turn, pushes its blocks into the holder's host memory, makes the holder busy, then runs the turn again. */
async function offloadedTurn(mode: PeerTransferMode) {
  const cl = cluster({ workers: 2, engine: { numBlocks: 12, kvOffloadBlocks: 64 }, routerOptions: { peerMoveS: 0, ...peerTransferOptions(mode) } });
  await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  const holder = cl.workers.find((w) => w.engine.stats().prefixQueriedTokens > 0)!;
  for (let i = 0; i < 4; i++) await holder.engine.submit(greedy(model.tokenizer.encode(`The dog number ${i} ran to the big red ball. `.repeat(3), { addBos: true }), 2)).result;
  const offloaded = holder.engine.stats().kvOffloadedBlocks;
  const busy = Array.from({ length: 6 }, (_, i) => holder.engine.submit(greedy(model.tokenizer.encode(`Filler ${i} `.repeat(18), { addBos: true }), 2)));
  const t2 = await run(cl, { ...greedy(STORY, 4), sessionId: "s1" });
  await Promise.all(busy.map((h) => h.result));
  const moves = cl.counters.prefixMoves;
  await cl.stop();
  return { t2, offloaded, moves };
}

test("Cluster with peer transfer \"host\" pulls a session's prefix from its holder's host memory to a peer", async () => {
  const full = Math.floor((STORY.length - 1) / 16) * 16;
  const pulled = await offloadedTurn("host");
  assert.ok(pulled.offloaded >= full / 16, `the holder offloaded the session's blocks (${pulled.offloaded})`);
  assert.equal(pulled.moves, 1, "the prefix moved from the holder's host memory");
  assert.equal(pulled.t2.result.cachedTokens, full);
  assert.deepEqual(pulled.t2.streamed, await oneEngine(greedy(STORY, 4)));
  const recomputed = await offloadedTurn("device");
  assert.equal(recomputed.t2.result.cachedTokens, 0, "counting device blocks only, the peer recomputes the prompt");
  assert.deepEqual(recomputed.t2.streamed, pulled.t2.streamed);
  const off = await offloadedTurn("off");
  assert.equal(off.moves, 0, "with peer transfer off nothing moves");
});

test("Cluster.tick() shows the planner measured steps, applies its flips, threshold and step mixing, and reports each to onDecision", async () => {
  const planner = new ScriptedPlanner([[
    { kind: "flip", workerId: "worker-1", to: "prefill" },
    { kind: "local-prefill-threshold", tokens: 0 },
    { kind: "step-mixing", split: true },
  ], [{ kind: "step-mixing", split: true }, { kind: "flip", workerId: "worker-1", to: "prefill" }]]);
  let now = 0;
  const decisions: ClusterDecision[] = [];
  const cl = cluster({ workers: 2, planner, now: () => now, onDecision: (d) => decisions.push(d) });
  const r = await run(cl, greedy(STORY, 6));
  now = 1000;
  cl.tick();
  const snap = planner.seen[0];
  assert.equal(snap.arrivals, 1);
  assert.equal(snap.arrivedPromptTokens, STORY.length);
  assert.equal(snap.completions.length, 1);
  assert.equal(snap.completions[0].osl, 6);
  assert.equal(snap.workers.reduce((a, w) => a + w.prefillTokens, 0), STORY.length, "every prompt token computed shows in some window");
  assert.equal(snap.workers.reduce((a, w) => a + w.decodeTokens, 0), r.result.completionTokens - 1);
  assert.deepEqual(cl.workerStatuses().map((w) => w.role), ["mixed", "prefill"]);
  assert.equal(cl.counters.flips, 1);
  assert.equal(cl.localPrefillThreshold, 0);
  assert.equal(cl.stepMixing, "split");
  assert.equal(cl.counters.mixingChanges, 1);
  // worker-1 now only prefills: a new prompt is prefilled there when the router sends it, and decoded on worker-0.
  const next = await run(cl, greedy(golden.prompt_ids_with_bos, 20));
  assert.deepEqual(next.streamed, golden.greedy20);
  assert.equal(cl.workers[1].engine.stats().running + cl.workers[1].engine.stats().waiting, 0);
  assert.equal(cl.workers[1].engine.metrics.finished.get("length") ?? 0, 0, "no whole request ran on the prefill worker");
  now = 2000;
  cl.tick();
  assert.equal(planner.seen[1].workers[1].role, "prefill");
  assert.deepEqual([cl.counters.flips, cl.counters.mixingChanges], [1, 1], "decisions that change nothing are not counted");
  assert.deepEqual(decisions, [
    { action: { kind: "flip", workerId: "worker-1", to: "prefill" }, changed: true, from: "mixed" },
    { action: { kind: "local-prefill-threshold", tokens: 0 }, changed: true },
    { action: { kind: "step-mixing", split: true }, changed: true },
    { action: { kind: "step-mixing", split: true }, changed: false },
    { action: { kind: "flip", workerId: "worker-1", to: "prefill" }, changed: false, from: "prefill" },
  ]);
  await cl.stop();
});

test("Cluster cancels a request while its prefill runs elsewhere, and keeps serving", async () => {
  const cl = prefillDecodeCluster();
  const h = cl.submit(greedy(STORY));
  h.cancel();
  const r = await h.result;
  assert.equal(r.finishReason, "abort");
  assert.equal(r.error, undefined);
  const after = await run(cl, greedy(golden.prompt_ids_with_bos, 20));
  assert.deepEqual(after.streamed, golden.greedy20);
  for (const w of cl.workers) assert.equal(w.engine.stats().kvUsedBlocks, 0, `${w.id} holds no blocks once idle`);
  await cl.stop();
});

test("remoteKvDtype() prices a block's move in the dtype the workers' caches will hold", () => {
  const even = model.config, odd = { ...model.config, headDim: 7 };
  assert.equal(remoteKvDtype(even, "f32", "webgpu"), "f32");
  assert.equal(remoteKvDtype(even, "f16", "cuda"), "f16");
  assert.equal(remoteKvDtype(even, "auto", "webgpu"), "f16");
  assert.equal(remoteKvDtype(even, undefined, "reference"), "f16");
  assert.equal(remoteKvDtype(odd, "auto", "webgpu"), "f32", "f16 caches need an even head dimension");
  assert.equal(remoteKvDtype(even, "auto", "cuda"), "f32", "CUDA attention takes f32 caches");
  assert.equal(remoteKvDtype(even, "auto", "auto"), "f32", "unknown backend: never priced under its cost");
  assert.equal(remoteKvDtype(even, "f8_e4m3", "webgpu"), "f16", "an fp8 cache's blocks move as the f16 values they hold");
});

test("createCluster() refuses roles that leave no worker to decode, and bad worker counts", () => {
  assert.throws(() => cluster({ workers: 2, roles: ["prefill", "prefill"] }), /At least one worker must decode/);
  assert.throws(() => cluster({ workers: 2, roles: ["mixed"] }), /1 roles were given for 2 workers/);
  assert.throws(() => cluster({ workers: 0 }), /positive integer, got 0/);
});

test("clusterPlanner() keeps a local-prefill threshold given to the router, where it would move its own", () => {
  // Decode steps of 100 ms, twice the ITL target: the planner lowers an adaptive threshold.
  const ticks = (p: OnlinePlanner) => {
    const moved: number[] = [];
    for (let t = 1; t <= 10; t++) {
      for (const a of p.tick(snap(t, ["prefill", "decode"], { uncachedPerS: 20_000, outputPerS: 2000, backlog: 5000, seqs: 64, stepA: 0.1 }))) {
        if (a.kind === "local-prefill-threshold") moved.push(a.tokens);
      }
    }
    return moved;
  };
  const adaptive = clusterPlanner({ workers: 2 }) as OnlinePlanner;
  assert.ok(ticks(adaptive).length > 0 && adaptive.localPrefillThreshold() < 512, `the planner's own threshold moves (${adaptive.localPrefillThreshold()})`);
  const fixed = clusterPlanner({ workers: 2, routerOptions: { localPrefillThreshold: 40 } }) as OnlinePlanner;
  assert.equal(fixed.localPrefillThreshold(), 40);
  assert.deepEqual(ticks(fixed), []);
  assert.equal(fixed.localPrefillThreshold(), 40);
});

test("Cluster reports an admission decision as changed only when it changes the new-session budget", async () => {
  const hold = { kind: "admission", holdNewSessions: true, maxHoldS: 5 } as const;
  const planner = new ScriptedPlanner([[hold], [hold], [{ kind: "admission", holdNewSessions: false, maxHoldS: 5, newSessions: 3 }]]);
  const decisions: ClusterDecision[] = [];
  const cl = cluster({ workers: 2, planner, onDecision: (d) => decisions.push(d) });
  for (let i = 0; i < 3; i++) cl.tick();
  assert.deepEqual(decisions.map((d) => d.changed), [true, false, true]);
  await cl.stop();
});

test("Cluster with fixedStepMixing keeps the step mixing it was given, whatever the planner says", async () => {
  const planner = new ScriptedPlanner([[{ kind: "step-mixing", split: false }], [{ kind: "step-mixing", split: false }]]);
  const decisions: ClusterDecision[] = [];
  // The engines are made with mixed steps; the cluster's own setting wins from the start.
  const cl = cluster({ workers: 2, planner, stepMixing: "split", fixedStepMixing: true, onDecision: (d) => decisions.push(d) });
  assert.equal(cl.stepMixing, "split");
  assert.deepEqual(cl.workers.map((w) => w.engine.stepMixing), ["split", "split"]);
  cl.tick();
  assert.equal(cl.stepMixing, "split");
  assert.deepEqual(cl.workers.map((w) => w.engine.stepMixing), ["split", "split"]);
  assert.equal(cl.counters.mixingChanges, 0);
  assert.deepEqual(decisions.map((d) => d.changed), [false]);
  await cl.stop();
  // Not fixed: the same decision switches every worker.
  const free = cluster({ workers: 2, planner: new ScriptedPlanner([[{ kind: "step-mixing", split: false }]]), stepMixing: "split" });
  free.tick();
  assert.deepEqual([free.stepMixing, ...free.workers.map((w) => w.engine.stepMixing)], ["mixed", "mixed", "mixed"]);
  await free.stop();
});

test("clusterPlanner() starts the planner at the cluster's step mixing and leaves fixed step mixing alone", () => {
  // Mixed steps cost nothing extra: a planner that knows workers run separate steps switches them back.
  const switches = (p: OnlinePlanner) => {
    const roles = Array.from({ length: 16 }, (): "mixed" => "mixed");
    const out: boolean[] = [];
    for (let t = 1; t <= 30; t++) {
      const s = snap(t, roles, { uncachedPerS: 300_000, outputPerS: 20_000, backlog: 20_000, seqs: 800 });
      s.workers.forEach((w, i) => (w.steps = mixedWorkerSteps(0, 48, t * 100 + i)));
      for (const a of p.tick(s)) if (a.kind === "step-mixing") out.push(a.split);
    }
    return out;
  };
  assert.deepEqual(switches(clusterPlanner({ workers: 16, stepMixing: "split" }) as OnlinePlanner), [false]);
  assert.deepEqual(switches(clusterPlanner({ workers: 16, engine: { scheduler: { stepMixing: "split" } } }) as OnlinePlanner), [false], "from the engines' setting");
  assert.deepEqual(switches(clusterPlanner({ workers: 16 }) as OnlinePlanner), [], "already mixed");
  assert.deepEqual(switches(clusterPlanner({ workers: 16, stepMixing: "split", fixedStepMixing: true }) as OnlinePlanner), [], "fixed");
});

test("warmUpWorkers() warms up each engine of an in-process cluster once, counting nothing, and returns the longest", async () => {
  const expected = await oneEngine(greedy(STORY, 8));
  const cl = createCluster(createReferenceBackend(), model, { workers: 2, planner: "none", engine: { numBlocks: 64 } });
  try {
    assert.equal(await warmUpWorkers(cl), Math.max(...cl.workers.map((w) => w.engine.warmUpMs!)));
    for (const w of cl.workers) {
      assert.equal(typeof w.engine.warmUpMs, "number", w.engine.id);
      assert.deepEqual([w.engine.stats().kvUsedBlocks, w.engine.metrics.promptTokens, w.engine.metrics.generationTokens], [0, 0, 0]);
    }
    assert.deepEqual((await run(cl, greedy(STORY, 8))).streamed, expected);
    // A worker that has served no longer warms up.
    await assert.rejects(() => warmUpWorkers(cl), /warms up only before its first request/);
  } finally {
    await cl.stop();
  }
});

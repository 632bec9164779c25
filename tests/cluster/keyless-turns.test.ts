import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { chainHashes, namespaceRoot } from "../../kv/index.ts";
import { KeylessTurns } from "../../src/cluster/keyless-turns.ts";
import { ClusterSessions } from "../../src/cluster/cluster-sessions.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import type { Cluster } from "../../src/cluster/cluster.ts";
import { greedy, model, run, STORY } from "./fixtures.ts";

const B = 4;
const hashes = (p: readonly number[], root?: number) => chainHashes(p, B, undefined, root ?? null);
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

test("KeylessTurns.find() returns the conversation whose whole prompt a prompt repeats and goes past", () => {
  const turns = new KeylessTurns(B);
  const system = range(100, 8);
  const first = [...system, 1, 2, 3, 4, 5, 6];
  turns.remember(first, hashes(first), undefined, { workerId: "w1", sessionId: "~3" });
  const next = [...first, 77, 78, 79, 9, 9, 9, 9];
  assert.deepEqual(turns.find(next, hashes(next), undefined), { workerId: "w1", sessionId: "~3" });
  // The answer rendered back otherwise (its reasoning dropped) still continues: the whole prompt is there.
  const rerendered = [...first, 70];
  assert.deepEqual(turns.find(rerendered, hashes(rerendered), undefined), { workerId: "w1", sessionId: "~3" });
  // The same prompt again (a retry), a new question after the shared system prompt, or the prompt cut short: new conversations.
  assert.equal(turns.find(first, hashes(first), undefined), undefined);
  const other = [...system, 1, 2, 3, 4, 8, 8, 8, 8];
  assert.equal(turns.find(other, hashes(other), undefined), undefined);
  const edited = [...system, 1, 2, 3, 4, 5, 7, 9, 9];
  assert.equal(turns.find(edited, hashes(edited), undefined), undefined);
  // Another cache namespace (a LoRA adapter's, a salt's) shares no turn.
  const root = namespaceRoot("adapter");
  assert.equal(turns.find(next, hashes(next, root), root), undefined);
});

test("KeylessTurns.find() takes the latest turn of a conversation and knows prompts shorter than a block", () => {
  const turns = new KeylessTurns(B);
  const t1 = [1, 2];
  turns.remember(t1, hashes(t1), undefined, { workerId: "w0" });
  const t2 = [1, 2, 3, 4, 5, 6, 7];
  assert.deepEqual(turns.find(t2, hashes(t2), undefined), { workerId: "w0" });
  turns.remember(t2, hashes(t2), undefined, { workerId: "w2" });
  const t3 = [...t2, 8, 9, 10];
  assert.deepEqual(turns.find(t3, hashes(t3), undefined), { workerId: "w2" }, "the deepest anchor (the latest turn) wins");
  const root = namespaceRoot("salt");
  assert.equal(turns.find(t2, hashes(t2, root), root), undefined);
});

test("KeylessTurns.remember() keeps at most its cap of anchors, forgetting the oldest, and the latest turn of a prompt", () => {
  const turns = new KeylessTurns(B, 2);
  const prompts = [range(10, 5), range(20, 5), range(30, 5)];
  prompts.forEach((p, i) => turns.remember(p, hashes(p), undefined, { workerId: `w${i}` }));
  assert.equal(turns.size, 2);
  const cont = (p: number[]) => [...p, 1, 5];
  assert.equal(turns.find(cont(prompts[0]), hashes(cont(prompts[0])), undefined), undefined, "the oldest was forgotten");
  assert.deepEqual(turns.find(cont(prompts[2]), hashes(cont(prompts[2])), undefined), { workerId: "w2" });
  // The same prompt answered again elsewhere: the later turn is the one found.
  turns.remember(prompts[2], hashes(prompts[2]), undefined, { workerId: "w7" });
  assert.deepEqual(turns.find(cont(prompts[2]), hashes(cont(prompts[2])), undefined), { workerId: "w7" });
  assert.equal(turns.size, 2);
  assert.throws(() => new KeylessTurns(0), /Block size must be a positive integer, got 0/);
});

test("ClusterSessions.locate() places keyed sessions by name and keyless ones by their turns; placed() tells the worker left", () => {
  const moved: string[] = [];
  const sessions = new ClusterSessions(B, (w, s) => moved.push(`${s}@${w}`));
  const p = range(10, 6);
  assert.deepEqual(sessions.locate("k", p, hashes(p), undefined), {});
  assert.equal(sessions.isNew("k"), true);
  sessions.placed("k", "w0");
  assert.deepEqual(sessions.locate("k", p, hashes(p), undefined), { lastWorker: "w0" });
  sessions.placed("k", "w0");
  sessions.placed("k", "w1");
  assert.deepEqual(moved, ["k@w0"], "told once, when the session left w0");
  sessions.unplace("k", "w0");
  assert.equal(sessions.workerOf("k"), "w1", "a refusal elsewhere leaves the place alone");
  sessions.unplace("k", "w1");
  assert.equal(sessions.isNew("k"), true);
  // Keyless: the turn's end places its conversation, under the name its worker reported.
  sessions.keylessEnded(p, hashes(p), undefined, "~w2.0", "w2");
  const next = [...p, 1, 2, 3];
  assert.deepEqual(sessions.locate(undefined, next, hashes(next), undefined), { lastWorker: "w2", continuedAs: "~w2.0" });
  assert.equal(sessions.workerOf("~w2.0"), "w2", "a tool wait for it reaches w2");
  assert.deepEqual(sessions.locate(undefined, p, hashes(p), undefined), {}, "a retry opens a conversation");
});

function cluster(workers: number, peerMoveS: number, numBlocks = 64): Cluster {
  return createCluster(createReferenceBackend(), model, { planner: "none", workers, engine: { numBlocks }, routerOptions: { peerMoveS } });
}

/** Runs a keyless turn on STORY, then makes its worker busy; returns the cluster, the holder and the first turn's answer. */
async function busyHolder(peerMoveS: number) {
  const cl = cluster(2, peerMoveS);
  const first = await run(cl, greedy(STORY, 4));
  const holder = cl.workers.find((w) => w.engine.stats().prefixQueriedTokens > 0)!;
  const busy = Array.from({ length: 6 }, (_, i) => holder.engine.submit(greedy(model.tokenizer.encode(`Filler ${i} `.repeat(40), { addBos: true }), 2)));
  return { cl, holder, answer: first.streamed, busy };
}

test("Cluster charges a keyless request continuing a conversation as a returning turn: it does not pull from its busy worker", async () => {
  // A charge no pull can win: a returning turn stays or recomputes, never moves.
  const { cl, answer, busy } = await busyHolder(1000);
  const next = await run(cl, greedy([...STORY, ...answer, ...model.tokenizer.encode(" Then she went home.")], 4));
  assert.equal(cl.counters.prefixMoves, 0, "the continuation was charged as a move");
  assert.ok(next.result.completionTokens === 4);
  await Promise.all(busy.map((h) => h.result));
  await cl.stop();
});

test("Cluster lets a keyless request opening a conversation pull a shared prefix from a busy worker uncharged", async () => {
  const { cl, holder, busy } = await busyHolder(1000);
  // Shares STORY's first two blocks (a system prompt), then asks something else: no answer token repeated.
  const opening = [...STORY.slice(0, 32), ...model.tokenizer.encode(" A cat sat on the mat all day long.")];
  const t = await run(cl, greedy(opening, 4));
  assert.equal(cl.counters.prefixMoves, 1, "the new conversation pulled the shared blocks instead of queueing behind the holder");
  assert.ok(cl.workers.find((w) => w !== holder)!.engine.stats().prefixHitTokens > 0);
  assert.ok(t.result.cachedTokens >= 32);
  await Promise.all(busy.map((h) => h.result));
  await cl.stop();
});

test("Cluster charges a keyless turn holding an answer as a returning one even when it kept no turn it continues", async () => {
  const { cl, busy } = await busyHolder(1000);
  // Shares STORY's first two blocks and goes on otherwise (a template that edited the earlier prompt):
  // no kept turn continues it, but its messages hold an answer, so it is a returning agent's turn.
  const edited = [...STORY.slice(0, 32), ...model.tokenizer.encode(" A cat sat on the mat all day long.")];
  const t = await run(cl, { ...greedy(edited, 4), openingTurn: false });
  assert.equal(cl.counters.prefixMoves, 0, "a returning turn's pull was charged as a move");
  assert.equal(t.result.completionTokens, 4);
  await Promise.all(busy.map((h) => h.result));
  await cl.stop();
});

test("Cluster spreads concurrent keyless conversations whose prompts share a system prompt's blocks", async () => {
  const cl = createCluster(createReferenceBackend(), model, { planner: "none", workers: 4, engine: { numBlocks: 256 } });
  const system = "You are a helpful coding agent. You can read files and run commands in the shell. Always explain. ";
  await run(cl, greedy(model.tokenizer.encode(system + "Warm up.", { addBos: true }), 4));
  const turns = Array.from({ length: 12 }, (_, i) => run(cl, greedy(model.tokenizer.encode(system + `Task number ${i}: fix the bug in file ${i}.`, { addBos: true }), 8)));
  const done = await Promise.all(turns);
  assert.deepEqual(cl.workers.map((w) => w.engine.stats().prefixQueriedTokens > 0), [true, true, true, true], "every worker took some of the conversations");
  assert.ok(done.every((t) => t.result.cachedTokens > 0), "each took the shared blocks from a cache (its own or pulled)");
  await cl.stop();
});

test("Cluster workers name the keyless conversations they start apart, so a tool wait reaches the right one", async () => {
  const cl = cluster(2, 0.5);
  const [a, b] = await Promise.all([
    run(cl, greedy(model.tokenizer.encode("Once upon a time a cat sat on a big mat in the sun.", { addBos: true }), 4)),
    run(cl, greedy(model.tokenizer.encode("The dog ran to the park and found a red ball there.", { addBos: true }), 4)),
  ]);
  // The prompts differ in length: each worker's queried tokens tell which it served.
  assert.notEqual(a.result.promptTokens, b.result.promptTokens);
  const [wa, wb] = [a, b].map((t) => cl.workers.find((w) => w.engine.stats().prefixQueriedTokens === t.result.promptTokens));
  assert.ok(wa && wb && wa !== wb, "the two conversations ran on different workers");
  assert.notEqual(a.handle.sessionId, b.handle.sessionId, "each worker made up a session name of its own");
  cl.markToolWait(a.handle.sessionId!, "shell");
  assert.equal(wa.engine.sessionStatusCounts()?.["waiting-tool"], 1, "the tool wait reached the worker holding the conversation");
  assert.equal(wb.engine.sessionStatusCounts()?.["waiting-tool"] ?? 0, 0);
  await cl.stop();
});

test("Cluster keeps a keyless conversation's session name when its next turn moves to another worker", async () => {
  const cl = cluster(2, 0);
  const first = await run(cl, greedy(STORY, 4));
  const holder = cl.workers.find((w) => w.engine.stats().prefixQueriedTokens > 0)!;
  const busy = Array.from({ length: 6 }, (_, i) => holder.engine.submit(greedy(model.tokenizer.encode(`Filler ${i} `.repeat(40), { addBos: true }), 2)));
  const next = await run(cl, greedy([...STORY, ...first.streamed, ...model.tokenizer.encode(" Then she went home.")], 4));
  assert.equal(cl.counters.prefixMoves, 1, "the turn moved off its busy worker");
  assert.ok(first.handle.sessionId !== undefined);
  assert.equal(next.handle.sessionId, first.handle.sessionId, "the worker it moved to serves it under the same name");
  // A tool wait for that name now reaches the worker that holds the conversation.
  cl.markToolWait(next.handle.sessionId!, "shell");
  assert.equal(cl.workers.find((w) => w !== holder)!.engine.sessionStatusCounts()?.["waiting-tool"], 1);
  await Promise.all(busy.map((h) => h.result));
  await cl.stop();
});

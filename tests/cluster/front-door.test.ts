import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type DoorState, passFrontDoor } from "../../src/cluster/front-door.ts";
import { EngineOverloadedError, type GenerateRequest, type RequestHandle, SessionRefusedError } from "../../src/engine/engine-types.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster, type CreateClusterOptions } from "../../src/cluster/create-cluster.ts";
import type { Cluster } from "../../src/cluster/cluster.ts";
import type { PlannerAction } from "../../planner/types.ts";
import { greedy, model, run, ScriptedPlanner, STORY } from "./fixtures.ts";

/** A door with room in the queues, `budget` new sessions left, and session "seen" already served. */
const door = (budget: number, waiting = 0): DoorState => ({ waiting, maxWaiting: 8, newSessionBudget: budget, isNewSession: (k) => k !== "seen" });
const req = (o: Partial<GenerateRequest>): GenerateRequest => ({ prompt: [1, 2, 3], ...o });

test("passFrontDoor() counts unseen keys and keyless opening turns as new sessions, and nothing else", () => {
  assert.equal(passFrontDoor(req({ sessionId: "fresh" }), door(1)), true);
  assert.equal(passFrontDoor(req({ sessionId: "seen" }), door(1)), false);
  assert.equal(passFrontDoor(req({ openingTurn: true }), door(1)), true, "a keyless chat with no answer yet opens a conversation");
  assert.equal(passFrontDoor(req({ openingTurn: false }), door(1)), false, "a keyless turn holding an answer returns");
  assert.equal(passFrontDoor(req({}), door(1)), false, "a raw prompt without a key says neither");
  assert.equal(passFrontDoor(req({ sessionId: "fresh", openingTurn: false }), door(1)), false, "an unseen key with an answer returns (a restarted cluster's agent)");
});

test("passFrontDoor() refuses only new sessions once the budget is spent, naming what it refused", () => {
  assert.throws(() => passFrontDoor(req({ sessionId: "fresh" }), door(0)), (e: unknown) => e instanceof SessionRefusedError && /No room for new session "fresh"/.test(e.message));
  assert.throws(() => passFrontDoor(req({ openingTurn: true }), door(0)), (e: unknown) => e instanceof SessionRefusedError && /No room for a new conversation/.test(e.message));
  for (const r of [req({ sessionId: "seen" }), req({ openingTurn: false }), req({}), req({ sessionId: "fresh", openingTurn: false })]) {
    assert.equal(passFrontDoor(r, door(0)), false, JSON.stringify(r));
  }
  assert.equal(passFrontDoor(req({ sessionId: "fresh" }), door(Infinity)), true, "no budget set: everyone enters");
});

test("passFrontDoor() refuses every request once the queues hold maxWaiting, quoting the bound", () => {
  assert.throws(() => passFrontDoor(req({ sessionId: "seen" }), door(5, 8)), (e: unknown) => e instanceof EngineOverloadedError && /8 requests are already waiting/.test(e.message));
  assert.equal(passFrontDoor(req({ sessionId: "seen" }), door(5, 7)), false);
});

function cluster(o: Partial<CreateClusterOptions>): Cluster {
  return createCluster(createReferenceBackend(), model, { workers: 2, planner: "none", engine: { numBlocks: 64 }, ...o });
}
const budget = (newSessions: number, maxHoldS = 0): PlannerAction => ({ kind: "admission", holdNewSessions: false, maxHoldS, newSessions, rejectAfterHold: true });
const PENDING = Symbol("pending");
/** What `p` settled to within a few event-loop turns, or PENDING. */
const settled = <T>(p: Promise<T>) => Promise.race([p, new Promise<typeof PENDING>((r) => setTimeout(() => r(PENDING), 30))]);
const refusedAs = async (h: RequestHandle, pattern: RegExp) => {
  const e = await h.refusal;
  assert.ok(e instanceof SessionRefusedError && pattern.test(e.message), `refusal ${e}`);
  assert.ok((await h.result).refused instanceof SessionRefusedError);
};

test("Cluster.submit() holds a new session the planner's budget has no room for, and the next tick turns it away; a known session's turn always enters", async () => {
  const planner = new ScriptedPlanner([[budget(1)], [], [budget(1)]]);
  const cl = cluster({ planner });
  const turn = (sessionId: string) => run(cl, { ...greedy(STORY, 2), sessionId });
  await turn("before-any-tick"); // no budget set yet: everyone enters
  cl.tick();
  await turn("agent-a"); // the tick's one new session
  const b = cl.submit({ ...greedy(STORY, 2), sessionId: "agent-b" });
  const c = cl.submit({ ...greedy(STORY, 2), sessionId: "agent-c" });
  assert.equal(await settled(b.refusal!), PENDING, "agent-b waits at the door");
  // Sessions already served, and a raw prompt naming none, enter meanwhile.
  assert.equal((await turn("agent-a")).result.completionTokens, 2);
  assert.equal((await turn("before-any-tick")).result.completionTokens, 2);
  assert.equal((await run(cl, greedy(STORY, 2))).result.completionTokens, 2);
  assert.equal(cl.metrics.rejected, 0, "a held session is not refused yet");
  cl.tick(); // no admission action: the budget stays spent, and those held to this tick are turned away
  await refusedAs(b, /No room for new session "agent-b"/);
  await refusedAs(c, /No room for new session "agent-c"/);
  assert.equal(cl.metrics.rejected, 2);
  const again = cl.submit({ ...greedy(STORY, 2), sessionId: "agent-b" });
  cl.tick(); // room for one: the held session enters
  assert.equal(await again.refusal, undefined);
  const r = await again.result;
  assert.equal(r.completionTokens, 2);
  assert.equal(r.refused, undefined);
  await cl.stop();
});

test("Cluster.tick() lets held new sessions in oldest first as far as its budget goes, and skips one cancelled while it waited", async () => {
  const planner = new ScriptedPlanner([[budget(0)], [budget(2)]]);
  const cl = cluster({ planner });
  cl.tick();
  const held = ["s1", "s2", "s3", "s4"].map((sessionId) => cl.submit({ ...greedy(STORY, 2), sessionId }));
  held[1].cancel();
  cl.tick();
  assert.equal(await held[0].refusal, undefined);
  assert.equal(await held[2].refusal, undefined, "s2 left the queue: s3 takes its place");
  assert.equal((await held[0].result).completionTokens, 2);
  assert.equal((await held[2].result).completionTokens, 2);
  const cancelled = await held[1].result;
  assert.equal(cancelled.finishReason, "abort");
  assert.equal(cancelled.refused, undefined, "a cancelled session is not refused");
  await refusedAs(held[3], /No room for new session "s4"/);
  assert.equal(cl.metrics.rejected, 1);
  await cl.stop();
});

test("Cluster holds a new session at the door as long as the admission action's maxHoldS, on the cluster's clock", async () => {
  let nowMs = 0;
  const planner = new ScriptedPlanner([[budget(0, 5)], [], []]);
  const cl = cluster({ planner, now: () => nowMs });
  cl.tick();
  const h = cl.submit({ ...greedy(STORY, 2), sessionId: "patient" });
  nowMs = 4000;
  cl.tick();
  assert.equal(await settled(h.refusal!), PENDING, "4 s of 5: still waiting");
  nowMs = 5000;
  cl.tick();
  await refusedAs(h, /No room for new session "patient"/);
  await cl.stop();
});

test("Cluster lets a keyless opening turn wait at the door as a new session, never a turn holding an answer, keyed or not", async () => {
  const planner = new ScriptedPlanner([[budget(1)], [budget(0)]]);
  const cl = cluster({ planner });
  const opening = () => cl.submit({ ...greedy(STORY, 2), openingTurn: true });
  cl.tick();
  assert.equal((await run(cl, { ...greedy(STORY, 2), openingTurn: true })).result.completionTokens, 2); // the tick's one new session
  const second = opening();
  const keyedOpening = cl.submit({ ...greedy(STORY, 2), openingTurn: true, sessionId: "agent-new" });
  // A keyless request that may hold an answer (a raw prompt) or does (a returning agent the cluster may
  // not know) always enters; so does a turn holding an answer under a key the cluster has not seen.
  // (A turn holding an answer has another prompt than any opening turn: the answer is in it.)
  const answered = [...STORY, 7, 8];
  for (const req of [greedy(STORY, 2), { ...greedy(answered, 2), openingTurn: false }, { ...greedy(answered, 2), openingTurn: false, sessionId: "agent-from-before-a-restart" }]) {
    assert.equal((await run(cl, req)).result.completionTokens, 2);
  }
  assert.equal(await settled(second.refusal!), PENDING);
  cl.tick();
  await refusedAs(second, /No room for a new conversation/);
  await refusedAs(keyedOpening, /No room for new session "agent-new"/);
  assert.equal(cl.metrics.rejected, 2);
  await cl.stop();
});

test("Cluster.stop() turns away the sessions waiting at the door", async () => {
  const cl = cluster({ planner: new ScriptedPlanner([[budget(0, 60)]]) });
  cl.tick();
  const h = cl.submit({ ...greedy(STORY, 2), sessionId: "late" });
  await cl.stop();
  await refusedAs(h, /server is stopping/);
});

test("Cluster lets a held session's other requests (an n > 1 turn's choices) wait with it, enter with it for one budget, and be turned away with it", async () => {
  const planner = new ScriptedPlanner([[budget(0)], [budget(1)], [budget(0)], []]);
  const cl = cluster({ planner });
  cl.tick();
  const [a, b] = [0, 1].map(() => cl.submit({ ...greedy(STORY, 2), sessionId: "two-choices" }));
  const other = cl.submit({ ...greedy(STORY, 2), sessionId: "other" });
  assert.equal(await settled(b.refusal!), PENDING, "the second choice waits with the first");
  cl.tick(); // room for one session: both choices of it enter, the other session does not
  assert.equal(await a.refusal, undefined);
  assert.equal(await b.refusal, undefined);
  assert.deepEqual([(await a.result).completionTokens, (await b.result).completionTokens], [2, 2]);
  await refusedAs(other, /No room for new session "other"/);
  cl.tick();
  const [c, d] = [0, 1].map(() => cl.submit({ ...greedy(STORY, 2), sessionId: "refused-together" }));
  cl.tick();
  await refusedAs(c, /No room for new session "refused-together"/);
  await refusedAs(d, /No room for new session "refused-together"/);
  assert.equal(cl.metrics.rejected, 3, "each request refused counts");
  await cl.stop();
});

test("Cluster lets the other choices of a held keyless opening turn (its very prompt, no longer an opening) wait and go with it", async () => {
  const planner = new ScriptedPlanner([[budget(0)], [], [budget(1)]]);
  const cl = cluster({ planner });
  cl.tick();
  // What serve's submit() sends for n = 2: the second choice is no opening turn, so it is counted once.
  const choices = () => [cl.submit({ ...greedy(STORY, 2), openingTurn: true }), cl.submit({ ...greedy(STORY, 2), openingTurn: false })];
  const [a, b] = choices();
  assert.equal(await settled(b.refusal!), PENDING, "the second choice waits with the first");
  // A keyless turn holding an answer (another prompt) is no choice of it, and enters.
  assert.equal((await run(cl, { ...greedy([...STORY, 7, 8], 2), openingTurn: false })).result.completionTokens, 2);
  cl.tick();
  await refusedAs(a, /No room for a new conversation/);
  await refusedAs(b, /No room for a new conversation/);
  const [c, d] = choices();
  cl.tick();
  assert.equal(await c.refusal, undefined);
  assert.equal(await d.refusal, undefined);
  assert.deepEqual([(await c.result).completionTokens, (await d.result).completionTokens], [2, 2]);
  await cl.stop();
});

test("Cluster under the planner's memory-pressure hold keeps new sessions at the door whatever the budget, and lets them in after maxHoldS", async () => {
  let nowMs = 0;
  const hold: PlannerAction = { kind: "admission", holdNewSessions: true, maxHoldS: 5 };
  const planner = new ScriptedPlanner([[hold], [hold], [hold]]);
  const cl = cluster({ planner, now: () => nowMs });
  cl.tick();
  const h = cl.submit({ ...greedy(STORY, 2), sessionId: "held-for-memory" });
  assert.equal((await run(cl, { ...greedy(STORY, 2), openingTurn: false, sessionId: "returning" })).result.completionTokens, 2, "turns holding an answer enter");
  nowMs = 4000;
  cl.tick();
  assert.equal(await settled(h.refusal!), PENDING, "4 s of 5: still held");
  nowMs = 5000;
  cl.tick(); // held its longest: in, not refused (the memory hold's terms)
  assert.equal(await h.refusal, undefined);
  assert.equal((await h.result).completionTokens, 2);
  assert.equal(cl.metrics.rejected, 0);
  await cl.stop();
});

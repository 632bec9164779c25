import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadModel } from "../../src/model/load.ts";
import { EngineSessions, inferSessionId, isKvRetention, syntheticSessionId } from "../../src/engine/engine-sessions.ts";

test("EngineSessions turns: submit runs, finish idles, a tool call waits; quiet sessions are pruned", () => {
  const s = new EngineSessions(100);
  s.started("a", 0);
  s.started("b", 0);
  assert.equal(s.tracker.status("a"), "running");
  s.ended("a", 1);
  s.waitsOnTool("a", "pytest", 1);
  s.ended("b", 1);
  assert.deepEqual([s.tracker.status("a"), s.tracker.status("b")], ["waiting-tool", "idle"]);
  assert.ok(s.tracker.returnProbability("a", 2, 30) > 5 * s.tracker.returnProbability("b", 2, 30));
  s.started("a", 5); // a returns after 4 s: the gap is learned
  s.ended("a", 6);
  s.started("c", 200); // > ttl after b went quiet: b is forgotten, a (quiet since 6) too
  assert.deepEqual([s.tracker.status("a"), s.tracker.status("b"), s.tracker.status("c")], [undefined, undefined, "running"]);
  assert.throws(() => new EngineSessions(0), /Session time-to-live must be a positive number of seconds, got 0/);
  assert.ok(isKvRetention("agent") && isKvRetention("lru") && !isKvRetention("fifo"));
});

test("EngineSessions keeps at most maxSessions, forgetting the quietest idle ones first and never a running one", () => {
  const s = new EngineSessions(3600, 10);
  s.started("busy", 0); // runs throughout
  for (let i = 0; i < 30; i++) { s.started(`k${i}`, 1 + i); s.ended(`k${i}`, 1 + i); }
  assert.ok(s.tracker.size <= 10, `tracked ${s.tracker.size}`);
  assert.equal(s.tracker.status("busy"), "running");
  assert.equal(s.tracker.status("k29"), "idle", "the latest is kept");
  assert.equal(s.tracker.status("k0"), undefined, "the quietest is forgotten");
  assert.throws(() => new EngineSessions(60, 0), /Session cap must be a positive integer, got 0/);
});

test("EngineSessions keeps a session running until the last of its requests ends, and starts a tool wait noted meanwhile then", () => {
  const s = new EngineSessions(100);
  s.started("a", 0);
  s.started("a", 0); // two requests of one session side by side (n choices, parallel agents)
  s.ended("a", 1);
  assert.equal(s.tracker.status("a"), "running", "one of its requests still runs");
  s.waitsOnTool("a", "pytest", 1);
  assert.equal(s.tracker.status("a"), "running", "the tool wait starts when the session stops running");
  s.ended("a", 2);
  assert.equal(s.tracker.status("a"), "waiting-tool");
  // A tool wait noted while the session ran is dropped when the session comes back first.
  s.started("b", 3);
  s.started("b", 3);
  s.ended("b", 4);
  s.waitsOnTool("b", "grep", 4);
  s.started("b", 5);
  s.ended("b", 6);
  s.ended("b", 6);
  assert.equal(s.tracker.status("b"), "idle");
});

test("Engine.sessionStatusCounts() counts a session as running while any of its requests runs", async () => {
  const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });
    const short = e.submit({ prompt, maxTokens: 2, temperature: 0, ignoreEos: true, sessionId: "s" });
    const long = e.submit({ prompt, maxTokens: 40, temperature: 0, ignoreEos: true, sessionId: "s" });
    await short.result;
    assert.equal(e.stats().running, 1);
    assert.deepEqual(e.sessionStatusCounts(), { running: 1, "waiting-tool": 0, idle: 0 });
    await long.result;
    assert.deepEqual(e.sessionStatusCounts(), { running: 0, "waiting-tool": 0, idle: 1 });
  } finally {
    await e.stop();
  }
});

test("inferSessionId() takes the session of the deepest cached output block, else makes one up", () => {
  assert.equal(syntheticSessionId(7), "~7");
  assert.equal(syntheticSessionId(7, "worker-1"), "~worker-1.7", "a cluster worker's are its own");
  assert.equal(inferSessionId([{ sessionId: "a" }], 7, "worker-1"), "~worker-1.7");
  assert.equal(inferSessionId([], 7), "~7", "nothing cached: a new conversation");
  assert.equal(inferSessionId([{ sessionId: "a" }, { sessionId: "a" }], 7), "~7", "only prompt blocks (a shared system prompt): a new conversation");
  assert.equal(inferSessionId([{ sessionId: "a" }, { sessionId: "a", type: "output" }], 7), "a");
  assert.equal(inferSessionId([{ sessionId: "a", type: "output" }, { sessionId: "b", type: "output" }, { sessionId: "c" }], 7), "b", "the latest answer's session");
  assert.equal(inferSessionId([undefined, { type: "output" }], 7), "~7", "an output block of no session names none");
});

test("inferSessionId() counts a cached reasoning block as an earlier answer's (its tokens were generated)", () => {
  assert.equal(inferSessionId([{ sessionId: "a" }, { sessionId: "a", type: "reasoning" }], 7), "a", "reasoning sent back: the same conversation");
  assert.equal(inferSessionId([{ sessionId: "a", type: "output" }, { sessionId: "b", type: "reasoning" }], 7), "b", "the deepest generated block wins");
});

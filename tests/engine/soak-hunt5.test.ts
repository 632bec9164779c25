/**
 * Soak: state a long-running engine keeps per session, per tool name and per request must stay bounded
 * (a week of agent traffic brings sessions that never come back and tool names without end).
 */
import assert from "node:assert/strict";
import { test, projectRoot } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { Engine } from "../../src/engine/engine.ts";
import { EngineSessions } from "../../src/engine/engine-sessions.ts";
import { parseSpeculativeConfig } from "../../src/engine/ngram-draft.ts";
import { DEFAULT_MAX_TRACKED_TOOLS, MAX_TOOL_NAME_CHARS, SessionTracker } from "../../kv/session-tracker.ts";
import { HostKvOffload } from "../../src/engine/kv-offload.ts";
import { DEFAULT_MAX_CACHED_TOKENS, SuffixCache } from "../../src/engine/suffix-draft.ts";
import type { StepRunner } from "../../src/engine/engine-runner.ts";

test("Tool return-time statistics stay bounded under unique tool names, and a tool in use keeps its history", () => {
  const s = new EngineSessions(3600);
  let now = 0;
  // One turn of `sid` ending in a call to `tool`, and the session's return `gap` seconds later.
  const callAndReturn = (sid: string, tool: string, gap: number) => {
    s.started(sid, now);
    s.ended(sid, now);
    s.waitsOnTool(sid, tool, now);
    now += gap;
    s.started(sid, now);
    s.ended(sid, now);
  };
  const unique = 3 * DEFAULT_MAX_TRACKED_TOOLS;
  for (let i = 0; i < unique; i++) {
    callAndReturn(`s-${i}`, `tool_${i}_${"x".repeat(64)}`, 0.5);
    // A tool the fleet keeps calling, with its own gap of 20 s.
    if (i % 16 === 0) callAndReturn(`bash-${i}`, "bash", 20);
  }
  assert.ok(s.tracker.toolCount <= DEFAULT_MAX_TRACKED_TOOLS, `tracked tools ${s.tracker.toolCount} exceed the cap ${DEFAULT_MAX_TRACKED_TOOLS}`);
  // A new session waiting on bash is predicted from bash's history (20 s), not the 3 s prior.
  s.started("new", now);
  s.ended("new", now);
  s.waitsOnTool("new", "bash", now);
  const gap = s.tracker.predictedGapS("new");
  assert.ok(gap > 10, `a session waiting on bash predicts ${gap} s, bash's history lost`);
});

test("A tool name as long as an answer is kept as its first characters, in each waiting session and in the tool's statistics", () => {
  const t = new SessionTracker();
  const long = "f".repeat(100_000);
  for (let k = 0; k < 50; k++) {
    t.turnStarted(`s-${k}`, k);
    t.turnEnded(`s-${k}`, k, `${long}${k}`);
  }
  const inner = t as unknown as { sessions: Map<string, { tool: string | null }> };
  const held = [...inner.sessions.values()].reduce((n, s) => n + (s.tool?.length ?? 0), 0);
  assert.ok(held <= 50 * MAX_TOOL_NAME_CHARS, `waiting sessions hold ${held} characters of tool names`);
  // Names alike in their first characters share their statistics, and still predict from them.
  t.turnStarted("s-0", 30);
  t.turnEnded("x", 40, long);
  assert.ok(Math.abs(t.predictedGapS("x") - 3) > 0.5, "the truncated name found the learned gap");
});

test("SessionTracker refuses a tool cap that is not a positive integer", () => {
  assert.throws(() => new SessionTracker({ maxTools: 0 }), /Tracked tool cap must be a positive integer, got 0/);
  assert.throws(() => new SessionTracker({ maxTools: 1.5 }), /got 1.5/);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);

test("Engine keeps no per-request state after many sessions, cancels and tool waits", async () => {
  const e: Engine = createEngine(createReferenceBackend(), model, {
    numBlocks: 64, kvOffloadBlocks: 16,
    speculative: parseSpeculativeConfig('{"method":"suffix","num_speculative_tokens":3,"suffix_decoding_max_cached_requests":50}'),
  });
  const enc = (t: string) => [1, ...model.tokenizer.encode(t)];
  const n = 400;
  for (let k = 0; k < n; k++) {
    const h = e.submit({ prompt: enc(`Once upon a time ${k} there was`), maxTokens: 5, temperature: 0, sessionId: `s-${k}` });
    if (k % 3 === 0) h.cancel();
    else if (k % 3 === 1) for await (const _ of h.stream) { h.cancel(); break; }
    else for await (const _ of h.stream) { /* drained */ }
    await h.result;
    e.markToolWait(`s-${k}`, `tool_${k}`);
  }
  const inner = e as unknown as { active: Map<number, unknown>; wantDrafts: Set<number>; turns: { inFlight: Map<string, number>; pendingTool: Map<string, string> } };
  assert.equal(inner.active.size, 0, "finished requests left in the active map");
  assert.equal(inner.wantDrafts.size, 0, "finished requests left wanting drafts");
  assert.equal(inner.turns.inFlight.size, 0, "sessions still counted in flight");
  assert.equal(inner.turns.pendingTool.size, 0, "tool waits left pending");
  assert.equal(e.sessionStatusCounts()?.running ?? 0, 0, "sessions left running: never pruned");
  assert.equal(e.pool.numUsedBlocks(), 0);
  await e.stop();
});

test("The host tier's remembered turns stay within a token bound when sessions carry long contexts", () => {
  const runner = { readBlocks: () => Promise.reject(new Error("unused")), writeBlocks: () => {} } as unknown as StepRunner;
  const offload = new HostKvOffload(runner, 16, 4, "w0", () => 0);
  // 300 agent sessions of 20k-token contexts: 6M token ids, remembered as each turn ends.
  const context = Array.from({ length: 20_000 }, (_, i) => i % 250);
  for (let k = 0; k < 300; k++) offload.turnEnded(`s-${k}`, context);
  const { turns, tokens } = offload.remembered;
  assert.ok(tokens <= 2 ** 20, `remembered turns hold ${tokens} tokens (${turns} turns), past the bound of ${2 ** 20}`);
  assert.ok(turns >= 1, "the newest turn is remembered");
  // One turn longer than the bound alone is still remembered (the newest), and only it.
  offload.turnEnded("huge", new Array<number>(2 ** 21).fill(7));
  assert.deepEqual(offload.remembered, { turns: 1, tokens: 2 ** 21 });
});

test("The suffix-draft cache stays within its token bound when outputs are long, and still drafts from the newest", () => {
  const c = new SuffixCache(10_000, 50_000);
  const S = { maxDepth: 24, maxSpecFactor: 4, minTokenProb: 0.1 };
  for (let k = 0; k < 300; k++) c.add(Array.from({ length: 1000 }, (_, i) => 1000 + ((i * 7 + k) % 997)));
  assert.ok(c.tokenCount <= 50_000, `the cache holds ${c.tokenCount} tokens in ${c.size} outputs, past its bound of 50000`);
  assert.ok(c.size >= 1 && c.size <= 50, `${c.size} outputs kept`);
  c.add([1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(c.draft([9, 2, 3], S, 4), [4, 5, 6, 7]);
  // An output longer than the bound by itself is kept cut to it.
  c.add(new Array<number>(60_000).fill(11));
  assert.equal(c.tokenCount, 50_000);
  assert.equal(c.size, 1);
  assert.ok(DEFAULT_MAX_CACHED_TOKENS >= 2 ** 20 && DEFAULT_MAX_CACHED_TOKENS <= 2 ** 24, "the default bound stays near 100 MB");
});

/**
 * The "cost" draft-length schedule (draft-schedule.ts): expected tokens per draft, the length of most
 * tokens per second from fitted step costs and measured acceptance, exploration next to it, and the
 * proposer drafting what it picks.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type AcceptanceCounts, DraftLengthTuner, expectedDraftTokens } from "../../src/engine/draft-schedule.ts";

/** A tuner that has seen target steps costing `a + b·rows` seconds (rows varied) and draft forwards of `d` seconds. */
function measured(o: { a: number; b: number; d: number; maxTokens?: number; exploreEvery?: number }): DraftLengthTuner {
  const t = new DraftLengthTuner({ maxTokens: o.maxTokens ?? 6, exploreEvery: o.exploreEvery ?? 1000 });
  for (const rows of [1, 3, 2, 5, 1, 4]) t.observeTarget(rows, o.a + o.b * rows);
  t.observeDraft(3, 3 * o.d);
  return t;
}

test("expectedDraftTokens() is the accepted prefix plus the target's own token", () => {
  assert.equal(expectedDraftTokens([0], 4), 1);
  assert.equal(expectedDraftTokens([1], 4), 5);
  assert.equal(expectedDraftTokens([0.5], 2), 1 + 0.5 + 0.25);
  assert.equal(expectedDraftTokens([0.9], 0), 1);
  assert.ok(Math.abs(expectedDraftTokens([0.8], 4) - (1 - 0.8 ** 5) / (1 - 0.8)) < 1e-12, "one chance at every depth: the geometric sum");
});

test("DraftLengthTuner.bestLength() drafts long when the draft is cheap and agrees, and nothing when it rarely does", () => {
  const cheap = measured({ a: 0.1, b: 0, d: 0.005 });
  assert.equal(cheap.bestLength([0.9]), 6, "verify rows free, draft forwards 5% of a step: the longest");
  assert.equal(cheap.bestLength([0.02]), 0, "a 2% chance of a token does not pay a forward");
  // Verify rows as dear as a step's fixed part: each draft token must be likely to pay for its row.
  const dearRows = measured({ a: 0.1, b: 0.1, d: 0.005 });
  const k = dearRows.bestLength([0.8]);
  assert.ok(k >= 1 && k < 6, `k ${k}`);
  assert.equal(dearRows.bestLength([0.3]), 0);
  // The same acceptance, a dearer draft model: shorter.
  assert.ok(measured({ a: 0.1, b: 0, d: 0.05 }).bestLength([0.7]) < cheap.bestLength([0.7]));
});

test("DraftLengthTuner.bestLength() weighs every sequence of the batch", () => {
  const t = measured({ a: 0.1, b: 0.01, d: 0.01 });
  const one = t.bestLength([0.85]);
  assert.ok(one > 0);
  // Sequences that never agree add rows and draft forwards but no tokens.
  assert.ok(t.bestLength([0.85, 0, 0, 0, 0, 0, 0, 0]) < one);
});

test("DraftLengthTuner.bestLength() stops where drafts stop being accepted, whatever the average", () => {
  // Drafts of 6 whose first two tokens always pass and the third never: 2 of 3 tried, on average.
  const t = measured({ a: 0.1, b: 0.005, d: 0.01, maxTokens: 6 });
  let c: AcceptanceCounts | undefined;
  for (let i = 0; i < 30; i++) c = t.observeAcceptance(c, 6, 2);
  const alpha = t.acceptance(c);
  assert.ok(Math.abs(alpha - 2 / 3) < 0.02, `average ${alpha}`);
  const profile = t.depthAcceptance(alpha);
  // The third depth keeps a little of its prior (two tokens' weight of the depth before).
  assert.ok(profile[0] > 0.9 && profile[1] > 0.9 && profile[2] < 0.2, `${profile.map((p) => p.toFixed(2))}`);
  assert.equal(t.bestLength([alpha]), 2, "the third token is hardly ever accepted: drafting it costs more than it brings");
  // Read as one chance for every depth (2/3), the same costs would draft 3.
  const flat = measured({ a: 0.1, b: 0.005, d: 0.01, maxTokens: 6 });
  assert.equal(flat.bestLength([2 / 3]), 3);
  assert.ok(expectedDraftTokens(profile, 6) < 3.1);
  assert.equal(expectedDraftTokens([0.5, 0.5], 3), 1 + 0.5 + 0.25 + 0.125, "past the profile, the last depth's chance");
});

test("DraftLengthTuner.length() drafts the longest until both costs are measured, then explores next to its best", () => {
  const fresh = new DraftLengthTuner({ maxTokens: 4 });
  assert.equal(fresh.length([0.1]), 4);
  fresh.observeTarget(1, 0.1);
  assert.equal(fresh.length([0.1]), 4, "no draft forward timed yet");
  assert.equal(fresh.length([]), 0, "no sequence, no draft");

  const t = measured({ a: 0.1, b: 0, d: 0.01, maxTokens: 6, exploreEvery: 4 });
  const rounds = Array.from({ length: 8 }, () => t.length([0.02]));
  assert.deepEqual(rounds, [0, 0, 0, 1, 0, 0, 0, 1], "rarely accepted: no drafts but a one-token probe");
  const good = measured({ a: 0.1, b: 0, d: 0.005, maxTokens: 6, exploreEvery: 2 });
  assert.deepEqual(Array.from({ length: 4 }, () => good.length([0.9])), [6, 5, 6, 5], "the longest, and one shorter to keep the row cost measured");
});

test("DraftLengthTuner.acceptance() starts a sequence at the engine's average and follows its own drafts", () => {
  const t = new DraftLengthTuner({ maxTokens: 4 });
  assert.equal(t.acceptance(undefined), 0.5, "nothing measured: even odds");
  let a: AcceptanceCounts | undefined;
  for (let i = 0; i < 20; i++) a = t.observeAcceptance(a, 4, 4);
  assert.ok(t.acceptance(undefined) > 0.99, "the engine's average is every token accepted");
  let b: AcceptanceCounts | undefined;
  for (let i = 0; i < 20; i++) b = t.observeAcceptance(b, 4, 0);
  assert.ok(t.acceptance(b) < 0.2, `a sequence whose drafts all fail: ${t.acceptance(b)}`);
  assert.ok(t.acceptance(a) > 0.9, `one whose drafts all pass: ${t.acceptance(a)}`);
  // A rejection counts the tried token: 2 accepted of 4 drafted is 2 of 3 tried.
  const c = new DraftLengthTuner({ maxTokens: 4 }).observeAcceptance(undefined, 4, 2);
  assert.deepEqual(c, { accepted: 2, tried: 3 });
});

test("DraftLengthTuner refuses a maximum length below 1", () => {
  assert.throws(() => new DraftLengthTuner({ maxTokens: 0 }), /maxTokens of 1 or more, got 0/);
});

import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { StepWindow } from "../../planner/step-window.ts";
import type { StepSample } from "../../planner/types.ts";

const step = (prefillTokens: number, decodeSeqs: number, seconds: number, count = 1) => ({ prefillTokens, prefillAttnPairs: 0, decodeSeqs, decodeAttnTokens: 0, seconds, count });

test("StepWindow.take() sums a window's prefill and decode work and times decode steps from decode-only ones", () => {
  const w = new StepWindow(1000);
  w.observe(step(400, 2, 0.2)); // mixed
  w.observe(step(0, 4, 0.05, 3)); // three decode-only steps
  const f = w.take();
  assert.equal(f.prefillTokens, 400);
  assert.equal(f.prefillBusyS, 0.2);
  assert.equal(f.prefillSteps, 1);
  assert.equal(f.decodeTokens, 2 + 12);
  assert.ok(Math.abs(f.decodeBusyS - 0.35) < 1e-12);
  assert.ok(Math.abs(f.decodeStepS - 0.05) < 1e-12, "decode-only steps define the decode step time");
  assert.equal(f.meanDecodeBatch, 4);
  assert.equal(f.steps!.length, 2);
  const empty = w.take();
  assert.deepEqual([empty.prefillTokens, empty.decodeTokens, empty.decodeStepS, empty.steps!.length], [0, 0, 0, 0], "the next window starts empty");
});

test("StepWindow keeps its speed estimates across windows and bounds its step sample", () => {
  const w = new StepWindow(1000);
  assert.equal(w.prefillRate, 1000);
  w.observe(step(2000, 0, 1));
  assert.equal(w.prefillRate, 0.8 * 1000 + 0.2 * 2000);
  for (let i = 0; i < 100; i++) w.observe(step(0, 8, 0.02));
  assert.equal(w.take().steps!.length, 48);
  assert.ok(w.decodeStepS > 0.019 && w.decodeStepS < 0.021);
  assert.equal(w.prefillRate, 1200, "a window boundary keeps the rate");
});

test("StepWindow.take() keeps a busy window's rare prefill and mixed steps, in order, beside its latest decode steps", () => {
  const w = new StepWindow(1000);
  const seq: StepSample[] = [];
  for (let i = 0; i < 300; i++) {
    // A decode step every time, a mixed one every 100th, a prefill-only one at 120: as on a GPU.
    const s = i === 120 ? step(512, 0, 0.1) : i % 100 === 50 ? step(512, 8, 0.12) : step(0, 8, 0.01 + i * 1e-6);
    seq.push(s);
    w.observe(s);
  }
  const kept = w.take().steps!;
  assert.equal(kept.length, 48);
  assert.equal(kept.filter((s) => s.prefillTokens > 0 && s.decodeSeqs > 0).length, 3, "every mixed step");
  assert.equal(kept.filter((s) => s.prefillTokens > 0 && s.decodeSeqs === 0).length, 1, "the prefill-only step");
  const decodes = kept.filter((s) => s.prefillTokens === 0);
  assert.deepEqual(decodes, seq.filter((s) => s.prefillTokens === 0).slice(-44), "the latest decode steps fill the rest");
  const at = kept.map((s) => seq.indexOf(s));
  assert.deepEqual(at, at.slice().sort((a, b) => a - b), "in the order they ran");
  // A quiet window keeps everything, as it came.
  const few = [step(0, 2, 0.01), step(100, 2, 0.05), step(100, 0, 0.04)];
  for (const s of few) w.observe(s);
  assert.deepEqual(w.take().steps, few);
});

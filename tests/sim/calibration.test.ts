import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { SeededRng } from "../../kv/rng.ts";
import { calibrateHardware, parseStepLog, StepLogError } from "../../src/sim/calibration.ts";
import { parseSimArgs } from "../../src/sim/cli-options.ts";
import { CostModel } from "../../src/sim/cost-model.ts";
import { GB300, gpusPerWorker, KIMI_K2_6 } from "../../src/sim/profiles.ts";
import { runOnce } from "../../src/sim/run.ts";

/**
 * A step log as an engine on "true" hardware (30% FLOP/s, 50% bandwidth, 6 ms overhead, `mixedS`
 * extra per mixed step) would write it, with 2% noise.
 */
function stepLog(n: number, seed: number, mixedS = 0): string {
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const truth = new CostModel(KIMI_K2_6, { ...GB300, flopEfficiency: 0.3, bandwidthEfficiency: 0.5, stepOverheadS: 0.006, mixedStepOverheadS: mixedS }, gpw);
  const rng = new SeededRng(seed);
  const lines: string[] = [];
  for (let i = 0; i < n; i++) {
    const prefillTokens = rng.next() < 0.5 ? 0 : rng.int(1, 16384);
    const decodeSeqs = rng.int(0, 256);
    const shape = {
      prefillTokens, prefillAttnPairs: truth.prefillPairs(rng.int(0, 60_000), prefillTokens),
      decodeSeqs, decodeAttnTokens: decodeSeqs * rng.int(1000, 60_000),
    };
    lines.push(JSON.stringify({ ...shape, seconds: truth.stepTime(shape) * (0.98 + 0.04 * rng.next()) }));
  }
  return lines.join("\n") + "\n";
}

test("calibrateHardware() fits efficiencies and overhead from a measured step log", () => {
  const steps = parseStepLog(stepLog(200, 3));
  assert.equal(steps.length, 200);
  const cal = calibrateHardware(KIMI_K2_6, GB300, gpusPerWorker(KIMI_K2_6, GB300), steps);
  assert.ok(Math.abs(cal.hw.flopEfficiency - 0.3) < 0.03, `flop eff ${cal.hw.flopEfficiency}`);
  assert.ok(Math.abs(cal.hw.bandwidthEfficiency - 0.5) < 0.05, `bw eff ${cal.hw.bandwidthEfficiency}`);
  assert.ok(Math.abs(cal.hw.stepOverheadS - 0.006) < 0.002, `overhead ${cal.hw.stepOverheadS}`);
  assert.ok(cal.rmsAfterS < cal.rmsBeforeS / 3, `rms ${cal.rmsBeforeS} → ${cal.rmsAfterS}`);
  assert.ok((cal.hw.mixedStepOverheadS ?? 0) < 0.002, `mixed overhead ${cal.hw.mixedStepOverheadS}`);
  assert.match(cal.hw.name, /calibrated/);
});

test("calibrateHardware() separates the extra cost of mixed prefill+decode steps", () => {
  const steps = parseStepLog(stepLog(300, 5, 0.015));
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const cal = calibrateHardware(KIMI_K2_6, GB300, gpw, steps);
  assert.ok(Math.abs((cal.hw.mixedStepOverheadS ?? 0) - 0.015) < 0.004, `mixed overhead ${cal.hw.mixedStepOverheadS}`);
  assert.ok(Math.abs(cal.hw.stepOverheadS - 0.006) < 0.002, `overhead ${cal.hw.stepOverheadS}`);
  // The fitted model prices a mixed step above the same work run as a single-kind step.
  const fitted = new CostModel(KIMI_K2_6, cal.hw, gpw);
  const shape = { prefillTokens: 2048, prefillAttnPairs: fitted.prefillPairs(0, 2048), decodeSeqs: 64, decodeAttnTokens: 64 * 8000 };
  const mixedS = fitted.stepTime(shape);
  assert.ok(Math.abs(mixedS - fitted.timeOf(fitted.work(shape)) - (cal.hw.mixedStepOverheadS ?? 0)) < 1e-12);
});

test("parseStepLog() names the line and field of a bad record", () => {
  const good = stepLog(3, 1);
  assert.throws(() => parseStepLog(good + '{"prefillTokens":1}\n'), (e: unknown) => e instanceof StepLogError && /line 4 .*"prefillAttnPairs"/.test(e.message));
  assert.throws(() => parseStepLog("not json\n" + good), (e: unknown) => e instanceof StepLogError && /line 1 is not JSON: "not json"/.test(e.message));
  assert.throws(() => parseStepLog(good.replace(/"seconds":[0-9.e-]+/, '"seconds":-1')), /line 1 needs a non-negative number "seconds", got -1/);
  assert.throws(() => parseStepLog(stepLog(2, 1)), /at least 3 measured steps to calibrate, got 2/);
  assert.throws(() => parseStepLog(good.replace(/"seconds":([0-9.e-]+)/, '"seconds":$1,"cycleSeconds":0')), /line 1 has "cycleSeconds" 0; it must be a number no smaller than "seconds"/);
});

test("parseStepLog() takes a step's whole loop iteration (cycleSeconds) as its time when the log has it", () => {
  const line = (s: number, c?: number) => JSON.stringify({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 4, decodeAttnTokens: 400, seconds: s, ...(c !== undefined ? { cycleSeconds: c } : {}) });
  const steps = parseStepLog([line(0.002, 0.003), line(0.002), line(0.001, 0.0025)].join("\n"));
  assert.deepEqual(steps.map((x) => x.seconds), [0.003, 0.002, 0.0025]);
});

test("runOnce() with a step log simulates on the calibrated cost model and says so", () => {
  const o = parseSimArgs(["--scenario", "coding-256", "--gpus", "32", "--duration", "30", "--baselines", "dynamo-agg"]);
  let t = 0;
  const clock = () => t++;
  const plain = runOnce(o, 1, null, clock);
  const cal = runOnce(o, 1, null, clock, stepLog(100, 5));
  assert.match(cal.hardware, /calibrated/);
  assert.match(cal.assumptions[0], /calibrated from 100 measured steps/);
  // A slower fitted machine (30% vs 45% FLOP/s, 50% vs 70% bandwidth) makes every request slower.
  assert.ok(cal.systems.evolving.e2e.mean > plain.systems.evolving.e2e.mean, `${cal.systems.evolving.e2e.mean} vs ${plain.systems.evolving.e2e.mean}`);
});

test("runOnce() with --mixed-step-overhead-ms slows mixed steps and states the assumption", () => {
  const args = ["--scenario", "coding-256", "--gpus", "32", "--duration", "30", "--baselines", "dynamo-agg"];
  let t = 0;
  const clock = () => t++;
  const plain = runOnce(parseSimArgs(args), 1, null, clock);
  const slow = runOnce(parseSimArgs([...args, "--mixed-step-overhead-ms", "40"]), 1, null, clock);
  assert.ok(slow.assumptions.some((a) => /Mixed prefill\+decode steps cost 40 ms more/.test(a)), slow.assumptions.join("\n"));
  // Every worker is mixed in aggregated serving, so its decodes see the extra cost in their ITL.
  assert.ok(slow.systems.baseline.itl.mean > plain.systems.baseline.itl.mean, `${slow.systems.baseline.itl.mean} vs ${plain.systems.baseline.itl.mean}`);
  assert.throws(() => parseSimArgs([...args, "--mixed-step-overhead-ms", "-1"]), /--mixed-step-overhead-ms needs a number ≥ 0, got "-1"/);
});

test("runOnce() with --itl-aim holds ours' decode pool at that fraction of the ITL target and states it", () => {
  // 32 GPUs of computer-use agents at 3x: ours' door binds, so a lower aim turns more new sessions
  // away and keeps the ITL of the requests it serves lower (measured: 37.1 ms, 120 turned away;
  // at 0.3, 23.3 ms and 360).
  const args = ["--scenario", "computer-use-256", "--gpus", "32", "--load", "3", "--duration", "200", "--baselines", "dynamo-agg"];
  let t = 0;
  const clock = () => t++;
  const measured = runOnce(parseSimArgs(args), 3, null, clock);
  const low = runOnce(parseSimArgs([...args, "--itl-aim", "0.3"]), 3, null, clock);
  const e = measured.systems.evolving, l = low.systems.evolving;
  assert.ok(l.itl.mean < 0.8 * e.itl.mean, `ITL ${l.itl.mean} at aim 0.3 vs ${e.itl.mean} measured`);
  assert.ok(l.rejected > e.rejected, `turned away ${l.rejected} at aim 0.3 vs ${e.rejected} measured`);
  assert.match(String(low.params.evolving.admission), /0\.3 \(--itl-aim\) × the ITL target/);
  assert.match(String(measured.params.evolving.admission), /mean\/P90 of recent requests' ITL × the ITL target/);
  // The baseline does not read the option.
  assert.deepEqual(low.systems.baseline, measured.systems.baseline);
  assert.throws(() => parseSimArgs([...args, "--itl-aim", "0"]), /--itl-aim needs a fraction of the ITL target in \(0, 1\], got "0"/);
  assert.throws(() => parseSimArgs([...args, "--itl-aim", "1.5"]), /got "1.5"/);
});

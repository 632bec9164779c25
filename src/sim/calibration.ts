/**
 * Calibrating the step-time cost model from a real engine's step log: one JSON object per line with
 * the step's shape and its measured duration,
 *   {"prefillTokens":8192,"prefillAttnPairs":1.2e8,"decodeSeqs":64,"decodeAttnTokens":3.1e6,"seconds":0.041}
 * (`deno task serve --step-log FILE` writes this format, with `cycleSeconds`, the step's whole share
 * of the worker's time, the engine loop's own work included, which is what a simulated step stands for:
 * where a line has it, it is the step's measured time). The fit replaces the hardware profile's
 * assumed efficiencies and step overhead for the run; the log must come from the same model and
 * hardware (and GPUs per worker) as the simulated ones.
 */
import { CostModel, type StepShape } from "./cost-model.ts";
import type { HardwareProfile, ModelProfile } from "./profiles.ts";

/** One measured engine step. */
export interface MeasuredStep extends StepShape {
  seconds: number;
}

/** A step log line that is not a measured step. */
export class StepLogError extends Error {
  override name = "StepLogError";
}

const FIELDS = ["prefillTokens", "prefillAttnPairs", "decodeSeqs", "decodeAttnTokens", "seconds"] as const;

/** A value for a message: JSON would print 1e400 (Infinity once parsed) as null. */
const show = (x: unknown) => (typeof x === "number" ? String(x) : JSON.stringify(x ?? null));

/** Parses a JSONL step log; blank lines are skipped, anything else malformed is an error naming the line. */
export function parseStepLog(text: string): MeasuredStep[] {
  const out: MeasuredStep[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    let v: unknown;
    try { v = JSON.parse(line); } catch { throw new StepLogError(`Step log line ${i + 1} is not JSON: "${line.slice(0, 80)}"`); }
    if (typeof v !== "object" || v === null) throw new StepLogError(`Step log line ${i + 1} is not an object: "${line.slice(0, 80)}"`);
    const rec = v as Record<string, unknown>;
    for (const f of FIELDS) {
      const x = rec[f];
      if (typeof x !== "number" || !Number.isFinite(x) || x < 0) {
        throw new StepLogError(`Step log line ${i + 1} needs a non-negative number "${f}", got ${show(x)}`);
      }
    }
    if ((rec.seconds as number) <= 0) throw new StepLogError(`Step log line ${i + 1} has "seconds" ${rec.seconds}; a step takes time`);
    const cycle = rec.cycleSeconds;
    if (cycle !== undefined && (typeof cycle !== "number" || !Number.isFinite(cycle) || cycle < (rec.seconds as number))) {
      throw new StepLogError(`Step log line ${i + 1} has "cycleSeconds" ${show(cycle)}; it must be a number no smaller than "seconds"`);
    }
    out.push({
      prefillTokens: rec.prefillTokens as number, prefillAttnPairs: rec.prefillAttnPairs as number,
      decodeSeqs: rec.decodeSeqs as number, decodeAttnTokens: rec.decodeAttnTokens as number, seconds: cycle ?? (rec.seconds as number),
    });
  }
  if (out.length < 3) throw new StepLogError(`A step log needs at least 3 measured steps to calibrate, got ${out.length}`);
  return out;
}

/** What a calibration changed. */
export interface Calibration {
  hw: HardwareProfile;
  steps: number;
  /** RMS error (s) of the assumed and the fitted model on the measured steps. */
  rmsBeforeS: number;
  rmsAfterS: number;
}

/** Fits `hw`'s efficiencies and step overhead to measured steps of `model` on `gpusPerWorker` GPUs (KV replication as in CostModel). */
export function calibrateHardware(
  model: ModelProfile, hw: HardwareProfile, gpusPerWorker: number, steps: readonly MeasuredStep[], kvReplication = 1,
): Calibration {
  // Steps all of one shape fit any split of their time between per-step overhead and per-token
  // work equally well: the fit would keep the assumed overhead and report it as measured.
  const shape = (s: StepShape) => `${s.prefillTokens},${s.prefillAttnPairs},${s.decodeSeqs},${s.decodeAttnTokens}`;
  if (steps.length > 0 && new Set(steps.map(shape)).size < 2) {
    throw new StepLogError(`A step log needs steps of at least 2 different shapes to calibrate, got ${steps.length} steps all of shape ${JSON.stringify(shape(steps[0]))} (prefillTokens,prefillAttnPairs,decodeSeqs,decodeAttnTokens)`);
  }
  const cost = new CostModel(model, hw, gpusPerWorker, kvReplication);
  const samples = steps.map((s) => ({ work: cost.work(s), measuredS: s.seconds, mixed: s.prefillTokens > 0 && s.decodeSeqs > 0 }));
  const rms = () => Math.sqrt(steps.reduce((a, st) => a + (cost.stepTime(st) - st.seconds) ** 2, 0) / steps.length);
  const rmsBeforeS = rms();
  // With enough steps of each kind, alternate: fit the roofline to the steps with the current
  // mixed-step overhead taken off the mixed ones, then set that overhead to how much more mixed steps
  // exceed the fitted roofline than single-kind steps do. Otherwise assume no mixed-step overhead.
  const mixedN = samples.filter((s) => s.mixed).length;
  const split = mixedN >= 3 && samples.length - mixedN >= 3;
  let mixedS = 0;
  for (let round = 0; round < (split ? 8 : 1); round++) {
    cost.calibrate(samples.map((s) => ({ work: s.work, measuredS: s.mixed ? s.measuredS - mixedS : s.measuredS })), 60);
    if (!split) break;
    let rm = 0, rs = 0;
    for (const s of samples) {
      const r = s.measuredS - cost.timeOf(s.work);
      if (s.mixed) rm += r; else rs += r;
    }
    mixedS = Math.max(0, rm / mixedN - rs / (samples.length - mixedN));
  }
  cost.mixedStepOverheadS = mixedS;
  const rmsAfterS = rms();
  // Steps too large for a double (1e300 tokens, 1e300 s) overflow the fit: say so rather than run on NaN.
  const fitted = [cost.flopEfficiency, cost.bandwidthEfficiency, cost.stepOverheadS, cost.mixedStepOverheadS, rmsBeforeS, rmsAfterS];
  if (!fitted.every(Number.isFinite)) {
    const big = steps.findIndex((st) => !Number.isFinite(cost.stepTime(st)) || !Number.isFinite(st.seconds ** 2));
    throw new StepLogError(`The step log cannot be fitted: ${big >= 0 ? `step ${big + 1} (${JSON.stringify(steps[big])}) is too large` : "the fit does not converge"} for the cost model`);
  }
  return {
    hw: {
      ...hw, name: `${hw.name} (calibrated)`, flopEfficiency: cost.flopEfficiency, bandwidthEfficiency: cost.bandwidthEfficiency,
      stepOverheadS: cost.stepOverheadS, mixedStepOverheadS: cost.mixedStepOverheadS,
    },
    steps: samples.length, rmsBeforeS, rmsAfterS,
  };
}

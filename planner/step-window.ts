/**
 * A worker's measured steps over one planner window, reduced to the step fields of its
 * {@link WorkerSnapshot}, plus the running speed estimates a router prices it with. The simulator's
 * workers feed it their (macro-)steps and the server's cluster (src/cluster) the engines' step
 * records, so a planner reads both the same way.
 */
import type { StepSample, WorkerSnapshot } from "./types.ts";
import { isValidStep } from "./snapshot-guard.ts";

/** Steps kept per window as samples: all of them up to this many, else the latest of each kind, shared fairly. */
const STEP_SAMPLES = 48;

/** Kinds of step a window keeps apart: prefill only, decode only, mixed. */
const KINDS = 3;

function kindOf(s: StepSample): number {
  return s.prefillTokens > 0 ? (s.decodeSeqs > 0 ? 2 : 0) : 1;
}

/** The step fields of a snapshot. */
export type StepWindowFields = Pick<
  WorkerSnapshot,
  "prefillTokens" | "prefillBusyS" | "prefillSteps" | "decodeTokens" | "decodeBusyS" | "decodeStepS" | "meanDecodeBatch" | "steps"
>;

/** Accumulates one window of steps; {@link take} returns it and starts the next. */
export class StepWindow {
  /** Prefill tokens per second of prefill-carrying step (EWMA over steps; `initialPrefillRate` until one is seen). */
  prefillRate: number;
  /** Seconds per decode-carrying step (EWMA; 0 until one is seen). */
  decodeStepS = 0;
  private prefillTokens = 0;
  private prefillBusy = 0;
  private prefillSteps = 0;
  private decodeTokens = 0;
  private decodeBusy = 0;
  private decodeSteps = 0;
  private batchSum = 0;
  private pureSteps = 0;
  private pureBusy = 0;
  private pureBatch = 0;
  // Per kind: its latest STEP_SAMPLES steps (a ring) with their order in the window, and how many came.
  // On a GPU a worker runs a hundred decode steps a second and a prefill now and then: the latest 48
  // steps of a window would seldom hold one, and the step model would not learn what prefill and
  // mixed steps cost (the simulator's merged decode steps hid this).
  private readonly kept: StepSample[][] = Array.from({ length: KINDS }, () => []);
  private readonly order: number[][] = Array.from({ length: KINDS }, () => []);
  private readonly seen = new Array<number>(KINDS).fill(0);
  private count = 0;

  constructor(initialPrefillRate: number) {
    this.prefillRate = initialPrefillRate;
  }

  /**
   * Records a finished step (or `sample.count` identical ones). A step whose time or shape is NaN,
   * infinite or negative is ignored: the speed EWMAs routers price with would never recover from it.
   */
  observe(sample: StepSample): void {
    if (!isValidStep(sample)) return;
    const k = sample.count ?? 1;
    const s = sample.seconds;
    const kind = kindOf(sample);
    const slot = this.seen[kind]++ % STEP_SAMPLES;
    this.kept[kind][slot] = sample;
    this.order[kind][slot] = this.count++;
    if (sample.prefillTokens > 0) {
      this.prefillTokens += sample.prefillTokens;
      this.prefillBusy += s;
      this.prefillSteps += k;
      if (s > 0) this.prefillRate = 0.8 * this.prefillRate + 0.2 * (sample.prefillTokens / s);
    }
    const d = sample.decodeSeqs;
    if (d > 0) {
      this.decodeTokens += d * k;
      this.decodeBusy += k * s;
      this.decodeSteps += k;
      this.batchSum += d * k;
      if (sample.prefillTokens === 0) {
        this.pureSteps += k;
        this.pureBusy += k * s;
        this.pureBatch += d * k;
      }
      this.decodeStepS = 0.8 * this.decodeStepS + 0.2 * s;
    }
  }

  /** The window's fields; the next window starts empty. */
  take(): StepWindowFields {
    const out: StepWindowFields = {
      prefillTokens: this.prefillTokens, prefillBusyS: this.prefillBusy, prefillSteps: this.prefillSteps,
      decodeTokens: this.decodeTokens, decodeBusyS: this.decodeBusy,
      // Step time vs batch from decode-only steps when there were any (mixed steps carry prefill cost).
      decodeStepS: this.pureSteps > 0 ? this.pureBusy / this.pureSteps : this.decodeSteps > 0 ? this.decodeBusy / this.decodeSteps : 0,
      meanDecodeBatch: this.pureSteps > 0 ? this.pureBatch / this.pureSteps : this.decodeSteps > 0 ? this.batchSum / this.decodeSteps : 0,
      steps: this.takeSamples(),
    };
    this.count = 0;
    this.prefillTokens = this.prefillBusy = this.prefillSteps = this.decodeTokens = this.decodeBusy = this.decodeSteps = this.batchSum = 0;
    this.pureSteps = this.pureBusy = this.pureBatch = 0;
    return out;
  }

  /** The window's kept steps in the order they came: every one when there were few, else a fair share of each kind's latest. */
  private takeSamples(): StepSample[] {
    const have = this.seen.map((n) => Math.min(n, STEP_SAMPLES));
    // Water-filling: kinds with fewer steps than an equal share keep them all; the rest share what is left.
    const quota = have.slice();
    if (have.reduce((a, b) => a + b, 0) > STEP_SAMPLES) {
      let left = STEP_SAMPLES;
      const byCount = Array.from({ length: KINDS }, (_, k) => k).sort((x, y) => have[x] - have[y]);
      byCount.forEach((k, i) => {
        quota[k] = Math.min(have[k], Math.floor(left / (KINDS - i)));
        left -= quota[k];
      });
    }
    const picked: { s: StepSample; at: number }[] = [];
    for (let k = 0; k < KINDS; k++) {
      // The latest `quota[k]` of the kind's ring: slots before the next write, going back.
      for (let j = 1; j <= quota[k]; j++) {
        const slot = (((this.seen[k] - j) % STEP_SAMPLES) + STEP_SAMPLES) % STEP_SAMPLES;
        picked.push({ s: this.kept[k][slot], at: this.order[k][slot] });
      }
      this.kept[k].length = 0;
      this.order[k].length = 0;
      this.seen[k] = 0;
    }
    return picked.sort((a, b) => a.at - b.at).map((p) => p.s);
  }
}

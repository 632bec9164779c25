/**
 * A worker's measured steps over one planner window, reduced to the step fields of its
 * {@link WorkerSnapshot}, plus the running speed estimates a router prices it with. The simulator's
 * workers feed it their (macro-)steps and the server's cluster (src/cluster) the engines' step
 * records, so a planner reads both the same way.
 */
import type { StepSample, WorkerSnapshot } from "./types.ts";

/** Steps kept per window as samples: the first ones, then round-robin. */
const STEP_SAMPLES = 48;

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
  private samples: StepSample[] = [];
  private count = 0;

  constructor(initialPrefillRate: number) {
    this.prefillRate = initialPrefillRate;
  }

  /** Records a finished step (or `sample.count` identical ones). */
  observe(sample: StepSample): void {
    const k = sample.count ?? 1;
    const s = sample.seconds;
    const n = this.count++;
    if (n < STEP_SAMPLES) this.samples.push(sample);
    else this.samples[n % STEP_SAMPLES] = sample;
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
      steps: this.samples,
    };
    this.samples = [];
    this.count = 0;
    this.prefillTokens = this.prefillBusy = this.prefillSteps = this.decodeTokens = this.decodeBusy = this.decodeSteps = this.batchSum = 0;
    this.pureSteps = this.pureBusy = this.pureBatch = 0;
    return out;
  }
}

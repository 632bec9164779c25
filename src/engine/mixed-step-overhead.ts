/**
 * `--mixed-step-overhead-ms`: makes every step that carries both prefill chunks and decodes take
 * longer by a fixed time, as mixed steps do on GPUs where a long chunk and a decode batch interfere
 * (no CUDA graph for the mixed shape, attention kernels for both). On the CPU reference backend a
 * mixed step costs what its parts cost, so the planner's answer to dear mixed steps (separate prefill
 * and decode steps, or roles) can only be tried against a real server with this. The simulator's
 * option of the same name charges the same time, so the two can be compared.
 */
import type { StepRunner } from "./engine-runner.ts";
import { stepShapeOf } from "./step-record.ts";

/** Waits `ms` (a timer, so the thread is idle meanwhile, as a host waiting on its GPU is). */
export type Delay = (ms: number) => Promise<void>;

const timerDelay: Delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `runner` with `overheadMs` added to each mixed step's forward (prefill and decode entries in one
 * step); other steps and the KV copies are unchanged. Throws on a negative or non-finite overhead.
 */
export function withMixedStepOverhead(runner: StepRunner, overheadMs: number, delay: Delay = timerDelay): StepRunner {
  if (!Number.isFinite(overheadMs) || overheadMs < 0) throw new RangeError(`The mixed-step overhead must be a non-negative number of milliseconds, got ${overheadMs}`);
  if (overheadMs === 0) return runner;
  const run: StepRunner["run"] = async (entries, rows, extras) => {
    const out = await runner.run(entries, rows, extras);
    const s = stepShapeOf(entries);
    if (s.prefillTokens > 0 && s.decodeSeqs > 0) await delay(overheadMs);
    return out;
  };
  // Everything else goes to the runner itself, bound to it.
  return new Proxy(runner, {
    get(target, key) {
      if (key === "run") return run;
      const v: unknown = Reflect.get(target, key);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

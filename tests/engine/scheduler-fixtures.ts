/** Shared fixtures of the scheduler tests: a scheduler on a real block pool, and a deterministic fake forward. */
import { BlockPool } from "../../kv/index.ts";
import { Scheduler } from "../../src/engine/scheduler.ts";
import { poolBlockManager } from "../../src/engine/scheduler-kv-adapter.ts";
import type { SchedulerConfig, StepPlan } from "../../src/engine/scheduler-types.ts";

/** A scheduler over a fresh pool of `numBlocks` blocks of `blockSize` tokens (no watermark unless `cfg` sets one). */
export function make(numBlocks: number, blockSize: number, cfg: Partial<SchedulerConfig> = {}): { pool: BlockPool; sched: Scheduler } {
  const pool = new BlockPool({ numBlocks, blockSize, clock: () => 0 });
  return { pool, sched: new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0, ...cfg }) };
}

/** `n` consecutive integers from `from`. */
export const range = (n: number, from = 0): number[] => Array.from({ length: n }, (_, i) => from + i);

/** Fake forward: the sampled token is a function of the sequence and position, like a deterministic model. */
export function fakeSample(plan: StepPlan): Map<number, number> {
  const m = new Map<number, number>();
  for (const e of plan.entries) if (e.sample) m.set(e.seqId, (e.seqId * 31 + e.startPos + e.tokens.length) % 97);
  return m;
}

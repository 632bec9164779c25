/**
 * What `Scheduler.schedule()` costs per decode step at a long context, with no engine around it: 64
 * sequences with prompts of `--context` tokens (default 4096; blocks of 16) each generate 256 tokens
 * on a real block pool; the time of each decode-only step's planning is summed (commits and prefill
 * steps left out). The step plans hand out each sequence's block table (scheduler-tables.ts).
 *
 *   npx tsx scripts/bench-scheduler-plan.ts                  # --context 4096
 *   npx tsx scripts/bench-scheduler-plan.ts --context 256
 */
import { BlockPool } from "../kv/index.ts";
import { Scheduler } from "../src/engine/scheduler.ts";
import { poolBlockManager } from "../src/engine/scheduler-kv-adapter.ts";
import { cliArgs } from "../src/runtime/env.ts";

const args = cliArgs();
const at = args.indexOf("--context");
const context = at >= 0 ? Number(args[at + 1]) : 4096;
const STREAMS = 64, GENERATE = 256, BLOCK = 16;

const pool = new BlockPool({ numBlocks: STREAMS * (Math.ceil((context + GENERATE) / BLOCK) + 2) + 1, blockSize: BLOCK, clock: () => 0 });
const sched = new Scheduler(poolBlockManager(pool), { watermarkBlocks: 0, maxBatchTokens: 1 << 20, maxRunning: STREAMS });
for (let i = 0; i < STREAMS; i++) sched.submit(i, Array.from({ length: context }, (_, p) => (p * 7 + i) % 500));
let steps = 0, ms = 0;
while (!sched.idle) {
  const t0 = performance.now();
  const plan = sched.schedule();
  const dt = performance.now() - t0;
  const sampled = new Map<number, number>();
  for (const e of plan.entries) if (e.sample) sampled.set(e.seqId, 3);
  for (const seq of sched.commit(plan, sampled)) if (seq.numOutput >= GENERATE) sched.finish(seq.id, "length");
  if (plan.numPrefillTokens === 0) (ms += dt), steps++;
}
const perStep = (ms * 1000) / steps;
console.log(`context ${context}: schedule() ${perStep.toFixed(1)} µs per decode step of ${STREAMS} sequences, ${(perStep / STREAMS).toFixed(2)} µs per token (${steps} steps)`);

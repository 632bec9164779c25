/**
 * What the engine concurrency tests share: an engine on the reference backend whose runner can be
 * hooked (paused, made to throw, its host copies held back) and a check that no KV block leaked.
 */
import assert from "node:assert/strict";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Engine, type EngineOptions } from "../../src/engine/engine.ts";
import { modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import type { GenerateRequest, GenerateResult } from "../../src/engine/engine-types.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import type { HostKv } from "../../src/engine/kv-copy.ts";
import type { StepEntry } from "../../src/engine/scheduler-types.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { model } from "../cluster/fixtures.ts";

export { model };

/** What a test may do around the runner's calls. */
export interface RunnerHooks {
  /** Called as a step starts, before its forward: may cancel requests (the step is in flight) or throw (the step fails). */
  beforeRun?: (entries: readonly StepEntry[]) => void | Promise<void>;
  /** Called before a host copy of evicted blocks resolves: may hold it back. */
  beforeRead?: (blockIds: readonly number[]) => Promise<void>;
}

/** Engine options other than the runner and the model. */
export type HookedOptions = Omit<EngineOptions, "runner" | "config" | "tokenizer"> & { numBlocks?: number; blockSize?: number };

/** An engine on the reference backend (f32 KV, 16-token blocks unless told) whose runner calls `hooks`. */
export function hookedEngine(o: HookedOptions = {}, hooks: RunnerHooks = {}): Engine {
  const { numBlocks = 64, blockSize = 16, ...opts } = o;
  const backend = createReferenceBackend();
  const base = modelStepRunner(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, numBlocks, blockSize, "f32"));
  const runner: StepRunner = {
    ...base,
    run: async (entries, rows, extras) => {
      await hooks.beforeRun?.(entries);
      return base.run(entries, rows, extras);
    },
    readBlocks: async (ids): Promise<HostKv> => {
      // The copy is taken now (the block's KV is intact now); only its arrival is held back.
      const kv = base.readBlocks!(ids);
      await hooks.beforeRead?.(ids);
      return kv;
    },
  };
  return new Engine({ ...opts, runner, config: model.config, tokenizer: model.tokenizer });
}

/** Submits `req`, drains its stream and returns the streamed ids and the result. */
export async function drain(e: Engine, req: GenerateRequest): Promise<{ streamed: number[]; result: GenerateResult }> {
  const h = e.submit(req);
  const streamed: number[] = [];
  for await (const d of h.stream) streamed.push(...d.tokenIds);
  return { streamed, result: await h.result };
}

/**
 * The leak check: nothing active, waiting or running, every block back in the pool (free or
 * evictable in the prefix cache), nothing left in swap space. `held`: blocks legitimately held
 * (hand-off tails).
 */
export function assertNoLeak(e: Engine, label: string, held = 0): void {
  assert.equal(e.activeRequests, 0, `${label}: no request is still active`);
  const s = e.stats();
  assert.equal(s.waiting, 0, `${label}: nothing waits`);
  assert.equal(s.running, 0, `${label}: nothing runs`);
  assert.equal(s.swapUsedBlocks, 0, `${label}: swap space is empty`);
  assert.equal(e.pool.numUsedBlocks(), held, `${label}: every KV block is back in the pool`);
  assert.equal(e.pool.numFreeBlocks(), e.pool.numBlocks - held, `${label}: the pool's free count is back at its start`);
}

/** A promise with its resolve, to hold a hook until a test lets it go. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

/**
 * Resolves with `p`, or rejects after `ms` (a hanging promise fails the test instead of the run). The
 * deadline is no measure of speed: callers give a generous one (60 s), since CI's loaded machine is slow.
 */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

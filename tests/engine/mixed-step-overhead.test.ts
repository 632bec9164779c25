import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import type { SamplingRow } from "../../src/backend/types.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { StepOutput, StepRunner } from "../../src/engine/engine-runner.ts";
import { withMixedStepOverhead } from "../../src/engine/mixed-step-overhead.ts";
import type { StepEntry, SwapOp } from "../../src/engine/scheduler-types.ts";
import type { StepRecord } from "../../src/engine/step-record.ts";
import { loadModel } from "../../src/model/load.ts";

/** A runner that answers token 7 for every entry and counts swaps through `this`. */
class CountingRunner implements StepRunner {
  readonly numBlocks = 8;
  readonly blockSize = 16;
  swaps = 0;
  run(entries: readonly StepEntry[], _rows: readonly SamplingRow[]): Promise<StepOutput> {
    return Promise.resolve({ ids: Int32Array.from(entries, () => 7) });
  }
  swap(_out: readonly SwapOp[], _into: readonly SwapOp[]): Promise<void> {
    this.swaps++;
    return Promise.resolve();
  }
  close(): void {}
}

const entry = (prefill: boolean, tokens: number): StepEntry =>
  ({ seqId: tokens, tokens: Array.from({ length: tokens }, () => 1), startPos: 0, blockTable: [0], sample: true, prefill }) as StepEntry;

test("withMixedStepOverhead() delays steps that carry prefill and decode, and no others", async () => {
  const inner = new CountingRunner();
  const delays: number[] = [];
  const r = withMixedStepOverhead(inner, 25, (ms) => {
    delays.push(ms);
    return Promise.resolve();
  });
  assert.deepEqual([...(await r.run([entry(true, 9)], [])).ids], [7], "a prefill-only step");
  await r.run([entry(false, 1), entry(false, 1)], []);
  assert.deepEqual(delays, [], "prefill-only and decode-only steps are not delayed");
  assert.deepEqual([...(await r.run([entry(true, 9), entry(false, 1)], [])).ids], [7, 7]);
  assert.deepEqual(delays, [25], "the mixed step is");
  await r.swap!([], []);
  assert.equal(inner.swaps, 1, "other methods reach the runner, bound to it");
  assert.equal(r.numBlocks, 8);
  assert.equal(withMixedStepOverhead(inner, 0), inner, "no overhead: the runner itself");
  assert.throws(() => withMixedStepOverhead(inner, -1), /non-negative number of milliseconds, got -1/);
  assert.throws(() => withMixedStepOverhead(inner, NaN), /got NaN/);
});

test("createEngine() with mixedStepOverheadMs logs mixed steps that much longer", async () => {
  const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const records: StepRecord[] = [];
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, mixedStepOverheadMs: 80, onStep: (r) => records.push(r) });
  const prompt = (n: number, k: number) => Array.from({ length: n }, (_, i) => 1 + ((i * k) % 500));
  const first = e.submit({ prompt: prompt(20, 7), maxTokens: 40, temperature: 0, ignoreEos: true });
  // The second prompt arrives while the first decodes: its prefill shares a step with that decode.
  await new Promise((r) => setTimeout(r, 20));
  const second = e.submit({ prompt: prompt(30, 11), maxTokens: 2, temperature: 0, ignoreEos: true });
  await Promise.all([first.result, second.result]);
  await e.stop();
  const mixed = records.filter((s) => s.prefillTokens > 0 && s.decodeSeqs > 0);
  assert.ok(mixed.length >= 1, `no mixed step in ${JSON.stringify(records.map((s) => [s.prefillTokens, s.decodeSeqs]))}`);
  for (const s of mixed) assert.ok(s.seconds >= 0.079, `a mixed step took ${s.seconds} s, under the 80 ms overhead`);
});

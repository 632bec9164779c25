/**
 * An engine's warm-up (Engine.warmUp): the kinds of step serving runs, once each, on KV block 0
 * before anything is cached there, so that a backend's kernels are compiled — and a device that
 * cannot run them fails — at start rather than at a user's first request. Kernels are chosen by
 * shape (WebGPU's matmul by row count, its attention split by context length) and by what a step
 * asks (biases, masks, penalties, log probabilities), so the steps cover those. Every position a
 * step feeds maps to block 0 (a table of it repeated): the keys and values written there, racing
 * each other, are never read for anything kept.
 */
import type { SamplingRow } from "../backend/types.ts";
import type { StepExtras, StepRunner } from "./engine-runner-types.ts";
import { TokenMask } from "./output-constraint.ts";
import type { VisionConfig } from "../model/vision/mmproj.ts";
import type { StepEntry } from "./scheduler-types.ts";

/** Decodes a warm-up step batches: one row count for each of WebGPU's tiled matmul widths past one (2, 4 and 8 row threads), the output matmul's included. */
const DECODE_BATCHES = [8, 16, 24];
/** A context long enough for WebGPU's attention to split its keys (two spans of 256). */
const SPLIT_CONTEXT = 512;

/**
 * Runs the warm-up steps on `runner` for a model of `vocabSize` tokens: a prompt, a decode asking
 * for everything a row can ask (a bias, a mask, a repetition penalty, log probabilities), with
 * `schedulerSteps` > 1 a decode run ahead (with penalties where the runner takes them), with
 * `mtpTokens` a verify step and the multi-token-prediction block's drafts after it; where the
 * backend readies kernels at first use, also decodes of each batch in {@link DECODE_BATCHES}, a
 * decode at the end of a long context and, with a vision tower, a prompt that is one image (its
 * encoder's kernels, and the step's given rows) (on the reference backend, with nothing to ready,
 * those would only cost time: a 1B model's batch of 24 takes it many seconds).
 */
export async function warmUpRunner(runner: StepRunner, vocabSize: number, maxModelLen: number, schedulerSteps: number, mtpTokens = 0, vision?: VisionConfig): Promise<void> {
  const bs = runner.blockSize;
  if (bs < 4) return;
  const tok = Math.min(1, vocabSize - 1);
  const row: SamplingRow = { temperature: 0.7, topK: 0, topP: 1, uniform: 0.5 };
  const entry = (tokens: number[], startPos: number): StepEntry => {
    const blocks = Math.ceil((startPos + tokens.length) / bs);
    return { seqId: -1, tokens, startPos, blockTable: new Array<number>(blocks).fill(0), sample: true, prefill: startPos === 0 };
  };
  await runner.run([entry([tok, tok], 0)], [row]);
  const shapes = runner.preparesKernelsLazily === true;
  // A Gated DeltaNet model's steps hold at most its state slots' sequences (each warm-up entry takes one).
  if (shapes) for (const n of DECODE_BATCHES.filter((n) => n <= (runner.stateSlots ?? Infinity))) await runner.run(new Array<StepEntry>(n).fill(entry([tok], 2)), new Array<SamplingRow>(n).fill(row));
  const all = TokenMask.allBut(vocabSize, []);
  const asks: StepExtras = {
    additions: [new Map([[tok, 0.5]])], masks: [all], repeats: [{ seen: all, factor: 1.1 }], logprobs: [1],
  };
  await runner.run([entry([tok], 2)], [row], asks);
  if (schedulerSteps > 1 && runner.runsAhead) {
    const penalties: StepExtras = runner.penalizesAhead
      ? { repeats: [{ seen: all, factor: 1.1 }], outputPenalties: [{ presence: 0.5, frequency: 0.5, present: [tok] }] }
      : {};
    await runner.run([{ ...entry([tok], 2), lookahead: 1 }], [row], { lookahead: [[row]], ...penalties });
  }
  // The multi-token-prediction block's pass after a verify step, its chained drafts included (mtp-drafts.ts).
  if (mtpTokens > 0) await runner.run([{ ...entry([tok, tok], 2), draft: 1 }], [row], { drafts: [[row]], mtp: { tokens: mtpTokens, draft: [true], next: [undefined] } });
  if (shapes && maxModelLen >= SPLIT_CONTEXT) await runner.run([entry([tok], SPLIT_CONTEXT - 1)], [row]);
  if (shapes && vision && vision.tokensPerImage < maxModelLen) {
    const n = vision.tokensPerImage;
    // A key no image's digest is (not hex): the warm-up's embeddings are never found for a request's image.
    const image = { start: 0, length: n, pixels: new Float32Array(3 * vision.imageSize * vision.imageSize), key: "warm-up" };
    await runner.run([entry(new Array<number>(n).fill(tok), 0)], [row], { images: [[image]] });
  }
}

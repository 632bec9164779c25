/**
 * Multi-step decoding on a model (vLLM's `--num-scheduler-steps`): a step of plain decodes runs,
 * samples, and then runs `lookahead` more one-token steps, each fed the token the one before sampled
 * while it is still on the device, and reads every step's tokens back at once. A read costs a
 * backend a round trip (Deno's WebGPU answers it on a 10 ms poll, however soon the work ended), so
 * k + 1 steps share one instead of paying one each; the tokens are those one-token steps give.
 */
import type { Backend, SamplingRow, Tensor } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { type ForwardEntry, forwardWithHidden, type PagedKv, type StepLora } from "../model/forward.ts";
import type { StepExtras, StepOutput } from "./engine-runner-types.ts";
import { AheadPenalties, type OutputPenalty } from "./ahead-penalties.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import { addToLogits, gatherLogitRows, maskLogitRows } from "./logit-rows.ts";
import { type TokenLogprob, tokenLogprob } from "./logprobs.ts";
import type { TokenMask } from "./output-constraint.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";
import type { StepEntry } from "./scheduler-types.ts";

/** The step a runner looks ahead from: its entries' common lookahead (0: none), checked against what the step asks. */
export function lookaheadOf(entries: readonly StepEntry[], extras: StepExtras | undefined): number {
  const k = entries[0]?.lookahead ?? 0;
  if (entries.some((e) => (e.lookahead ?? 0) !== k)) throw new RangeError("A step's entries look ahead by different numbers of steps");
  if (k === 0) return 0;
  if (extras?.lookahead?.length !== k) throw new RangeError(`A step that looks ahead ${k} steps has ${extras?.lookahead?.length ?? 0} steps of sampling rows`);
  const allowed = new Set(["lookahead", "adapters", "logprobs", "additions", "repeats", "outputPenalties", "masks", "aheadMasks"]);
  // A draft block's pass runs after each of the group's steps, writing its cache; none of them drafts.
  if (extras.mtp?.draft.some((d) => d)) throw new RangeError("A step that looks ahead cannot take multi-token-prediction drafts");
  allowed.add("mtp");
  const asks = Object.entries(extras).filter(([key, v]) => !allowed.has(key) && v !== undefined && (!Array.isArray(v) || v.some((x) => x !== undefined)));
  if (asks.length > 0) throw new RangeError(`A step that looks ahead cannot also ask for ${asks.map(([key]) => key).join(", ")}`);
  return k;
}

/** What the steps of a group ask beyond their tokens, per entry (undefined: nothing). */
export interface AheadAsks {
  /** Log probabilities: each token's, with this many top alternatives, from the raw logits of every step. */
  readonly logprobs?: readonly (number | undefined)[];
  /** A fixed logit bias (and the presence and frequency penalties of the output before the group), added at every step. */
  readonly additions?: readonly (LogitAdditions | undefined)[];
  /** The repetition penalty of the prompt and output before the group, at every step. */
  readonly repeats?: readonly (RepeatPenalty | undefined)[];
  /** Presence and frequency penalties: those of the tokens the group samples are applied on the device. */
  readonly outputPenalties?: readonly (OutputPenalty | undefined)[];
  /** The first step's masks, then each further step's (`aheadMasks[k - 1]` for step k): masks the host knows ahead. */
  readonly masks?: readonly (TokenMask | undefined)[];
  readonly aheadMasks?: readonly (readonly (TokenMask | undefined)[])[];
}

/**
 * A draft block's pass after each step of a group (mtp-drafts.ts): what the forward returns for it
 * (every row's normed state, or the states entering an EAGLE-3 head's layers), and the pass itself,
 * given the step's entries, that input and the step's sampled tokens on the device. Nothing drafts
 * in a group; the pass keeps the block's cache following the model's.
 */
export interface AheadBlockPass<E> {
  readonly input: { allHidden?: boolean; auxLayers?: readonly number[] };
  run(step: readonly E[], input: Tensor, sampled: Tensor): void;
}

/**
 * Runs `entries` (each sampling its last row with `rows`: plain decodes, or a draft model's catch-up
 * chunks), then `ahead.length` one-token steps per entry fed the tokens sampled before them, and
 * reads all of them back in one go (`afterForward` sees each step's entries once its forward is
 * queued: where each is, for work queued after it). Entries asking for log probabilities get each of their tokens',
 * from the raw logits of every step, copied out as they come; penalties and additions
 * ({@link AheadAsks}) change each step's rows after that, in a one-token step's order: the
 * repetition penalty (and on the device those of tokens sampled in the group), the additive ones
 * and biases, then the masks.
 */
export async function runAhead<E extends ForwardEntry>(
  backend: Backend, model: DeviceModel, kv: PagedKv, entries: readonly E[], rows: readonly SamplingRow[],
  ahead: readonly (readonly SamplingRow[])[], lora: StepLora | undefined, asks: AheadAsks = {}, afterForward?: (step: readonly E[]) => void, block?: AheadBlockPass<E>,
): Promise<StepOutput> {
  const { logprobs, additions } = asks;
  const asking = entries.flatMap((_, i) => (logprobs?.[i] === undefined ? [] : [i]));
  const sampled: Tensor[] = [];
  const raws: Tensor[] = [];
  let vocab = 0;
  let penalties: AheadPenalties | undefined;
  try {
    let step = entries;
    for (let k = 0; k <= ahead.length; k++) {
      const out = forwardWithHidden(backend, model, kv, { entries: step, ...(k > 0 ? { tokenIds: sampled[k - 1] } : {}), ...(lora ? { lora } : {}), ...block?.input });
      const logits = out.logits;
      const input = out.auxHidden ?? out.allHidden;
      afterForward?.(step);
      try {
        vocab = logits.shape[1];
        if (asking.length > 0) raws.push(gatherLogitRows(backend, logits, asking));
        if (k === 0) penalties = AheadPenalties.of(backend, vocab, ahead.length, asks.repeats, asks.outputPenalties);
        penalties?.apply(logits, k, sampled[k - 1]);
        if (additions) addToLogits(backend, logits, additions);
        const masks = k === 0 ? asks.masks : asks.aheadMasks?.[k - 1];
        if (masks) maskLogitRows(backend, logits, masks);
        sampled.push(backend.sample(logits, k === 0 ? rows : ahead[k - 1]));
        if (input) block!.run(step, input, sampled[k]);
      } finally {
        backend.free(logits);
        if (input) backend.free(input);
      }
      // The placeholder token is never read: the forward takes the ids from the device.
      step = step.map((e) => ({ ...e, tokens: [0], startPos: e.startPos + e.tokens.length }));
    }
    const [read, rawRead] = await Promise.all([
      Promise.all(sampled.map(async (t) => (await backend.download(t)) as Int32Array)),
      Promise.all(raws.map(async (t) => (await backend.download(t)) as Float32Array)),
    ]);
    const ids = read[0];
    const lookaheadIds = entries.map((_, i) => Int32Array.from(read.slice(1), (step) => step[i]));
    if (asking.length === 0) return { ids, lookaheadIds };
    // Each step's log probability of each asking entry's token, in step order.
    const perEntry: (TokenLogprob[] | undefined)[] = entries.map(() => undefined);
    asking.forEach((i, r) => {
      perEntry[i] = read.map((stepIds, k) => tokenLogprob(rawRead[k].subarray(r * vocab, (r + 1) * vocab), stepIds[i], logprobs![i]!));
    });
    return { ids, lookaheadIds, logprobs: perEntry.map((lps) => lps?.[0]), lookaheadLogprobs: perEntry.map((lps) => lps?.slice(1)) };
  } finally {
    for (const t of [...sampled, ...raws]) backend.free(t);
    penalties?.free();
  }
}

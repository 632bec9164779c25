/**
 * Where a step's extra rows sit in its flat logits: the rows that predict prompt tokens (prompt log
 * probabilities) and each entry's draft rows (speculative decoding), in entry order, and the log
 * probabilities read from the prompt rows.
 */
import type { Backend, SamplingRow, Tensor } from "../backend/types.ts";
import { type TokenLogprob, tokenLogprob } from "./logprobs.ts";
import type { StepEntry } from "./scheduler-types.ts";
import type { PromptLogprobAsk } from "./engine-runner-types.ts";
import { gatherLogitRows } from "./logit-rows.ts";

/** The flat rows whose logits the prompt log probabilities need, in entry order (see PromptLogprobAsk). */
export function promptRows(entries: readonly StepEntry[], asks: readonly (PromptLogprobAsk | undefined)[] | undefined): number[] {
  const rows: number[] = [];
  if (!asks) return rows;
  let offset = 0;
  entries.forEach((e, i) => {
    const n = asks[i]?.targets.length ?? 0;
    if (n > e.tokens.length) throw new RangeError(`Entry ${i} asks for ${n} prompt log probabilities but feeds ${e.tokens.length} tokens`);
    for (let j = 0; j < n; j++) rows.push(offset + j);
    offset += e.tokens.length;
  });
  return rows;
}

/**
 * The flat rows of the entries' draft positions (the `draft` rows before each entry's last: the row of
 * its last pending token, which predicts the draft's first, and those of all but the last draft token),
 * in entry order, with the entry each belongs to, its position in the draft and its sampling row.
 */
export function draftRows(entries: readonly StepEntry[], asks: readonly (readonly SamplingRow[] | undefined)[] | undefined) {
  const rows: number[] = [], entry: number[] = [], pos: number[] = [], sampling: SamplingRow[] = [];
  let offset = 0;
  entries.forEach((e, i) => {
    const d = e.draft ?? 0;
    if (d > 0 && asks?.[i]?.length !== d) throw new RangeError(`Entry ${i} drafts ${d} tokens but has ${asks?.[i]?.length ?? 0} draft sampling rows`);
    const first = offset + e.tokens.length - d - 1;
    for (let j = 0; j < d; j++) {
      rows.push(first + j);
      entry.push(i);
      pos.push(j);
      sampling.push(asks![i]![j]);
    }
    offset += e.tokens.length;
  });
  return { rows, entry, pos, sampling };
}

/** Values per draft row (draftRows' order), split per entry and made into `R` (undefined for entries without a draft). */
export function splitDraftRows<T, R>(values: readonly T[], entries: readonly StepEntry[], make: (xs: T[]) => R | undefined): (R | undefined)[] {
  let at = 0;
  return entries.map((e) => {
    const d = e.draft ?? 0;
    if (d === 0) return undefined;
    at += d;
    return make(values.slice(at - d, at));
  });
}

/** Log probabilities of each asking entry's targets, from rows `first`..`first + count` of logits (promptRows' order). */
export async function readPromptLogprobs(
  backend: Backend, logits: Tensor, first: number, count: number, asks: readonly (PromptLogprobAsk | undefined)[],
): Promise<(TokenLogprob[] | undefined)[]> {
  const part = gatherLogitRows(backend, logits, Array.from({ length: count }, (_, k) => first + k));
  let data: Float32Array;
  try {
    data = (await backend.download(part)) as Float32Array;
  } finally {
    backend.free(part);
  }
  const vocab = logits.shape[1];
  let row = 0;
  return asks.map((a) =>
    a?.targets.map((id) => {
      const lp = tokenLogprob(data.subarray(row * vocab, (row + 1) * vocab), id, a.top);
      row++;
      return lp;
    })
  );
}

/**
 * Drafts from the model's own multi-token-prediction block (speculative method "mtp"; model/forward-mtp.ts).
 * After every step the block runs over the step's rows, each fed the model's hidden state at its
 * position and the token after it, so its KV cache follows the model's. That token is the next one the
 * row's entry fed, or the one sampled at the row: at a draft row it is what the model sampled there,
 * which is the draft token wherever the draft holds, and at the first row where it does not, the
 * sequence's next token. A sequence's draft is the block's prediction at the row of its last kept
 * token (its first draft token), then chained: each next pass, one row a sequence at the position
 * after, takes the token before it and the block's own hidden state (tokens on the device, one read
 * at the end).
 *
 * Rows past the kept tokens write K/V at positions the next step writes again before any row reads
 * them, as the model's own rejected rows do. A chained pass's positions may lie past the sequence's
 * blocks: those take blocks the cache reserves (PagedKv.reserved), `perSequence` for each drafting
 * sequence.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import type { ForwardEntry, PagedKv } from "../model/forward.ts";
import { mtpForward } from "../model/forward-mtp.ts";
import type { MtpAsk } from "./engine-runner-types.ts";
import type { StepEntry } from "./scheduler-types.ts";

/** Drafts from the model's multi-token-prediction block (the engine's `speculative` option; vLLM's `--speculative-config` names in comments). */
export interface MtpSpeculation {
  method: "mtp";
  /** Draft tokens per step at most (`num_speculative_tokens`): the block's prediction, then its own chained after it. */
  numTokens: number;
  /** No drafts while more than this many sequences run (`disable_by_batch_size`). Absent: drafts at any batch. */
  disableByBatchSize?: number;
}

/** What the step sampled: each entry's token, and at its draft rows (StepOutput.ids, draftIds). */
export interface StepSamples {
  ids: Int32Array;
  draftIds?: readonly (Int32Array | undefined)[];
}

/** Blocks reserved for chained drafts that each drafting sequence needs ({@link MtpAsk.tokens} a draft). */
export function mtpBlocksPerSequence(tokens: number, blockSize: number): number {
  return Math.ceil(Math.max(0, tokens - 1) / blockSize);
}

/**
 * Runs the block over the step's rows (writing its cache) and, for the entries that ask, their drafts.
 * `hidden`: the model's hidden state after its output norm at every row (forwardWithHidden `allHidden`).
 * Without `samples` (a step nobody reads: no entry samples) the pass is queued and nothing is read.
 */
export async function mtpPass(
  backend: Backend, model: DeviceModel, kv: PagedKv, entries: readonly StepEntry[], hidden: Tensor, ask: MtpAsk, samples?: StepSamples,
): Promise<(Int32Array | undefined)[] | undefined> {
  const rows: ForwardEntry[] = [];
  const sources: { entry: number; row: number; pos: number }[] = [];
  let offset = 0;
  entries.forEach((e, i) => {
    const n = e.tokens.length;
    const k = e.draft ?? 0;
    const drafted = samples?.draftIds?.[i];
    const next = e.sample ? samples?.ids[i] : ask.next[i];
    // Row j is fed token j + 1, and the last row what comes after the entry's tokens; a draft row what was sampled there.
    const tokens = e.tokens.map((_, j) => (j === n - 1 ? next ?? e.tokens[j] : drafted && j >= n - 1 - k ? drafted[j - (n - 1 - k)] : e.tokens[j + 1]));
    rows.push({ tokens, startPos: e.startPos, blockTable: e.blockTable });
    if (samples && e.sample && ask.draft[i]) {
      // The draft's kept tokens: the model's samples at its rows, up to the first that differs.
      let kept = 0;
      while (drafted && kept < k && drafted[kept] === e.tokens[n - k + kept]) kept++;
      const row = n - 1 - k + kept;
      sources.push({ entry: i, row: offset + row, pos: e.startPos + row });
    }
    offset += n;
  });
  const first = mtpForward(backend, model, kv, { entries: rows, hidden, rows: sources.map((s) => s.row) });
  if (!first) return undefined;
  const bs = kv.blockSize;
  const perSequence = mtpBlocksPerSequence(ask.tokens, bs);
  const reserved = kv.reserved ?? 0;
  if (perSequence > 0 && sources.length * perSequence > reserved) {
    backend.free(first.logits);
    backend.free(first.hidden);
    throw new RangeError(`A step drafts for ${sources.length} sequences from the multi-token-prediction block; its cache reserves blocks for ${Math.floor(reserved / perSequence)}`);
  }
  const picks: Tensor[] = [];
  let last = first;
  try {
    for (let j = 1; ; j++) {
      const ids = backend.argmax(last.logits);
      picks.push(ids);
      backend.free(last.logits);
      if (j >= ask.tokens) break;
      // One row a sequence, at the position after the last: the token just drafted, the block's own hidden state.
      const chained = sources.map((s, k) => ({ tokens: [0], startPos: s.pos + j, blockTable: tableFor(entries[s.entry].blockTable, s.pos + j, bs, kv.numBlocks - reserved + k * perSequence) }));
      const next = mtpForward(backend, model, kv, { entries: chained, hidden: last.hidden, rows: sources.map((_, k) => k), tokenIds: ids })!;
      backend.free(last.hidden);
      last = next;
    }
    const read = await Promise.all(picks.map((t) => backend.download(t) as Promise<Int32Array>));
    const out: (Int32Array | undefined)[] = new Array(entries.length);
    sources.forEach((s, k) => (out[s.entry] = Int32Array.from(read, (ids) => ids[k])));
    return out;
  } finally {
    backend.free(last.hidden);
    for (const t of picks) backend.free(t);
  }
}

/** `table`, with reserved blocks from `firstReserved` on for the positions up to `pos` it does not cover. */
function tableFor(table: readonly number[], pos: number, blockSize: number, firstReserved: number): readonly number[] {
  const need = Math.floor(pos / blockSize) + 1;
  if (table.length >= need) return table;
  return [...table, ...Array.from({ length: need - table.length }, (_, i) => firstReserved + i)];
}

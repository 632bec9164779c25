/**
 * Drafts from the model's own multi-token-prediction block (speculative method "mtp"; model/forward-mtp.ts),
 * or from an EAGLE head run as one (methods "eagle" and "eagle3"; model/forward-eagle.ts).
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
import type { LoadOptions } from "../model/weights.ts";
import type { MtpAsk } from "./engine-runner-types.ts";
import type { StepEntry } from "./scheduler-types.ts";

/**
 * Drafts from the model's multi-token-prediction block, or from an EAGLE head loaded beside it (the
 * engine's `speculative` option; vLLM's `--speculative-config` names in comments).
 */
export interface MtpSpeculation {
  /** "mtp": the model's own block; "eagle3" and "eagle": the head in `model` (model/eagle-head.ts). */
  method: "mtp" | "eagle" | "eagle3";
  /** The EAGLE head's directory (`model`; the loader attaches it, LoadOptions.eagle); absent for "mtp". */
  model?: string;
  /** Draft tokens per step at most (`num_speculative_tokens`): the block's prediction, then its own chained after it. */
  numTokens: number;
  /** No drafts while more than this many sequences run (`disable_by_batch_size`). Absent: drafts at any batch. */
  disableByBatchSize?: number;
  /**
   * How many tokens each sequence drafts (`num_speculative_tokens_schedule`): "heuristic" (default)
   * as a draft model's (draft-heuristic.ts: shorter after a draft not all taken, a pause after drafts
   * of one token rejected outright); "constant" always `numTokens`, as vLLM does.
   */
  schedule?: "heuristic" | "constant";
}

/** The methods whose drafts come from a block run after every step (this file), not from the host or a draft model. */
export const BLOCK_METHODS: readonly MtpSpeculation["method"][] = ["mtp", "eagle", "eagle3"];

/** True for a speculation setting whose drafts come from a block ({@link BLOCK_METHODS}). */
export function draftsFromBlock(s: { method: string } | undefined): s is MtpSpeculation {
  return s !== undefined && (BLOCK_METHODS as readonly string[]).includes(s.method);
}

/** What loading the model takes for a speculation setting's block: the model's own (LoadOptions.mtp) or an EAGLE head (LoadOptions.eagle). */
export function blockLoadOptions(s: { method: string; model?: string } | undefined): Pick<LoadOptions, "mtp" | "eagle"> {
  if (!draftsFromBlock(s)) return {};
  return s.method === "mtp" ? { mtp: true } : { eagle: { method: s.method, path: s.model! } };
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

/** The block's pass queued with the step, before its tokens are read (see {@link queueMtpPass}). */
export interface QueuedMtp {
  /** i32 [candidates]: the block's token at every candidate row (each drafting entry's draft rows and last row). */
  picks: Tensor;
  /** f32 [candidates, hidden]: the head's input at those rows, what a chained pass takes. */
  hidden: Tensor;
  /** Per drafting entry: its index, and where its candidates start in `picks`. */
  drafting: { entry: number; first: number }[];
}

/**
 * Queues the block's pass over the step's rows, writing its cache, and its tokens at the rows a
 * draft may start from: at a drafting entry's draft rows and last row, one of which will be its last
 * kept token's (known once the step's samples are read). The rows' tokens come from the entries and
 * `ask.next`, and the rows that sampled take their tokens from `sampled` (the step's sample, i32
 * [entries + draft rows], on the device), so the pass is queued before anything is read and its
 * candidates read with the step's tokens. `hidden`: the model's hidden state after its output norm at
 * every row (forwardWithHidden `allHidden`). Undefined where no entry drafts (then nothing is to read).
 */
export function queueMtpPass(
  backend: Backend, model: DeviceModel, kv: PagedKv, entries: readonly StepEntry[], hidden: Tensor, ask: MtpAsk, sampled?: Tensor,
): QueuedMtp | undefined {
  const n = entries.length;
  const rows: ForwardEntry[] = [];
  // Rows whose token the step sampled: flat row, and index into `sampled`.
  const patched: { row: number; from: number }[] = [];
  const candidates: number[] = [];
  const drafting: QueuedMtp["drafting"] = [];
  let offset = 0;
  let draftRow = n;
  entries.forEach((e, i) => {
    const len = e.tokens.length;
    const k = e.draft ?? 0;
    // Row j is fed token j + 1, the last row what comes after the entry's tokens: known, or sampled.
    rows.push({ tokens: e.tokens.map((_, j) => (j === len - 1 ? (e.sample ? 0 : ask.next[i] ?? e.tokens[j]) : e.tokens[j + 1])), startPos: e.startPos, blockTable: e.blockTable, ...slotOf(e) });
    if (sampled && e.sample) {
      for (let m = 0; m < k; m++) patched.push({ row: offset + len - 1 - k + m, from: draftRow + m });
      patched.push({ row: offset + len - 1, from: i });
      if (ask.draft[i]) {
        drafting.push({ entry: i, first: candidates.length });
        for (let m = 0; m <= k; m++) candidates.push(offset + len - 1 - k + m);
      }
    }
    draftRow += k;
    offset += len;
  });
  const embedded = patched.length > 0 ? embedRows(backend, model, rows, patched, sampled!) : undefined;
  try {
    const out = mtpForward(backend, model, kv, { entries: rows, hidden, rows: candidates, ...(embedded ? { embedded } : {}) });
    if (!out) return undefined;
    try {
      return { picks: backend.argmax(out.logits), hidden: out.hidden, drafting };
    } finally {
      backend.free(out.logits);
    }
  } finally {
    if (embedded) backend.free(embedded);
  }
}

/**
 * The rows' token embeddings: the entries' tokens, and at the `patched` rows the tokens the step
 * sampled (rows of `sampled`), on the device: each row takes one of two embeddings, weighted 1 and 0
 * (exact), so nothing larger than a row count crosses to the device.
 */
function embedRows(backend: Backend, model: DeviceModel, rows: readonly ForwardEntry[], patched: readonly { row: number; from: number }[], sampled: Tensor): Tensor {
  const table = model.weights.mtp?.embedding ?? model.weights.tokenEmbedding;
  const n = rows.reduce((a, r) => a + r.tokens.length, 0);
  const from = new Int32Array(n);
  const known = new Float32Array(n).fill(1);
  for (const p of patched) [from[p.row], known[p.row]] = [p.from, 0];
  const temps: Tensor[] = [];
  const keep = (t: Tensor) => (temps.push(t), t);
  try {
    const own = keep(backend.embedding(table, keep(backend.upload(Int32Array.from(rows.flatMap((r) => r.tokens)), [n]))));
    const drawn = keep(backend.gatherRows(keep(backend.embedding(table, sampled)), keep(backend.upload(from, [n]))));
    const ownPart = keep(backend.moeCombine(own, keep(backend.upload(known, [n, 1]))));
    const drawnPart = keep(backend.moeCombine(drawn, keep(backend.upload(known.map((k) => 1 - k), [n, 1]))));
    return backend.add(ownPart, drawnPart);
  } finally {
    for (const t of temps) backend.free(t);
  }
}

/**
 * Each drafting entry's draft, once the step's samples and the queued candidates' tokens are read:
 * the candidate at its last kept token's row, then `ask.tokens - 1` more chained from it (their
 * tokens on the device, read once at the end). Frees the queued tensors.
 */
export async function finishMtpPass(
  backend: Backend, model: DeviceModel, kv: PagedKv, entries: readonly StepEntry[], queued: QueuedMtp, picks: Int32Array, ask: MtpAsk, samples: StepSamples,
): Promise<(Int32Array | undefined)[]> {
  const out: (Int32Array | undefined)[] = new Array(entries.length);
  // An EAGLE-3 head with a vocabulary of its own picks its ids: the model's are looked up.
  const toModel = model.config.mtp?.eagle?.draftToTarget;
  const modelId = (id: number) => (toModel ? toModel[id] : id);
  const sources = queued.drafting.map(({ entry, first }) => {
    const e = entries[entry];
    const n = e.tokens.length, k = e.draft ?? 0;
    const drafted = samples.draftIds?.[entry];
    // The draft's kept tokens: the model's samples at its rows, up to the first that differs.
    let kept = 0;
    while (drafted && kept < k && drafted[kept] === e.tokens[n - k + kept]) kept++;
    return { entry, candidate: first + kept, pos: e.startPos + n - 1 - k + kept, pick: modelId(picks[first + kept]) };
  });
  if (ask.tokens <= 1 || sources.length === 0) {
    backend.free(queued.hidden);
    for (const s of sources) out[s.entry] = Int32Array.of(s.pick);
    return out;
  }
  const bs = kv.blockSize;
  const perSequence = mtpBlocksPerSequence(ask.tokens, bs);
  const reserved = kv.reserved ?? 0;
  if (sources.length * perSequence > reserved) {
    backend.free(queued.hidden);
    throw new RangeError(`A step drafts for ${sources.length} sequences from the multi-token-prediction block; its cache reserves blocks for ${Math.floor(reserved / perSequence)}`);
  }
  const chainedPicks: Tensor[] = [];
  let hidden = queued.hidden;
  try {
    const idx = backend.upload(Int32Array.from(sources, (s) => s.candidate), [sources.length]);
    try {
      hidden = backend.gatherRows(queued.hidden, idx);
    } finally {
      backend.free(idx);
      backend.free(queued.hidden);
    }
    let ids: Tensor | undefined;
    for (let j = 1; j < ask.tokens; j++) {
      // One row a sequence, at the position after the last: the token just drafted, the block's own hidden state.
      const chained = sources.map((s, k) => ({
        tokens: [s.pick], startPos: s.pos + j, blockTable: tableFor(entries[s.entry].blockTable, s.pos + j, bs, kv.numBlocks - reserved + k * perSequence), ...slotOf(entries[s.entry]),
      }));
      const next = mtpForward(backend, model, kv, { entries: chained, hidden, rows: sources.map((_, k) => k), ...(ids ? { tokenIds: ids } : {}) })!;
      backend.free(hidden);
      hidden = next.hidden;
      ids = backend.argmax(next.logits);
      backend.free(next.logits);
      chainedPicks.push(ids);
    }
    const read = await Promise.all(chainedPicks.map((t) => backend.download(t) as Promise<Int32Array>));
    sources.forEach((s, k) => (out[s.entry] = Int32Array.from([s.pick, ...read.map((r) => modelId(r[k]))])));
    return out;
  } finally {
    if (hidden !== queued.hidden) backend.free(hidden);
    for (const t of chainedPicks) backend.free(t);
  }
}

/**
 * The entry's state slot, which the step's plan checks where the model has windowed sliding layers
 * (the block's own layer is not one: the rings it plans are never read by the pass).
 */
function slotOf(e: ForwardEntry): Pick<ForwardEntry, "stateSlot"> {
  return e.stateSlot === undefined ? {} : { stateSlot: e.stateSlot };
}

/** `table`, with reserved blocks from `firstReserved` on for the positions up to `pos` it does not cover. */
function tableFor(table: readonly number[], pos: number, blockSize: number, firstReserved: number): readonly number[] {
  const need = Math.floor(pos / blockSize) + 1;
  if (table.length >= need) return table;
  return [...table, ...Array.from({ length: need - table.length }, (_, i) => firstReserved + i)];
}

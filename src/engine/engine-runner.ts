/**
 * Runs one scheduler step on a model: one ragged forward over the step's entries, then sampling
 * on the backend with each row's parameters and CPU-drawn uniform. The worker loop only sees the
 * `StepRunner` seam, so it can be driven by any backend (or a test double in unit tests).
 * The model runner also moves preempted KV to and from host memory for swap preemption, and whole
 * cached blocks out of and into the cache when a prefix moves between workers. The seam's types are
 * engine-runner-types.ts; the logits' per-row operations logit-rows.ts; where extra rows sit step-rows.ts.
 */
import { type Backend, numel, type SamplingRow, type Tensor } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { forwardWithHidden, type InputRows, type PagedKv, type RecurrentState, type StepLora } from "../model/forward.ts";
import { type DeviceLoraSet, freeLoraSet, uploadLoraSet } from "../model/lora-set.ts";
import { readSlots, slotsOf, writeSlots } from "./kv-copy.ts";
import { HostKvSwap, KvSwapError } from "./kv-swap.ts";
import { type TokenLogprob, tokenLogprob } from "./logprobs.ts";
import { GREEDY_ROW, type StepExtras, type StepOutput, type StepRunner } from "./engine-runner-types.ts";
import type { StepEntry } from "./scheduler-types.ts";
import { addToLogits, gatherLogitRows, maskLogitRows, penalizeRepeatRows } from "./logit-rows.ts";
import { lookaheadOf, runAhead } from "./run-ahead.ts";
import { StateSlots } from "./state-slots.ts";
import { ImageEmbeddings } from "./image-inputs.ts";
import { copyRecurrentSlot, copyStateSlot, type HostState, readStateSlot, writeStateSlot } from "./state-copy.ts";
import { finishMtpPass, queueMtpPass, type QueuedMtp } from "./mtp-drafts.ts";
import { draftRows, promptRows, readPromptLogprobs, splitDraftRows } from "./step-rows.ts";

export { GREEDY_ROW, type PromptLogprobAsk, type StepExtras, type StepOutput, type StepRunner } from "./engine-runner-types.ts";
export { addToLogits, maskLogitRows, penalizeRepeatRows } from "./logit-rows.ts";

/** A runner over a backend, an uploaded model and its paged KV cache. */
export function modelStepRunner(backend: Backend, model: DeviceModel, kv: PagedKv, release: () => void = () => {}): StepRunner {
  const host = new HostKvSwap(backend, kv);
  // Gated DeltaNet models: each running sequence's slot, then the checkpoints' (state-checkpoints.ts),
  // then the scratch slots drafted sequences' states wait in for their drafts' verdict.
  const slots = kv.state ? new StateSlots(kv.state.slots - (kv.state.checkpoints ?? 0) - (kv.state.scratch ?? 0)) : undefined;
  // The last step's drafted sequences, by sequence: the scratch slot holding their state from before it.
  const beforeDrafts = new Map<number, number>();
  // Swapped-out sequences' states on their way to (then in) host memory, by sequence.
  const swappedStates = new Map<number, Promise<HostState>>();
  // Images' embeddings, kept by key while their prompts may need them again (image-inputs.ts).
  const images = new ImageEmbeddings(backend, model.vision);
  let loras: DeviceLoraSet | undefined;
  // A replaced set is freed when the next step starts: the step in flight may still be using it.
  const retired: DeviceLoraSet[] = [];
  const freeRetired = () => {
    for (const set of retired.splice(0)) freeLoraSet(backend, set);
  };
  // `afterForward`: called with each forward's entries once it is queued (state checkpoints).
  const runStep = async <E extends StepEntry>(entries: readonly E[], rows: readonly SamplingRow[], extras?: StepExtras, afterForward?: (step: readonly E[]) => void): Promise<StepOutput> => {
    freeRetired();
    const lora = stepLora(loras, extras?.adapters);
    const ahead = lookaheadOf(entries, extras);
    // A multi-token-prediction block runs after every step, over every row's hidden state (mtp-drafts.ts).
    const mtp = extras?.mtp;
    if (mtp && !model.config.mtp) throw new RangeError("A step asks for multi-token-prediction drafts but the model has no such block loaded");
    // What the block reads: every row's normed state, or (an EAGLE-3 head) the states entering three layers.
    const aux = mtp ? model.config.mtp?.eagle?.auxLayers : undefined;
    const blockInput = { allHidden: mtp !== undefined && !aux, ...(aux ? { auxLayers: aux } : {}) };
    if (ahead > 0 && extras?.images?.some((x) => x)) throw new RangeError("A step whose entries look ahead cannot hold images");
    // The rows images take, made for this step and freed when it is done.
    const given = extras?.images ? images.stepRows(entries, extras.images) : undefined;
    const inputRows = given ? { inputRows: given.rows } : {};
    // Gemma 3's images attend to themselves both ways: their rows see the whole image.
    const seen = model.config.vision?.bidirectional && extras?.images ? entries.map((e, i) => (extras.images![i] ? { ...e, bidirectional: extras.images![i]!.map((im): [number, number] => [im.start, im.start + im.length]) } : e)) : entries;
    try {
      return await runForward(seen, rows, extras, afterForward, lora, ahead, mtp, blockInput, inputRows);
    } finally {
      given?.free();
    }
  };
  const runForward = async <E extends StepEntry>(
    entries: readonly E[], rows: readonly SamplingRow[], extras: StepExtras | undefined, afterForward: ((step: readonly E[]) => void) | undefined,
    lora: StepLora | undefined, ahead: number, mtp: StepExtras["mtp"], blockInput: { allHidden: boolean; auxLayers?: readonly number[] }, inputRows: { inputRows?: InputRows[] },
  ): Promise<StepOutput> => {
    if (ahead > 0) {
      // In a group the pass after each step only writes the block's cache (lookaheadOf refuses drafts there).
      const block = mtp && { input: blockInput, run: (step: readonly E[], input: Tensor, sampled: Tensor) => void queueMtpPass(backend, model, kv, step, input, mtp, sampled) };
      return runAhead(backend, model, kv, entries, rows, extras!.lookahead!, lora, extras!, afterForward, block || undefined);
    }
    const scored = promptRows(entries, extras?.promptLogprobs);
    const drafts = draftRows(entries, extras?.drafts);
    const extraRows = [...scored, ...drafts.rows];
    const hiddenRows = extras?.hidden ? entries.flatMap((_, i) => (extras.hidden![i] ? [i] : [])) : [];
    if (extras?.unread) {
      if (entries.some((e) => e.sample) || extraRows.length + hiddenRows.length > 0) throw new RangeError("A step nobody reads cannot sample, score prompt tokens or return hidden states");
      const out = forwardWithHidden(backend, model, kv, { entries, ...blockInput, ...inputRows, ...(lora ? { lora } : {}) });
      backend.free(out.logits);
      afterForward?.(entries);
      const input = out.auxHidden ?? out.allHidden;
      if (input) {
        try {
          // No entry samples, so none drafts: the pass only writes the block's cache.
          queueMtpPass(backend, model, kv, entries, input, mtp!);
        } finally {
          backend.free(input);
        }
      }
      return { ids: new Int32Array(entries.length) };
    }
    const out = forwardWithHidden(backend, model, kv, { entries, extraRows, hiddenRows, ...blockInput, ...inputRows, ...(lora ? { lora } : {}) });
    const input = out.auxHidden ?? out.allHidden;
    afterForward?.(entries);
    let logits = out.logits;
    let raw: Tensor | undefined;
    let promptLogprobs: (TokenLogprob[] | undefined)[] | undefined;
    let hidden: (Float32Array | undefined)[] | undefined;
    try {
      if (out.hidden) {
        const data = (await backend.download(out.hidden)) as Float32Array;
        const size = out.hidden.shape[1];
        hidden = new Array(entries.length);
        hiddenRows.forEach((i, k) => (hidden![i] = data.slice(k * size, (k + 1) * size)));
      }
      if (extraRows.length > 0) {
        // The prompt rows, then the draft rows follow the entries' last rows: read the prompt rows
        // out, then sample from the entries' rows and the draft rows.
        const all = logits;
        try {
          if (scored.length > 0) promptLogprobs = await readPromptLogprobs(backend, all, entries.length, scored.length, extras!.promptLogprobs!);
          const first = entries.length + scored.length;
          logits = gatherLogitRows(backend, all, [...entries.keys(), ...drafts.rows.map((_, k) => first + k)]);
        } finally {
          backend.free(all);
        }
      }
      // Rows: the entries', then the draft rows (draftRows' order). The raw rows are copied out
      // before the additions change them.
      const n = entries.length;
      const lpTop = [...entries.map((_, i) => extras?.logprobs?.[i]), ...drafts.entry.map((i) => extras?.logprobs?.[i])];
      const asking = lpTop.flatMap((top, row) => (top === undefined ? [] : [row]));
      if (asking.length > 0) raw = gatherLogitRows(backend, logits, asking);
      const perDraftRow = <T>(asks: readonly (readonly (T | undefined)[] | undefined)[] | undefined) => drafts.entry.map((i, k) => asks?.[i]?.[drafts.pos[k]]);
      penalizeRepeatRows(backend, logits, [...entries.map((_, i) => extras?.repeats?.[i]), ...perDraftRow(extras?.draftRepeats)]);
      addToLogits(backend, logits, [...entries.map((_, i) => extras?.additions?.[i]), ...perDraftRow(extras?.draftAdditions)]);
      maskLogitRows(backend, logits, [...entries.map((_, i) => extras?.masks?.[i]), ...perDraftRow(extras?.draftMasks)]);
      const idsT = backend.sample(logits, [...rows, ...drafts.sampling]);
      let all: Int32Array;
      // The block's pass is queued before the read: its candidate drafts are read with the step's tokens.
      let queued: QueuedMtp | undefined;
      let picks: Int32Array | undefined;
      try {
        queued = input ? queueMtpPass(backend, model, kv, entries, input, mtp!, idsT) : undefined;
        [all, picks] = await Promise.all([backend.download(idsT) as Promise<Int32Array>, queued && (backend.download(queued.picks) as Promise<Int32Array>)]);
      } catch (e) {
        if (queued) backend.free(queued.hidden);
        throw e;
      } finally {
        backend.free(idsT);
        if (queued) backend.free(queued.picks);
      }
      const ids = all.subarray(0, n);
      const draftIds = drafts.rows.length === 0 ? undefined : splitDraftRows(Array.from(all.subarray(n)), entries, (xs) => Int32Array.from(xs));
      const mtpDrafts = queued ? await finishMtpPass(backend, model, kv, entries, queued, picks!, mtp!, { ids, ...(draftIds ? { draftIds } : {}) }) : undefined;
      const more = { ...(promptLogprobs ? { promptLogprobs } : {}), ...(draftIds ? { draftIds } : {}), ...(hidden ? { hidden } : {}), ...(mtpDrafts ? { mtpDrafts } : {}) };
      if (!raw) return { ids, ...more };
      const data = (await backend.download(raw)) as Float32Array;
      const vocab = logits.shape[1];
      const rowLogprobs: (TokenLogprob | undefined)[] = new Array(lpTop.length);
      asking.forEach((row, k) => (rowLogprobs[row] = tokenLogprob(data.subarray(k * vocab, (k + 1) * vocab), all[row], lpTop[row]!)));
      const logprobs = rowLogprobs.slice(0, n);
      if (drafts.rows.length === 0 || asking[asking.length - 1] < n) return { ids, logprobs, ...more };
      const draftLogprobs = splitDraftRows(rowLogprobs.slice(n), entries, (xs) => (xs.every((x) => x !== undefined) ? xs as TokenLogprob[] : undefined));
      return { ids, logprobs, draftLogprobs, ...more };
    } finally {
      backend.free(logits);
      if (raw) backend.free(raw);
      if (out.hidden) backend.free(out.hidden);
      if (input) backend.free(input);
    }
  };
  return {
    // Blocks the cache reserves (chained drafts' positions past a sequence's blocks) are no table's.
    numBlocks: kv.numBlocks - (kv.reserved ?? 0),
    blockSize: kv.blockSize,
    kvDtype: kv.dtype ?? "f32",
    runsAhead: true,
    penalizesAhead: backend.penalizeSampled !== undefined,
    preparesKernelsLazily: backend.info.preparesKernelsLazily === true,
    async run(stepEntries, rows, extras) {
      if (!slots || !kv.state) return runStep(stepEntries, rows, extras);
      const state = kv.state;
      // A prompt resuming from a checkpoint starts from a copy of it in its own slot.
      for (const e of stepEntries) if (e.restore !== undefined) copyStateSlot(backend, state, slots.slots + e.restore, slots.claim(e.seqId), e.startPos);
      const entries = slots.assign(stepEntries);
      // A recurrent state runs through every draft token; kept from before the step, it is what a
      // sequence goes back to when its draft is not all taken (rollbackState).
      beforeDrafts.clear();
      const drafted = entries.filter((e) => (e.draft ?? 0) > 0);
      if (drafted.length > 0 && state.conv.length + state.ssm.length > 0) {
        const scratch = state.scratch ?? 0;
        if (drafted.length > scratch) throw new RangeError(`A step verifies drafts of ${drafted.length} sequences; this model's recurrent state keeps ${scratch} from before a draft`);
        const first = slots.slots + (state.checkpoints ?? 0);
        drafted.forEach((e, k) => {
          copyRecurrentSlot(backend, state, e.stateSlot, first + k);
          beforeDrafts.set(e.seqId, first + k);
        });
      }
      // Queued after each forward (a look-ahead group runs several): the states checkpoints keep.
      const keep = (step: readonly (StepEntry & { stateSlot: number })[]) => {
        for (const e of step) if (e.checkpoint?.after === e.startPos + e.tokens.length) copyStateSlot(backend, state, e.stateSlot, slots.slots + e.checkpoint.id, e.checkpoint.after);
      };
      try {
        return await runStep(entries, rows, extras, keep);
      } finally {
        slots.endStep();
      }
    },
    ...(slots && kv.state ? runnerStates(backend, kv.state, slots) : {}),
    ...(slots && kv.state?.scratch
      ? {
        rollbackState(seqId: number) {
          const from = beforeDrafts.get(seqId);
          const to = slots.slotOf(seqId);
          if (from === undefined || to === undefined) throw new RangeError(`Sequence ${seqId} verified no draft in the last step: there is no state to roll it back to`);
          copyRecurrentSlot(backend, kv.state!, from, to);
          beforeDrafts.delete(seqId);
        },
      }
      : {}),
    async swap(out, into) {
      for (const op of out) {
        host.save(op);
        // A sequence's recurrent state (or sliding windows) goes with its blocks, and its slot with it.
        const slot = slots?.slotOf(op.seqId);
        if (slots && kv.state && slot !== undefined) {
          const saved = readStateSlot(backend, kv.state, slot);
          saved.catch(() => {});
          swappedStates.set(op.seqId, saved);
          slots.release(op.seqId);
        }
      }
      for (const op of into) {
        await host.restore(op);
        if (!slots || !kv.state) continue;
        const saved = swappedStates.get(op.seqId);
        if (!saved) throw new KvSwapError(`No swapped state is held for sequence ${op.seqId}`);
        swappedStates.delete(op.seqId);
        writeStateSlot(backend, kv.state, slots.claim(op.seqId), await saved);
      }
    },
    discardSwap: (seqId) => {
      host.discard(seqId);
      swappedStates.delete(seqId);
    },
    readBlocks: (ids) => readSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize)),
    writeBlocks: (ids, data, from) => writeSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize), data, from * kv.blockSize),
    async draftGreedy(entries, steps) {
      freeRetired();
      const rows = entries.map(() => GREEDY_ROW);
      const out = await runAhead(backend, model, kv, entries, rows, Array.from({ length: steps - 1 }, () => rows), undefined);
      return entries.map((_, i) => Int32Array.from([out.ids[i], ...out.lookaheadIds![i]]));
    },
    setAdapters(adapters) {
      const next = adapters.some((a) => a !== undefined) ? uploadLoraSet(backend, model.config, adapters, model.weights.output !== undefined) : undefined;
      if (loras) retired.push(loras);
      loras = next;
    },
    close() {
      freeRetired();
      images.close();
      if (loras) freeLoraSet(backend, loras);
      loras = undefined;
      release();
    },
  };
}

/** A step's adapters: the set and every entry's slot, when some entry has one (undefined: the base model throughout). */
function stepLora(set: DeviceLoraSet | undefined, slots: readonly (number | undefined)[] | undefined): StepLora | undefined {
  if (!slots?.some((s) => s)) return undefined;
  if (!set) throw new RangeError("A step asks for LoRA adapters but none are loaded");
  return { set, slots: slots.map((s) => s ?? 0) };
}

/** What a runner of a model with recurrent state adds: its slots, its checkpoints, and their host copies. */
function runnerStates(
  backend: Backend, state: RecurrentState, slots: StateSlots,
): Pick<StepRunner, "endSequence" | "stateSlots" | "stateCheckpoints" | "stateScratch" | "readState" | "writeState" | "windowSizes" | "stateBytes"> {
  const w = state.window;
  const checkpoints = state.checkpoints ?? 0;
  const slotOf = (id: number) => {
    if (!Number.isInteger(id) || id < 0 || id >= checkpoints) throw new RangeError(`State checkpoint ${id} is not one of this runner's ${checkpoints}`);
    return slots.slots + id;
  };
  return {
    endSequence: (seqId: number) => slots.release(seqId),
    stateSlots: slots.slots,
    stateCheckpoints: checkpoints,
    ...(state.scratch ? { stateScratch: state.scratch } : {}),
    stateBytes: [...state.conv, ...state.ssm].reduce((a, t) => a + 4 * numel(t.shape), 0) +
      [...(w?.k ?? []), ...(w?.v ?? [])].reduce((a, t) => a + (t.dtype === "f16" ? 2 : t.dtype === "f32" ? 4 : 36 / 32) * numel(t.shape), 0),
    ...(w ? { windowSizes: w.k.flatMap((k) => [w.checkpointBlocks * k.shape[1] * k.shape[2] * k.shape[3], w.checkpointBlocks * k.shape[1] * k.shape[2] * k.shape[3]]) } : {}),
    readState: (id) => readStateSlot(backend, state, slotOf(id)),
    writeState: (id, host) => writeStateSlot(backend, state, slotOf(id), host),
  };
}

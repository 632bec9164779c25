/**
 * Speculative decoding with a draft model (vLLM's `"method": "draft_model"`): a smaller model with the
 * target's vocabulary proposes the next k tokens greedily, and the engine verifies them in one target
 * step, keeping only what the target itself samples (engine.ts `verifyDraft`), so outputs are those of
 * decoding one token a step, greedy or seeded.
 *
 * The draft model keeps its own paged KV cache, a cache in the plain sense: nothing depends on what it
 * holds. Each sequence's draft KV follows the tokens it was computed for; on the next proposal the
 * part that still agrees with the sequence (the accepted draft tokens included) is kept and the rest
 * recomputed. A finished sequence's draft KV stays until its blocks are needed, and a new sequence
 * starts from the one sharing its longest prefix: an agent's next turn re-sends the last turn's
 * context, so the draft computes only the new tool result and instructions, as the target's prefix
 * cache does.
 */
import { type LoadedModel, ModelLoadError } from "../model/config.ts";
import { loadModel } from "../model/load.ts";
import type { LoadOptions } from "../model/weights.ts";
import { GREEDY_ROW, type StepRunner } from "./engine-runner.ts";
import type { StepEntry } from "./scheduler-types.ts";
import { type AcceptanceCounts, DraftLengthTuner } from "./draft-schedule.ts";
import { HeuristicDraftLength } from "./draft-heuristic.ts";

/** Draft-model speculation (the engine's `speculative` option; vLLM's `--speculative-config` names in comments). */
export interface DraftModelSpeculation {
  method: "draft_model";
  /** The draft model: a GGUF file or a Hugging Face directory, read where the engine runs (`model`). */
  model: string;
  /** Draft tokens per step at most (`num_speculative_tokens`). */
  numTokens: number;
  /** No drafts while more than this many sequences run (`disable_by_batch_size`). Absent: drafts at any batch. */
  disableByBatchSize?: number;
  /**
   * How many tokens each sequence drafts (`num_speculative_tokens_schedule`, Hugging Face's
   * `num_assistant_tokens_schedule`): "heuristic" (default) starts at `numTokens`, adds 2 after a
   * draft accepted whole and takes 1 off after one that was not (1 at least), and after a draft of
   * one token rejected outright, pauses that sequence's drafts for 1, 2, 4 … 16 steps; "constant"
   * always drafts `numTokens` (vLLM's behaviour); "cost" drafts, each round, the length (0 to
   * `numTokens`) of most expected tokens per second from measured acceptance and step times
   * (draft-schedule.ts).
   */
  schedule?: "heuristic" | "constant" | "cost";
}

/** A draft model that cannot serve a target: names both files and what differs. */
export class DraftModelError extends RangeError {
  override name = "DraftModelError";
}

/** Prompt tokens the draft computes per sequence in one forward while it catches up. */
const CATCH_UP_CHUNK = 512;


/**
 * Throws DraftModelError unless `draft` reads and writes the same token ids as `target`: the same
 * vocabulary size and the same string for every token (control tokens included). Embedding tables
 * padded past the vocabulary may differ in size.
 */
export function checkDraftVocabulary(target: LoadedModel, draft: LoadedModel): void {
  const t = target.tokenizer, d = draft.tokenizer;
  const names = `draft model "${draft.source}" and model "${target.source}"`;
  if (t.vocabSize !== d.vocabSize) throw new DraftModelError(`The ${names} have different vocabularies: ${d.vocabSize} and ${t.vocabSize} tokens`);
  const text = (tok: LoadedModel["tokenizer"], id: number) => (tok.tokenText ? tok.tokenText(id, { special: true }) : tok.decode([id], { special: true }));
  for (let id = 0; id < t.vocabSize; id++) {
    const a = text(d, id), b = text(t, id);
    if (a !== b) throw new DraftModelError(`The ${names} have different vocabularies: token ${id} is ${JSON.stringify(a)} in the draft and ${JSON.stringify(b)} in the model`);
  }
}

/** Loads the draft model a speculation names and checks it against `target` (ModelLoadError or DraftModelError). */
export async function loadDraftModel(spec: DraftModelSpeculation, target: LoadedModel, options: LoadOptions = {}): Promise<LoadedModel> {
  let draft: LoadedModel;
  try {
    draft = await loadModel(spec.model, options);
  } catch (e) {
    throw new ModelLoadError(`The speculative draft model cannot be loaded: ${e instanceof Error ? e.message : String(e)}`);
  }
  checkDraftVocabulary(target, draft);
  return draft;
}

/** A sequence that wants a draft: its tokens so far and how many draft tokens it may take. */
export interface DraftWant {
  seqId: number;
  tokens: readonly number[];
  limit: number;
}

/** One sequence's draft KV: the blocks and the tokens whose KV they hold, from position 0. */
interface DraftState {
  blocks: number[];
  fed: number[];
  /** The proposal round that last used it (eviction takes the oldest first). */
  used: number;
  /** Draft length the heuristic schedule allows next, and its pause (the other schedules: its length is the most). */
  length: HeuristicDraftLength;
  /** Its recent acceptance (the "cost" schedule). */
  acceptance?: AcceptanceCounts;
}

/** A sequence drafting this round: what it asked, its state, and its draft so far. */
interface LiveDraft {
  want: DraftWant;
  st: DraftState;
  draft: number[];
}

/** Proposes drafts with a draft model's step runner (see the module comment). */
export class DraftModelProposer {
  private readonly states = new Map<number, DraftState>();
  /** States of finished sequences, kept for a later sequence that continues one. */
  private readonly idle = new Set<DraftState>();
  private readonly free: number[];
  private round = 0;
  /** The "cost" schedule's measurements (undefined under the others). */
  private readonly tuner: DraftLengthTuner | undefined;

  /**
   * @param runner the draft model's step runner, with its own KV cache
   * @param targetVocab the target's embedding rows: a draft token past them ends the draft
   * @param contextLength the draft model's context: drafts stop short of it (no drafts for sequences
   *   past it, as in vLLM): positions it never learned would make poor guesses
   * @param now milliseconds, to time the draft model's forwards (the "cost" schedule)
   */
  constructor(
    private readonly runner: StepRunner,
    private readonly targetVocab: number,
    private readonly contextLength = Infinity,
    private readonly schedule: Required<Pick<DraftModelSpeculation, "numTokens" | "schedule">> = { numTokens: Infinity, schedule: "constant" },
    private readonly now: () => number = () => performance.now(),
  ) {
    this.free = Array.from({ length: runner.numBlocks }, (_, i) => runner.numBlocks - 1 - i);
    this.tuner = schedule.schedule === "cost" ? new DraftLengthTuner({ maxTokens: schedule.numTokens }) : undefined;
  }

  /**
   * A target step of `entries` in `seconds`: under the "cost" schedule, one of decodes only (draft
   * rows included) measures what a draft token costs to verify; the others schedules take nothing.
   */
  observeTargetStep(entries: readonly StepEntry[], seconds: number): void {
    if (!this.tuner || entries.some((e) => e.prefill)) return;
    this.tuner.observeTarget(entries.reduce((n, e) => n + e.tokens.length, 0), seconds);
  }

  /**
   * Up to `limit` greedy draft tokens per sequence (fewer or none where the draft's KV cache has no
   * room for it). Runs one draft forward per draft token, after catching each sequence's draft KV up;
   * with a runner that can (StepRunner.draftGreedy), all of them on the device before one read, every
   * sequence drafting as many as the longest asks (the extra tokens are its own greedy continuation,
   * kept as draft KV). A failed forward forgets the draft KV of the sequences in it and throws.
   */
  async propose(wants: readonly DraftWant[]): Promise<Map<number, number[]>> {
    const round = ++this.round;
    const bs = this.runner.blockSize;
    const asking: { want: DraftWant; st: DraftState }[] = [];
    const eligible = wants.filter((w) => w.limit > 0 && w.tokens.length > 0).map((w) => ({ w, st: this.stateOf(w.seqId, w.tokens) }));
    const tuner = this.tuner;
    // The "cost" schedule: one length for the round, as the drafts run chained together.
    const roundLength = tuner ? tuner.length(eligible.map(({ st }) => tuner.acceptance(st.acceptance))) : Infinity;
    for (const { w, st } of eligible) {
      st.used = round;
      if (!st.length.drafts()) continue;
      // Positions past the draft model's context are not drafted: its last fed one is tokens + limit - 2.
      const want = { ...w, limit: Math.min(w.limit, st.length.k, roundLength, this.contextLength + 1 - w.tokens.length) };
      if (want.limit <= 0) continue;
      // Kept: the fed tokens that still agree, short of the last (its row samples the first draft token).
      st.fed.length = Math.min(commonPrefix(st.fed, want.tokens), want.tokens.length - 1);
      asking.push({ want, st });
    }
    const chained = this.runner.draftGreedy !== undefined && asking.length > 0;
    const steps = Math.max(0, ...asking.map((a) => a.want.limit));
    const live: LiveDraft[] = [];
    for (const { want, st } of asking) {
      const drafted = chained ? steps : want.limit;
      if (this.reserve(st, Math.ceil((want.tokens.length + drafted - 1) / bs), round)) live.push({ want, st, draft: [] });
    }
    const out = new Map<number, number[]>();
    if (live.length === 0) return out;
    try {
      // Catch up in chunks, then the forward whose rows sample each sequence's first draft token.
      for (;;) {
        const lagging = live.filter(({ want, st }) => want.tokens.length - st.fed.length > CATCH_UP_CHUNK);
        if (lagging.length === 0) break;
        await this.run(lagging.map(({ want, st }) => this.entry(want.seqId, st, want.tokens.slice(st.fed.length, st.fed.length + CATCH_UP_CHUNK), false)));
        for (const { want, st } of lagging) st.fed.push(...want.tokens.slice(st.fed.length, st.fed.length + CATCH_UP_CHUNK));
      }
      const first = live.map(({ want, st }) => this.entry(want.seqId, st, want.tokens.slice(st.fed.length), true));
      const t0 = this.now();
      const forwards = chained ? (await this.draftChained(live, first, steps), steps) : await this.draftStepwise(live, first);
      this.tuner?.observeDraft(forwards, (this.now() - t0) / 1000);
    } catch (e) {
      // Their draft KV may be half written: forgotten, so nothing relies on it.
      for (const { want } of live) this.drop(want.seqId);
      throw e;
    }
    for (const { want, draft } of live) {
      const end = draft.findIndex((t) => t >= this.targetVocab || t < 0);
      out.set(want.seqId, end < 0 ? draft : draft.slice(0, end));
    }
    return out;
  }

  /**
   * How the target verified the sequence's last draft: `accepted` of its `drafted` tokens. Moves the
   * sequence's draft length as the schedule says (DraftModelSpeculation.schedule), or under "cost"
   * its measured acceptance.
   */
  observe(seqId: number, drafted: number, accepted: number): void {
    const st = this.states.get(seqId);
    if (!st || drafted === 0 || this.schedule.schedule === "constant") return;
    if (this.tuner) {
      st.acceptance = this.tuner.observeAcceptance(st.acceptance, drafted, accepted);
      return;
    }
    st.length.observe(drafted, accepted);
  }

  /** All draft tokens on the device, read once (StepRunner.draftGreedy); every sequence feeds `steps - 1` of them. */
  private async draftChained(live: LiveDraft[], first: StepEntry[], steps: number): Promise<void> {
    const all = await this.runner.draftGreedy!(first, steps);
    live.forEach((l, i) => {
      const drafted = Array.from(all[i]);
      l.st.fed.push(...l.want.tokens.slice(l.st.fed.length), ...drafted.slice(0, steps - 1));
      l.draft.push(...drafted.slice(0, l.want.limit));
    });
  }

  /**
   * One forward and one read per draft token; a sequence stops at its limit or at a token past the
   * target's vocabulary. Returns the forwards run.
   */
  private async draftStepwise(live: LiveDraft[], first: StepEntry[]): Promise<number> {
    let ids = await this.run(first);
    live.forEach((l, i) => {
      l.st.fed.push(...l.want.tokens.slice(l.st.fed.length));
      l.draft.push(ids[i]);
    });
    for (let k = 1; ; k++) {
      const going = live.filter((l) => l.want.limit > k && l.draft[k - 1] < this.targetVocab);
      if (going.length === 0) return k;
      ids = await this.run(going.map(({ want, st, draft }) => this.entry(want.seqId, st, [draft[k - 1]], true)));
      going.forEach((l, i) => {
        l.st.fed.push(l.draft[k - 1]);
        l.draft.push(ids[i]);
      });
    }
  }

  /** The sequence ended: its draft KV stays for a sequence that continues it, until the blocks are needed. */
  release(seqId: number): void {
    const st = this.states.get(seqId);
    if (!st) return;
    this.states.delete(seqId);
    if (st.fed.length > 0) this.idle.add(st);
    else this.free.push(...st.blocks);
  }

  /** Releases the draft model's device memory. */
  close(): void {
    this.runner.close();
  }

  private async run(entries: StepEntry[]): Promise<Int32Array> {
    return (await this.runner.run(entries, entries.map(() => GREEDY_ROW))).ids;
  }

  private entry(seqId: number, st: DraftState, tokens: number[], sample: boolean): StepEntry {
    return { seqId, tokens, startPos: st.fed.length, blockTable: st.blocks, sample, prefill: tokens.length > 1 || !sample };
  }

  /** The sequence's state; a new one adopts the idle state sharing the longest prefix with `tokens`. */
  private stateOf(seqId: number, tokens: readonly number[]): DraftState {
    let st = this.states.get(seqId);
    if (st) return st;
    let best: DraftState | undefined, bestLen = 0;
    for (const s of this.idle) {
      const n = commonPrefix(s.fed, tokens);
      if (n > bestLen) [best, bestLen] = [s, n];
    }
    if (best) this.idle.delete(best);
    st = best ?? { blocks: [], fed: [], used: 0, length: new HeuristicDraftLength(this.schedule.numTokens) };
    this.states.set(seqId, st);
    return st;
  }

  /**
   * Gives `st` `need` blocks at least (a longer table is kept), taking idle states' blocks, then
   * those of sequences not drafting this round, oldest first; false when even that is not enough.
   */
  private reserve(st: DraftState, need: number, round: number): boolean {
    while (st.blocks.length < need) {
      const b = this.free.pop() ?? this.reclaim(round);
      if (b === undefined) return false;
      st.blocks.push(b);
    }
    return true;
  }

  /** Frees the blocks of the oldest idle state, else of the least recently drafting sequence; one of them is returned. */
  private reclaim(round: number): number | undefined {
    let victim: DraftState | undefined;
    for (const s of this.idle) if (!victim || s.used < victim.used) victim = s;
    if (victim) this.idle.delete(victim);
    else {
      let id: number | undefined;
      for (const [k, s] of this.states) if (s.used < round && s.blocks.length > 0 && (!victim || s.used < victim.used)) [victim, id] = [s, k];
      if (!victim) return undefined;
      this.states.delete(id!);
    }
    this.free.push(...victim.blocks);
    return this.free.pop();
  }

  private drop(seqId: number): void {
    const st = this.states.get(seqId);
    if (!st) return;
    this.states.delete(seqId);
    this.free.push(...st.blocks);
  }
}

/** Length of the common prefix of two token lists. */
function commonPrefix(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

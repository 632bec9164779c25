/**
 * Speculative decoding inside the engine: proposes each request's next draft (n-gram, suffix or a
 * draft model's; EngineOptions.speculative), cuts it where it could not be verified, and keeps the
 * prefix of a verified draft that the model's own samples agree with.
 */
import type { EngineMetrics } from "./engine-metrics.ts";
import type { EngineOptions } from "./engine-options.ts";
import { type Active, jumpsForward, speculates } from "./engine-request.ts";
import { verifiableDraftLength } from "./draft-extras.ts";
import { DraftModelProposer } from "./draft-model.ts";
import { HeuristicDraftLength } from "./draft-heuristic.ts";
import { draftsFromBlock } from "./mtp-drafts.ts";
import { checkSpeculation, ngramDraft } from "./ngram-draft.ts";
import type { Scheduler } from "./scheduler.ts";
import type { StepEntry } from "./scheduler-types.ts";
import { SuffixCache } from "./suffix-draft.ts";

/** One engine's drafting: its suffix cache or draft model, and the drafts' counters in EngineMetrics. */
export class EngineDrafts {
  /** Earlier outputs, for suffix drafts (`speculative.method` "suffix"; undefined otherwise). */
  private readonly suffixes: SuffixCache | undefined;
  /** The draft model's proposer (`speculative.method` "draft_model"; undefined otherwise). */
  private readonly drafter: DraftModelProposer | undefined;
  /** Each sequence's draft length under the "heuristic" schedule of the multi-token-prediction block's drafts. */
  private readonly mtpLengths = new Map<number, HeuristicDraftLength>();

  /**
   * Throws a RangeError for a speculation the options cannot serve.
   * @param opts the engine's options (read: `speculative`, `draft`, `jumpForward`, `config.vocabSize`)
   * @param active the engine's requests by sequence id
   * @param wanted sequences whose next draft the draft model proposes at the end of this step
   */
  constructor(
    private readonly opts: Pick<EngineOptions, "speculative" | "draft" | "jumpForward" | "config">,
    private readonly active: ReadonlyMap<number, Active>,
    private readonly wanted: Set<number>,
    private readonly scheduler: Scheduler,
    private readonly metrics: EngineMetrics,
    private readonly maxModelLen: number,
    now: () => number,
  ) {
    if (opts.speculative) checkSpeculation(opts.speculative);
    if (opts.speculative?.method === "suffix") this.suffixes = new SuffixCache(opts.speculative.maxCachedRequests);
    if (opts.speculative?.method === "draft_model") {
      if (!opts.draft) throw new RangeError(`Speculative method "draft_model" needs the draft model's runner (engine-factory.ts builds it from "${opts.speculative.model}")`);
      const { numTokens, schedule } = opts.speculative;
      this.drafter = new DraftModelProposer(opts.draft.runner, opts.config.vocabSize, opts.draft.contextLength, { numTokens, schedule: schedule ?? "heuristic" }, now);
    }
  }

  /** Whether the draft model has drafts to propose at the end of this step ({@link proposeFromModel}). */
  get pending(): boolean {
    return this.wanted.size > 0;
  }

  /**
   * Proposes the request's next draft: as many n-gram or suffix draft tokens as its budget and the context
   * leave room for, and its grammar allows; none while the batch is larger than `disableByBatchSize`.
   */
  propose(a: Active): void {
    const seq = a.seq;
    if (this.scheduler.numRunning > (this.opts.speculative!.disableByBatchSize ?? Infinity)) return;
    const spec = this.opts.speculative!;
    if (spec.method === "draft_model") {
      this.wanted.add(seq.id);
      return;
    }
    // The model's multi-token-prediction block (or an EAGLE head) drafts in the step itself (offerMtp).
    if (draftsFromBlock(spec)) return;
    const room = this.draftRoom(a);
    // A salted request neither drafts from other requests' outputs nor leaves its own for them: how
    // often drafts are accepted would tell one tenant about another's text, as cache hits would.
    const shared = a.req.cacheSalt === undefined;
    this.offerDraft(a, spec.method === "suffix" ? this.suffixes!.draft(seq.tokens, spec, room, shared) : ngramDraft(seq.tokens, spec, room));
  }

  /**
   * The draft model's drafts for the sequences that asked this step, in one batch (draft-model.ts).
   * Its own KV cache only: a draft that cannot be had is no draft, and the request decodes as usual.
   */
  async proposeFromModel(): Promise<void> {
    const wants = [...this.wanted].flatMap((id) => {
      const a = this.active.get(id);
      return a && !a.done && a.seq.status === "running" ? [{ seqId: id, tokens: a.seq.tokens, limit: this.draftRoom(a) }] : [];
    });
    this.wanted.clear();
    let drafts: Map<number, number[]>;
    try {
      drafts = await this.drafter!.propose(wants);
    } catch {
      // No drafts this step; the requests decode as usual. Counted, so a failing draft model shows.
      this.metrics.stepErrors++;
      return;
    }
    for (const [id, draft] of drafts) {
      const a = this.active.get(id);
      // A request cancelled or preempted while the draft model ran takes no draft.
      if (a && !a.done && a.seq.status === "running") this.offerDraft(a, draft);
    }
  }

  /**
   * Whether the request takes a draft from the multi-token-prediction block's pass after this step
   * (MtpAsk.draft): it speculates, and the batch is within `disableByBatchSize`.
   */
  wantsMtp(a: Active): boolean {
    const spec = this.opts.speculative;
    if (!draftsFromBlock(spec) || !speculates(a) || this.scheduler.numRunning > (spec.disableByBatchSize ?? Infinity) || this.draftRoom(a) <= 0) return false;
    return this.mtpLength(a.seq.id)?.drafts() ?? true;
  }

  /** A sequence not drafting from the block through `steps` steps of a group counts them against its pause (heuristic schedule). */
  skippedMtp(a: Active, steps: number): void {
    this.mtpLength(a.seq.id)?.skip(steps);
  }

  /** Offers the multi-token-prediction block's draft (StepOutput.mtpDrafts) to a request still decoding, cut as any draft is. */
  offerMtp(a: Active, draft: Int32Array): void {
    if (a.done || a.seq.status !== "running") return;
    const k = Math.min(this.draftRoom(a), this.mtpLength(a.seq.id)?.k ?? Infinity);
    this.offerDraft(a, Array.from(draft.subarray(0, Math.max(0, k))));
  }

  /** The sequence's heuristic draft length (undefined under the "constant" schedule). */
  private mtpLength(seqId: number): HeuristicDraftLength | undefined {
    const spec = this.opts.speculative;
    if (!draftsFromBlock(spec) || spec.schedule === "constant") return undefined;
    let length = this.mtpLengths.get(seqId);
    if (!length) this.mtpLengths.set(seqId, length = new HeuristicDraftLength(spec.numTokens));
    return length;
  }

  /**
   * Keeps the longest prefix of `draft` that agrees with the tokens sampled at its rows, and returns
   * the token sampled after it (at the first disagreement, or after the whole draft). Each row sampled
   * from the model given the tokens before it, so what is kept is what decoding one token a step
   * would have produced; the uniforms of the rows past the kept ones are drawn again later.
   */
  verify(seqId: number, draft: readonly number[], samples: Int32Array, last: number, accepted: Map<number, readonly number[]>): number {
    let kept = 0;
    while (kept < draft.length && samples[kept] === draft[kept]) kept++;
    accepted.set(seqId, draft.slice(0, kept));
    this.drafter?.observe(seqId, draft.length, kept);
    this.mtpLengths.get(seqId)?.observe(draft.length, kept);
    this.active.get(seqId)!.rng.rewind(draft.length - kept);
    this.metrics.specDrafts++;
    this.metrics.specDraftTokens += draft.length;
    this.metrics.specAcceptedTokens += kept;
    const perPos = this.metrics.specAcceptedPerPos;
    for (let i = 0; i < kept; i++) perPos[i] = (perPos[i] ?? 0) + 1;
    return kept < draft.length ? samples[kept] : last;
  }

  /** A target step of `entries` took `seconds`: what a draft token costs to verify, for a schedule that weighs it (draft-schedule.ts). */
  observeTargetStep(entries: readonly StepEntry[], seconds: number): void {
    this.drafter?.observeTargetStep(entries, seconds);
  }

  /** Keeps a finishing request's output for suffix drafts (a cancelled one's as far as it got; a salted or embedding one's never). */
  keepOutput(a: Active): void {
    if (this.suffixes && !a.req.embed && a.req.cacheSalt === undefined) this.suffixes.add(a.seq.outputTokens);
  }

  /** Forgets a finished sequence's draft KV and draft length. */
  release(seqId: number): void {
    this.drafter?.release(seqId);
    this.mtpLengths.delete(seqId);
  }

  /** Releases the draft model's device memory. */
  close(): void {
    this.drafter?.close();
  }

  /** Draft tokens the request may take now: its budget and the context leave room for them and the token after. */
  private draftRoom(a: Active): number {
    return Math.min(this.opts.speculative!.numTokens, a.maxTokens - a.seq.numOutput - 1, this.maxModelLen - a.seq.tokens.length - 1);
  }

  /** Proposes `found` to the scheduler, cut at the first EOS and where the request's grammar stops verifying. */
  private offerDraft(a: Active, found: number[]): void {
    const seq = a.seq;
    // Rows after an EOS would verify tokens the request never keeps (it ends at the EOS). Agent
    // contexts hold EOS tokens (a chat template's end-of-turn), so copied drafts often cross one.
    const eos = found.findIndex((t) => a.ends.includes(t));
    if (eos >= 0) found = found.slice(0, eos + 1);
    const draft = found.slice(0, verifiableDraftLength(a, found, jumpsForward(a, this.opts.jumpForward)));
    if (draft.length > 0) this.scheduler.propose(seq.id, draft);
  }
}

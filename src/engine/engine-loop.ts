/**
 * The worker loop of one engine: plans a step with the scheduler, runs it on the model, files each
 * entry's samples (draft verification, log probabilities, embeddings), commits them and streams the
 * tokens (engine-output.ts), then sleeps when there is nothing to run. A failure of one request's own
 * work ends that request; a failed forward ends its step's; a throw outside both ends every request.
 */
import type { BlockPool, SessionTracker } from "../../kv/index.ts";
import type { EngineDrafts } from "./engine-drafts.ts";
import type { EngineMetrics } from "./engine-metrics.ts";
import type { EngineOptions } from "./engine-options.ts";
import type { EngineOutput } from "./engine-output.ts";
import { type Active, aheadExtras, keepPromptLogprobs, runsAhead, samplingRow, stepExtras } from "./engine-request.ts";
import type { MtpAsk, StepExtras, StepOutput } from "./engine-runner-types.ts";
import { stepLogprobs } from "./draft-extras.ts";
import type { HandoffTails } from "./handoff-tails.ts";
import type { HostKvOffload } from "./kv-offload.ts";
import { draftsFromBlock } from "./mtp-drafts.ts";
import type { Scheduler } from "./scheduler.ts";
import type { StepPlan } from "./scheduler-types.ts";
import type { AutoStepMixing } from "./step-mixing-auto.ts";
import { type StepRecord, stepShapeOf } from "./step-record.ts";

/** EngineOptions.multiStepWindowMs's default. */
export const DEFAULT_MULTI_STEP_WINDOW_MS = 100;

/** Lets I/O callbacks run between steps (a CPU backend's forward never yields on its own). */
const yieldToEventLoop = (): Promise<void> => {
  // setImmediate runs after pending I/O without setTimeout's 1 ms clamp; Deno and Node both have it.
  const immediate = (globalThis as { setImmediate?: (fn: () => void) => unknown }).setImmediate;
  return new Promise<void>((r) => (immediate ? immediate(r) : setTimeout(r, 0)));
};

/** An error's "name: message", as a result's `error` carries it. */
export function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** What the loop drives; the engine's own parts, shared by reference. */
export interface StepLoopParts {
  /** The engine's requests by sequence id. */
  active: Map<number, Active>;
  scheduler: Scheduler;
  pool: BlockPool;
  metrics: EngineMetrics;
  output: EngineOutput;
  drafts: EngineDrafts;
  /** Hand-off blocks held between a prefill's end and its decode's admission. */
  tails: HandoffTails;
  /** The host KV tier (undefined: none). */
  offload: HostKvOffload | undefined;
  /** Agent retention's sessions, for the host tier's prefetches (undefined under "lru"). */
  sessions: SessionTracker | undefined;
  /** Re-decides the step mixing from measured steps (undefined: autoStepMixing off). */
  mixing: AutoStepMixing | undefined;
  /** Read when used: `runner`, `onStep`, `schedulerSteps`, `multiStepWindowMs`. */
  opts: Pick<EngineOptions, "runner" | "onStep" | "schedulerSteps" | "multiStepWindowMs" | "speculative">;
  /** Context limit (prompt + output) of every request. */
  maxModelLen: number;
  /** Milliseconds on a monotonic clock. */
  now: () => number;
  /** Whether the engine is stopping: the loop ends once no request is left. */
  stopped: () => boolean;
  /** Ends one request whose own host-side work threw (its grammar's mask, its text). */
  fail: (id: number, e: unknown) => void;
  /** Run at the top of each turn, before it plans, where no planned step is yet to run (recurrent states moved here: state-import.ts). */
  beforeSchedule?: () => void;
}

/** One engine's worker loop, started on demand and restarted after a failure. */
export class StepLoop {
  private wakeUp: (() => void) | undefined;
  /** Seconds a decode-only forward takes (an EWMA; a group's read shared among its steps); undefined before one ran. */
  private decodeStepS: number | undefined;
  private loopDone: Promise<void> | undefined;

  constructor(private readonly parts: StepLoopParts) {}

  /** Starts the loop (idempotent). */
  start(): void {
    this.loopDone ??= this.loop().catch((e) => this.loopFailed(e));
  }

  /** Ends the loop's idle wait, if it is in one (new work, or a prefetch to re-time). */
  wake(): void {
    this.wakeUp?.();
  }

  /** Settles when the loop in flight ends (undefined: none runs). */
  get running(): Promise<void> | undefined {
    return this.loopDone;
  }

  private async loop(): Promise<void> {
    const { active, scheduler, metrics, output, drafts, now } = this.parts;
    // End of the last step's work, before its yield (undefined after an idle wait): back to back, each
    // step's cycle runs from there, so the cycles of a busy stretch tile its time.
    let tMark: number | undefined;
    while (!this.parts.stopped() || active.size > 0) {
      const tIter = tMark ?? now();
      this.parts.offload?.beforeStep(this.parts.pool, scheduler.waitingSequences, this.parts.sessions, now() / 1000);
      try {
        this.parts.beforeSchedule?.();
      } catch {
        // A state that failed to write is not kept: the prompts it would have resumed compute more.
        metrics.stepErrors++;
      }
      const plan = scheduler.schedule();
      for (const id of plan.truncated) output.finishById(id, "length");
      // A preempted sequence computes again from position 0: its recurrent state slot (if any) goes back.
      // One swapped out keeps it until the runner has read it to the host with its blocks (runner.swap).
      const swapped = new Set(plan.swapOut.map((op) => op.seqId));
      for (const id of plan.preempted) if (!swapped.has(id)) this.parts.opts.runner.endSequence?.(id);
      const moved = plan.preempted.length + plan.truncated.length > 0;
      if (plan.entries.length === 0) {
        // A step that only preempted or truncated changed the state: plan again instead of sleeping.
        if (plan.swapOut.length > 0) await this.swapKv(plan).catch(() => metrics.stepErrors++);
        if (moved) continue;
        if (this.parts.stopped()) break;
        await this.sleep();
        this.wakeUp = undefined;
        tMark = undefined;
        continue;
      }
      const tPlanned = now();
      let stepTokens = 0;
      for (const e of plan.entries) {
        stepTokens += e.tokens.length;
        const a = active.get(e.seqId);
        if (a && a.tScheduled === undefined) a.tScheduled = tPlanned;
      }
      // The draft block's ask first: a step any sequence takes a block draft from runs alone.
      const mtp = this.mtpAsk(plan);
      const ahead = this.lookahead(plan, mtp);
      metrics.stepsRunAhead += ahead;
      if (ahead > 0 && mtp) for (const e of plan.entries) drafts.skippedMtp(active.get(e.seqId)!, ahead);
      for (let j = 0; j <= ahead; j++) metrics.iterationTokens.observe(stepTokens);
      // A draft's rows draw their uniforms before the entry's own row, in the order of the positions they sample.
      const draftRows = plan.entries.map((e) => (e.draft ? Array.from({ length: e.draft }, () => samplingRow(active.get(e.seqId)!, true)) : undefined));
      const rows = plan.entries.map((e) => samplingRow(active.get(e.seqId)!, e.sample));
      const asked = stepExtras(plan.entries.map((e) => active.get(e.seqId)!), plan.entries, (i, err) => this.parts.fail(plan.entries[i].seqId, err));
      // Each further step's rows, drawn after the first's: a request's uniforms come in the order of its tokens.
      const aheadRows = Array.from({ length: ahead }, () => plan.entries.map((e) => samplingRow(active.get(e.seqId)!, true)));
      const withMtp = mtp ? { ...asked, mtp } : asked;
      const extras = draftRows.some((d) => d) ? { ...withMtp, drafts: draftRows } : ahead > 0 ? { ...withMtp, lookahead: aheadRows, ...aheadExtras(plan.entries.map((e) => active.get(e.seqId)!), ahead) } : this.unread(plan, asked) ? { ...withMtp, unread: true } : withMtp;
      let sampled: StepOutput | undefined;
      let error: string | undefined;
      const records: StepRecord[] = [];
      try {
        await this.swapKv(plan);
        const t0 = now();
        sampled = await this.parts.opts.runner.run(plan.entries, rows, extras);
        // Steps run ahead share the time evenly: one read for all of them.
        const seconds = (now() - t0) / 1000 / (ahead + 1);
        if (plan.numPrefillTokens === 0) this.decodeStepS = this.decodeStepS === undefined ? seconds : 0.8 * this.decodeStepS + 0.2 * seconds;
        // What a draft token costs to verify, for a schedule that weighs it (draft-schedule.ts).
        if (ahead === 0) drafts.observeTargetStep(plan.entries, seconds);
        const mixing = this.parts.mixing;
        if (this.parts.opts.onStep || mixing) {
          for (let j = 0; j <= ahead; j++) {
            const shape = stepShapeOf(j === 0 ? plan.entries : plan.entries.map((e) => ({ ...e, startPos: e.startPos + j })));
            const record: StepRecord = { ...shape, seconds, startS: t0 / 1000 + j * seconds };
            records.push(record);
            if (mixing) scheduler.stepMixing = mixing.observe(record);
          }
        }
      } catch (e) {
        error = errorText(e);
        metrics.stepErrors++;
        for (const entry of plan.entries) scheduler.abort(entry.seqId);
      }
      const tokens = new Map<number, number>();
      const accepted = new Map<number, readonly number[]>();
      plan.entries.forEach((e, i) => {
        const a = active.get(e.seqId);
        // A request cancelled mid-step (or failed) is finished at the commit; its row is not read.
        if (!a || a.seq.abortRequested) return;
        try {
          if (sampled?.promptLogprobs) keepPromptLogprobs(a, e.startPos, sampled.promptLogprobs[i]);
          if (!sampled || !e.sample) return;
          if (sampled.hidden?.[i]) a.embedding = sampled.hidden[i];
          const more = e.lookahead ? sampled.lookaheadIds![i] : undefined;
          if (more) {
            // The steps run ahead fed all but the last token sampled; that one is pending, as any sample is.
            tokens.set(e.seqId, more[more.length - 1]);
            accepted.set(e.seqId, [sampled.ids[i], ...more.subarray(0, more.length - 1)]);
            const first = sampled.logprobs?.[i];
            if (first) a.pendingLogprobs = [first, ...sampled.lookaheadLogprobs![i]!];
            return;
          }
          tokens.set(e.seqId, e.draft ? drafts.verify(e.seqId, e.tokens.slice(-e.draft), sampled.draftIds![i]!, sampled.ids[i], accepted) : sampled.ids[i]);
          const lps = stepLogprobs(sampled, i, accepted.get(e.seqId)?.length ?? 0);
          if (lps) a.pendingLogprobs = lps;
        } catch (err) {
          this.parts.fail(e.seqId, err);
        }
      });
      const runner = this.parts.opts.runner;
      const advanced = scheduler.commit(plan, tokens, accepted, runner.rollbackState ? (id) => runner.rollbackState!(id) : undefined);
      for (const seq of advanced) {
        try {
          output.onTokens(seq, 1 + (accepted.get(seq.id)?.length ?? 0));
        } catch (err) {
          this.parts.fail(seq.id, err);
        }
      }
      for (const e of plan.entries) {
        const a = active.get(e.seqId);
        if (a && !a.done && a.seq.status === "finished") output.finish(a, a.seq.finishReason ?? "abort", error);
      }
      // The multi-token-prediction block's drafts, for the sequences' next steps.
      sampled?.mtpDrafts?.forEach((draft, i) => {
        const a = draft && active.get(plan.entries[i].seqId);
        if (a) drafts.offerMtp(a, draft);
      });
      if (drafts.pending) await drafts.proposeFromModel();
      // Reported once the step's tokens are out, with the loop's own time (the last yield, planning,
      // committing, streaming) in cycleSeconds; before the yield, so a request's last step is counted
      // by the time its caller resumes.
      tMark = now();
      for (const record of records) this.reportStep({ ...record, cycleSeconds: (tMark - tIter) / 1000 / records.length });
      await yieldToEventLoop();
    }
  }

  /**
   * The loop threw outside a step's forward and one request's work (a bug, or the device's error
   * while copying KV): every request ends with the error instead of hanging, their blocks go back,
   * and the next submit starts a fresh loop. Never rejects (an unhandled rejection ends a process).
   */
  private loopFailed(e: unknown): void {
    const { active, scheduler } = this.parts;
    this.parts.metrics.stepErrors++;
    const error = errorText(e);
    this.wakeUp = undefined;
    this.loopDone = undefined;
    try {
      scheduler.abandonStep();
    } catch { /* its sequences are finished below */ }
    for (const a of [...active.values()]) {
      a.error ??= error;
      try {
        scheduler.finish(a.seq.id, "abort");
      } catch { /* the request still ends */ }
      this.parts.output.finish(a, "abort");
    }
  }

  /**
   * How many steps past its sample the plan runs before reading its tokens (multi-step decoding,
   * EngineOptions.schedulerSteps; 0: none), with the blocks for them taken. Only a plan of plain
   * decodes (runsAhead) looks ahead, and only while nothing waits that could be admitted: a request
   * that arrives meanwhile waits for the whole group, which is kept within `multiStepWindowMs` of
   * measured decode steps. While waiting requests cannot get in before a running one ends (every
   * running slot taken, or too few KV blocks: Scheduler.admitsNone), the steps look ahead (one that
   * ends mid-group frees its slot and blocks at the group's end, within the window). Never past a request's token budget or the context.
   */
  private lookahead(plan: StepPlan, mtp: MtpAsk | undefined): number {
    const { opts, scheduler, active, maxModelLen } = this.parts;
    const steps = opts.schedulerSteps ?? 1;
    // With speculation too: a step of plain decodes has no draft to verify (e.draft below), and drafts
    // are proposed again after the group from all its tokens. A draft block (mtp, EAGLE) runs after
    // each of the group's steps, writing its cache; a step a sequence takes a draft from runs alone.
    if (steps <= 1 || !opts.runner.runsAhead || mtp?.draft.some((d) => d)) return 0;
    if ((scheduler.waitingSequences.length > 0 && !scheduler.admitsNone) || plan.swapIn.length + plan.swapOut.length > 0) return 0;
    const windowS = (opts.multiStepWindowMs ?? DEFAULT_MULTI_STEP_WINDOW_MS) / 1000;
    const fit = this.decodeStepS === undefined ? steps : Math.floor(windowS / this.decodeStepS);
    let k = Math.min(steps, fit) - 1;
    for (const e of plan.entries) {
      const a = active.get(e.seqId);
      // A first token comes alone (a hand-off's is fed as a decode): it is the request's time to first token.
      if (!a || e.prefill || !e.sample || e.draft || e.tokens.length !== 1 || a.seq.numOutput === 0 || !runsAhead(a, opts.runner.penalizesAhead)) return 0;
      const length = a.seq.tokens.length;
      k = Math.min(k, a.maxTokens - (length - a.seq.promptLength) - 1, maxModelLen - length - 1);
    }
    return k > 0 ? scheduler.lookAhead(plan, k) : 0;
  }

  /**
   * What the multi-token-prediction block's pass after the plan's step does (speculative method
   * "mtp"; undefined otherwise): which sequences take a draft from it, and each prompt chunk's next
   * token (the block at a row takes the token after it).
   */
  private mtpAsk(plan: StepPlan): MtpAsk | undefined {
    const { opts, active, drafts } = this.parts;
    const spec = opts.speculative;
    if (!draftsFromBlock(spec)) return undefined;
    return {
      tokens: spec.numTokens,
      draft: plan.entries.map((e) => {
        const a = active.get(e.seqId);
        return a !== undefined && e.sample && drafts.wantsMtp(a);
      }),
      next: plan.entries.map((e) => (e.sample ? undefined : active.get(e.seqId)?.seq.tokens[e.startPos + e.tokens.length])),
    };
  }

  /**
   * Whether nobody reads the plan's step: none of its entries samples (prompt chunks before their
   * last) and none scores prompt tokens. Its forward is queued without waiting for it (under Deno a
   * read costs a 10 ms poll, a long prompt's every chunk paid one), unless its time is measured
   * (the step hook, `--step-mixing auto`): a step's time is its forward's end.
   */
  private unread(plan: StepPlan, asked: StepExtras | undefined): boolean {
    if (this.parts.opts.onStep || this.parts.mixing || plan.swapOut.length + plan.swapIn.length > 0) return false;
    return plan.entries.every((e) => !e.sample) && !asked?.promptLogprobs?.some((p) => p !== undefined);
  }

  /** Hands a step's record to the step hook; a hook that throws (its log's disk full) is counted, and serving goes on. */
  private reportStep(record: StepRecord): void {
    try {
      this.parts.opts.onStep?.(record);
    } catch {
      this.parts.metrics.stepErrors++;
    }
  }

  /** Waits for a request, or until a host-tier prefetch is due. */
  private sleep(): Promise<void> {
    const { tails, offload, sessions, now } = this.parts;
    // A hand-off block nobody came for is let go once its TTL is out, idle or not.
    tails.prune();
    return new Promise<void>((resolve) => {
      const prefetchMs = sessions && offload?.nextPrefetchMs(sessions, now() / 1000);
      const tailS = tails.secondsToExpiry();
      const waits = [prefetchMs, tailS === undefined ? undefined : tailS * 1000 + 1].filter((x): x is number => x !== undefined);
      const ms = waits.length > 0 ? Math.min(...waits) : undefined;
      const timer = ms === undefined ? undefined : setTimeout(() => this.wakeUp?.(), ms);
      this.wakeUp = () => {
        if (timer !== undefined) clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Runs the plan's KV copies to and from host memory before its forward. */
  private async swapKv(plan: StepPlan): Promise<void> {
    if (plan.swapOut.length + plan.swapIn.length === 0) return;
    await this.parts.opts.runner.swap!(plan.swapOut, plan.swapIn);
  }
}

/**
 * A request's output and its end: streams the tokens each step gives it as deltas, appends what its
 * grammar forces (jump-forward), ends it at EOS, a stop string, its token budget or the context, and
 * finishes it (flushes held-back text, releases its KV and drafts, resolves its result, counts it).
 */
import type { EngineDrafts } from "./engine-drafts.ts";
import type { EngineMetrics } from "./engine-metrics.ts";
import type { EngineOptions } from "./engine-options.ts";
import { type Active, jumpsForward, resultOf, speculates } from "./engine-request.ts";
import type { EngineSessions } from "./engine-sessions.ts";
import type { HostKvOffload } from "./kv-offload.ts";
import type { Scheduler } from "./scheduler.ts";
import type { FinishReason, Sequence } from "./sequence.ts";

/** What {@link EngineOutput} streams to and releases; the engine's own parts, shared by reference. */
export interface EngineOutputParts {
  /** The engine's requests by sequence id (a finished one is deleted). */
  active: Map<number, Active>;
  scheduler: Scheduler;
  metrics: EngineMetrics;
  drafts: EngineDrafts;
  /** Agent retention's session turns (undefined under "lru"). */
  turns: EngineSessions | undefined;
  /** The host KV tier (undefined: none). */
  offload: HostKvOffload | undefined;
  /** Read when used: `runner` (its swapped KV), `jumpForward`, `speculative`. */
  opts: Pick<EngineOptions, "runner" | "jumpForward" | "speculative">;
  /** Milliseconds on a monotonic clock. */
  now: () => number;
  maxModelLen: number;
  /** Tokens per KV block (a turn's end is remembered by its last full block: engine-sessions.ts). */
  blockSize: number;
}

/** The output side of one engine's requests. */
export class EngineOutput {
  constructor(private readonly parts: EngineOutputParts) {}

  /**
   * Streams the `count` tokens a step appended to `seq` (more than one when it accepted draft
   * tokens) as one delta, and ends the request at the first of them that ends it (EOS, a stop string,
   * the token budget or the context), dropping those after it. Then proposes the next draft.
   */
  onTokens(seq: Sequence, count: number): void {
    const { metrics } = this.parts;
    const a = this.parts.active.get(seq.id);
    if (!a || a.done) return;
    const start = seq.tokens.length - count;
    // The log probabilities the step computed for its tokens (kept with the request's others).
    const pending = a.pendingLogprobs;
    const lps = pending?.length === count && pending.every((lp, k) => lp.id === seq.tokens[start + k]) ? pending : undefined;
    a.pendingLogprobs = undefined;
    const t = this.parts.now();
    if (start === seq.promptLength) {
      a.tFirst = t;
      metrics.ttft.observe((t - a.t0) / 1000);
    } else {
      // Tokens that come together (accepted drafts, steps run ahead) count a gap each, of a share of the wait.
      for (let k = 0; k < count; k++) metrics.itl.observe((t - a.tLast) / 1000 / count);
    }
    a.tLast = t;
    if (a.req.embed && !a.req.prefillOnly) {
      // An embedding request ends at its prompt's last row: the token sampled there is dropped. (A
      // prefill handed to another worker ends as any other; the decode worker computes that row.)
      seq.truncate(seq.promptLength);
      return this.finish(a, "stop");
    }
    if (seq.status === "finished") {
      if (lps) a.logprobs?.push(...lps);
      metrics.generationTokens += count;
      return; // prefill role: the first token ends the sequence here
    }
    const first = start === seq.promptLength ? { cachedTokens: seq.numCachedPrompt, ...(a.promptLogprobs ? { promptLogprobs: a.promptLogprobs } : {}) } : {};
    let text = "";
    const ids: number[] = [];
    let eos = false;
    for (let k = 0; k < count; k++) {
      const tok = seq.tokens[start + k];
      metrics.generationTokens++;
      if (a.ends.includes(tok)) {
        seq.truncate(start + k + 1);
        eos = true;
        break;
      }
      text += a.text.push(tok);
      ids.push(tok);
      const end = start + k + 1;
      if (a.text.stopped || this.spent(a, end)) {
        seq.truncate(end);
        break;
      }
    }
    // Those of the tokens kept, an EOS that ended the request included (resultOf leaves it out).
    if (lps) a.logprobs?.push(...lps.slice(0, seq.tokens.length - start));
    if (ids.length > 0) a.queue.push({ text, tokenIds: ids, ...(lps ? { logprobs: lps.slice(0, ids.length) } : {}), ...first });
    if (eos) return this.finish(a, "stop");
    if (this.endIfDone(a)) return;
    this.jumpForward(a);
    if (!a.done && this.parts.opts.speculative && speculates(a)) this.parts.drafts.propose(a);
  }

  /** Finishes the request with sequence id `id`, if it is still active. */
  finishById(id: number, reason: FinishReason): void {
    const a = this.parts.active.get(id);
    if (a) this.finish(a, reason);
  }

  /**
   * Ends the request (once): flushes its held-back text unless aborted, ends its session's turn,
   * releases its sequence, swapped KV and draft KV, closes its stream and resolves its result.
   */
  finish(a: Active, reason: FinishReason, error?: string): void {
    if (a.done) return;
    const { turns, offload, scheduler, metrics } = this.parts;
    a.done = true;
    if (reason !== "abort") {
      const rest = a.text.flush();
      if (rest) a.queue.push({ text: rest, tokenIds: [] });
    }
    // The turn is over; unless the server says it waits on a tool, the session goes idle. Set before
    // the blocks are released so the policy ranks them with the session's new status.
    if (a.sessionId !== undefined) {
      turns?.ended(a.sessionId, this.parts.now() / 1000);
      turns?.rememberEnd(a.sessionId, a.seq.tokens, a.seq.promptLength, this.parts.blockSize, a.seq.hints.cacheRoot);
      offload?.turnEnded(a.sessionId, a.seq.tokens, a.seq.hints.cacheRoot);
    }
    // Suffix drafts come from earlier outputs too; a cancelled one is kept as far as it got.
    this.parts.drafts.keepOutput(a);
    scheduler.finish(a.seq.id, reason);
    this.parts.opts.runner.discardSwap?.(a.seq.id);
    this.parts.opts.runner.endSequence?.(a.seq.id);
    this.parts.drafts.release(a.seq.id);
    this.parts.active.delete(a.seq.id);
    a.queue.close();
    const result = resultOf(a, reason, error ?? a.error);
    metrics.countFinish(result.error ? "error" : reason);
    const e2eS = (this.parts.now() - a.t0) / 1000;
    metrics.e2e.observe(e2eS);
    metrics.observeRequest(result, e2eS, a.maxTokens);
    a.resolve(result);
  }

  /** Ends the request when a stop string matched or its token budget or the context is spent; whether it did. */
  private endIfDone(a: Active): boolean {
    if (a.text.stopped) this.finish(a, "stop");
    else if (this.spent(a, a.seq.tokens.length)) this.finish(a, "length");
    return a.done;
  }

  /** Whether `length` tokens of the request's sequence spend its token budget or the context. */
  private spent(a: Active, length: number): boolean {
    return length - a.seq.promptLength >= a.maxTokens || length >= this.parts.maxModelLen;
  }

  /**
   * Appends the tokens the request's grammar forces next, unsampled (EngineOptions.jumpForward), and
   * streams them as one delta; the next step computes them as one chunk. Not for a request asking
   * for log probabilities: these tokens have none from the model.
   */
  private jumpForward(a: Active): void {
    if (!a.constraint || !jumpsForward(a, this.parts.opts.jumpForward)) return;
    const seq = a.seq;
    const forced = a.constraint.forced(seq.tokens, seq.promptLength, Math.min(a.maxTokens - seq.numOutput, this.parts.maxModelLen - seq.tokens.length));
    if (forced.length === 0) return;
    let text = "";
    const ids: number[] = [];
    for (const tok of forced) {
      text += a.text.push(tok);
      ids.push(tok);
      if (a.text.stopped) break;
    }
    this.parts.scheduler.extend(seq.id, ids);
    this.parts.metrics.generationTokens += ids.length;
    this.parts.metrics.jumpForwardTokens += ids.length;
    a.queue.push({ text, tokenIds: ids });
    this.endIfDone(a);
  }
}

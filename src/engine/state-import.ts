/**
 * Recurrent state moved between workers with a cached prefix (PrefixKv.state). A model with Gated
 * DeltaNet, short convolution or Mamba-2 layers resumes a prefix only from a state checkpoint
 * (state-checkpoints.ts), so a prefix pulled from a peer or handed over by a prefill worker brings the
 * sender's checkpoint within it: {@link exportState} reads it as the blocks are read, and
 * {@link StateImports} writes it into a checkpoint of the receiver's. The write waits for the worker
 * loop's next turn, before it plans (StepLoop `beforeSchedule`): between a plan and its forward, a
 * checkpoint the plan restores from could otherwise be taken for it.
 */
import type { StepRunner } from "./engine-runner-types.ts";
import type { PrefixKv } from "./prefix-transfer.ts";
import { PrefixTransferError } from "./prefix-transfer.ts";
import type { HostState } from "./state-copy.ts";
import type { StateCheckpoints } from "./state-checkpoints.ts";

/**
 * The state of the longest written checkpoint of namespace `root` within the first `maxTokens` of
 * `tokens`, read to the host (queued at once, so no later step's write over it reaches the read);
 * undefined without one, or without a runner that reads states.
 */
export function exportState(
  checkpoints: StateCheckpoints | undefined, runner: StepRunner, tokens: readonly number[], maxTokens: number, root: number | null,
): Promise<PrefixKv["state"]> | undefined {
  if (!checkpoints || !runner.readState) return undefined;
  const cp = checkpoints.longest(tokens, maxTokens, root);
  if (cp === undefined) return undefined;
  return runner.readState(cp.id).then((values) => ({ tokens: cp.length, values }));
}

/** A state to write into a checkpoint, and what it follows. */
interface PendingState {
  tokens: number[];
  root: number | null;
  sessionId: string | undefined;
  values: HostState;
}

/**
 * States moved here, waiting for the worker loop's next turn to become checkpoints. A batch's
 * checkpoints are held while it is written (one written later cannot take an earlier one's place), then
 * `applied` runs (the scheduler's waiting prompts hold those they would resume from), then they are let
 * go: one no waiting prompt wants is an ordinary checkpoint from then on.
 */
export class StateImports {
  #pending: PendingState[] = [];
  /** States written into checkpoints, and those dropped (a checkpoint already held the same tokens, or every one was pending). */
  written = 0;
  dropped = 0;

  /**
   * `shapes`: this model's state tensors less their slot dimension (kv-cache.ts `stateShapes`), and
   * the values of each ring where the sliding layers keep only their windows (StepRunner.windowSizes).
   */
  constructor(
    private readonly checkpoints: StateCheckpoints, private readonly runner: StepRunner, private readonly shapes: { conv: number[][]; ssm: number[][]; window?: readonly number[] },
    private readonly applied?: () => void,
  ) {}

  /**
   * Queues `prefix.state` (if any) to become a checkpoint ranked as `sessionId`'s; a
   * PrefixTransferError, queueing nothing, where it does not fit this model or the prefix.
   */
  queue(prefix: PrefixKv, sessionId?: string): boolean {
    const s = prefix.state;
    if (s === undefined) return false;
    const bs = this.checkpoints.blockSize;
    if (!Number.isInteger(s.tokens) || s.tokens <= 0 || s.tokens % bs !== 0 || s.tokens > prefix.tokens.length) {
      throw new PrefixTransferError(`A recurrent state after ${s.tokens} tokens does not fit a prefix of ${prefix.tokens.length} tokens in blocks of ${bs}`);
    }
    this.check(s.values);
    this.#pending.push({ tokens: prefix.tokens.slice(0, s.tokens), root: prefix.root ?? null, sessionId, values: s.values });
    return true;
  }

  private check(values: HostState): void {
    const fits = (got: unknown, shapes: number[][]) =>
      Array.isArray(got) && got.length === shapes.length && shapes.every((shape, i) => got[i] instanceof Float32Array && got[i].length === shape.reduce((a, d) => a * d, 1));
    if (!fits(values?.conv, this.shapes.conv) || !fits(values?.ssm, this.shapes.ssm)) {
      const sizes = (xs: number[][]) => xs.map((x) => x.reduce((a, d) => a * d, 1)).join(", ");
      throw new PrefixTransferError(`The recurrent state sent does not fit this model's: convolution states of [${sizes(this.shapes.conv)}] values and delta rule or scan states of [${sizes(this.shapes.ssm)}] expected`);
    }
    const window = this.shapes.window ?? [];
    const got: unknown = values.window ?? [];
    if (!Array.isArray(got) || got.length !== window.length || window.some((n, i) => !(got[i] instanceof Float32Array) || got[i].length !== n)) {
      throw new PrefixTransferError(`The sliding layers' windows sent do not fit this model's: ${window.length === 0 ? "none" : `rings of [${window.join(", ")}] values`} expected`);
    }
  }

  /** Writes every queued state into a checkpoint (call where no planned step is yet to run); how many were written. */
  apply(): number {
    const pending = this.#pending;
    this.#pending = [];
    let n = 0;
    let failed: unknown;
    const batch: (() => void)[] = [];
    try {
      for (const p of pending) {
        const id = this.checkpoints.reserve(p.tokens, p.sessionId, p.root);
        if (id === undefined) {
          this.dropped++;
          continue;
        }
        try {
          this.runner.writeState!(id, p.values);
          this.checkpoints.settle(id);
          batch.push(this.checkpoints.hold(id));
          n++;
        } catch (e) {
          // The device's error: that checkpoint goes, the others are still written; the first error is thrown after.
          this.checkpoints.drop(id);
          this.dropped++;
          failed ??= e;
        }
      }
      if (n > 0) this.applied?.();
    } finally {
      for (const release of batch) release();
    }
    this.written += n;
    if (failed !== undefined) throw failed;
    return n;
  }
}

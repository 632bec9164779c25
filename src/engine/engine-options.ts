/** What an engine (engine.ts) is built from and how it behaves. */
import type { ModelConfig, Tokenizer } from "../model/config.ts";
import type { StepRunner } from "./engine-runner.ts";
import type { KvRetention } from "./engine-sessions.ts";
import type { Speculation } from "./ngram-draft.ts";
import type { SchedulerConfig } from "./scheduler-types.ts";
import type { AutoStepMixingOptions } from "./step-mixing-auto.ts";
import type { StepRecord } from "./step-record.ts";

/** How to build an engine. */
export interface EngineOptions {
  runner: StepRunner;
  config: ModelConfig;
  tokenizer: Tokenizer;
  scheduler?: Partial<SchedulerConfig>;
  /** Context limit (prompt + output); defaults to the model's, capped by the KV pool. */
  maxModelLen?: number;
  /** Waiting requests at most before `submit` refuses with EngineOverloadedError. */
  maxWaiting?: number;
  /** Milliseconds on a monotonic clock. */
  now?: () => number;
  workerId?: string;
  /** Called after every forward step with its shape and measured time (the simulator's step-log format). */
  onStep?: (record: StepRecord) => void;
  /** Re-decide `scheduler.stepMixing` online from the measured steps (step-mixing-auto.ts; default off). */
  autoStepMixing?: boolean | AutoStepMixingOptions;
  /**
   * Which cached KV blocks go first when memory runs short: "agent" (default; expected benefit per
   * byte, keeping sessions that wait on a tool call — kv/agent-retention.ts, the simulator's policy)
   * or "lru" (vLLM's automatic prefix caching).
   */
  kvRetention?: KvRetention;
  /** Seconds a session that is not running is remembered ("agent" retention; default 3600). */
  sessionTtlS?: number;
  /**
   * Jump-forward decoding (default true): text a request's output grammar forces next (a literal, the
   * one key left, `<tool_call>\n`) is appended without sampling it, all but its last token, and
   * computed in one step (OutputConstraint.forced). Off for requests asking for log probabilities.
   */
  jumpForward?: boolean;
  /**
   * Speculative decoding (default off): each decode step also verifies up to `numTokens` draft tokens
   * (copied from where the context's last n tokens occurred before, ngram-draft.ts; from earlier
   * outputs, suffix-draft.ts; or a draft model's greedy guesses, draft-model.ts) and keeps those the
   * model's own samples agree with, so a seed gives the same tokens either way.
   */
  speculative?: Speculation;
  /**
   * Multi-step decoding (vLLM's `--num-scheduler-steps`; default 1: off; `createEngine` takes 4 on
   * WebGPU): a step of plain decodes
   * (engine-request.ts `runsAhead`) runs up to this many forward steps, each fed the token the one
   * before sampled on the device, and reads their tokens back once (run-ahead.ts); the tokens are
   * those of one-token steps. Only while nothing waits to be admitted; with `speculative`, only for a
   * step in which no sequence verifies a draft (n-gram and suffix drafts come only where the context
   * repeats itself; a draft model's, every step).
   */
  schedulerSteps?: number;
  /**
   * The longest a group of steps run ahead may take, in milliseconds of measured decode steps (default
   * 100): a request arriving meanwhile waits for the group, so where one decode step takes s ms a group
   * holds at most floor(window / s) steps (one where a step takes longer than the window). Before any
   * decode step is measured, `schedulerSteps` stands.
   */
  multiStepWindowMs?: number;
  /**
   * The draft model for `speculative.method` "draft_model": its step runner, over its own KV cache,
   * and the context it was trained for (engine-factory.ts builds it; the engine closes it when it stops).
   */
  draft?: { runner: StepRunner; contextLength: number };
  /** Blocks of host memory that evicted cached KV moves to, and comes back from (default 0: dropped). */
  kvOffloadBlocks?: number;
  /**
   * State checkpoints kept in host memory once the device's are taken for others (state-offload.ts), for
   * a model whose state is not in its KV blocks (default 0: a taken checkpoint is lost).
   */
  hostStateCheckpoints?: number;
}

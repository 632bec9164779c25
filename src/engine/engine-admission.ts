/**
 * A request's way into the engine: the checks `Engine.submit` and `Engine.checkRequest` run on it
 * (prompt tokens, sampling, output grammar, reasoning budget, LoRA adapter), each a typed client
 * error thrown before anything is queued, and the per-request state a checked request starts with.
 */
import { checkImages } from "./image-inputs.ts";
import type { ModelConfig, Tokenizer } from "../model/config.ts";
import { tokenTextOf } from "../model/config.ts";
import type { AdapterSlot, EngineAdapters } from "./engine-adapters.ts";
import type { Active } from "./engine-request.ts";
import { OutputText } from "./engine-text.ts";
import { type GenerateRequest, type GenerateResult, outputBudget, RequestParamError, type StreamDelta } from "./engine-types.ts";
import { AsyncQueue } from "./events.ts";
import { AFTER_THINK } from "./grammar.ts";
import { nestsTooDeeply, SchemaError } from "./json-schema.ts";
import { checkSamplingRequest, LogitAdjuster } from "./logit-adjust.ts";
import { OutputConstraint, TokenMask, TokenTrie } from "./output-constraint.ts";
import { BudgetMasks } from "./reasoning-budget.ts";
import { RepeatTracker } from "./repeat-penalty.ts";
import { seededUniforms } from "./sampler-rng.ts";
import type { SchedulerConfig } from "./scheduler-types.ts";
import type { Sequence } from "./sequence.ts";
import { TokenRules } from "./token-rules.ts";

/** Bytes of f32 logits that one step's prompt log probabilities may take (on the device and downloaded). */
const PROMPT_LOGPROB_BYTES = 128 * 2 ** 20;

/**
 * Scored prompt tokens per step: 128 MiB of logit rows (220 at a 151,936-token vocabulary, where a
 * 2048-token chunk would be 1.2 GB), never fewer than 16.
 */
export function promptLogprobRowLimit(vocabSize: number): number {
  return Math.max(16, Math.floor(PROMPT_LOGPROB_BYTES / (4 * vocabSize)));
}

/**
 * Refuses a prompt with a token id the model has no embedding for: run, it would fail the forward of
 * its whole step, and with it every request batched there.
 */
export function checkPromptTokens(prompt: readonly number[], vocabSize: number): void {
  for (let i = 0; i < prompt.length; i++) {
    const id = prompt[i];
    if (!(Number.isInteger(id) && id >= 0 && id < vocabSize)) throw new RequestParamError(`Prompt token ${i} is ${id}, outside this model's vocabulary of ${vocabSize} tokens`, "prompt");
  }
}

/** What submit() needs from a request once it passes the checks. */
export interface CheckedRequest {
  /** Its output budget (engine-types.ts `outputBudget`). */
  maxTokens: number;
  constraint: OutputConstraint | undefined;
  budget: Active["budget"];
  lora: AdapterSlot | undefined;
}

/** The checks of one engine's requests, with what they build once and share (grammar tries, budget masks). */
export class RequestChecks {
  /** Masks of reasoning budgets' rules (reasoning-budget.ts), shared by the requests that have one. */
  private readonly budgetMasks: BudgetMasks;
  /** Token tries for output grammars, without and with control tokens' strings (built on first use). */
  private readonly tries: [TokenTrie | undefined, TokenTrie | undefined] = [undefined, undefined];

  /** `scheduler`: read at each check (whether the model's reasoning tokens are tracked). */
  constructor(
    private readonly config: ModelConfig,
    private readonly tokenizer: Tokenizer,
    private readonly maxModelLen: number,
    private readonly scheduler: Pick<SchedulerConfig, "reasoningTokens">,
    private readonly adapters: EngineAdapters,
  ) {
    this.budgetMasks = new BudgetMasks(config.vocabSize);
  }

  /**
   * What submit() needs from `req` once it passes the checks, in the order they run; throws the
   * client's mistakes (RequestParamError, ContextLengthError, LoraAdapterError).
   */
  check(req: GenerateRequest): CheckedRequest {
    const maxTokens = outputBudget(req, this.maxModelLen);
    checkPromptTokens(req.prompt, this.config.vocabSize);
    checkImages(req.images, req.prompt.length, this.config);
    checkSamplingRequest(req, this.config.vocabSize);
    const constraint = this.outputConstraint(req);
    const budget = this.reasoningBudget(req);
    const lora = req.adapter === undefined ? undefined : this.adapters.resolve(req.adapter);
    return { maxTokens, constraint, budget, lora };
  }

  /** The request's reasoning budget (undefined: none); a RequestParamError when it is not a count or the model's reasoning tokens are unknown. */
  private reasoningBudget(req: GenerateRequest): Active["budget"] {
    const limit = req.reasoningBudget;
    if (limit === undefined) return undefined;
    if (!Number.isInteger(limit) || limit < 0) throw new RequestParamError(`The reasoning budget must be a whole number of tokens, 0 or more, got ${limit}`, "reasoningBudget");
    if (!this.scheduler.reasoningTokens) {
      throw new RequestParamError("A reasoning budget needs the model's reasoning tokens, which this server does not track (start it with --reasoning-parser)", "reasoningBudget");
    }
    const tok = this.tokenizer;
    return { limit, masks: this.budgetMasks, ...(tok.tokenBytes ? { bytesOf: (id: number) => tok.tokenBytes!(id) } : {}) };
  }

  /** The request's output constraint, if it has a grammar; a schema outside the subset is a RequestParamError. */
  private outputConstraint(req: GenerateRequest): OutputConstraint | undefined {
    if (req.grammar === undefined) return undefined;
    try {
      return new OutputConstraint(req.grammar, this.tokenTrie(req.skipSpecialTokens === false), this.config.eosTokenIds, req.grammarAfter ?? (req.startsInReasoning ? AFTER_THINK : undefined));
    } catch (e) {
      if (e instanceof SchemaError) throw new RequestParamError(e.message, "grammar");
      // Compiled again here, deeper in the stack than the server's check (or first, in a worker).
      if (nestsTooDeeply(e)) throw new RequestParamError("The output grammar (response_format, structured_outputs or a forced tool's parameters) nests too deeply to be followed", "grammar");
      throw e;
    }
  }

  /**
   * The vocabulary's texts as they stream, in a trie built on first use; pieces of characters by
   * their bytes. With `special`, control tokens by their strings (EOS aside: it ends the output).
   */
  private tokenTrie(special: boolean): TokenTrie {
    const built = this.tries[special ? 1 : 0];
    if (built !== undefined) return built;
    const tok = this.tokenizer, eos = this.config.eosTokenIds;
    const texts = Array.from({ length: this.config.vocabSize }, (_, id) => (special && eos.includes(id) ? "" : tokenTextOf(tok, id, { special })));
    return (this.tries[special ? 1 : 0] = new TokenTrie(texts, (id) => tok.tokenBytes?.(id)));
  }
}

/** The tokens that end a request's output: EOS (unless ignored) and its stop token ids, each once. */
export function endTokensOf(req: GenerateRequest, eosTokenIds: readonly number[]): number[] {
  return [...new Set([...(req.ignoreEos ? [] : eosTokenIds), ...(req.stopTokenIds ?? [])])];
}

/** What a queued request starts with besides its request, sequence and checks. */
export interface ActiveStart {
  sessionId: string | undefined;
  /** From {@link endTokensOf}. */
  ends: readonly number[];
  resolve: (r: GenerateResult) => void;
  /** Submission time (ms). */
  t0: number;
  /** Cancels the request (a stream's consumer gave up). */
  cancel: () => void;
  tokenizer: Tokenizer;
  vocabSize: number;
}

/** The engine's state for a request the scheduler just queued as `seq`. */
export function newActive(req: GenerateRequest, seq: Sequence, checked: CheckedRequest, start: ActiveStart): Active {
  const { maxTokens, constraint, budget } = checked;
  const { sessionId, ends, resolve, t0, vocabSize } = start;
  return {
    seq, req, sessionId, maxTokens, resolve, t0, tLast: t0, done: false,
    queue: new AsyncQueue<StreamDelta>(start.cancel),
    text: new OutputText(start.tokenizer, req.stop ?? [], req.skipSpecialTokens === false, req.minTokens ?? 0, req.includeStopString === true),
    rng: seededUniforms(req.seed ?? Math.floor(Math.random() * 2 ** 31), 0),
    adjust: LogitAdjuster.of(req),
    ...(req.repetitionPenalty !== undefined && req.repetitionPenalty !== 1 ? { repeats: new RepeatTracker(req.repetitionPenalty, vocabSize, req.images?.map((im): [number, number] => [im.start, im.start + im.length])) } : {}),
    constraint,
    ...(budget === undefined ? {} : { budget }),
    ends,
    ...(req.minTokens ? { minTokens: { count: req.minTokens, mask: TokenMask.allBut(vocabSize, ends) } } : {}),
    ...(req.allowedTokenIds || req.badWords?.length ? { rules: new TokenRules(vocabSize, req.allowedTokenIds, req.badWords) } : {}),
    logprobs: req.logprobs === undefined ? undefined : [],
    promptLogprobs: req.promptLogprobs !== undefined ? new Array<null>(req.prompt.length).fill(null) : undefined,
  };
}

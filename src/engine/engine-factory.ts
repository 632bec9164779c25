/**
 * Builds an Engine from a loaded model on a backend: uploads the weights, allocates the paged KV
 * cache, and sizes the block pool from a block count or a memory budget.
 */
import { longRopeFor } from "../model/phi3.ts";
import type { Backend } from "../backend/types.ts";
import { hasRecurrentState, type LoadedModel, type ModelConfig, recurrentKind, windowedLayers } from "../model/config.ts";
import { freeDeviceModel, uploadModel } from "../model/device-weights.ts";
import { Engine, type EngineOptions } from "./engine.ts";
import { modelStepRunner, type StepRunner } from "./engine-runner.ts";
import { withMixedStepOverhead } from "./mixed-step-overhead.ts";
import { draftsFromBlock, mtpBlocksPerSequence } from "./mtp-drafts.ts";
import type { Speculation } from "./ngram-draft.ts";
import {
  allocatePagedKv, DEFAULT_BLOCK_SIZE, freePagedKv, kvBytesPerBlock, type KvDTypeChoice, KvDTypeError, resolveKvDtype, stateBytesPerSlot, windowBlocksFor, windowBytesPerSlot,
  windowCheckpointBlocks,
} from "./kv-cache.ts";
import { DEFAULT_SCHEDULER_CONFIG } from "./scheduler-types.ts";
import type { KvDType } from "../backend/types.ts";

/** Options of `createEngine` beyond the model and backend. */
export interface CreateEngineOptions extends Omit<EngineOptions, "runner" | "config" | "tokenizer" | "draft"> {
  /** KV blocks; takes precedence over `kvMemoryBytes`. */
  numBlocks?: number;
  /** Memory budget for the KV cache, in bytes. */
  kvMemoryBytes?: number;
  blockSize?: number;
  /**
   * A Gated DeltaNet model's state checkpoints for prefix reuse (state-checkpoints.ts; default: one
   * per `scheduler.maxRunning`; 0: none, every prompt computes from its start). Each is a sequence's
   * whole recurrent state, taken from the KV budget.
   */
  stateCheckpoints?: number;
  /**
   * The KV cache's element type (`--kv-cache-dtype`): "auto" (default) takes f16 where the backend's
   * attention reads it (half the memory, so twice the blocks for `kvMemoryBytes`), else f32.
   */
  kvCacheDtype?: KvDTypeChoice;
  /** Milliseconds added to every step that mixes prefill and decode (mixed-step-overhead.ts; default 0). */
  mixedStepOverheadMs?: number;
  /**
   * What a sliding-window layer's cache keeps (`--sliding-window-kv`): "paged" (default) every
   * position in the pool's blocks, as the other layers; "window" only each sequence's last window, in
   * a ring per state slot (forward.ts WindowKv), so a block of the pool holds the other layers alone
   * and a long context takes that much less. Its state goes as a recurrent model's does: a slot per
   * running sequence, checkpoints for prefix hits (`stateCheckpoints`), moved with a prefix, swapped
   * with a preempted sequence's blocks.
   */
  slidingWindowKv?: SlidingWindowKv;
}

/** What a sliding-window layer's cache keeps: every position ("paged") or the window ("window"). */
export type SlidingWindowKv = "paged" | "window";

/**
 * Ring blocks per state slot of the sliding layers' windows under `o` (0: they keep paged blocks), for
 * the most tokens one sequence feeds in a step (`maxBatchTokens`, or the scheduler's
 * `longPrefillTokenThreshold` below it); refuses a model without sliding layers.
 */
export function windowBlocksOf(config: ModelConfig, o: CreateEngineOptions): number {
  const mode = o.slidingWindowKv ?? "paged";
  if (mode !== "paged" && mode !== "window") throw new RangeError(`Unknown sliding window KV mode "${String(mode)}"; use paged or window`);
  if (mode === "paged") return 0;
  if (windowedLayers(config).length === 0) throw new RangeError(`Sliding window KV "window" needs sliding-window layers; model ${config.architecture} has none`);
  const batch = o.scheduler?.maxBatchTokens ?? DEFAULT_SCHEDULER_CONFIG.maxBatchTokens;
  // An image whose rows attend both ways runs in one step, past the budget if it must (atomic-spans.ts).
  const chunk = Math.max(Math.min(batch, o.scheduler?.longPrefillTokenThreshold ?? batch), config.vision?.bidirectional ? config.vision.tokensPerImage : 0);
  return windowBlocksFor(config, o.blockSize ?? DEFAULT_BLOCK_SIZE, chunk);
}

/**
 * What moving a prefix off an engine of `config` under `o` carries, for routers pricing it: bytes per
 * block in `dtype` (the paged layers'), and the bytes of the state checkpoint that goes with it (its
 * host copy, f32: a recurrent state, the sliding layers' windows; 0 for other models).
 */
export function movedKvBytes(config: ModelConfig, o: CreateEngineOptions, dtype: KvDType): { bytesPerBlock: number; stateBytes: number } {
  const bs = o.blockSize ?? DEFAULT_BLOCK_SIZE;
  const windowBlocks = windowBlocksOf(config, o);
  return {
    bytesPerBlock: kvBytesPerBlock(config, bs, dtype, windowBlocks > 0),
    stateBytes: stateBytesPerSlot(config) + (windowBlocks > 0 ? windowBytesPerSlot(config, bs, "f32", windowCheckpointBlocks(config.slidingWindow!.size, bs)) : 0),
  };
}

/** Whether an engine of `config` under `o` keeps per-sequence state apart from its blocks: recurrent layers, or sliding layers keeping their windows only. */
function keepsState(config: ModelConfig, o: CreateEngineOptions): boolean {
  return hasRecurrentState(config) || windowBlocksOf(config, o) > 0;
}

/**
 * Scheduler steps an engine takes when none are asked (EngineOptions.schedulerSteps): 4 on WebGPU,
 * where reading a step's tokens back costs a round trip (a 10 ms poll under Deno; a queue sync under
 * Dawn) that steps run ahead share; 1 elsewhere (the reference backend reads host memory; CUDA's
 * multi-step decoding is not measured on a GPU yet). Measured: docs/bench-engine.md "Multi-step decoding".
 */
export function defaultSchedulerSteps(backend: Backend): number {
  return backend.info.name === "webgpu" ? 4 : 1;
}

/** A draft model's part of the KV cache: its config and the element type of its cache. */
export interface DraftKvShape {
  config: ModelConfig;
  dtype: KvDType;
}

/**
 * Blocks for a memory budget (of KV in `dtype`), or by default enough for 64 sequences at full
 * context. With `draft`, each block's bytes include the draft model's block as well (the proposer
 * gets as many blocks as the engine), so target and draft caches together fit the budget, as vLLM
 * counts the draft's layers in its KV cache.
 */
export function kvBlockCount(model: LoadedModel, o: CreateEngineOptions, dtype: KvDType = "f32", draft?: DraftKvShape): number {
  const bs = o.blockSize ?? DEFAULT_BLOCK_SIZE;
  if (o.numBlocks !== undefined) return o.numBlocks;
  if (o.kvMemoryBytes !== undefined) {
    const windowBlocks = windowBlocksOf(model.config, o);
    const perBlock = kvBytesPerBlock(model.config, bs, dtype, windowBlocks > 0) + (draft ? kvBytesPerBlock(draft.config, bs, draft.dtype) : 0);
    // A Gated DeltaNet model's recurrent state (and the sliding layers' windows, where they keep only
    // those) for every sequence that may run comes out of the budget first.
    const slots = stateSlotsOf(model.config, o);
    const checkpoints = stateCheckpointsOf(model.config, o);
    const ring = (blocks: number) => (windowBlocks > 0 ? windowBytesPerSlot(model.config, bs, dtype, blocks) : 0);
    const checkpointRing = ring(windowCheckpointBlocks(model.config.slidingWindow?.size ?? 0, bs));
    const states = (slots + checkpoints + scratchSlotsOf(model.config, o)) * stateBytesPerSlot(model.config) + slots * ring(windowBlocks) + checkpoints * checkpointRing;
    if (states > o.kvMemoryBytes / 2) {
      const gib = (b: number) => (b / 2 ** 30).toFixed(2);
      throw new RangeError(
        `The ${windowBlocks > 0 ? "state (sliding windows included)" : "recurrent state"} of ${slots} sequences and ${checkpoints} checkpoints (${gib(states)} GiB) takes more than half the KV memory budget (${gib(o.kvMemoryBytes)} GiB); lower --max-num-seqs${windowBlocks > 0 ? `, --state-checkpoints or --long-prefill-token-threshold (each ring holds the window and a step's tokens: ${windowBlocks} blocks)` : ""} or raise --kv-memory-fraction`,
      );
    }
    // Blocks reserved for chained multi-token-prediction drafts come out of it too.
    return Math.max(1, Math.floor((o.kvMemoryBytes - states) / perBlock) - mtpReservedBlocksOf(o));
  }
  const ctx = Math.min(o.maxModelLen ?? model.config.contextLength, model.config.contextLength);
  return Math.ceil(ctx / bs) * 64 + 1;
}

/** State slots an engine of `config` holds: one per sequence that may run (`--max-num-seqs`); 0 without recurrent layers or windowed sliding ones. */
export function stateSlotsOf(config: ModelConfig, o: CreateEngineOptions): number {
  return keepsState(config, o) ? o.scheduler?.maxRunning ?? DEFAULT_SCHEDULER_CONFIG.maxRunning : 0;
}

/** State checkpoints an engine of `config` keeps for prefix reuse (state-checkpoints.ts): `o.stateCheckpoints`, by default one per running slot. */
export function stateCheckpointsOf(config: ModelConfig, o: CreateEngineOptions): number {
  return keepsState(config, o) ? o.stateCheckpoints ?? stateSlotsOf(config, o) : 0;
}

/**
 * Scratch state slots an engine of `config` under `o` keeps: with speculative decoding on a model with
 * recurrent layers, one per sequence that may verify a draft in a step (`--max-num-seqs`, or
 * `disable_by_batch_size` below it: no drafts beyond that batch), each holding a drafted sequence's
 * state from before the step for when its draft is not all taken (engine-runner.ts `rollbackState`).
 */
export function scratchSlotsOf(config: ModelConfig, o: CreateEngineOptions): number {
  if (!o.speculative || !hasRecurrentState(config)) return 0;
  return Math.min(stateSlotsOf(config, o), o.speculative.disableByBatchSize ?? Infinity);
}

/**
 * KV blocks an engine reserves past its pool for chained multi-token-prediction drafts
 * (mtp-drafts.ts): a drafting sequence's positions past its own blocks, for each sequence that may
 * draft at once (`--max-num-seqs`, or `disable_by_batch_size` below it); none for one draft token.
 */
export function mtpReservedBlocksOf(o: CreateEngineOptions): number {
  const s = o.speculative;
  if (!draftsFromBlock(s)) return 0;
  const seqs = Math.min(o.scheduler?.maxRunning ?? DEFAULT_SCHEDULER_CONFIG.maxRunning, s.disableByBatchSize ?? Infinity);
  return seqs * mtpBlocksPerSequence(s.numTokens, o.blockSize ?? DEFAULT_BLOCK_SIZE);
}

/** Refuses a block method (mtp-drafts.ts) whose block the model lacks, or has of the other kind. */
function checkDraftBlock(config: ModelConfig, s: Speculation | undefined): void {
  if (!draftsFromBlock(s)) return;
  const eagle = config.mtp?.eagle;
  if (s.method === "mtp" && !config.mtp) {
    const has = config.nextnLayers ? "its multi-token-prediction block was not loaded (load the model with the mtp option)" : "the model has no multi-token-prediction block";
    throw new RangeError(`Speculative method "mtp" drafts with the model's own multi-token-prediction block, but ${has}`);
  }
  if (s.method === "mtp" && eagle) throw new RangeError(`Speculative method "mtp" drafts with the model's own block, but the one loaded is EAGLE head "${eagle.source}"`);
  if (s.method !== "mtp" && eagle?.method !== s.method) {
    const has = eagle ? `the head loaded ("${eagle.source}") is run as "${eagle.method}"` : config.mtp ? "the block loaded is the model's own" : "no head was loaded (load the model with the eagle option)";
    throw new RangeError(`Speculative method "${s.method}" drafts with an EAGLE head, but ${has}`);
  }
}

/**
 * Checks what a model keeping state outside its KV blocks is asked for. Its prefix hits reach only as
 * far as a state checkpoint (state-checkpoints.ts), which moves between workers with the prefix
 * (state-import.ts); a host KV tier (`kvOffloadBlocks`) brings evicted blocks back to a device
 * checkpoint's prefix; swap preemption takes a sequence's state to host memory with its blocks;
 * speculative decoding keeps a drafted sequence's recurrent state from before its draft
 * ({@link scratchSlotsOf}), to go back to where the draft is not all taken (sliding windows need
 * none: a ring's rejected draft rows are written over before any row reads them).
 */
export function checkRecurrentOptions(config: ModelConfig, o: CreateEngineOptions): void {
  // A bad sliding-window mode, or one the model has no sliding layers for, is refused before anything is allocated.
  windowBlocksOf(config, o);
}

/**
 * An engine running `model` on `backend` (not started until the first request). `draft`: the draft
 * model of `o.speculative` "draft_model" (draft-model.ts `loadDraftModel`).
 */
export function createEngine(backend: Backend, model: LoadedModel, o: CreateEngineOptions = {}, draft?: LoadedModel): Engine {
  return createEngines(backend, model, [o], draft)[0];
}

/** The draft model's KV dtype: the same choice as the model's, a refusal saying it is the draft's. */
function draftKvDtype(backend: Backend, draft: LoadedModel, choice: KvDTypeChoice | undefined): KvDType {
  try {
    return resolveKvDtype(backend, draft.config, choice);
  } catch (e) {
    if (e instanceof KvDTypeError) throw new KvDTypeError(`The draft model's KV cache: ${e.message.replace("this model's", "the draft's")}`);
    throw e;
  }
}

/**
 * Engines sharing one upload of `model`'s weights on `backend`, each with its own KV cache and
 * options (the workers of an in-process cluster). The weights are freed when the last one stops.
 * Those speculating with a draft model share one upload of `draft` too, each with its own draft KV
 * cache of as many blocks as its own (a `kvMemoryBytes` budget covers both caches).
 */
export function createEngines(backend: Backend, loaded: LoadedModel, opts: readonly CreateEngineOptions[], draft?: LoadedModel): Engine[] {
  // LongRoPE's divisors for the context served (phi3.ts): the engines share one upload, so the longest of theirs.
  const served = Math.max(...opts.map((o) => Math.min(o.maxModelLen ?? loaded.config.contextLength, loaded.config.contextLength)));
  const config = longRopeFor(loaded.config, served);
  const model = config === loaded.config ? loaded : { ...loaded, config };
  for (const o of opts) checkRecurrentOptions(model.config, o);
  for (const o of opts) checkDraftBlock(model.config, o.speculative);
  // The draft model's own cache follows its drafts by position: a recurrent state there would keep its rejected tokens.
  if (draft && hasRecurrentState(draft.config)) {
    throw new RangeError(`A draft model with ${recurrentKind(draft.config)} (${draft.config.architecture}) is not supported: its state cannot follow its rejected tokens back; use one with attention only, or the ngram or suffix method`);
  }
  const dtypes = opts.map((o) => resolveKvDtype(backend, model.config, o.kvCacheDtype));
  const drafts = opts.map((o) => (o.speculative?.method === "draft_model" && draft ? { config: draft.config, dtype: draftKvDtype(backend, draft, o.kvCacheDtype) } : undefined));
  const sizes = opts.map((o, i) => {
    const numBlocks = kvBlockCount(model, o, dtypes[i], drafts[i]);
    if (!Number.isInteger(numBlocks) || numBlocks < 2) throw new RangeError(`The KV cache needs at least 2 blocks, got ${numBlocks}`);
    return numBlocks;
  });
  if (opts.length === 0) throw new RangeError("At least one engine is needed");
  const drafting = opts.filter((o) => o.speculative?.method === "draft_model").length;
  if (drafting > 0 && !draft) throw new RangeError("Speculative method \"draft_model\" needs the draft model loaded (draft-model.ts loadDraftModel)");
  const device = uploadModel(backend, model);
  const draftDevice = drafting > 0 ? uploadModel(backend, draft!) : undefined;
  let open = opts.length;
  let openDrafts = drafting;
  return opts.map((o, i) => {
    const blockSize = o.blockSize ?? DEFAULT_BLOCK_SIZE;
    const reserved = mtpReservedBlocksOf(o);
    const kv = allocatePagedKv(
      backend, model.config, sizes[i] + reserved, blockSize, dtypes[i], Math.max(1, stateSlotsOf(model.config, o)), stateCheckpointsOf(model.config, o), windowBlocksOf(model.config, o),
      scratchSlotsOf(model.config, o),
    );
    if (reserved > 0) kv.reserved = reserved;
    const runner = modelStepRunner(backend, device, kv, () => {
      freePagedKv(backend, kv);
      if (--open === 0) freeDeviceModel(backend, device);
    });
    let draftRunner: StepRunner | undefined;
    if (o.speculative?.method === "draft_model") {
      const draftKv = allocatePagedKv(backend, draft!.config, sizes[i], blockSize, drafts[i]!.dtype);
      draftRunner = modelStepRunner(backend, draftDevice!, draftKv, () => {
        freePagedKv(backend, draftKv);
        if (--openDrafts === 0) freeDeviceModel(backend, draftDevice!);
      });
    }
    const { mixedStepOverheadMs, kvCacheDtype: _dtype, slidingWindowKv: _window, ...engine } = o;
    return new Engine({
      ...engine, schedulerSteps: engine.schedulerSteps ?? defaultSchedulerSteps(backend), runner: withMixedStepOverhead(runner, mixedStepOverheadMs ?? 0), config: model.config, tokenizer: model.tokenizer, ...(draftRunner ? { draft: { runner: draftRunner, contextLength: draft!.config.contextLength } } : {}),
    });
  });
}

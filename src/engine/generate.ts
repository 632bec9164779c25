/**
 * Offline generation for a handful of prompts: chunked prefill and decode of every sequence as one
 * ragged batch per step, sampling on the backend with per-sequence seeded uniforms. The serving
 * scheduler (continuous batching, prefix cache) is separate; this is the simplest correct loop.
 */
import type { DeviceLoraSet } from "../model/lora-set.ts";
import type { Backend, SamplingRow } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { forward, type ForwardEntry } from "../model/forward.ts";
import { allocatePagedKv, BlockAllocator, DEFAULT_BLOCK_SIZE, freePagedKv, type KvDTypeChoice, resolveKvDtype } from "./kv-cache.ts";
import { runAhead } from "./run-ahead.ts";
import { seededUniforms, type UniformSource } from "./sampler-rng.ts";
import type { ModelConfig } from "../model/config.ts";
import type { PromptImage } from "./engine-types.ts";
import { checkImages, ImageEmbeddings, imagesIn } from "./image-inputs.ts";
import { spanChunk } from "./atomic-spans.ts";

/** Sampling and stopping options of `generate`. */
export interface GenerateOptions {
  maxTokens: number;
  /** 0 = greedy (default). */
  temperature?: number;
  /** 0 = disabled (default). */
  topK?: number;
  /** 1 = disabled (default). */
  topP?: number;
  seed?: number;
  /** Stop a sequence when it samples one of the model's EOS ids (default true). */
  stopAtEos?: boolean;
  /** Most prompt tokens one sequence feeds per step (default 64). */
  prefillChunk?: number;
  blockSize?: number;
  /** The KV cache's element type (default "auto": f16 where the backend takes it, as the engine). */
  kvCacheDtype?: KvDTypeChoice;
  /** LoRA adapters on the device: every sequence runs with the one in slot 1. */
  lora?: DeviceLoraSet;
  /**
   * Multi-step decoding (EngineOptions.schedulerSteps; default 1): once every sequence decodes, a
   * step runs up to this many forwards, each fed the ids the one before sampled on the device, and
   * reads them back once (run-ahead.ts). The same tokens.
   */
  schedulerSteps?: number;
  /**
   * Each prompt's images (a model with a vision tower: DeviceModel.vision): their positions take the
   * tower's embeddings; with Gemma 3's, a chunk never cuts one (atomic-spans.ts).
   */
  images?: readonly (readonly PromptImage[] | undefined)[];
}

/** One prompt's outcome. */
export interface GenerateResult {
  promptIds: number[];
  /** Generated ids, without the EOS that stopped the sequence. */
  ids: number[];
  finishReason: "stop" | "length";
}

/** Thrown for prompts or options `generate` cannot run. */
export class GenerateInputError extends RangeError {
  override name = "GenerateInputError";
}

interface SeqState {
  prompt: number[];
  out: number[];
  computed: number;
  blocks: number[];
  rng: UniformSource;
  done: boolean;
  finishReason: "stop" | "length";
  /** Generation budget: maxTokens, cut so the sequence fits the context. */
  budget: number;
}

function checkOptions(o: GenerateOptions): void {
  const bad = (what: string, v: unknown) => new GenerateInputError(`Invalid ${what}: ${v}`);
  if (!Number.isInteger(o.maxTokens) || o.maxTokens < 0) throw bad("maxTokens", o.maxTokens);
  const t = o.temperature ?? 0;
  if (!(t >= 0) || !Number.isFinite(t)) throw bad("temperature", t);
  const k = o.topK ?? 0;
  if (!Number.isInteger(k) || k < 0) throw bad("topK", k);
  const p = o.topP ?? 1;
  if (!(p > 0 && p <= 1)) throw bad("topP", p);
  const chunk = o.prefillChunk ?? 64;
  if (!Number.isInteger(chunk) || chunk <= 0) throw bad("prefillChunk", chunk);
  const steps = o.schedulerSteps ?? 1;
  if (!Number.isInteger(steps) || steps < 1) throw bad("schedulerSteps", steps);
}

/** A prompt's images checked as the engine checks a request's, as a GenerateInputError. */
function checkImagesOf(images: readonly PromptImage[] | undefined, length: number, config: ModelConfig, i: number): void {
  try {
    checkImages(images, length, config);
  } catch (e) {
    throw new GenerateInputError(`Prompt ${i}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** Generates continuations of `prompts` (token ids) with `model` on `backend`. */
export async function generate(
  model: DeviceModel,
  backend: Backend,
  prompts: readonly (readonly number[])[],
  options: GenerateOptions,
): Promise<GenerateResult[]> {
  checkOptions(options);
  const ctx = model.config.contextLength;
  const blockSize = options.blockSize ?? DEFAULT_BLOCK_SIZE;
  const chunk = options.prefillChunk ?? 64;
  const eos = new Set(options.stopAtEos === false ? [] : model.config.eosTokenIds);
  const seqs: SeqState[] = prompts.map((prompt, i) => {
    if (prompt.length === 0) throw new GenerateInputError(`Prompt ${i} is empty`);
    if (prompt.length > ctx) {
      throw new GenerateInputError(`Prompt ${i} has ${prompt.length} tokens, more than the context length ${ctx}`);
    }
    const budget = Math.min(options.maxTokens, ctx - prompt.length);
    return {
      prompt: [...prompt], out: [], computed: 0, blocks: [], rng: seededUniforms(options.seed ?? 0, i),
      done: budget === 0, finishReason: "length", budget,
    };
  });
  // Enough blocks for every sequence's worst case, so the loop never runs out.
  const numBlocks = Math.max(1, seqs.reduce((n, s) => n + Math.ceil((s.prompt.length + s.budget) / blockSize), 0));
  // A Gated DeltaNet model's state: one slot per sequence (sequence i's is slot i).
  const kv = allocatePagedKv(backend, model.config, numBlocks, blockSize, resolveKvDtype(backend, model.config, options.kvCacheDtype), Math.max(1, seqs.length));
  const alloc = new BlockAllocator(numBlocks);
  const images = new ImageEmbeddings(backend, model.vision);
  const bidirectional = model.config.vision?.bidirectional === true;
  prompts.forEach((p, i) => checkImagesOf(options.images?.[i], p.length, model.config, i));
  try {
    for (;;) {
      const active = seqs.filter((s) => !s.done);
      if (active.length === 0) break;
      const entries: ForwardEntry[] = [];
      const stepImages: (readonly PromptImage[] | undefined)[] = [];
      const rows: SamplingRow[] = [];
      const sampling: boolean[] = [];
      for (const s of active) {
        const slot = seqs.indexOf(s);
        const all = [...s.prompt, ...s.out];
        // The last sampled token has no KV yet; a prompt feeds the next chunk of its tokens (an image whose rows attend both ways whole).
        const own = options.images?.[slot];
        const spans = bidirectional ? own?.map((im): [number, number] => [im.start, im.start + im.length]) : undefined;
        const tokens = all.slice(s.computed, s.computed + spanChunk(spans, s.computed, Math.min(all.length - s.computed, chunk), all.length - s.computed));
        alloc.ensure(s.blocks, s.computed + tokens.length, blockSize);
        entries.push({ tokens, startPos: s.computed, blockTable: s.blocks, stateSlot: slot, ...(spans ? { bidirectional: spans } : {}) });
        stepImages.push(imagesIn(own, { startPos: s.computed, tokens }));
        const finishesPrompt = s.computed + tokens.length === all.length;
        sampling.push(finishesPrompt);
        rows.push({
          temperature: finishesPrompt ? options.temperature ?? 0 : 0,
          topK: options.topK ?? 0,
          topP: options.topP ?? 1,
          uniform: finishesPrompt ? s.rng.next() : 0,
        });
        s.computed += tokens.length;
      }
      const lora = options.lora ? { set: options.lora, slots: entries.map(() => 1) } : undefined;
      // Every sequence decoding: up to schedulerSteps forwards, never past a sequence's budget.
      const decoding = entries.every((e, i) => sampling[i] && e.tokens.length === 1 && active[i].out.length > 0);
      const ahead = decoding ? Math.min((options.schedulerSteps ?? 1) - 1, ...active.map((s) => s.budget - s.out.length - 1)) : 0;
      let sampled: ArrayLike<number>[];
      if (ahead > 0) {
        for (const s of active) alloc.ensure(s.blocks, s.computed + ahead, blockSize);
        // Each sequence's uniforms in the order of its tokens: this step's rows, then each further step's.
        const aheadRows = Array.from({ length: ahead }, () => active.map((s, i) => ({ ...rows[i], uniform: s.rng.next() })));
        const out = await runAhead(backend, model, kv, entries, rows, aheadRows, lora);
        sampled = [out.ids, ...aheadRows.map((_, j) => out.lookaheadIds!.map((ids) => ids[j]))];
        for (const s of active) s.computed += ahead;
      } else {
        // The rows images take in this step (none once every prompt is in).
        const given = stepImages.some((x) => x) ? images.stepRows(entries, stepImages) : undefined;
        try {
          const logits = forward(backend, model, kv, { entries, ...(lora ? { lora } : {}), ...(given ? { inputRows: given.rows } : {}) });
          if (!sampling.some((x) => x)) {
            // Prompt chunks before their last: nothing to read, so nothing waits for the device.
            backend.free(logits);
            sampled = [];
          } else {
            const picked = backend.sample(logits, rows);
            backend.free(logits);
            sampled = [await backend.download(picked)];
            backend.free(picked);
          }
        } finally {
          given?.free();
        }
      }
      // A sequence that ends mid-group drops the tokens after its end.
      for (const ids of sampled) {
        active.forEach((s, i) => {
          if (!sampling[i] || s.done) return;
          const id = ids[i];
          if (eos.has(id)) {
            s.done = true;
            s.finishReason = "stop";
          } else {
            s.out.push(id);
            s.done = s.out.length >= s.budget;
          }
          if (s.done) alloc.release(s.blocks.splice(0));
        });
      }
    }
  } finally {
    images.close();
    freePagedKv(backend, kv);
  }
  return seqs.map((s) => ({ promptIds: s.prompt, ids: s.out, finishReason: s.finishReason }));
}

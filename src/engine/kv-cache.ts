/**
 * Per-layer paged KV cache allocation and a minimal free-list block allocator, enough for
 * `generate`. The scheduler's prefix-caching block pool lives in kv/.
 */
import type { Backend, KvDType, Tensor } from "../backend/types.ts";
import { fp8KvFits } from "../backend/quant-blocks-fp8.ts";
import { attentionGeometries, cachedLayers, hasRecurrentState, isDeltaNetLayer, isMamba2Layer, isShortConvLayer, layerAttention, type ModelConfig, windowedLayers } from "../model/config.ts";
import type { PagedKv, RecurrentState, WindowKv } from "../model/forward.ts";

/** Default tokens per KV block. */
export const DEFAULT_BLOCK_SIZE = 16;

/** Thrown when a sequence needs more KV blocks than are free. */
export class KvCapacityError extends Error {
  override name = "KvCapacityError";
}

/** The KV cache dtype asked for: one a backend takes, or "auto" for f16 where it takes it (else f32). */
export type KvDTypeChoice = KvDType | "auto";

/** Whether `s` names a KV cache dtype choice (`--kv-cache-dtype`; `kvDtypeChoice` also reads vLLM's "fp8" names). */
export function isKvDtypeChoice(s: string): s is KvDTypeChoice {
  return s === "auto" || s === "f16" || s === "f32" || s === "f8_e4m3";
}

/** vLLM's names for an E4M3 cache (`--kv-cache-dtype fp8`, `fp8_e4m3`), as ours. */
const KV_DTYPE_ALIASES: Readonly<Record<string, KvDTypeChoice>> = { fp8: "f8_e4m3", fp8_e4m3: "f8_e4m3" };

/** The choice `s` names (ours or vLLM's alias), or undefined. */
export function kvDtypeChoice(s: string): KvDTypeChoice | undefined {
  const choice = Object.hasOwn(KV_DTYPE_ALIASES, s) ? KV_DTYPE_ALIASES[s] : s;
  return isKvDtypeChoice(choice) ? choice : undefined;
}

/** Thrown when a KV cache dtype is asked for that the backend or the model cannot hold. */
export class KvDTypeError extends RangeError {
  override name = "KvDTypeError";
}

/**
 * The KV cache dtype to allocate: "auto" takes f16 where the backend's attention reads it and the
 * model's heads have an even width (two halves per word), else f32 (f8_e4m3, which rounds keys and
 * values to 4 significant bits, is only taken when asked); an explicit choice the backend or the
 * model's head width cannot take is refused.
 */
export function resolveKvDtype(backend: Backend, config: ModelConfig, choice: KvDTypeChoice = "auto"): KvDType {
  const takes = backend.info.kvDtypes ?? ["f32"];
  const geometries = attentionGeometries(config);
  const f16 = takes.includes("f16") && geometries.every((g) => g.headDim % 2 === 0);
  if (choice === "auto") return f16 ? "f16" : "f32";
  if (!isKvDtypeChoice(choice)) throw new KvDTypeError(`Unknown KV cache dtype "${String(choice)}"; use auto, f16, f32 or fp8 (f8_e4m3)`);
  if (!takes.includes(choice)) {
    throw new KvDTypeError(`The ${backend.info.name} backend's attention takes ${takes.join(" or ")} KV caches, not ${choice}`);
  }
  if (choice === "f16" && !f16) throw new KvDTypeError(`An f16 KV cache needs an even head dimension; this model's is ${config.headDim}`);
  if (choice === "f8_e4m3" && !geometries.every((g) => fp8KvFits(g.numKvHeads, g.headDim))) {
    throw new KvDTypeError(
      `An fp8 (f8_e4m3) KV cache needs rows of whole 32-value blocks and heads of a multiple of 4 dims; this model's rows are ${config.numKvHeads} heads of ${config.headDim}`,
    );
  }
  return choice;
}

/** Whether the model's keys and values share one cache (MLA: the value is the latent part of the key). */
export function sharesKvCache(config: ModelConfig): boolean {
  return config.mla !== undefined;
}

/**
 * Allocates zeroed K and V caches for every attention layer of `config`, in `dtype` (f32 unless
 * asked). A multi-head latent attention model gets one cache per layer, serving as both (`v[i]` is
 * `k[i]`). A model with recurrent layers also gets their state, f32, for `stateSlots`
 * sequences at once and `stateCheckpoints` kept states (forward.ts {@link RecurrentState}). With
 * `windowBlocks`, the sliding layers keep only their window, in rings of that many blocks per state
 * slot ({@link windowBlocksFor}; forward.ts `WindowKv`), and `numBlocks` are the other layers'.
 */
export function allocatePagedKv(
  backend: Backend,
  config: ModelConfig,
  numBlocks: number,
  blockSize = DEFAULT_BLOCK_SIZE,
  dtype: KvDType = "f32",
  stateSlots = 1,
  stateCheckpoints = 0,
  windowBlocks = 0,
  scratchSlots = 0,
): PagedKv {
  if (!Number.isInteger(numBlocks) || numBlocks <= 0) throw new RangeError(`Invalid KV block count ${numBlocks}`);
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`Invalid KV block size ${blockSize}`);
  const max = backend.info.maxHeadDim;
  const widest = Math.max(...attentionGeometries(config).map((g) => g.headDim));
  if (max !== undefined && widest > max) {
    throw new RangeError(`The ${backend.info.name} backend's attention takes heads of up to ${max} dims; this model's KV heads have ${widest}`);
  }
  if (dtype !== "f32") resolveKvDtype(backend, config, dtype);
  const shared = sharesKvCache(config);
  const k: Tensor[] = [];
  const v: Tensor[] = [];
  const windowed = new Set(windowBlocks > 0 ? windowedLayers(config) : []);
  if (windowBlocks !== 0 && (!Number.isInteger(windowBlocks) || windowBlocks < 0)) throw new RangeError(`Invalid sliding window ring of ${windowBlocks} blocks`);
  if (windowBlocks > 0 && windowed.size === 0) throw new RangeError(`Model ${config.architecture} has no sliding-window layers to keep windows of`);
  const size = config.slidingWindow?.size ?? 0;
  const window: WindowKv | undefined = windowed.size > 0
    ? { k: [], v: [], blocksPerSlot: windowBlocks, checkpointBlocks: windowCheckpointBlocks(size, blockSize), runningSlots: stateSlots, window: size }
    : undefined;
  const state: RecurrentState | undefined = hasRecurrentState(config) || window
    ? { conv: [], ssm: [], slots: stateSlots + stateCheckpoints + scratchSlots, checkpoints: stateCheckpoints, ...(scratchSlots > 0 ? { scratch: scratchSlots } : {}), ...(window ? { window } : {}) }
    : undefined;
  if (scratchSlots !== 0 && (!Number.isInteger(scratchSlots) || scratchSlots < 0 || !hasRecurrentState(config))) {
    throw new RangeError(`Invalid scratch state slot count ${scratchSlots} (only a model with recurrent layers keeps any)`);
  }
  if (state && (!Number.isInteger(stateSlots) || stateSlots < 1)) throw new RangeError(`Invalid recurrent state slot count ${stateSlots}`);
  if (state && (!Number.isInteger(stateCheckpoints) || stateCheckpoints < 0)) throw new RangeError(`Invalid recurrent state checkpoint count ${stateCheckpoints}`);
  try {
    for (const i of cachedLayers(config)) {
      // Gemma 4's sliding layers have heads of their own size.
      const g = layerAttention(config, i);
      if (windowed.has(i)) {
        const ring = [stateSlots * windowBlocks + stateCheckpoints * window!.checkpointBlocks, blockSize, g.numKvHeads, g.headDim];
        window!.k.push(backend.zeros(ring, dtype));
        window!.v.push(backend.zeros(ring, dtype));
        continue;
      }
      const shape = [numBlocks, blockSize, g.numKvHeads, g.headDim];
      const kc = backend.zeros(shape, dtype);
      k.push(kc);
      v.push(shared ? kc : backend.zeros(shape, dtype));
    }
    const shapes = stateShapes(config);
    for (const shape of shapes.conv) state?.conv.push(backend.zeros([state.slots, ...shape], "f32"));
    for (const shape of shapes.ssm) state?.ssm.push(backend.zeros([state.slots, ...shape], "f32"));
  } catch (e) {
    // What was allocated goes back; the error says how much was asked for, and of what.
    for (const t of new Set([...k, ...v, ...(state?.conv ?? []), ...(state?.ssm ?? []), ...(window?.k ?? []), ...(window?.v ?? [])])) backend.free(t);
    const gib = (kvBytesPerBlock(config, blockSize, dtype, windowed.size > 0) * numBlocks) / 2 ** 30;
    throw new KvCapacityError(
      `A KV cache of ${numBlocks} blocks (${gib.toFixed(2)} GiB in ${dtype}) could not be allocated on the ${backend.info.name} backend (${e instanceof Error ? e.message : String(e)}); ask for fewer blocks (--kv-blocks, --kv-memory-fraction)`,
    );
  }
  return { k, v, numBlocks, blockSize, dtype, ...(state ? { state } : {}) };
}

/** Frees every layer's caches (a cache shared by keys and values once) and recurrent state. */
export function freePagedKv(backend: Backend, kv: PagedKv): void {
  const w = kv.state?.window;
  for (const t of new Set([...kv.k, ...kv.v, ...(kv.state?.conv ?? []), ...(kv.state?.ssm ?? []), ...(w?.k ?? []), ...(w?.v ?? [])])) backend.free(t);
}

/**
 * Blocks of a sliding layers' ring (forward.ts `WindowKv`) for steps of at most `stepTokens` tokens
 * per sequence: the window and a step's tokens, less one (a step's first row sees window − 1 rows
 * before it, its last row all of the step's).
 */
export function windowBlocksFor(config: ModelConfig, blockSize: number, stepTokens: number): number {
  const w = config.slidingWindow;
  if (!w) throw new RangeError(`Model ${config.architecture} has no sliding-window layers to keep windows of`);
  return Math.ceil((stepTokens + w.size - 1) / blockSize);
}

/**
 * Blocks of a checkpoint's ring: the positions a sequence resuming after a block boundary still sees,
 * window − 1 of them, in whole blocks.
 */
export function windowCheckpointBlocks(window: number, blockSize: number): number {
  return Math.max(1, Math.ceil((window - 1) / blockSize));
}

/** Bytes a ring of `windowBlocks` blocks takes across the windowed sliding layers (K and V in `dtype`). */
export function windowBytesPerSlot(config: ModelConfig, blockSize: number, dtype: KvDType, windowBlocks: number): number {
  const values = 2 * blockSize * windowBlocks * windowedLayers(config).reduce((sum, i) => {
    const g = layerAttention(config, i);
    return sum + g.numKvHeads * g.headDim;
  }, 0);
  return bytesOfValues(values, dtype);
}

/**
 * One sequence's recurrent state tensors, less their slot dimension, in RecurrentState's order: a
 * convolution state [kernel - 1, channels] per recurrent layer (Gated DeltaNet, short convolution or
 * Mamba-2), a delta rule state [value heads, key dim, value dim] per Gated DeltaNet layer or a scan state
 * [heads, head dim, state dim] per Mamba-2 layer, each in layer order.
 */
export function stateShapes(config: ModelConfig): { conv: number[][]; ssm: number[][] } {
  const conv: number[][] = [];
  const ssm: number[][] = [];
  const d = config.deltaNet;
  for (let i = 0; i < config.numLayers; i++) {
    if (d && isDeltaNetLayer(config, i)) {
      conv.push([d.convKernel - 1, 2 * d.numKHeads * d.headKDim + d.numVHeads * d.headVDim]);
      ssm.push([d.numVHeads, d.headKDim, d.headVDim]);
    } else if (isShortConvLayer(config, i)) {
      conv.push([config.shortConv!.kernel - 1, config.hiddenSize]);
    } else if (isMamba2Layer(config, i)) {
      const m = config.mamba2!;
      conv.push([m.convKernel - 1, m.innerSize + 2 * m.groups * m.stateSize]);
      ssm.push([m.heads, m.innerSize / m.heads, m.stateSize]);
    }
  }
  return { conv, ssm };
}

/** Bytes one sequence's recurrent state occupies across the recurrent layers (f32); 0 without them. */
export function stateBytesPerSlot(config: ModelConfig): number {
  const { conv, ssm } = stateShapes(config);
  return 4 * [...conv, ...ssm].reduce((a, shape) => a + shape.reduce((x, y) => x * y, 1), 0);
}

/**
 * Bytes one block occupies across all layers (K and V, or MLA's one shared cache, in `dtype`); with
 * `windowed`, across the layers that keep paged blocks when the sliding ones keep their windows only.
 */
export function kvBytesPerBlock(config: ModelConfig, blockSize = DEFAULT_BLOCK_SIZE, dtype: KvDType = "f32", windowed = false): number {
  const caches = sharesKvCache(config) ? 1 : 2;
  const skip = new Set(windowed ? windowedLayers(config) : []);
  const values = caches * blockSize * cachedLayers(config).reduce((sum, i) => {
    if (skip.has(i)) return sum;
    const g = layerAttention(config, i);
    return sum + g.numKvHeads * g.headDim;
  }, 0);
  return bytesOfValues(values, dtype);
}

/** Bytes `values` cache values take in `dtype` (f8_e4m3: 36 bytes per 32 values, an f32 scale, then the codes). */
function bytesOfValues(values: number, dtype: KvDType): number {
  return dtype === "f8_e4m3" ? Math.ceil(values / 32) * 36 : values * (dtype === "f16" ? 2 : 4);
}

/** A free list of block ids; blocks are handed out lowest id first. */
export class BlockAllocator {
  private readonly free: number[];

  constructor(readonly numBlocks: number) {
    this.free = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  }

  /** Blocks not currently allocated. */
  get available(): number {
    return this.free.length;
  }

  /** Takes `count` blocks, or throws KvCapacityError without taking any. */
  allocate(count: number): number[] {
    if (count > this.free.length) {
      throw new KvCapacityError(`Need ${count} KV blocks but only ${this.free.length} of ${this.numBlocks} are free`);
    }
    const out: number[] = [];
    for (let i = 0; i < count; i++) out.push(this.free.pop()!);
    return out;
  }

  /** Grows `table` so it covers `tokens` positions of `blockSize`. */
  ensure(table: number[], tokens: number, blockSize: number): void {
    const need = Math.ceil(tokens / blockSize) - table.length;
    if (need > 0) table.push(...this.allocate(need));
  }

  /** Returns blocks to the free list. */
  release(blocks: readonly number[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) this.free.push(blocks[i]);
  }
}

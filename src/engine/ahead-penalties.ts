/**
 * Penalties in multi-step decoding: a group's steps sample tokens the host has not seen, so the
 * repetition, presence and frequency penalties of those tokens are applied on the device
 * (Backend.penalizeSampled) from what the host counted when the group began. The host's part
 * (its repetition mask, its additions) is the same at every step of the group; the masks and
 * parameters are uploaded once a group, not once a step.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";

/** A request's presence and frequency penalties, with the distinct output tokens the host counted. */
export interface OutputPenalty {
  readonly presence: number;
  readonly frequency: number;
  readonly present: readonly number[];
}

/** One group's penalty state on the device: the rows that have any, their masks, parameters and sampled tokens. */
export class AheadPenalties {
  readonly #backend: Backend;
  readonly #rows: Tensor;
  readonly #seen: Tensor;
  readonly #present: Tensor;
  readonly #factors: Tensor;
  readonly #params: Tensor;
  readonly #history: Tensor;
  readonly #repeats: boolean;

  private constructor(backend: Backend, tensors: Tensor[], repeats: boolean) {
    this.#backend = backend;
    [this.#rows, this.#seen, this.#present, this.#factors, this.#params, this.#history] = tensors;
    this.#repeats = repeats;
  }

  /**
   * The state for a group of `steps` forwards over rows whose repetition penalties are `repeats[i]`
   * and output penalties `output[i]`, in a vocabulary of `vocab` logits; undefined when no row has
   * either. Throws where the backend cannot apply them on the device.
   */
  static of(
    backend: Backend, vocab: number, steps: number, repeats: readonly (RepeatPenalty | undefined)[] | undefined,
    output: readonly (OutputPenalty | undefined)[] | undefined,
  ): AheadPenalties | undefined {
    const n = Math.max(repeats?.length ?? 0, output?.length ?? 0);
    const rows = Array.from({ length: n }, (_, i) => i).filter((i) => repeats?.[i] !== undefined || output?.[i] !== undefined);
    if (rows.length === 0) return undefined;
    if (!backend.penalizeSampled) throw new RangeError(`The ${backend.info.name} backend cannot apply penalties to tokens sampled ahead of the host`);
    const words = Math.ceil(vocab / 32);
    const seen = new Int32Array(rows.length * words);
    const present = new Int32Array(rows.length * words);
    const params = new Float32Array(rows.length * 3);
    rows.forEach((row, k) => {
      const r = repeats?.[row], o = output?.[row];
      if (r) seen.set(r.seen.bits.subarray(0, words), k * words);
      for (const t of o?.present ?? []) if (t >= 0 && t < vocab) present[k * words + (t >> 5)] |= 1 << (t & 31);
      params.set([r?.factor ?? 1, o?.presence ?? 0, o?.frequency ?? 0], k * 3);
    });
    const tensors = [
      backend.upload(Int32Array.from(rows), [rows.length]),
      backend.upload(seen, [rows.length, words]),
      backend.upload(present, [rows.length, words]),
      backend.upload(Float32Array.from(rows, (_, k) => params[k * 3]), [rows.length]),
      backend.upload(params, [rows.length, 3]),
      backend.upload(new Int32Array(rows.length * Math.max(1, steps)).fill(-1), [rows.length, Math.max(1, steps)]),
    ];
    return new AheadPenalties(backend, tensors, repeats?.some((r) => r !== undefined) ?? false);
  }

  /**
   * Step `k`'s penalties on its logits, before the additions: the host's repetition mask, then (from
   * the second step on) those of the tokens sampled in the group so far, `prev` being the ids the
   * step before sampled.
   */
  apply(logits: Tensor, k: number, prev: Tensor | undefined): void {
    if (this.#repeats) this.#backend.penalizeRepeats(logits, this.#rows, this.#seen, this.#factors);
    if (k > 0) this.#backend.penalizeSampled!(logits, this.#rows, prev!, this.#history, k, this.#seen, this.#present, this.#params);
  }

  /** Frees the device state. */
  free(): void {
    for (const t of [this.#rows, this.#seen, this.#present, this.#factors, this.#params, this.#history]) this.#backend.free(t);
  }
}

/**
 * Images in prompts, engine side: which images a step's prompt chunks cover (the loop's ask,
 * StepExtras.images), a request's images checked at submission, and the runner's side: each image's
 * embeddings computed by the vision tower once and kept by key while they may be needed again
 * (a prompt's later chunks, a preempted prompt, the next turn's resent screenshot), and the rows a
 * step's chunks take from them (ForwardStep.inputRows).
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { ModelConfig } from "../model/config.ts";
import type { InputRows } from "../model/forward.ts";
import { type DeviceVision, encodeImage } from "../model/vision/vision-encoder.ts";
import { RequestParamError, type PromptImage } from "./engine-types.ts";

/** The images whose positions a chunk [startPos, startPos + tokens) covers (undefined: none). */
export function imagesIn(images: readonly PromptImage[] | undefined, entry: { readonly startPos: number; readonly tokens: readonly number[] }): readonly PromptImage[] | undefined {
  if (!images) return undefined;
  const end = entry.startPos + entry.tokens.length;
  const hit = images.filter((im) => im.start < end && im.start + im.length > entry.startPos);
  return hit.length > 0 ? hit : undefined;
}

/** Throws a RequestParamError naming what is wrong with a request's images (none is fine). */
export function checkImages(images: readonly PromptImage[] | undefined, promptLength: number, config: ModelConfig): void {
  if (images === undefined || images.length === 0) return;
  const vision = config.vision;
  if (!vision) throw new RequestParamError("This model reads text only: images need a vision projector loaded (--mmproj)", "images");
  const pixels = 3 * vision.imageSize * vision.imageSize;
  let end = 0;
  for (const [i, im] of images.entries()) {
    if (!Number.isInteger(im.start) || im.start < end) throw new RequestParamError(`Image ${i} starts at position ${im.start}, before the end of the one before (${end})`, "images");
    if (im.length !== vision.tokensPerImage) throw new RequestParamError(`Image ${i} takes ${im.length} positions; this vision tower gives ${vision.tokensPerImage}`, "images");
    if (im.start + im.length > promptLength) throw new RequestParamError(`Image ${i} ends at position ${im.start + im.length}, past the prompt's ${promptLength} tokens`, "images");
    if (im.pixels.length !== pixels) throw new RequestParamError(`Image ${i} holds ${im.pixels.length} pixel values; this vision tower takes ${pixels}`, "images");
    if (typeof im.key !== "string" || im.key.length === 0) throw new RequestParamError(`Image ${i} has no key`, "images");
    end = im.start + im.length;
  }
}

/** The most images whose embeddings a runner keeps on the device (each [tokensPerImage, hidden] f32). */
export const KEPT_IMAGE_EMBEDDINGS = 8;

/** A runner's image embeddings by key, the least recently used dropped past {@link KEPT_IMAGE_EMBEDDINGS}. */
export class ImageEmbeddings {
  private readonly kept = new Map<string, Tensor>();
  constructor(private readonly backend: Backend, private readonly vision: DeviceVision | undefined) {}

  /** The image's embeddings, computed (queued on the device) when not kept. */
  of(image: PromptImage): Tensor {
    const found = this.kept.get(image.key);
    if (found) {
      this.kept.delete(image.key);
      this.kept.set(image.key, found);
      return found;
    }
    if (!this.vision) throw new RangeError("A step holds an image but the model has no vision tower loaded");
    const t = encodeImage(this.backend, this.vision, image.pixels);
    this.kept.set(image.key, t);
    for (const [key, old] of this.kept) {
      if (this.kept.size <= KEPT_IMAGE_EMBEDDINGS) break;
      // Safe while a queued step still reads it: backends run their work in order, so whatever reuses the memory comes after.
      this.backend.free(old);
      this.kept.delete(key);
    }
    return t;
  }

  /**
   * The rows a step's chunks take from their images: for each covered image, the flat batch's rows
   * (entries' tokens in order) and the embeddings' rows there. `free` releases what was made for the step.
   */
  stepRows(entries: readonly { readonly startPos: number; readonly tokens: readonly number[] }[], images: readonly (readonly PromptImage[] | undefined)[]): { rows: InputRows[]; free: () => void } {
    const made: Tensor[] = [];
    const rows: InputRows[] = [];
    let offset = 0;
    entries.forEach((e, i) => {
      for (const im of images[i] ?? []) {
        const from = Math.max(im.start, e.startPos);
        const to = Math.min(im.start + im.length, e.startPos + e.tokens.length);
        if (to <= from) continue;
        const flat = Int32Array.from({ length: to - from }, (_, k) => offset + from - e.startPos + k);
        const own = Int32Array.from({ length: to - from }, (_, k) => from - im.start + k);
        const embeddings = this.of(im);
        const idx = this.backend.upload(own, [own.length]);
        const values = this.backend.gatherRows(embeddings, idx);
        const at = this.backend.upload(flat, [flat.length]);
        made.push(idx, values, at);
        rows.push({ rows: at, values });
      }
      offset += e.tokens.length;
    });
    return { rows, free: () => made.forEach((t) => this.backend.free(t)) };
  }

  /** Frees every kept embedding. */
  close(): void {
    for (const t of this.kept.values()) this.backend.free(t);
    this.kept.clear();
  }
}

/**
 * Images in requests, server side: an image part's data URL decoded, and a rendered prompt whose
 * image markers become each image's positions (the vision tower's tokens per image), with its
 * preprocessed pixels and key for the engine (GenerateRequest.images). Chat templates see an image
 * as the marker text, where its part was among the message's parts, as llama.cpp's server renders
 * them for models whose template takes text.
 */
import { Buffer } from "node:buffer";
import type { PromptImage } from "../engine/engine-types.ts";
import { ApiError } from "./errors.ts";
import type { ServeContext } from "./serve-context.ts";
import { preprocessImage } from "../model/vision/image-preprocess.ts";
import { imageKey, imageTokenIds } from "../model/vision/image-tokens.ts";
import { type DecodedImage, ImageDecodeError } from "../model/vision/png.ts";
import { decodeImage } from "../model/vision/image-decode.ts";
import type { PreparedImage } from "./image-prep.ts";

/** What a chat template sees where an image part was (llama.cpp's media marker). */
export const IMAGE_MARKER = "<__media__>";

/** The most images one request may hold: each is decoded and resized on the server's thread before the request queues. */
export const MAX_IMAGES = 32;

/** The refusal of a request holding more than `max` images (`where`: which one, or how many). */
export function tooManyImages(max: number, where: string): string {
  return max === 0 ? `This server takes no images (--limit-mm-per-prompt); ${where}` : `A request may hold at most ${max} image${max === 1 ? "" : "s"} (--limit-mm-per-prompt); ${where}`;
}

/** The largest image accepted, in pixels (before it is resized to the tower's side). */
export const MAX_IMAGE_PIXELS = 32 * 1024 * 1024;

/** An image's pixels from an image part's URL: a base64 `data:` URL of a PNG or a JPEG. `param` names the part in errors. */
export function imageFromUrl(url: string, param: string): DecodedImage {
  const bad = (message: string) => new ApiError(400, message, param, "invalid_value");
  if (/^https?:\/\//i.test(url)) throw bad(`Image URLs are read only from hosts the server names (--allowed-media-domains): send the image inline as a base64 data URL (data:image/png;base64,...), got ${JSON.stringify(url.slice(0, 80))}`);
  const m = /^data:([^;,]*)((?:;[^;,]*)*),/i.exec(url);
  if (!m) throw bad(`An image URL should be a base64 data URL (data:image/png;base64,...), got ${JSON.stringify(url.slice(0, 40))}`);
  if (!m[2].toLowerCase().split(";").includes("base64")) throw bad(`An image data URL should be base64-encoded, got ${JSON.stringify(url.slice(0, m[0].length))}`);
  const raw = url.slice(m[0].length);
  if (!/^[A-Za-z0-9+/=\s_-]*$/.test(raw)) throw bad("An image data URL's payload is not base64");
  // atob's rules (WHATWG forgiving-base64, URL-safe letters allowed), checked here; the bytes come
  // from Buffer's native decoder, as mapping atob's string to bytes took ~115 ms for a 1.4 MB PNG.
  const payload = /\s/.test(raw) ? raw.replace(/\s+/g, "") : raw;
  const unpadded = payload.length % 4 === 0 ? payload.replace(/={1,2}$/, "") : payload;
  if (unpadded.length % 4 === 1 || unpadded.includes("=")) throw bad("An image data URL's payload is not base64 (its length or padding is wrong)");
  const buffer = Buffer.from(unpadded, "base64");
  const bytes = new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  try {
    return decodeImage(bytes, { maxPixels: MAX_IMAGE_PIXELS });
  } catch (e) {
    if (e instanceof ImageDecodeError) throw bad(e.message);
    throw e;
  }
}

/**
 * A rendered prompt with `images` where its markers are, in order: each text piece tokenized (the
 * first with BOS where `addBos`), each image its tower's positions, their ids drawn from its pixels'
 * key (an image prepared already keeps its pixels and key). The markers must match the images one for one.
 */
export function encodeWithImages(ctx: Pick<ServeContext, "config" | "tokenizer">, text: string, images: readonly (DecodedImage | PreparedImage)[], addBos: boolean, param: string): { prompt: number[]; images: PromptImage[] } {
  const vision = ctx.config.vision;
  if (!vision) throw new ApiError(400, "This model reads text only: image parts need a vision projector, loaded with --mmproj", param, "invalid_value");
  const pieces = text.split(IMAGE_MARKER);
  if (pieces.length - 1 !== images.length) {
    throw new ApiError(400, `The prompt holds ${pieces.length - 1} image markers (${JSON.stringify(IMAGE_MARKER)}) for ${images.length} images: the text may not contain the marker itself`, param, "invalid_value");
  }
  const prompt = ctx.tokenizer.encode(pieces[0], { addBos });
  const placed: PromptImage[] = [];
  images.forEach((image, i) => {
    // Prepared already (image-prep.ts), or preprocessed here.
    const pixels = "key" in image ? image.pixels : preprocessImage(image, vision.preprocess);
    const key = "key" in image ? image.key : imageKey(pixels);
    // Gemma 3's image sits between its start and end tokens, as its processor writes it.
    if (vision.wrap) prompt.push(...ctx.tokenizer.encode(vision.wrap.before, { addBos: false }));
    placed.push({ start: prompt.length, length: vision.tokensPerImage, pixels, key });
    prompt.push(...imageTokenIds(key, vision.tokensPerImage, ctx.config.vocabSize));
    prompt.push(...ctx.tokenizer.encode((vision.wrap?.after ?? "") + pieces[i + 1], { addBos: false }));
  });
  return { prompt, images: placed };
}

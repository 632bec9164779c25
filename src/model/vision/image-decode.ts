/**
 * An image file's pixels, whatever format this project reads: PNG, JPEG or GIF (its first frame), told by their magic bytes
 * (the server's image parts and `generate --image` both come here).
 */
import { decodeGif } from "./gif.ts";
import { decodeJpeg } from "./jpeg.ts";
import { type DecodedImage, decodePng, ImageDecodeError, sniffImageType } from "./png.ts";

/**
 * Decodes a PNG, JPEG or GIF file of at most `maxPixels` pixels. Another format, or a file that does not
 * decode, is an ImageDecodeError naming it (which format, and the decoder's own message).
 */
export function decodeImage(bytes: Uint8Array, options: { maxPixels?: number } = {}): DecodedImage {
  const kind = sniffImageType(bytes);
  if (kind === undefined) throw new ImageDecodeError(`The data is not a PNG, JPEG or GIF image (${bytes.length} bytes)`);
  if (kind === "webp") throw new ImageDecodeError("WebP images are not read yet; send PNG, JPEG or GIF");
  try {
    return kind === "png" ? decodePng(bytes, options) : kind === "jpeg" ? decodeJpeg(bytes, options) : decodeGif(bytes, options);
  } catch (e) {
    if (e instanceof ImageDecodeError) throw new ImageDecodeError(`The image is not a readable ${kind.toUpperCase()}: ${e.message}`);
    throw e;
  }
}

/**
 * Turns a decoded image into what a ViT-style vision encoder takes: {@link preprocessImage} pads
 * (optionally), resizes and normalizes it into a channels-first f32 tensor, and {@link imagePatches}
 * cuts that tensor into flattened patches laid out for a patch-embedding matmul.
 */
import type { DecodedImage } from "./png.ts";
import { resizeImage, type ResizeFilter } from "./image-resize.ts";

/** How a vision encoder wants its input image. */
export interface PreprocessSpec {
  /** Side of the square input, in pixels. */
  size: number;
  /** Per-channel mean (RGB, on the 0..1 scale) subtracted after scaling. */
  mean: readonly [number, number, number];
  /** Per-channel standard deviation (RGB) divided by after subtracting the mean. */
  std: readonly [number, number, number];
  /** Pad a non-square image to a square (centred) before resizing, as LLaVA's `expand2square` does. */
  padToSquare: boolean;
  /** The resize's filter, as the model's Hugging Face processor asks PIL for it (CLIP's BICUBIC, SigLIP's BILINEAR, Idefics3's LANCZOS). */
  resample: ResizeFilter;
}

/**
 * Pads an image to a square, centred as LLaVA's `expand2square` does: the image is placed at offset
 * floor((side - extent) / 2) and the rest filled with `int(mean * 255)` per channel (truncated, as
 * LLaVA's `tuple(int(x * 255) for x in image_mean)` is). A square image is returned as it is.
 */
function padToSquare(image: DecodedImage, mean: readonly [number, number, number]): DecodedImage {
  const { width, height, rgb } = image;
  if (width === height) return image;
  const side = Math.max(width, height), x0 = (side - width) >> 1, y0 = (side - height) >> 1;
  const out = new Uint8Array(side * side * 3);
  const fill = mean.map((m) => Math.min(255, Math.max(0, Math.trunc(m * 255))));
  // One row of the colour, copied into every row (a 1920-pixel side is 3.7 M pixels), then the image over it.
  const row = new Uint8Array(side * 3);
  for (let x = 0; x < side; x++) row.set(fill, x * 3);
  for (let y = 0; y < side; y++) out.set(row, y * side * 3);
  for (let y = 0; y < height; y++) out.set(rgb.subarray(y * width * 3, (y + 1) * width * 3), ((y0 + y) * side + x0) * 3);
  return { width: side, height: side, rgb: out };
}

/**
 * Preprocesses an RGB image for a vision encoder into a channels-first [3, size, size] f32 tensor:
 * pads it to a square first when `spec.padToSquare` (centred, the padding colour `int(mean * 255)` per
 * channel as LLaVA has it), resizes it to size × size as PIL does with `spec.resample` (image-resize.ts:
 * antialiased when shrinking, 8-bit, byte for byte Pillow's — what Hugging Face's processors feed the
 * towers), then scales to 0..1 (/ 255) and normalizes each channel to (x - mean) / std.
 * @throws {RangeError} when `spec.size` is not a positive whole number or the image's bytes do not match its size.
 */
export function preprocessImage(image: DecodedImage, spec: PreprocessSpec): Float32Array {
  const { size, mean, std } = spec;
  if (!Number.isInteger(size) || size <= 0) throw new RangeError(`Preprocess size ${size} is not a positive whole number`);
  if (image.rgb.length !== image.width * image.height * 3) {
    throw new RangeError(`A ${image.width} × ${image.height} RGB image needs ${image.width * image.height * 3} bytes, not ${image.rgb.length}`);
  }
  const { rgb } = resizeImage(spec.padToSquare ? padToSquare(image, mean) : image, size, size, spec.resample);
  const out = new Float32Array(3 * size * size);
  const area = size * size;
  for (let i = 0; i < area; i++) {
    for (let c = 0; c < 3; c++) out[c * area + i] = (rgb[i * 3 + c] / 255 - mean[c]) / std[c];
  }
  return out;
}

/**
 * Cuts a channels-first [3, size, size] tensor into non-overlapping patch × patch patches, returned as
 * [numPatches, 3 * patch * patch] row-major with numPatches = (size / patch)². Patches come in raster
 * order (a row of patches, then the next row down), and each patch's row is laid out (channel, y, x),
 * index c * patch * patch + dy * patch + dx: the order of a conv2d weight [hidden, 3, patch, patch]
 * flattened, so that the patch embedding is a matmul of this with that weight's [hidden, 3·patch²] view.
 * @throws {RangeError} when `size` is not a multiple of `patch` (or either is not a positive whole
 *   number), or `pixels` does not hold 3 × size × size values.
 */
export function imagePatches(pixels: Float32Array, size: number, patch: number): Float32Array {
  if (!Number.isInteger(size) || !Number.isInteger(patch) || size <= 0 || patch <= 0 || size % patch !== 0) {
    throw new RangeError(`Image size ${size} is not a positive multiple of patch size ${patch}`);
  }
  if (pixels.length !== 3 * size * size) throw new RangeError(`A 3 × ${size} × ${size} image holds ${3 * size * size} values, not ${pixels.length}`);
  const grid = size / patch, area = patch * patch;
  const out = new Float32Array(grid * grid * 3 * area);
  let o = 0;
  for (let py = 0; py < grid; py++) {
    for (let px = 0; px < grid; px++) {
      for (let c = 0; c < 3; c++) {
        for (let dy = 0; dy < patch; dy++) {
          const from = c * size * size + (py * patch + dy) * size + px * patch;
          out.set(pixels.subarray(from, from + patch), o);
          o += patch;
        }
      }
    }
  }
  return out;
}

/**
 * Image resizing as PIL's `Image.resize` does it (Pillow's Resample.c), which Hugging Face's image
 * processors call and the vision towers were trained on: a separable convolution whose filter widens
 * with the scale when shrinking (so a 1920-pixel screenshot shrunk to 336 averages every source pixel
 * rather than sampling a few: thin text and rules survive), in 8-bit fixed point, the horizontal pass
 * first, each pass rounded and clipped to 0..255. Checked byte for byte against Pillow
 * (tests/model/fixtures/pil-resize.json, scripts/pil-resize-fixture.py).
 */
import type { DecodedImage } from "./png.ts";

/** PIL's resampling filters that Hugging Face's processors use: BILINEAR (2), BICUBIC (3), LANCZOS (1). */
export type ResizeFilter = "bilinear" | "bicubic" | "lanczos";

/** Each filter's kernel and its support at scale 1. */
const FILTERS: Record<ResizeFilter, { support: number; kernel: (x: number) => number }> = {
  bilinear: {
    support: 1,
    kernel: (x) => {
      x = Math.abs(x);
      return x < 1 ? 1 - x : 0;
    },
  },
  bicubic: {
    support: 2,
    kernel: (x) => {
      // Keys' cubic with a = -0.5, as Pillow's.
      const a = -0.5;
      x = Math.abs(x);
      if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
      if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
      return 0;
    },
  },
  lanczos: {
    support: 3,
    kernel: (x) => (x >= -3 && x < 3 ? sinc(x) * sinc(x / 3) : 0),
  },
};

function sinc(x: number): number {
  if (x === 0) return 1;
  x *= Math.PI;
  return Math.sin(x) / x;
}

/** Pillow's fixed point: 32 bits less 8 for the value and 2 for the sign and headroom. */
const PRECISION_BITS = 22;

/** For each output index: the first source index, how many it reads, and their fixed-point weights (Pillow's precompute_coeffs, normalize_coeffs_8bpc). */
function coefficients(inSize: number, outSize: number, filter: ResizeFilter): { first: Int32Array; count: Int32Array; weights: Int32Array; ksize: number } {
  const { support: base, kernel } = FILTERS[filter];
  const scale = inSize / outSize;
  const filterScale = Math.max(scale, 1);
  const support = base * filterScale;
  const ksize = Math.ceil(support) * 2 + 1;
  const first = new Int32Array(outSize), count = new Int32Array(outSize), weights = new Int32Array(outSize * ksize);
  const w = new Float64Array(ksize);
  for (let o = 0; o < outSize; o++) {
    const center = (o + 0.5) * scale;
    // C's (int) truncates toward zero; the lower bound is clamped at 0 right after.
    const xmin = Math.max(0, Math.trunc(center - support + 0.5));
    const xmax = Math.min(inSize, Math.trunc(center + support + 0.5)) - xmin;
    let total = 0;
    for (let x = 0; x < xmax; x++) {
      w[x] = kernel((x + xmin - center + 0.5) / filterScale);
      total += w[x];
    }
    for (let x = 0; x < xmax; x++) {
      const k = total !== 0 ? w[x] / total : w[x];
      weights[o * ksize + x] = Math.trunc(k < 0 ? -0.5 + k * (1 << PRECISION_BITS) : 0.5 + k * (1 << PRECISION_BITS));
    }
    first[o] = xmin;
    count[o] = xmax;
  }
  return { first, count, weights, ksize };
}

/** A fixed-point sum as Pillow's clip8: shifted down, clamped to 0..255. */
function clip8(sum: number): number {
  const v = sum >> PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

/**
 * One pass along an axis: for each of `lines` lines, each output pixel the weighted sum of its taps,
 * rounded and clipped (Pillow's ImagingResampleHorizontal/Vertical_8bpc). Strides in bytes: between
 * lines in `src` and `dst`, between taps along the axis in `src`, between outputs in `dst`.
 */
function resamplePass(src: Uint8Array, dst: Uint8Array, lines: number, k: ReturnType<typeof coefficients>, stride: { srcLine: number; dstLine: number; tap: number; out: number }): void {
  const half = 1 << (PRECISION_BITS - 1);
  const outs = k.first.length;
  // Lines outermost where a line is contiguous (the horizontal pass), outputs outermost where the
  // lines lie side by side (the vertical pass): either way the innermost reads move through memory in order.
  const linesOuter = stride.tap < stride.srcLine;
  const [outerCount, innerCount] = linesOuter ? [lines, outs] : [outs, lines];
  for (let outer = 0; outer < outerCount; outer++) {
    for (let inner = 0; inner < innerCount; inner++) {
      const line = linesOuter ? outer : inner, o = linesOuter ? inner : outer;
      const n = k.count[o], at = k.ksize * o;
      let p = line * stride.srcLine + k.first[o] * stride.tap;
      let r = half, g = half, b = half;
      for (let i = 0; i < n; i++, p += stride.tap) {
        const w = k.weights[at + i];
        r += src[p] * w;
        g += src[p + 1] * w;
        b += src[p + 2] * w;
      }
      const d = line * stride.dstLine + o * stride.out;
      dst[d] = clip8(r);
      dst[d + 1] = clip8(g);
      dst[d + 2] = clip8(b);
    }
  }
}

/**
 * `image` resized to width × height with `filter`, as PIL's `image.resize((width, height), resample)`
 * (reducing_gap None, Hugging Face's call) gives it for an RGB image, byte for byte.
 * @throws {RangeError} when a size is not a positive whole number or the image's bytes do not match its size.
 */
export function resizeImage(image: DecodedImage, width: number, height: number, filter: ResizeFilter): DecodedImage {
  for (const [name, v] of [["width", width], ["height", height]] as const) {
    if (!Number.isInteger(v) || v <= 0) throw new RangeError(`A resized image's ${name} must be a positive whole number, got ${v}`);
  }
  const { width: inW, height: inH, rgb } = image;
  if (rgb.length !== inW * inH * 3) throw new RangeError(`A ${inW} × ${inH} RGB image needs ${inW * inH * 3} bytes, not ${rgb.length}`);
  // Horizontal first, then vertical, each rounded to 8 bits; Pillow skips a pass whose size does not change.
  let mid = rgb;
  if (width !== inW) {
    mid = new Uint8Array(width * inH * 3);
    resamplePass(rgb, mid, inH, coefficients(inW, width, filter), { srcLine: inW * 3, dstLine: width * 3, tap: 3, out: 3 });
  }
  if (height === inH) return { width, height, rgb: mid };
  const out = new Uint8Array(width * height * 3);
  resamplePass(mid, out, width, coefficients(inH, height, filter), { srcLine: 3, dstLine: 3, tap: width * 3, out: width * 3 });
  return { width, height, rgb: out };
}

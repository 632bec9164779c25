/**
 * ImagePrep (src/serve/image-prep.ts): images prepared in a thread are what the server's thread would
 * make of them, are kept by data URL within a byte budget, and whatever the thread could not prepare
 * (a broken file, a closed prep) is prepared, or refused by name, on the calling thread.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { encodePng } from "../../src/model/vision/png.ts";
import { ImagePrep } from "../../src/serve/image-prep.ts";
import { preprocessImage, type PreprocessSpec } from "../../src/model/vision/image-preprocess.ts";
import { imageKey } from "../../src/model/vision/image-tokens.ts";
import { imageFromUrl } from "../../src/serve/prompt-images.ts";
import { ApiError } from "../../src/serve/errors.ts";

const spec: PreprocessSpec = { size: 28, mean: [0.48, 0.46, 0.41], std: [0.27, 0.26, 0.28], padToSquare: true, resample: "bicubic" };
/** 28 × 28 × 3 f32 pixels: 9408 bytes a prepared image. */
const IMAGE_BYTES = 28 * 28 * 3 * 4;

function pngUrl(seed: number, w = 20, h = 12): string {
  const rgb = Uint8Array.from({ length: w * h * 3 }, (_, i) => Math.floor(127.5 + 127.5 * Math.sin(i * 0.37 + seed)));
  return `data:image/png;base64,${btoa(String.fromCharCode(...encodePng({ width: w, height: h, rgb })))}`;
}

test("ImagePrep.prepare() makes in its thread what the calling thread makes of each data URL, and prepared() takes it from there", async () => {
  const prep = new ImagePrep(spec, 1 << 20);
  try {
    const urls = [pngUrl(1), pngUrl(2, 31, 7), pngUrl(1)];
    const made = await prep.prepare(urls);
    assert.equal(made.size, 2, "one per distinct URL");
    for (const url of urls) {
      const want = preprocessImage(imageFromUrl(url, "x"), spec);
      const got = made.get(url)!;
      assert.deepEqual(got.pixels, want);
      assert.equal(got.key, imageKey(want));
      assert.equal(prep.prepared(url, "x", made), got, "the request's own, not made again");
    }
    assert.equal(prep.size.images, 2);
    // Kept: a second request gets the same images without the thread.
    const again = await prep.prepare([urls[0]]);
    assert.equal(again.get(urls[0]), made.get(urls[0]));
  } finally {
    await prep.close();
  }
});

test("ImagePrep.start() starts its thread and waits for its answer; close() ends it; a prep on the calling thread starts none", async () => {
  const prep = new ImagePrep(spec, 1 << 20);
  assert.equal(prep.running, false, "started lazily otherwise");
  await prep.start();
  assert.equal(prep.running, true);
  const url = pngUrl(8);
  assert.deepEqual((await prep.prepare([url])).get(url)!.pixels, preprocessImage(imageFromUrl(url, "x"), spec));
  await prep.close();
  assert.equal(prep.running, false);
  const here = new ImagePrep(spec, 1 << 20, false);
  await here.start();
  assert.equal(here.running, false);
});

test("ImagePrep keeps prepared images within its byte budget, most recently used last dropped; 0 keeps none", async () => {
  const prep = new ImagePrep(spec, 2 * IMAGE_BYTES, false);
  const [a, b, c] = [pngUrl(1), pngUrl(2), pngUrl(3)];
  const first = prep.prepared(a, "x");
  prep.prepared(b, "x");
  assert.equal(prep.prepared(a, "x"), first, "kept, and now the most recently used");
  prep.prepared(c, "x");
  assert.deepEqual(prep.size, { images: 2, bytes: 2 * IMAGE_BYTES });
  const kept = await prep.prepare([a, b, c]);
  assert.deepEqual([...kept.keys()].sort(), [a, c].sort(), "b went first");
  const none = new ImagePrep(spec, 0, false);
  assert.notEqual(none.prepared(a, "x"), none.prepared(a, "x"));
  assert.deepEqual(none.size, { images: 0, bytes: 0 });
});

test("ImagePrep leaves what its thread cannot read to prepared(), which refuses it naming the part; after close() the calling thread prepares", async () => {
  const prep = new ImagePrep(spec, 1 << 20);
  const broken = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA";
  const good = pngUrl(4);
  const made = await prep.prepare([broken, good, "https://example.com/a.png"]);
  assert.deepEqual([...made.keys()], [good]);
  assert.throws(() => prep.prepared(broken, "messages[0].content[1].image_url.url", made), (e: unknown) => e instanceof ApiError && e.status === 400 && e.param === "messages[0].content[1].image_url.url" && /not a readable PNG/.test(e.message));
  await prep.close();
  const late = pngUrl(5);
  assert.equal((await prep.prepare([late])).size, 0, "no thread after close");
  assert.deepEqual(prep.prepared(late, "x").pixels, preprocessImage(imageFromUrl(late, "x"), spec));
});

/** imageTokenIds(), imageKey(): an image's identity in a prompt is the token ids drawn from its pixels. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { imageKey, imageTokenIds } from "../../src/model/vision/image-tokens.ts";

test("imageTokenIds() draws an image's ids from its key: the same key the same ids, another key others, all in the vocabulary", () => {
  const a = imageKey(Float32Array.from([1, 2, 3]));
  const b = imageKey(Float32Array.from([1, 2, 3.0001]));
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.equal(imageKey(Float32Array.from([1, 2, 3])), a);
  const ids = imageTokenIds(a, 576, 300);
  assert.deepEqual(imageTokenIds(a, 576, 300), ids);
  assert.ok(ids.every((t) => Number.isInteger(t) && t >= 0 && t < 300));
  const other = imageTokenIds(b, 576, 300);
  assert.ok(other.filter((t, i) => t === ids[i]).length < 20, "another image's ids mostly differ");
  // Spread over the vocabulary, not stuck on a few ids.
  assert.ok(new Set(ids).size > 200, `${new Set(ids).size} distinct ids of 576`);
  assert.throws(() => imageTokenIds("not-hex", 4, 300), /should be a hex digest of 16 digits or more, got "not-hex"/);
});

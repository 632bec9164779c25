import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { modelFingerprint } from "../../src/model/fingerprint.ts";
import { loadModel } from "../../src/model/load.ts";

test("modelFingerprint() is the same for the same file and changes with a weight byte or the config", async () => {
  const a = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const b = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  assert.equal(modelFingerprint(a), modelFingerprint(b));
  assert.match(modelFingerprint(a), /^[0-9a-f]{32}$/);
  const wq = a.weights.layers[0].wq!;
  const data = wq.data.slice();
  data[data.length - 1] ^= 1;
  const layers = [{ ...a.weights.layers[0], wq: { ...wq, data } }, ...a.weights.layers.slice(1)];
  assert.notEqual(modelFingerprint({ ...a, weights: { ...a.weights, layers } }), modelFingerprint(a), "one bit of the first layer's wq");
  assert.notEqual(modelFingerprint({ ...a, config: { ...a.config, ropeTheta: a.config.ropeTheta * 2 } }), modelFingerprint(a));
});

/** The reference backend's sampler against hand-computed cumulative distributions. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { effectiveTemperature, MIN_SAMPLING_TEMPERATURE, type SamplingRow } from "../../src/backend/types.ts";
import { packSamplingRows } from "../../src/backend/cuda/sampling-params.ts";

const be = createReferenceBackend();
// softmax(ln p) = p: probabilities 0.1, 0.2, 0.3, 0.4 → descending order 3, 2, 1, 0,
// cumulative 0.4, 0.7, 0.9, 1.0.
const LOGITS = [0.1, 0.2, 0.3, 0.4].map(Math.log);

async function pick(row: Partial<SamplingRow>, logits = LOGITS): Promise<number> {
  const full: SamplingRow = { temperature: 1, topK: 0, topP: 1, uniform: 0, ...row };
  const t = be.upload(new Float32Array(logits), [1, logits.length]);
  return (await be.download(be.sample(t, [full])))[0];
}

test("sample() with temperature 0 is argmax", async () => {
  assert.equal(await pick({ temperature: 0, uniform: 0.99 }), 3);
  assert.equal(await pick({ temperature: 0 }, [2, 5, 5]), 1);
});

test("sample() inverts the cumulative distribution with the given uniform", async () => {
  assert.equal(await pick({ uniform: 0 }), 3);
  assert.equal(await pick({ uniform: 0.39 }), 3);
  assert.equal(await pick({ uniform: 0.41 }), 2);
  assert.equal(await pick({ uniform: 0.8 }), 1);
  assert.equal(await pick({ uniform: 0.95 }), 0);
});

test("sample() with top-k renormalises over the k most likely tokens", async () => {
  // kept {3: 0.4, 2: 0.3}, total 0.7: uniform 0.5 → target 0.35 < 0.4 → 3; 0.6 → 0.42 → 2.
  assert.equal(await pick({ topK: 2, uniform: 0.5 }), 3);
  assert.equal(await pick({ topK: 2, uniform: 0.6 }), 2);
  assert.equal(await pick({ topK: 2, uniform: 0.999 }), 2);
  assert.equal(await pick({ topK: 1, uniform: 0.999 }), 3);
});

test("sample() with top-p keeps the shortest prefix reaching the mass", async () => {
  assert.equal(await pick({ topP: 0.39, uniform: 0.999 }), 3); // 0.4 ≥ 0.39: one token
  assert.equal(await pick({ topP: 0.5, uniform: 0.999 }), 2); // needs 0.7: two tokens
  assert.equal(await pick({ topP: 0.5, uniform: 0.6 }), 2); // target 0.42
  assert.equal(await pick({ topP: 0.75, uniform: 0.85 }), 1); // kept 0.9, target 0.765
  // top-p is measured within the top-k set: k 2 (mass 0.7), p 0.5 → 0.35 → one token.
  assert.equal(await pick({ topK: 2, topP: 0.5, uniform: 0.999 }), 3);
});

test("sample() divides logits by the temperature", async () => {
  // T = 2: p ∝ sqrt([.1, .2, .3, .4]) → [.1627, .2301, .2818, .3254]
  assert.equal(await pick({ temperature: 2, uniform: 0.32 }), 3);
  assert.equal(await pick({ temperature: 2, uniform: 0.33 }), 2);
  assert.equal(await pick({ temperature: 2, uniform: 0.6 }), 2); // cum .6072
  assert.equal(await pick({ temperature: 2, uniform: 0.61 }), 1);
  assert.equal(await pick({ temperature: 2, uniform: 0.84 }), 0); // cum .8373
});

test("sample() breaks probability ties by the lower index", async () => {
  assert.equal(await pick({ topK: 1, uniform: 0.9 }, [1, 3, 3]), 1);
  assert.equal(await pick({ uniform: 0.4 }, [0, 0]), 0);
  assert.equal(await pick({ uniform: 0.6 }, [0, 0]), 1);
});

test("sample() handles several rows with their own parameters", async () => {
  const t = be.upload(new Float32Array([...LOGITS, ...LOGITS]), [2, 4]);
  const out = await be.download(be.sample(t, [
    { temperature: 1, topK: 0, topP: 1, uniform: 0.95 },
    { temperature: 0, topK: 0, topP: 1, uniform: 0.95 },
  ]));
  assert.deepEqual(Array.from(out), [0, 3]);
});

test("sample() rejects a row count mismatch and bad parameters", () => {
  const t = be.upload(new Float32Array(LOGITS), [1, 4]);
  assert.throws(() => be.sample(t, []), /0 sampling rows for 1 logit rows/);
  assert.throws(() => be.sample(t, [{ temperature: 1, topK: 0, topP: 0, uniform: 0 }]), /invalid topP 0/);
  assert.throws(() => be.sample(t, [{ temperature: 1, topK: 0, topP: 1, uniform: 1 }]), /invalid uniform 1/);
  assert.throws(() => be.sample(t, [{ temperature: -1, topK: 0, topP: 1, uniform: 0 }]), /invalid temperature -1/);
});

test("sample() with a temperature below MIN_SAMPLING_TEMPERATURE (1e-320, 1e-309) is argmax, not NaN", async () => {
  // Descending order 0, 1, 2: a NaN softmax would walk to the last token.
  for (const temperature of [1e-320, 1e-309, 5e-324, MIN_SAMPLING_TEMPERATURE / 2]) {
    for (const uniform of [0, 0.5, 0.999]) assert.equal(await pick({ temperature, uniform }, [5, 2, 1]), 0, `T = ${temperature}`);
  }
  // From the threshold on, the row samples as before.
  assert.equal(await pick({ temperature: MIN_SAMPLING_TEMPERATURE, uniform: 0.999 }, [5, 2, 1]), 0);
});

test("packSamplingRows() and effectiveTemperature() send a temperature below MIN_SAMPLING_TEMPERATURE as 0 to the device", () => {
  assert.equal(effectiveTemperature(1e-320), 0);
  assert.equal(effectiveTemperature(0.7), 0.7);
  const packed = packSamplingRows([{ temperature: 1e-40, topK: 0, topP: 1, uniform: 0.5 }, { temperature: 0.5, topK: 3, topP: 0.9, uniform: 0.25, minP: 0.5 }]);
  assert.deepEqual(Array.from(packed), [0, 0, 1, 0.5, 0, 0.5, 3, Math.fround(0.9), 0.25, 0.5], "five floats a row, minP last (0: off)");
});

test("sample() with minP drops tokens below minP × the largest probability before top-k and top-p", async () => {
  // p / max p: 0.25, 0.5, 0.75, 1. minP 0.6 keeps {3: 0.4, 2: 0.3}, total 0.7, as top-k 2 did.
  assert.equal(await pick({ minP: 0.6, uniform: 0.5 }), 3);
  assert.equal(await pick({ minP: 0.6, uniform: 0.6 }), 2);
  assert.equal(await pick({ minP: 0.6, uniform: 0.999 }), 2);
  // Token 1 is at half the largest: minP 0.45 keeps it, 0.55 drops it.
  assert.equal(await pick({ minP: 0.45, uniform: 0.999 }), 1);
  assert.equal(await pick({ minP: 0.55, uniform: 0.999 }), 2);
  assert.equal(await pick({ minP: 1, uniform: 0.999 }), 3, "minP 1: only the most likely");
  assert.equal(await pick({ minP: 0, uniform: 0.95 }), 0, "0: off");
  // Then top-p over what is left: {3, 2} of mass 0.7, topP 0.5 → 0.35 ≤ 0.4: token 3 alone.
  assert.equal(await pick({ minP: 0.6, topP: 0.5, uniform: 0.999 }), 3);
  // Temperature first: at T = 2, p / max p = sqrt(ratio): token 1 (sqrt(0.5) ≈ 0.71) survives minP 0.6.
  assert.equal(await pick({ minP: 0.6, temperature: 2, uniform: 0.999 }), 1);
  await assert.rejects(pick({ minP: 1.5 }), /Sampling row 0 has an invalid minP 1.5/);
});

test("penalizeRepeats() divides a marked positive logit by the factor and multiplies any other, on the rows named", async () => {
  const x = be.upload(new Float32Array([2, -2, 0.5, -1, 3, 2, -2, 0.5, -1, 3]), [2, 5]);
  // Row 1 only; tokens 0, 1, 3 (bits 0b01011).
  be.penalizeRepeats(x, be.upload(new Int32Array([1]), [1]), be.upload(new Int32Array([0b01011]), [1, 1]), be.upload(new Float32Array([2]), [1]));
  assert.deepEqual(Array.from(await be.download(x)), [2, -2, 0.5, -1, 3, 1, -4, 0.5, -2, 3]);
  assert.throws(() => be.penalizeRepeats(x, be.upload(new Int32Array([0]), [1]), be.upload(new Int32Array([1]), [1, 1]), be.upload(new Float32Array([0]), [1])), /factor 0 at 0 must be positive/);
});

test("penalizeSampled() records the last sampled token and penalizes each distinct token of the history once", async () => {
  const x = be.upload(new Float32Array([2, -2, 0.5, -1, 3, 2, -2, 0.5, -1, 3]), [2, 5]);
  // Row 1 sampled token 1; its history already holds 0, 1, 0: token 0 twice, token 1 twice with the new one.
  const history = be.upload(new Int32Array([0, 1, 0, -1]), [1, 4]);
  // Token 0 was seen by the host (no repetition penalty) but not yet present in the output; token 1 the other way round.
  const seen = be.upload(new Int32Array([0b01]), [1, 1]);
  const present = be.upload(new Int32Array([0b10]), [1, 1]);
  const params = be.upload(new Float32Array([2, 0.5, 0.25]), [1, 3]);
  be.penalizeSampled!(x, be.upload(new Int32Array([1]), [1]), be.upload(new Int32Array([3, 1]), [2]), history, 4, seen, present, params);
  // Token 0: 2 − 0.25·2 − 0.5 = 1; token 1: −2·2 − 0.25·2 = −4.5; the others and row 0 untouched.
  assert.deepEqual(Array.from(await be.download(x)), [2, -2, 0.5, -1, 3, 1, -4.5, 0.5, -1, 3]);
  assert.deepEqual(Array.from(await be.download(history)), [0, 1, 0, 1]);
  const call = (count: number) => be.penalizeSampled!(x, be.upload(new Int32Array([1]), [1]), be.upload(new Int32Array([3, 1]), [2]), history, count, seen, present, params);
  assert.throws(() => call(0), /penalizeSampled count must be an integer from 1 to 4 \(the history's columns\), got 0/);
  assert.throws(() => call(5), /got 5/);
});

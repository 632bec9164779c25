/**
 * Conformance cases for penalizeSampled (multi-step decoding's penalties of tokens sampled on the
 * device). Tolerance: the repetition penalty's division is correctly rounded in the reference and
 * within WGSL's 2.5 ULP on a device (rtol 1e-6, as penalizeRepeats); the history is exact.
 */
import type { Backend, Tensor } from "../../src/backend/types.ts";
import type { Case, Output, Rng } from "./conformance-support.ts";

async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...outputs, ...temps]) b.free(t);
  return res;
}

/**
 * Logits of both signs; histories drawn from a handful of tokens (so tokens repeat, within the
 * history and with the step's new one), a -1 and an id past the vocabulary among them; random
 * seen and present bits; factors above, below and at 1, penalties of both signs and zero.
 */
function penalizeSampledCase(n: number, vocab: number, m: number, h: number, count: number): Case {
  return {
    op: "penalizeSampled",
    optionalOp: "penalizeSampled",
    name: `x=[${n}, ${vocab}] m=${m} history=${h} count=${count}`,
    tolerance: { atol: 0, rtol: 1e-6 },
    run: (b: Backend, rng: Rng) => {
      const x = b.upload(rng.f32(n * vocab).map((v) => v * 8), [n, vocab]);
      const pool = [0, vocab - 1, rng.int(vocab), rng.int(vocab), rng.int(vocab)];
      const pick = () => pool[rng.int(pool.length)];
      const sampled = b.upload(Int32Array.from({ length: n }, pick), [n]);
      const hist = Int32Array.from({ length: m * h }, (_, i) => (i % h >= count - 1 ? -7 : i % 11 === 4 ? -1 : i % 13 === 6 ? vocab + 3 : pick()));
      const history = b.upload(hist, [m, h]);
      const words = Math.ceil(vocab / 32);
      const seen = b.upload(rng.i32(m * words, 2 ** 31).map((w, i) => (i % 2 ? -w : w)), [m, words]);
      const present = b.upload(rng.i32(m * words, 2 ** 31).map((w, i) => (i % 3 ? w : -w)), [m, words]);
      const factors = [1.3, 0.8, 1];
      const params = b.upload(Float32Array.from({ length: m * 3 }, (_, i) => (i % 3 === 0 ? factors[(i / 3) % 3] : rng.uniform(-2, 2))), [m, 3]);
      const rows = b.upload(Int32Array.from(rng.perm(n).slice(0, m)), [m]);
      b.penalizeSampled!(x, rows, sampled, history, count, seen, present, params);
      return finish(b, [x, history], [rows, sampled, seen, present, params]);
    },
  };
}

/** The sampling-side cases. */
export function samplingCases(): Case[] {
  return [
    penalizeSampledCase(3, 517, 2, 4, 1),
    penalizeSampledCase(4, 37, 4, 4, 4),
    penalizeSampledCase(9, 2000, 7, 8, 5),
    penalizeSampledCase(70, 40, 66, 3, 2),
    penalizeSampledCase(2, 64, 0, 2, 2),
  ];
}

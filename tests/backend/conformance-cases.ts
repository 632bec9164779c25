/**
 * Conformance cases for the dense ops: embedding, gatherRows, sliceColumns, concatColumns, scatterAdd, maskLogits, penalizeRepeats, matmul, rmsnorm (grouped too), rope,
 * reluSquared, layerNorm, gelu, siluMul, geluMul, swigluOai, add, softmax, argmax. Each case draws fresh inputs from the seeded generator it is given.
 *
 * Tolerances (|x - ref| <= atol + rtol·|ref|; the reference accumulates in f64):
 * - embedding, gatherRows, sliceColumns, concatColumns, scatterAdd, maskLogits, add, argmax: exact. Decoding f16/bf16/q8_0 to f32 is exact (a q8_0 value
 *   is an f16 scale times an int8: 19 significant bits); the other block formats round at most once
 *   (scale products of an f16 and a 6- or 8-bit code are exact in f32, so fused or not, both sides
 *   round code·scale − min once), copies are copies, f32 addition is exactly rounded either way,
 *   argmax compares the same f32 values.
 * - matmul: atol 1e-4, rtol 1e-4. Inputs in [-1, 1], k ≤ 128: f32 accumulation error is about
 *   √k·2⁻²⁴·Σ|x·w| ≈ 1e-5, ten times below.
 * - rmsnorm: atol 1e-5, rtol 1e-5 (one f32 sum of squares and a reciprocal square root).
 * - layerNorm: atol 1e-4, rtol 1e-4 (an f32 mean of values near 5 over up to 517 terms, then the
 *   squares about it: the mean's rounding, ~517·2⁻²⁴·5, is scaled up by 1/σ ≈ 1.7).
 * - rope: atol 1e-4, rtol 0. Positions up to 300: the f32 angle pos·θ^(−2i/d) carries an absolute
 *   error near pos·2⁻²⁴ plus the device's sin/cos error (frequency divisors ≥ 1 only shrink it).
 * - siluMul: atol 1e-6, rtol 1e-5 (the device's exp); geluMul and swigluOai atol 1e-5 (gelu's
 *   cube and exp on inputs to ±12; swigluOai's outputs up to ~56: 7·8).
 * - softmax: atol 1e-6, rtol 1e-5 (exp and an f32 sum over ≤ 517 terms).
 */
import { blockValues, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { type Backend, type RopeLayout, type Tensor, WEIGHT_DTYPES } from "../../src/backend/types.ts";
import { type Case, EXACT, type Output } from "./conformance-support.ts";

const DTYPES = WEIGHT_DTYPES;

/** Downloads outputs, then frees every tensor the case made. */
async function finish(b: Backend, outputs: Tensor[], temps: Tensor[]): Promise<Output[]> {
  const res: Output[] = [];
  for (const t of outputs) res.push(await b.download(t));
  for (const t of [...outputs, ...temps]) b.free(t);
  return res;
}

function embeddingCases(): Case[] {
  const cases: Case[] = [];
  for (const dtype of DTYPES) {
    for (const [vocab, dim, n] of [[517, 64, 37], [7, 33, 1], [300, 32, 5], [40, 512, 9]]) {
      if (dim % blockValues(dtype) !== 0) continue;
      cases.push({
        op: "embedding",
        name: `${dtype} vocab=${vocab} dim=${dim} n=${n}`,
        tolerance: EXACT,
        run: (b, rng) => {
          const table = b.uploadWeight(encodeFromF32(rng.f32(vocab * dim), dtype), [vocab, dim], dtype);
          const ids = b.upload(rng.i32(n, vocab), [n]);
          return finish(b, [b.embedding(table, ids), table], [ids]);
        },
      });
    }
  }
  return cases;
}

function gatherCases(): Case[] {
  return [[37, 64, 8], [5, 3, 11], [1, 517, 1]].map(([rows, cols, m]): Case => ({
    op: "gatherRows",
    name: `x=[${rows}, ${cols}] m=${m}`,
    tolerance: EXACT,
    run: (b, rng) => {
      const x = b.upload(rng.f32(rows * cols), [rows, cols]);
      const idx = b.upload(rng.i32(m, rows), [m]);
      return finish(b, [b.gatherRows(x, idx)], [x, idx]);
    },
  }));
}

/**
 * Column windows and side-by-side joins along the last dim (multi-head latent attention splits q
 * into its RoPE and non-RoPE parts and joins the latent with the key's RoPE part): rank 2 and 3,
 * windows at either edge and inside, odd widths, MLA-like 512 + 64.
 */
function columnCases(): Case[] {
  const slices: [number[], number, number][] = [[[7, 40], 0, 32], [[7, 40], 32, 8], [[3, 5, 24], 5, 13], [[1, 517], 1, 515], [[6, 576], 0, 512]];
  const joins: [number[], number, number][] = [[[7], 32, 8], [[3, 5], 13, 3], [[4, 1], 512, 64], [[2], 1, 517]];
  return [
    ...slices.map(([shape, start, width]): Case => ({
      op: "sliceColumns",
      name: `x=[${shape}] start=${start} width=${width}`,
      tolerance: EXACT,
      run: (b, rng) => {
        const x = b.upload(rng.f32(shape.reduce((a, d) => a * d, 1)), shape);
        return finish(b, [b.sliceColumns(x, start, width)], [x]);
      },
    })),
    ...joins.map(([lead, da, db]): Case => ({
      op: "concatColumns",
      name: `lead=[${lead}] ${da} + ${db}`,
      tolerance: EXACT,
      run: (b, rng) => {
        const rows = lead.reduce((a, d) => a * d, 1);
        const a = b.upload(rng.f32(rows * da), [...lead, da]);
        const c = b.upload(rng.f32(rows * db), [...lead, db]);
        return finish(b, [b.concatColumns(a, c)], [a, c]);
      },
    })),
  ];
}

/** Distinct offsets into logits-shaped x, as the engine makes them for biases and penalties; m = 0 is a no-op. */
function scatterAddCases(): Case[] {
  return [[3, 517, 40], [1, 37, 37], [2, 11, 0], [1, 2000, 300]].map(([rows, vocab, m]): Case => ({
    op: "scatterAdd",
    name: `x=[${rows}, ${vocab}] m=${m}`,
    tolerance: EXACT,
    run: (b, rng) => {
      const x = b.upload(rng.f32(rows * vocab), [rows, vocab]);
      const index = b.upload(Int32Array.from(rng.perm(rows * vocab).slice(0, m)), [m]);
      const values = b.upload(rng.f32(m).map((v) => v * 100), [m]);
      b.scatterAdd(x, index, values);
      return finish(b, [x], [index, values]);
    },
  }));
}

/** Token masks on logits-shaped x: random bits on some rows (a word all ones, all zeros, and a vocabulary not a multiple of 32). */
function maskLogitsCases(): Case[] {
  return [[3, 517, 2], [1, 37, 1], [4, 64, 0], [5, 2000, 5]].map(([rows, vocab, m]): Case => ({
    op: "maskLogits",
    name: `x=[${rows}, ${vocab}] m=${m}`,
    tolerance: EXACT,
    run: (b, rng) => {
      const x = b.upload(rng.f32(rows * vocab), [rows, vocab]);
      const words = Math.ceil(vocab / 32);
      const bits = rng.i32(m * words, 2 ** 31).map((w, i) => (i % 7 === 3 ? -1 : i % 7 === 5 ? 0 : w * (i % 2 ? -1 : 1)));
      const rowIds = b.upload(Int32Array.from(rng.perm(rows).slice(0, m)), [m]);
      const mask = b.upload(bits, [m, words]);
      b.maskLogits(x, rowIds, mask);
      return finish(b, [x], [rowIds, mask]);
    },
  }));
}

/** Repetition penalties on logits-shaped x of both signs: random bits on some rows, one factor each (above and below 1). */
function penalizeRepeatsCases(): Case[] {
  return [[3, 517, 2], [1, 37, 1], [4, 64, 0], [5, 2000, 5]].map(([rows, vocab, m]): Case => ({
    op: "penalizeRepeats",
    name: `x=[${rows}, ${vocab}] m=${m}`,
    // A division: correctly rounded in the reference, within WGSL's 2.5 ULP on a device.
    tolerance: { atol: 0, rtol: 1e-6 },
    run: (b, rng) => {
      const x = b.upload(rng.f32(rows * vocab).map((v) => v * 8), [rows, vocab]);
      const words = Math.ceil(vocab / 32);
      const bits = rng.i32(m * words, 2 ** 31).map((w, i) => (i % 7 === 3 ? -1 : i % 7 === 5 ? 0 : w * (i % 2 ? -1 : 1)));
      const rowIds = b.upload(Int32Array.from(rng.perm(rows).slice(0, m)), [m]);
      const mask = b.upload(bits, [m, words]);
      const factors = b.upload(Float32Array.from({ length: m }, (_, k) => (k % 2 ? 0.8 : 1.3)), [m]);
      b.penalizeRepeats(x, rowIds, mask, factors);
      return finish(b, [x], [rowIds, mask, factors]);
    },
  }));
}

function matmulCases(): Case[] {
  const cases: Case[] = [];
  // k = 256 and 512 give the 256-value k-quant blocks a shape (one block, two per row).
  const shapes = [[1, 64, 37], [2, 128, 45], [37, 96, 45], [8, 128, 517], [3, 33, 5], [33, 31, 70], [1, 256, 37], [37, 512, 45]];
  for (const dtype of DTYPES) {
    for (const [n, k, m] of shapes) {
      if (k % blockValues(dtype) !== 0) continue;
      for (const withBias of [false, true]) {
        cases.push({
          op: "matmul",
          name: `${dtype} n=${n} k=${k} m=${m}${withBias ? " +bias" : ""}`,
          tolerance: { atol: 1e-4, rtol: 1e-4 },
          run: (b, rng) => {
            const x = b.upload(rng.f32(n * k), [n, k]);
            const w = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
            const bias = withBias ? b.upload(rng.f32(m), [m]) : undefined;
            return finish(b, [b.matmul(x, w, bias)], bias ? [x, w, bias] : [x, w]);
          },
        });
      }
    }
  }
  // The fused gated feed-forward (Backend.matmulGlu) in every format: each weight through its own copy
  // of the weights prelude (the second's names renamed), SiLU and GELU.
  for (const dtype of DTYPES) {
    const shapes = [[3, 512, 45, "gelu"], [1, 256, 37, "silu"], [37, 256, 45, "silu"]] as const;
    // Every format at one shape; a few formats (one of them a lattice i-quant, whose grid functions the
    // second prelude renames) also at the others (each shape is a pipeline to compile per format).
    for (const [n, k, m, activation] of ["f32", "f16", "q8_0", "q4_k", "iq2_xxs"].includes(dtype) ? shapes : shapes.slice(0, 1)) {
      cases.push({
        op: "matmulGlu",
        optionalOp: "matmulGlu",
        name: `${dtype} n=${n} k=${k} m=${m} ${activation}`,
        tolerance: { atol: 1e-4, rtol: 1e-4 },
        run: (b, rng) => {
          const x = b.upload(rng.f32(n * k), [n, k]);
          const g = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
          const u = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
          return finish(b, [b.matmulGlu!(x, g, u, activation)], [x, g, u]);
        },
      });
    }
  }
  // Three projections of one input (Backend.matmulQkv): every format at a GQA shape, a few formats at
  // more (the k and v weights read through the second and third prelude copies).
  for (const dtype of DTYPES) {
    const shapes = [[3, 256, [64, 16, 16]], [1, 512, [48, 24, 24]], [37, 256, [40, 8, 8]]] as const;
    for (const [n, k, ms] of ["f32", "f16", "q8_0", "q4_k", "iq3_xxs"].includes(dtype) ? shapes : shapes.slice(0, 1)) {
      cases.push({
        op: "matmulQkv",
        optionalOp: "matmulQkv",
        name: `${dtype} n=${n} k=${k} m=${ms.join("/")}`,
        tolerance: { atol: 1e-4, rtol: 1e-4 },
        run: (b, rng) => {
          const x = b.upload(rng.f32(n * k), [n, k]);
          const ws = ms.map((m) => b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype));
          return finish(b, b.matmulQkv!(x, ws[0], ws[1], ws[2]), [x, ...ws]);
        },
      });
    }
  }
  // The fused skip connection (Backend.matmulAdd), in a few formats: the residual added as each output is written.
  for (const dtype of ["f32", "f16", "q8_0", "q4_k"] as const) {
    for (const [n, k, m] of [[1, 256, 37], [3, 256, 45], [37, 512, 45]]) {
      cases.push({
        op: "matmulAdd",
        optionalOp: "matmulAdd",
        name: `${dtype} n=${n} k=${k} m=${m} +bias`,
        tolerance: { atol: 1e-4, rtol: 1e-4 },
        run: (b, rng) => {
          const x = b.upload(rng.f32(n * k), [n, k]);
          const w = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
          const bias = b.upload(rng.f32(m), [m]);
          const residual = b.upload(rng.f32(n * m, -4, 4), [n, m]);
          return finish(b, [b.matmulAdd!(x, w, residual, bias)], [x, w, bias, residual]);
        },
      });
    }
  }
  return cases;
}

function rowCases(): Case[] {
  const cases: Case[] = [];
  // A grouped norm (Mamba-2 with several groups, Nemotron-H's 8): tokens × groups rows, one weight row per group.
  for (const [tokens, groups, width] of [[3, 8, 16], [5, 2, 100]]) {
    cases.push({
      op: "rmsnorm",
      name: `grouped: [${tokens * groups}, ${width}] over weight [${groups}, ${width}]`,
      tolerance: { atol: 1e-5, rtol: 1e-5 },
      run: (b, rng) => {
        const x = b.upload(rng.f32(tokens * groups * width, -3, 3), [tokens * groups, width]);
        const w = b.upload(rng.f32(groups * width), [groups, width]);
        return finish(b, [b.rmsnorm(x, w, 1e-5)], [x, w]);
      },
    });
  }
  for (const [rows, cols] of [[1, 64], [37, 37], [4, 517]]) {
    cases.push({
      op: "rmsnorm",
      name: `[${rows}, ${cols}]`,
      tolerance: { atol: 1e-5, rtol: 1e-5 },
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, -3, 3), [rows, cols]);
        const w = b.upload(rng.f32(cols), [cols]);
        return finish(b, [b.rmsnorm(x, w, 1e-5)], [x, w]);
      },
    });
    cases.push({
      op: "layerNorm",
      // Values offset by 5, so a norm that does not centre (or centres badly) is far off.
      name: `[${rows}, ${cols}] with a bias, and without`,
      tolerance: { atol: 1e-4, rtol: 1e-4 },
      optionalOp: "layerNorm",
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, 2, 8), [rows, cols]);
        const w = b.upload(rng.f32(cols), [cols]);
        const bias = b.upload(rng.f32(cols), [cols]);
        return finish(b, [b.layerNorm!(x, w, bias, 1e-6), b.layerNorm!(x, w, undefined, 1e-5)], [x, w, bias]);
      },
    });
    cases.push({
      op: "gelu",
      name: `[${rows}, ${cols}]`,
      tolerance: { atol: 1e-5, rtol: 1e-5 },
      optionalOp: "gelu",
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, -12, 12), [rows, cols]);
        return finish(b, [b.gelu!(x)], [x]);
      },
    });
    cases.push({
      op: "reluSquared",
      name: `[${rows}, ${cols}]`,
      tolerance: { atol: 0, rtol: 1e-7 },
      optionalOp: "reluSquared",
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, -3, 3), [rows, cols]);
        return finish(b, [b.reluSquared!(x)], [x]);
      },
    });
    cases.push({
      op: "softcap",
      name: `[${rows}, ${cols}], cap 30 over logits of ±100 (Gemma 2's final soft-capping)`,
      tolerance: { atol: 1e-4, rtol: 1e-5 },
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, -100, 100), [rows, cols]);
        return finish(b, [b.softcap(x, 30)], [x]);
      },
    });
    cases.push({
      op: "softmax",
      name: `[${rows}, ${cols}]`,
      tolerance: { atol: 1e-6, rtol: 1e-5 },
      run: (b, rng) => {
        const x = b.upload(rng.f32(rows * cols, -8, 8), [rows, cols]);
        return finish(b, [b.softmax(x)], [x]);
      },
    });
    cases.push({
      op: "argmax",
      name: `[${rows}, ${cols}] with tied maxima`,
      tolerance: EXACT,
      run: (b, rng) => {
        const data = rng.f32(rows * cols);
        // Ties: copy each row's value at a random column to a later column and make it the maximum.
        for (let r = 0; r < rows; r += 2) {
          const c = rng.int(cols);
          data[r * cols + c] = 2;
          data[r * cols + Math.min(cols - 1, c + 1 + rng.int(cols))] = 2;
        }
        const x = b.upload(data, [rows, cols]);
        return finish(b, [b.argmax(x)], [x]);
      },
    });
  }
  for (const shape of [[37, 64], [3, 5, 7], [1]]) {
    const count = shape.reduce((a, d) => a * d, 1);
    cases.push({
      op: "add",
      name: `[${shape.join(", ")}]`,
      tolerance: EXACT,
      run: (b, rng) => {
        const x = b.upload(rng.f32(count), shape);
        const y = b.upload(rng.f32(count), shape);
        return finish(b, [b.add(x, y)], [x, y]);
      },
    });
    cases.push({
      op: "siluMul",
      name: `[${shape.join(", ")}]`,
      tolerance: { atol: 1e-6, rtol: 1e-5 },
      run: (b, rng) => {
        const g = b.upload(rng.f32(count, -6, 6), shape);
        const u = b.upload(rng.f32(count), shape);
        return finish(b, [b.siluMul(g, u)], [g, u]);
      },
    });
    cases.push({
      op: "geluMul",
      name: `[${shape.join(", ")}], gate from -12 to 12 (tails where tanh saturates)`,
      tolerance: { atol: 1e-5, rtol: 1e-5 },
      run: (b, rng) => {
        const g = b.upload(rng.f32(count, -12, 12), shape);
        const u = b.upload(rng.f32(count), shape);
        return finish(b, [b.geluMul(g, u)], [g, u]);
      },
    });
    cases.push({
      op: "swigluOai",
      name: `[${shape.join(", ")}] alpha 1.702 limit 7, inputs past both clamps`,
      tolerance: { atol: 1e-5, rtol: 1e-5 },
      run: (b, rng) => {
        const g = b.upload(rng.f32(count, -12, 12), shape);
        const u = b.upload(rng.f32(count, -12, 12), shape);
        return finish(b, [b.swigluOai(g, u, 1.702, 7)], [g, u]);
      },
    });
  }
  return cases;
}

function ropeCases(): Case[] {
  const cases: Case[] = [];
  const shapes: [number, number, number, number | undefined][] = [[1, 3, 8, undefined], [37, 3, 64, undefined], [5, 2, 64, 32], [4, 1, 8, 4]];
  for (const layout of ["normal", "neox"] as RopeLayout[]) {
    for (const [n, heads, dim, rot] of shapes) {
      cases.push({
        op: "rope",
        name: `${layout} n=${n} heads=${heads} headDim=${dim}${rot ? ` rotaryDim=${rot}` : ""}`,
        tolerance: { atol: 1e-4, rtol: 0 },
        run: (b, rng) => {
          const x = b.upload(rng.f32(n * heads * dim), [n, heads, dim]);
          const pos = b.upload(rng.i32(n, 300), [n]);
          return finish(b, [b.rope(x, pos, rng.next() < 0.5 ? 10000 : 500000, layout, rot)], [x, pos]);
        },
      });
    }
    // Llama 3.1+ frequency scaling: divisors in [1, 8] per rotated pair, as rope_freqs holds; and
    // LongRoPE's (Phi-3, Phi-4-mini): divisors and a magnitude on the rotated pairs only, partial rotations included.
    for (const magnitude of [false, true]) {
      for (const [n, heads, dim, rot] of shapes.slice(1)) {
        cases.push({
          op: "rope",
          name: `${layout} with freqFactors${magnitude ? " and magnitude" : ""} n=${n} heads=${heads} headDim=${dim}${rot ? ` rotaryDim=${rot}` : ""}`,
          tolerance: { atol: 1e-4, rtol: 0 },
          run: (b, rng) => {
            const half = (rot ?? dim) / 2;
            const x = b.upload(rng.f32(n * heads * dim), [n, heads, dim]);
            const pos = b.upload(rng.i32(n, 300), [n]);
            const factors = b.upload(rng.f32(half, 1, 8), [half]);
            const theta = rng.next() < 0.5 ? 10000 : 500000;
            return finish(b, [b.rope(x, pos, theta, layout, rot, factors, magnitude ? 1 + rng.next() : undefined)], [x, pos, factors]);
          },
        });
      }
    }
  }
  return cases;
}

/** Every dense-op case. */
export function denseCases(): Case[] {
  return [...embeddingCases(), ...gatherCases(), ...columnCases(), ...scatterAddCases(), ...maskLogitsCases(), ...penalizeRepeatsCases(), ...matmulCases(), ...rowCases(), ...ropeCases()];
}

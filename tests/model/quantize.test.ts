/**
 * `--quantize`: loadModel() re-encodes f32/f16/bf16 matrices into a block format as it reads them.
 * Checked on the bundled stories260K (f32) and on a bf16 Hugging Face directory: which tensors
 * change, that the logits stay close to the unquantized model's (and do change), and that a block
 * format is never re-quantized.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { isQuantizeDType, QUANTIZE_DTYPES, quantizeTensor } from "../../src/model/weights.ts";
import { hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { projectRoot, test } from "../harness.ts";
import { logSoftmax } from "../oracle/oracle-compare.ts";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { numel } from "../../src/backend/types.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

const STORIES = `${projectRoot}/models/stories260K.gguf`;
const PROMPT = [1, 403, 407, 261, 378, 505, 267, 1];
const be = createReferenceBackend();

/** Next-token log-probabilities after PROMPT. */
async function logProbs(m: LoadedModel): Promise<Float64Array> {
  return logSoftmax(await stepLogits(be, m, [{ tokens: PROMPT, startPos: 0, blockTable: [0] }]));
}

/** Largest |a − b| over the vocab, and the spread (max − min) of b. */
function logProbError(a: Float64Array, b: Float64Array): { error: number; spread: number } {
  let error = 0;
  for (let i = 0; i < a.length; i++) error = Math.max(error, Math.abs(a[i] - b[i]));
  return { error, spread: Math.max(...b) - Math.min(...b) };
}

test("loadModel() with quantize q8_0 re-encodes whole-block matrices and keeps norms and odd rows", async () => {
  const plain = await loadModel(STORIES);
  const q = await loadModel(STORIES, { quantize: "q8_0" });
  const l = q.weights.layers[0];
  for (const t of [l.wq!, l.wk!, l.wv!, l.wo!, l.wGate!, l.wUp!, q.weights.tokenEmbedding]) assert.equal(t.dtype, "q8_0", t.name);
  assert.equal(l.attnNorm?.dtype, "f32");
  // stories260K's FFN is 172 wide: ffn_down's rows are not whole 32-value blocks.
  assert.deepEqual([l.wDown!.dtype, l.wDown!.shape], ["f32", [64, 172]]);
  assert.ok(q.weights.tokenEmbedding.data.byteLength < plain.weights.tokenEmbedding.data.byteLength / 3);
  const { error, spread } = logProbError(await logProbs(q), await logProbs(plain));
  assert.ok(error > 0 && error < 0.02 * spread, `q8_0 log-prob error ${error} (spread ${spread})`);
});

test("loadModel() with quantize q4_0 stays close to the unquantized logits, further than q8_0", async () => {
  const plain = await logProbs(await loadModel(STORIES));
  const e8 = logProbError(await logProbs(await loadModel(STORIES, { quantize: "q8_0" })), plain);
  const e4 = logProbError(await logProbs(await loadModel(STORIES, { quantize: "q4_0" })), plain);
  assert.ok(e4.error > e8.error && e4.error < 0.25 * e4.spread, `q4_0 ${e4.error} vs q8_0 ${e8.error} (spread ${e4.spread})`);
});

test("loadModel() with quantize mxfp4 stays close to the unquantized logits, further than q8_0", async () => {
  const plain = await logProbs(await loadModel(STORIES));
  const e8 = logProbError(await logProbs(await loadModel(STORIES, { quantize: "q8_0" })), plain);
  const q = await loadModel(STORIES, { quantize: "mxfp4" });
  assert.equal(q.weights.layers[0].wq!.dtype, "mxfp4");
  // 17 bytes per 32 values against f32's 128.
  assert.equal(q.weights.tokenEmbedding.data.byteLength, (numel(q.weights.tokenEmbedding.shape) / 32) * 17);
  const e4 = logProbError(await logProbs(q), plain);
  assert.ok(e4.error > e8.error && e4.error < 0.25 * e4.spread, `mxfp4 ${e4.error} vs q8_0 ${e8.error} (spread ${e4.spread})`);
});

test("loadModel() with quantize f8_e4m3 stays close to the unquantized logits, further than q8_0 and nearer than q4_0", async () => {
  const plain = await logProbs(await loadModel(STORIES));
  const e8 = logProbError(await logProbs(await loadModel(STORIES, { quantize: "q8_0" })), plain);
  const e4 = logProbError(await logProbs(await loadModel(STORIES, { quantize: "q4_0" })), plain);
  const q = await loadModel(STORIES, { quantize: "f8_e4m3" });
  assert.equal(q.weights.layers[0].wq!.dtype, "f8_e4m3");
  // 36 bytes per 32 values against f32's 128.
  assert.equal(q.weights.tokenEmbedding.data.byteLength, (numel(q.weights.tokenEmbedding.shape) / 32) * 36);
  const f8 = logProbError(await logProbs(q), plain);
  assert.ok(f8.error > e8.error && f8.error < e4.error, `f8_e4m3 ${f8.error} vs q8_0 ${e8.error}, q4_0 ${e4.error} (spread ${f8.spread})`);
});

test("loadModel() reads a Qwen3-MoE GGUF whose expert stacks are mxfp4 (llama.cpp's MXFP4_MOE: q8_0 elsewhere) as stored", async () => {
  const dir = mkdtempSync(`${tmpdir()}/quantize-`);
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const spec: ModelFileSpec = {
    architecture: "qwen3moe", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false,
    dtype: "q8_0", ggufDtype: (name) => (/_exps\./.test(name) ? "mxfp4" : "q8_0"), experts: { count: 4, used: 2 }, seed: 39,
  };
  const weights = randomHfWeights(spec);
  await writeFile(`${dir}/mxfp4.gguf`, ggufBytes(spec, weights));
  const m = await loadModel(`${dir}/mxfp4.gguf`);
  const l = m.weights.layers[0];
  for (const t of [l.wGate!, l.wUp!, l.wDown!]) assert.equal(t.dtype, "mxfp4", t.name);
  assert.deepEqual([l.wGate!.shape, l.wDown!.shape], [[4, 64, 32], [4, 32, 64]]);
  assert.equal(l.wDown!.data.byteLength, (4 * 32 * 64 / 32) * 17);
  for (const t of [l.wq!, l.wo!, m.weights.output!]) assert.equal(t.dtype, "q8_0", t.name);
  // Expert 1's down projection, as written: the HF tensor quantized by llama.cpp's rounding.
  const down1 = weights.get("model.layers.0.mlp.experts.1.down_proj.weight")!.values;
  assert.deepEqual(l.wDown!.data.subarray(32 * 64 / 32 * 17, 2 * 32 * 64 / 32 * 17), encodeFromF32(down1, "mxfp4"));
  // And `quantize: "mxfp4"` turns a bf16 directory's expert stacks (3-D) into mxfp4 as well.
  await writeHfDirectory(`${dir}/hf`, { ...spec, dtype: "bf16" }, weights);
  const hf = await loadModel(`${dir}/hf`, { quantize: "mxfp4" });
  assert.equal(hf.weights.layers[0].wDown!.dtype, "mxfp4");
  assert.equal(hf.weights.layers[0].wDown!.data.byteLength, l.wDown!.data.byteLength);
});

test("loadModel() quantizes a bf16 Hugging Face directory's matrices into q4_k", async () => {
  const dir = mkdtempSync(`${tmpdir()}/quantize-`);
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const spec = { architecture: "qwen3", hidden: 256, layers: 1, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, vocab: 300, tied: true, dtype: "bf16", seed: 5 } as const;
  await writeHfDirectory(dir, spec, randomHfWeights(spec));
  const m = await loadModel(dir, { quantize: "q4_k" });
  const l = m.weights.layers[0];
  for (const t of [l.wq!, l.wk!, l.wv!, l.wo!, l.wGate!, l.wUp!, l.wDown!, m.weights.tokenEmbedding]) assert.equal(t.dtype, "q4_k", t.name);
  assert.equal(l.qNorm?.dtype, "f32");
});

test("quantizeTensor() leaves block formats, vectors and odd rows as they are", () => {
  const v = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i));
  const q8 = hostTensorFromF32("w", [2, 32], v, "q8_0");
  assert.equal(quantizeTensor(q8, "q4_0"), q8);
  const vec = hostTensorFromF32("n", [64], v, "f32");
  assert.equal(quantizeTensor(vec, "q8_0"), vec);
  const odd = hostTensorFromF32("o", [4, 16], v, "f16");
  assert.equal(quantizeTensor(odd, "q8_0"), odd);
  assert.equal(quantizeTensor(hostTensorFromF32("w", [2, 32], v, "f16"), "q8_0").dtype, "q8_0");
  // An FP8 checkpoint's matrices (f8_e4m3) are re-encoded into another format, and kept for their own.
  const fp8 = hostTensorFromF32("w", [2, 32], v, "f8_e4m3");
  assert.equal(quantizeTensor(fp8, "f8_e4m3"), fp8);
  assert.equal(quantizeTensor(fp8, "q8_0").dtype, "q8_0");
});

test("isQuantizeDType() accepts the block formats only", () => {
  assert.deepEqual(QUANTIZE_DTYPES, ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4", "f8_e4m3"]);
  assert.equal(isQuantizeDType("q4_k"), true);
  assert.equal(isQuantizeDType("mxfp4"), true);
  assert.equal(isQuantizeDType("bf16"), false);
  assert.equal(isQuantizeDType("q4_k_m"), false);
});

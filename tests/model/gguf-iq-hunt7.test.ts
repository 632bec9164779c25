/**
 * GGUF files holding the 1–3-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
 * load as stored: they are weight dtypes (WebGPU computes with them in place; the reference and
 * CUDA decode them at upload), as every block format is, and `--quantize` leaves them too. Before
 * they were decoded on the host and held as q8_0, and before that such a file failed with "has
 * type IQ2_XXS; supported types are …". llama.cpp agreement: tests/oracle/llama-cpp-iq-hunt7.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type { IqDType } from "../../src/backend/quant-blocks-iq.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { WeightDType } from "../../src/backend/types.ts";
import { loadModel } from "../../src/model/load.ts";
import type { LoadProgress } from "../../src/model/weights.ts";
import { openRandomAccess, writeFile } from "../../src/runtime/fs.ts";
import { readGgufHeader } from "../../src/model/gguf-reader.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";

/** q, k, v, o and the FFN in five i-quants, the embedding in two more (rows of 256: whole super-blocks). */
function mix(name: string): WeightDType | IqDType {
  if (/token_embd/.test(name)) return "iq1_m";
  if (/^output\./.test(name)) return "iq3_xxs";
  if (/attn_q/.test(name)) return "iq2_xxs";
  if (/attn_k/.test(name)) return "iq2_xs";
  if (/attn_v/.test(name)) return "iq3_s";
  if (/attn_output/.test(name)) return "iq2_s";
  return "iq1_s";
}

const SPEC: ModelFileSpec = {
  architecture: "llama", hidden: 256, layers: 1, heads: 4, kvHeads: 2, headDim: 64, ffn: 256, vocab: 300, tied: false,
  dtype: "q4_k", ggufDtype: mix, seed: 7,
};

const dir = mkdtempSync(`${tmpdir()}/gguf-iq-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const PATH = `${dir}/iq.gguf`;
await writeFile(PATH, ggufBytes(SPEC, randomHfWeights(SPEC)));

/** The file's raw bytes of tensor `name`. */
async function fileBytes(name: string): Promise<Uint8Array> {
  const file = await openRandomAccess(PATH);
  try {
    const info = (await readGgufHeader(file)).tensors.find((t) => t.name === name)!;
    return await file.read(info.offset, info.byteLength);
  } finally {
    await file.close();
  }
}

test("loadModel() keeps every i-quant matrix as the file stores it, names and shapes kept, with no load note", async () => {
  const progress: LoadProgress[] = [];
  const m = await loadModel(PATH, { onProgress: (p) => progress.push(p) });
  const l = m.weights.layers[0];
  const kept = [
    ["blk.0.attn_q.weight", "iq2_xxs", l.wq!], ["blk.0.attn_k.weight", "iq2_xs", l.wk!], ["blk.0.attn_v.weight", "iq3_s", l.wv!],
    ["blk.0.attn_output.weight", "iq2_s", l.wo!], ["output.weight", "iq3_xxs", m.weights.output!],
    ["blk.0.ffn_down.weight", "iq1_s", l.wDown!], ["token_embd.weight", "iq1_m", m.weights.tokenEmbedding],
  ] as const;
  for (const [name, dtype, t] of kept) {
    assert.equal(t.dtype, dtype, name);
    assert.deepEqual(t.data, await fileBytes(name), `${name}: the file's bytes`);
  }
  assert.deepEqual(l.wq!.shape, [256, 256]);
  assert.deepEqual(m.weights.tokenEmbedding.shape, [300, 256]);
  assert.equal(l.attnNorm?.dtype, "f32");
  assert.deepEqual(progress.filter((p) => p.note !== undefined), []);
  const logits = await stepLogits(createReferenceBackend(), m, [{ tokens: [1, 5, 9], startPos: 0, blockTable: [0] }]);
  assert.ok(Array.from(logits).every(Number.isFinite));
});

test("loadModel() with quantize q4_k keeps i-quant matrices, as it keeps every block format", async () => {
  const m = await loadModel(PATH, { quantize: "q4_k" });
  assert.equal(m.weights.layers[0].wq!.dtype, "iq2_xxs");
  assert.equal(m.weights.layers[0].wDown!.dtype, "iq1_s");
  assert.equal(m.weights.tokenEmbedding.dtype, "iq1_m");
});

/**
 * GGUF files holding the 1–3-bit i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M)
 * load: the 2–3-bit ones are weight dtypes and stay as stored; each IQ1_S and IQ1_M tensor, which
 * no backend has kernels for, is decoded on the host and held as q8_0 (or as the `--quantize`
 * format), shapes and names kept, and the load's first progress call says how many tensors of
 * which types were converted. Before, such a file failed with "has type
 * IQ2_XXS; supported types are …". llama.cpp agreement: tests/oracle/llama-cpp-iq-hunt7.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
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

/** The file's raw bytes of tensor `name` decoded from its i-quant. */
async function fileValues(name: string, dtype: IqDType): Promise<Float32Array> {
  const file = await openRandomAccess(PATH);
  try {
    const info = (await readGgufHeader(file)).tensors.find((t) => t.name === name)!;
    return decodeToF32(await file.read(info.offset, info.byteLength), dtype, info.shape.reduce((a, b) => a * b, 1));
  } finally {
    await file.close();
  }
}

test("loadModel() keeps 2–3-bit i-quant matrices, holds iq1_s and iq1_m as q8_0 of their decoded values, and says so once", async () => {
  const progress: LoadProgress[] = [];
  const m = await loadModel(PATH, { onProgress: (p) => progress.push(p) });
  const l = m.weights.layers[0];
  const kept = [
    ["blk.0.attn_q.weight", "iq2_xxs", l.wq], ["blk.0.attn_k.weight", "iq2_xs", l.wk!], ["blk.0.attn_v.weight", "iq3_s", l.wv!],
    ["blk.0.attn_output.weight", "iq2_s", l.wo], ["output.weight", "iq3_xxs", m.weights.output!],
  ] as const;
  for (const [name, dtype, t] of kept) {
    assert.equal(t.dtype, dtype, name);
    assert.deepEqual(t.data, await fileBytes(name), `${name}: the file's bytes`);
  }
  const want: [string, IqDType, { dtype: WeightDType; shape: number[]; data: Uint8Array }][] = [
    ["blk.0.ffn_down.weight", "iq1_s", l.wDown],
    ["token_embd.weight", "iq1_m", m.weights.tokenEmbedding],
  ];
  for (const [name, iq, t] of want) {
    assert.equal(t.dtype, "q8_0", name);
    assert.deepEqual(t.data, encodeFromF32(await fileValues(name, iq), "q8_0"), `${name}: q8_0 of the ${iq} values`);
  }
  assert.deepEqual(l.wq.shape, [256, 256]);
  assert.deepEqual(m.weights.tokenEmbedding.shape, [300, 256]);
  assert.equal(l.attnNorm.dtype, "f32");
  const notes = progress.filter((p) => p.note !== undefined).map((p) => p.note);
  assert.deepEqual(notes, [
    "the file holds 4 tensors of type IQ1_M, IQ1_S, which have no kernels: " +
    "they are converted to q8_0 on the host as they load, taking more memory than in the file",
  ]);
  assert.equal(progress[0].note, notes[0], "on the first progress call");
  const logits = await stepLogits(createReferenceBackend(), m, [{ tokens: [1, 5, 9], startPos: 0, blockTable: [0] }]);
  assert.ok(Array.from(logits).every(Number.isFinite));
});

test("loadModel() with quantize q4_k re-encodes host-decoded i-quant matrices as q4_k instead, and keeps the 2–3-bit ones", async () => {
  const progress: LoadProgress[] = [];
  const m = await loadModel(PATH, { quantize: "q4_k", onProgress: (p) => progress.push(p) });
  const wDown = m.weights.layers[0].wDown;
  assert.equal(wDown.dtype, "q4_k");
  assert.deepEqual(wDown.data, encodeFromF32(await fileValues("blk.0.ffn_down.weight", "iq1_s"), "q4_k"));
  assert.equal(m.weights.layers[0].wq.dtype, "iq2_xxs", "a block format already: kept, as --quantize keeps every block format");
  assert.match(progress[0].note ?? "", /^the file holds 4 tensors of type .* converted to q4_k on the host/);
});

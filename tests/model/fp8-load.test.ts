/**
 * FP8 checkpoints (src/model/fp8.ts): E4M3 bytes decoded as the OCP format defines them, and a Hugging
 * Face directory whose matrices are F8_E4M3 with block-wise `weight_scale_inv` (quant_method "fp8",
 * as Qwen3-FP8 and DeepSeek-V3 ship) or per-row `weight_scale` (compressed-tensors) loads to the
 * same weights as the directory of the values those codes and scales stand for, rounded to bf16.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { test } from "../harness.ts";
import { decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { loadModel } from "../../src/model/load.ts";
import type { LoadProgress } from "../../src/model/weights.ts";
import { ModelLoadError } from "../../src/model/config.ts";
import { e4m3ToF32 } from "../../src/model/fp8.ts";
import { type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";
import { writePair } from "./fp8-files.ts";

const SPEC: ModelFileSpec = { architecture: "llama", hidden: 48, layers: 2, heads: 4, kvHeads: 2, headDim: 12, ffn: 80, vocab: 300, tied: false, dtype: "f32", seed: 81 };
const dir = mkdtempSync(`${tmpdir()}/fp8-test-`);

test("e4m3ToF32() decodes E4M3: subnormals, the largest 448, signs, and NaN at 0x7f and 0xff", () => {
  const cases: [number, number][] = [[0x00, 0], [0x01, 2 ** -9], [0x07, 7 * 2 ** -9], [0x08, 2 ** -6], [0x38, 1], [0x39, 1.125], [0x40, 2], [0x7e, 448], [0xb8, -1], [0xfe, -448]];
  for (const [byte, value] of cases) assert.equal(e4m3ToF32(byte), value, `0x${byte.toString(16)}`);
  assert.ok(Number.isNaN(e4m3ToF32(0x7f)) && Number.isNaN(e4m3ToF32(0xff)));
  assert.ok(Object.is(e4m3ToF32(0x80), -0));
});

/** Asserts every layer matrix of the FP8 load is bf16 and equals the reference's values rounded to bf16. */
async function assertSameWeights(fp8Dir: string, refDir: string, layers = SPEC.layers) {
  const fp8 = await loadModel(fp8Dir);
  const ref = await loadModel(refDir);
  for (let i = 0; i < layers; i++) {
    for (const role of ["wq", "wk", "wv", "wo", "wGate", "wUp", "wDown"] as const) {
      const a = fp8.weights.layers[i][role]!;
      const b = ref.weights.layers[i][role]!;
      assert.equal(a.dtype, "bf16", `layer ${i} ${role}`);
      const n = a.shape.reduce((x, y) => x * y, 1);
      const want = decodeToF32(encodeFromF32(decodeToF32(b.data, b.dtype, n), "bf16"), "bf16", n);
      assert.deepEqual(decodeToF32(a.data, "bf16", n), want, `layer ${i} ${role}`);
    }
  }
  assert.deepEqual(fp8.weights.tokenEmbedding.data, ref.weights.tokenEmbedding.data, "unquantized tensors pass through");
}

test("loadModel() reads an FP8 checkpoint with 128×128-style block scales (weight_scale_inv) as its dequantized weights", async () => {
  // 32×32 blocks here, so the 48- and 80-wide matrices end in partial blocks.
  const weights = randomHfWeights(SPEC);
  await writePair(SPEC, `${dir}/block`, `${dir}/block-ref`, weights, { quant_method: "fp8", fmt: "e4m3", activation_scheme: "dynamic", weight_block_size: [32, 32] }, [32, 32]);
  await assertSameWeights(`${dir}/block`, `${dir}/block-ref`);
  // The check can fail: scales read per row where the file has blocks.
  const config = JSON.parse(await readFile(`${dir}/block/config.json`, "utf8"));
  await writeFile(`${dir}/block/config.json`, JSON.stringify({ ...config, quantization_config: { quant_method: "fp8", weight_block_size: [32, 16] } }));
  await assert.rejects(loadModel(`${dir}/block`), /FP8 tensor "model\.layers\.0\.self_attn\.q_proj\.weight" in ".*" has 4 scales in "model\.layers\.0\.self_attn\.q_proj\.weight_scale_inv"; its \[48, 48\] shape needs 6/);
});

test("loadModel() reads an FP8 mixture of experts (Qwen3-30B-A3B-FP8's shape): each expert dequantized, then stacked", async () => {
  const moe: ModelFileSpec = { ...SPEC, architecture: "qwen3moe", experts: { count: 4, used: 2 }, seed: 84 };
  await writePair(moe, `${dir}/moe`, `${dir}/moe-ref`, randomHfWeights(moe), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  await assertSameWeights(`${dir}/moe`, `${dir}/moe-ref`, moe.layers);
});

test("loadModel() reads a compressed-tensors float-quantized checkpoint with per-row weight_scale", async () => {
  const weights = randomHfWeights({ ...SPEC, seed: 82 });
  await writePair(SPEC, `${dir}/row`, `${dir}/row-ref`, weights, { quant_method: "compressed-tensors", format: "float-quantized" });
  await assertSameWeights(`${dir}/row`, `${dir}/row-ref`);
});

test("loadModel() refuses other quantization methods by name, and an FP8 matrix without its scale", async () => {
  const weights = randomHfWeights({ ...SPEC, seed: 83 });
  await writeHfDirectory(`${dir}/awq`, SPEC, weights);
  const config = JSON.parse(await readFile(`${dir}/awq/config.json`, "utf8"));
  await writeFile(`${dir}/awq/config.json`, JSON.stringify({ ...config, quantization_config: { quant_method: "awq", bits: 4 } }));
  await assert.rejects(loadModel(`${dir}/awq`), (e: unknown) => e instanceof ModelLoadError && /holds a "awq"-quantized model; this loader reads FP8 checkpoints/.test(e.message));
  await writePair(SPEC, `${dir}/noscale`, `${dir}/noscale-ref`, weights, { quant_method: "fp8" });
  const noScale = (await readFile(`${dir}/noscale/model.safetensors`));
  const text = new TextDecoder().decode(noScale.subarray(8, 8 + Number(new DataView(noScale.buffer, noScale.byteOffset).getBigUint64(0, true))));
  // Rename one scale tensor in the header (same length) so the matrix has none.
  const renamed = text.replace('"model.layers.1.mlp.up_proj.weight_scale"', '"model.layers.1.mlp.up_proj.weight_scalX"');
  noScale.set(new TextEncoder().encode(renamed), 8);
  await writeFile(`${dir}/noscale/model.safetensors`, noScale);
  await assert.rejects(loadModel(`${dir}/noscale`), /FP8 checkpoint ".*" lacks the scale tensor "model\.layers\.1\.mlp\.up_proj\.weight_scale"/);
});

test("fp8 test files are removed", () => {
  rmSync(dir, { recursive: true, force: true });
});

test("loadModel() says once that an FP8 checkpoint's matrices are dequantized, naming how many and what they become", async () => {
  await writePair(SPEC, `${dir}/note`, `${dir}/note-ref`, randomHfWeights({ ...SPEC, seed: 85 }), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  for (const [quantize, becomes] of [[undefined, /they are dequantized to bf16 as they load, twice their size in the file/], ["q8_0", /they are dequantized as they load and quantized to q8_0$/]] as const) {
    const progress: LoadProgress[] = [];
    await loadModel(`${dir}/note`, { quantize, onProgress: (p) => progress.push(p) });
    const notes = progress.flatMap((p) => (p.note === undefined ? [] : [p.note]));
    assert.equal(notes.length, 1, `${quantize}: ${notes}`);
    assert.equal(progress[0].note, notes[0], "on the first progress call");
    assert.match(notes[0], /^the checkpoint holds 14 FP8 \(F8_E4M3\) matrices, which have no kernels: /);
    assert.match(notes[0], becomes);
  }
  const plain: (string | undefined)[] = [];
  await loadModel(`${dir}/note-ref`, { onProgress: (p) => plain.push(p.note) });
  assert.ok(plain.length > 0 && plain.every((n) => n === undefined), "no note for a checkpoint without FP8");
});

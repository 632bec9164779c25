/**
 * FP8 checkpoints (src/model/fp8.ts): E4M3 bytes decoded as the OCP format defines them, and a Hugging
 * Face directory whose matrices are F8_E4M3 with block-wise `weight_scale_inv` (quant_method "fp8",
 * as Qwen3-FP8 and DeepSeek-V3 ship) or per-row `weight_scale` (compressed-tensors) loads to the
 * same weights as the directory of the values those codes and scales stand for: exactly, as f8_e4m3
 * blocks, where rows are whole 32-value blocks, else rounded to bf16.
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
import { stepLogits } from "./step-logits.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";

// Rows of 64 and 96 values (whole 32-value blocks) but o_proj's of 48 (heads × headDim): not.
const SPEC: ModelFileSpec = { architecture: "llama", hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 12, ffn: 96, vocab: 300, tied: false, dtype: "f32", seed: 81 };
const dir = mkdtempSync(`${tmpdir()}/fp8-test-`);

test("e4m3ToF32() decodes E4M3: subnormals, the largest 448, signs, and NaN at 0x7f and 0xff", () => {
  const cases: [number, number][] = [[0x00, 0], [0x01, 2 ** -9], [0x07, 7 * 2 ** -9], [0x08, 2 ** -6], [0x38, 1], [0x39, 1.125], [0x40, 2], [0x7e, 448], [0xb8, -1], [0xfe, -448]];
  for (const [byte, value] of cases) assert.equal(e4m3ToF32(byte), value, `0x${byte.toString(16)}`);
  assert.ok(Number.isNaN(e4m3ToF32(0x7f)) && Number.isNaN(e4m3ToF32(0xff)));
  assert.ok(Object.is(e4m3ToF32(0x80), -0));
});

/**
 * Asserts every layer tensor of the FP8 load equals the reference's: an f8_e4m3 one exactly (its
 * rows whole 32-value blocks, and no other), a bf16 one rounded to bf16; returns the dtypes seen.
 */
async function assertSameWeights(fp8Dir: string, refDir: string): Promise<Set<string>> {
  const fp8 = await loadModel(fp8Dir);
  const ref = await loadModel(refDir);
  const seen = new Set<string>();
  fp8.weights.layers.forEach((layer, i) => {
    for (const [role, a] of Object.entries(layer)) {
      const b = ref.weights.layers[i][role as keyof typeof layer]!;
      const n = a.shape.reduce((x: number, y: number) => x * y, 1);
      const want = decodeToF32(b.data, b.dtype, n);
      seen.add(a.dtype);
      if (a.dtype === "f8_e4m3") assert.equal(a.shape[a.shape.length - 1] % 32, 0, `layer ${i} ${role}`);
      else if (a.dtype === "bf16") assert.notEqual(a.shape[a.shape.length - 1] % 32, 0, `layer ${i} ${role} fits f8_e4m3 blocks`);
      else assert.equal(a.dtype, b.dtype, `layer ${i} ${role} passes through`);
      const rounded = a.dtype === "bf16" ? decodeToF32(encodeFromF32(want, "bf16"), "bf16", n) : want;
      assert.deepEqual(decodeToF32(a.data, a.dtype, n), rounded, `layer ${i} ${role}`);
    }
  });
  assert.deepEqual(fp8.weights.tokenEmbedding.data, ref.weights.tokenEmbedding.data, "unquantized tensors pass through");
  return seen;
}

test("loadModel() reads an FP8 checkpoint with 128×128-style block scales (weight_scale_inv) as its dequantized weights", async () => {
  // 32×32 blocks here, so the 48- and 96-row and 48-wide matrices end in partial blocks.
  const weights = randomHfWeights(SPEC);
  await writePair(SPEC, `${dir}/block`, `${dir}/block-ref`, weights, { quant_method: "fp8", fmt: "e4m3", activation_scheme: "dynamic", weight_block_size: [32, 32] }, [32, 32]);
  assert.deepEqual(await assertSameWeights(`${dir}/block`, `${dir}/block-ref`), new Set(["f32", "f8_e4m3", "bf16"]));
  // The check can fail: scales read per row where the file has blocks.
  const config = JSON.parse(await readFile(`${dir}/block/config.json`, "utf8"));
  await writeFile(`${dir}/block/config.json`, JSON.stringify({ ...config, quantization_config: { quant_method: "fp8", weight_block_size: [32, 16] } }));
  await assert.rejects(loadModel(`${dir}/block`), /FP8 tensor "model\.layers\.0\.self_attn\.q_proj\.weight" in ".*" has 4 scales in "model\.layers\.0\.self_attn\.q_proj\.weight_scale_inv"; its \[48, 64\] shape needs 8/);
});

test("loadModel() reads an FP8 mixture of experts (Qwen3-30B-A3B-FP8's shape): each expert dequantized, then stacked", async () => {
  const moe: ModelFileSpec = { ...SPEC, architecture: "qwen3moe", experts: { count: 4, used: 2 }, seed: 84 };
  await writePair(moe, `${dir}/moe`, `${dir}/moe-ref`, randomHfWeights(moe), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  assert.ok((await assertSameWeights(`${dir}/moe`, `${dir}/moe-ref`)).has("f8_e4m3"));
});

test("loadModel() reads a compressed-tensors float-quantized checkpoint with per-row weight_scale", async () => {
  const weights = randomHfWeights({ ...SPEC, seed: 82 });
  await writePair(SPEC, `${dir}/row`, `${dir}/row-ref`, weights, { quant_method: "compressed-tensors", format: "float-quantized" });
  assert.ok((await assertSameWeights(`${dir}/row`, `${dir}/row-ref`)).has("f8_e4m3"));
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

test("loadModel() says once how an FP8 checkpoint's matrices are held, naming how many and what they become", async () => {
  await writePair(SPEC, `${dir}/note`, `${dir}/note-ref`, randomHfWeights({ ...SPEC, seed: 85 }), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  const kept = /^the checkpoint holds 14 FP8 \(F8_E4M3\) matrices: 12 kept as f8_e4m3 \(their codes with an f32 scale per 32 values, 9 bits a weight\); 2 whose rows are not whole 32-value blocks dequantized to bf16$/;
  const cases = [
    [undefined, kept, "f8_e4m3"],
    ["f8_e4m3", kept, "f8_e4m3"],
    ["q8_0", /^the checkpoint holds 14 FP8 \(F8_E4M3\) matrices, quantized to q8_0 as they load \(2 whose rows are not whole 32-value blocks dequantized to bf16 first\)$/, "q8_0"],
  ] as const;
  for (const [quantize, note, wq] of cases) {
    const progress: LoadProgress[] = [];
    const model = await loadModel(`${dir}/note`, { quantize, onProgress: (p) => progress.push(p) });
    const notes = progress.flatMap((p) => (p.note === undefined ? [] : [p.note]));
    assert.equal(notes.length, 1, `${quantize}: ${notes}`);
    assert.equal(progress[0].note, notes[0], "on the first progress call");
    assert.match(notes[0], note);
    assert.equal(model.weights.layers[0].wq!.dtype, wq, `${quantize}: q_proj`);
    assert.equal(model.weights.layers[0].wo!.dtype, "bf16", `${quantize}: o_proj's 48-value rows`);
  }
  const plain: (string | undefined)[] = [];
  const ref = await loadModel(`${dir}/note-ref`, { quantize: "f8_e4m3", onProgress: (p) => plain.push(p.note) });
  assert.ok(plain.length > 0 && plain.every((n) => n === undefined), "no note for a checkpoint without FP8");
  assert.equal(ref.weights.layers[0].wq!.dtype, "f8_e4m3", "--quantize f8_e4m3 on an f32 checkpoint");
});

test("loadModel() reads an FP8 DeepSeek-V3-layout checkpoint: the latent projections kept as f8_e4m3, kv_b's W_vb copied, W_kb in bf16", async () => {
  const spec: ModelFileSpec = {
    hidden: 64, layers: 2, heads: 4, kvHeads: 4, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "deepseek2",
    ropeTheta: 10000, seed: 86, mla: { qLora: 32, kvLora: 64, nope: 16, rope: 8, v: 12 }, experts: { count: 4, used: 2, sharedFfn: 64, denseLayers: 1 },
  };
  await writePair(spec, `${dir}/mla`, `${dir}/mla-ref`, randomHfWeights(spec), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  const [fp8, ref] = [await loadModel(`${dir}/mla`), await loadModel(`${dir}/mla-ref`)];
  const layer = fp8.weights.layers[0];
  assert.equal(layer.wvB!.dtype, "f8_e4m3");
  assert.equal(layer.wkB!.dtype, "bf16", "W_kb's rows are kv_b's columns");
  for (const role of ["wvB", "wkB"] as const) {
    const [a, b] = [layer[role]!, ref.weights.layers[0][role]!];
    const n = a.shape.reduce((x, y) => x * y, 1);
    const want = decodeToF32(b.data, b.dtype, n);
    assert.deepEqual(decodeToF32(a.data, a.dtype, n), role === "wkB" ? decodeToF32(encodeFromF32(want, "bf16"), "bf16", n) : want, role);
  }
  assert.deepEqual(await assertSameWeights(`${dir}/mla`, `${dir}/mla-ref`), new Set(["f32", "f8_e4m3", "bf16"]));
});

test("loadModel() refuses an FP8 matrix holding a NaN code, naming the tensor and the place", async () => {
  await writePair(SPEC, `${dir}/nan`, `${dir}/nan-ref`, randomHfWeights({ ...SPEC, seed: 87 }), { quant_method: "fp8" });
  const file = await readFile(`${dir}/nan/model.safetensors`);
  const headerLength = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + headerLength)));
  const [begin] = header["model.layers.1.mlp.gate_proj.weight"].data_offsets;
  file[8 + headerLength + begin + 64 + 5] = 0xff; // row 1, column 5 of a [96, 64] matrix
  await writeFile(`${dir}/nan/model.safetensors`, file);
  await assert.rejects(loadModel(`${dir}/nan`), /FP8 tensor "model\.layers\.1\.mlp\.gate_proj\.weight" in ".*" holds a NaN code \(0x7f or 0xff\) at row 1, column 5/);
});

const webgpu = await poisonedWebGpu("FP8 forward on WebGPU");

test("forward() on WebGPU over an FP8 checkpoint's f8_e4m3 matrices gives the reference's logits of the values they stand for", async () => {
  const { gpu, why } = webgpu;
  assert.ok(gpu, why);
  await writePair(SPEC, `${dir}/fwd`, `${dir}/fwd-ref`, randomHfWeights({ ...SPEC, seed: 88 }), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  const fp8 = await loadModel(`${dir}/fwd`);
  assert.equal(fp8.weights.layers[0].wGate!.dtype, "f8_e4m3");
  const entry = { tokens: [1, 17, 120, 255, 3, 42, 299], startPos: 0, blockTable: [0] };
  const got = await stepLogits(gpu, fp8, [entry], true);
  // The reference reads the directory of the values the codes stand for (o_proj rounded to bf16, as loaded).
  const want = await stepLogits(createReferenceBackend(), fp8, [entry], true);
  const plain = await stepLogits(createReferenceBackend(), await loadModel(`${dir}/fwd-ref`), [entry], true);
  const worst = (a: Float32Array, b: Float32Array) => a.reduce((w, v, i) => Math.max(w, Math.abs(v - b[i])), 0);
  assert.ok(worst(got, want) < 1e-4, `WebGPU vs reference on the same weights: ${worst(got, want)}`);
  // Only o_proj's bf16 rounding separates the load from the directory of exact values.
  assert.ok(worst(want, plain) < 0.05, `FP8 load vs exact values: ${worst(want, plain)}`);
}, { ignore: webgpu.skip });

test("fp8 test files are removed", () => {
  rmSync(dir, { recursive: true, force: true });
});

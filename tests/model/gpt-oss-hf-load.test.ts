/**
 * Loading GPT-OSS Hugging Face checkpoints (hf-gpt-oss.ts): the fused MXFP4 or float experts read
 * into the same tensors as the GGUF of the same weights, config.json's sliding layers and YaRN
 * (with transformers' `truncate`), harmony stops, and clear refusals. The forward from both is
 * checked against llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type { WeightDType } from "../../src/backend/types.ts";
import { type HostTensor, type LoadedModel, ModelLoadError } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { yarnFreqFactors } from "../../src/model/rope-scaling.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/gpt-oss-hf-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "gpt-oss",
  ropeTheta: 150000, seed: 72, slidingWindow: 6, experts: { count: 4, used: 2 },
  yarn: { factor: 32, originalContext: 16, betaFast: 32, betaSlow: 1 },
};

/** The same weights as a GGUF and as an HF directory; GGUF matrices in `ggufDtype`'s types. */
async function both(name: string, spec: ModelFileSpec): Promise<{ gguf: LoadedModel; hf: LoadedModel; hfDir: string }> {
  const weights = randomHfWeights(spec);
  await writeFile(`${dir}/${name}.gguf`, ggufBytes(spec, weights));
  await writeHfDirectory(`${dir}/${name}`, spec, weights);
  return { gguf: await loadModel(`${dir}/${name}.gguf`), hf: await loadModel(`${dir}/${name}`), hfDir: `${dir}/${name}` };
}

function sameTensor(a: HostTensor | undefined, b: HostTensor | undefined, what: string): void {
  assert.ok(a && b, `${what}: missing`);
  assert.deepEqual([a.dtype, a.shape], [b.dtype, b.shape], what);
  assert.ok(Buffer.from(a.data).equals(Buffer.from(b.data)), `${what}: bytes differ`);
}

function sameLayers(gguf: LoadedModel, hf: LoadedModel): void {
  gguf.weights.layers.forEach((l, i) => {
    for (const [role, t] of Object.entries(l)) sameTensor(hf.weights.layers[i][role as keyof typeof l] as HostTensor | undefined, t as HostTensor, `layer ${i} ${role}`);
  });
}

const expertsOnly = (dtype: WeightDType) => (name: string): WeightDType => (/_exps\.weight$/.test(name) ? dtype : "f32");

test("loadModel() reads gpt-oss's MXFP4 gate_up_proj/down_proj blocks into the GGUF's expert bytes, bit for bit", async () => {
  const { gguf, hf } = await both("mxfp4", { ...SPEC, dtype: "mxfp4", ggufDtype: expertsOnly("mxfp4") });
  assert.equal(hf.weights.layers[0].wGate!.dtype, "mxfp4");
  assert.deepEqual(hf.weights.layers[0].wGate!.shape, [4, 64, 32]);
  assert.deepEqual(hf.weights.layers[0].wDown!.shape, [4, 32, 64]);
  sameLayers(gguf, hf);
  const c = hf.config;
  for (const key of ["slidingWindow", "moe", "attentionScale", "ropeFreqFactors", "outputBias", "attentionSinks", "qkvBias", "ropeLayout", "intermediateSize"] as const) {
    assert.deepEqual(c[key], gguf.config[key], key);
  }
  assert.deepEqual(c.slidingWindow, { size: 6, layers: [true, false, true] });
});

test("loadModel() reads a dequantized gpt-oss checkpoint (float gate_up_proj [experts, in, 2·width]) as the GGUF's experts", async () => {
  const { gguf, hf } = await both("bf16", { ...SPEC, dtype: "bf16", seed: 73 });
  assert.equal(hf.weights.layers[1].wUp!.dtype, "bf16");
  sameLayers(gguf, hf);
});

test("loadModel() runs gpt-oss YaRN without rounding the ramp when config.json says truncate: false, as transformers does", async () => {
  const { hfDir } = await both("truncate", { ...SPEC, headDim: 64, hidden: 64, seed: 74 });
  const cfg = JSON.parse(readFileSync(`${hfDir}/config.json`, "utf8"));
  const factors = async (truncate: Record<string, boolean>) => {
    cfg.rope_scaling = { ...cfg.rope_scaling, factor: 32, original_max_position_embeddings: 4096, ...truncate };
    writeFileSync(`${hfDir}/config.json`, JSON.stringify(cfg));
    return (await loadModel(hfDir)).config.ropeFreqFactors!;
  };
  const rounded = await factors({});
  const exact = await factors({ truncate: false });
  // transformers' `_compute_yarn_parameters`, transcribed: inverse frequencies blended by a linear
  // ramp between the (unrounded) correction dims, read back as divisors of the base frequencies.
  const dim = 64, base = 150000, factor = 32;
  const corr = (rot: number) => (dim * Math.log(4096 / (rot * 2 * Math.PI))) / (2 * Math.log(base));
  const [low, high] = [Math.max(corr(32), 0), Math.min(corr(1), dim - 1)];
  const expected = Array.from({ length: dim / 2 }, (_, i) => {
    const pos = base ** ((2 * i) / dim);
    const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
    const extrapolation = 1 - ramp;
    const invFreq = (1 / (factor * pos)) * (1 - extrapolation) + (1 / pos) * extrapolation;
    return 1 / pos / invFreq;
  });
  exact.forEach((f, i) => assert.ok(Math.abs(f - expected[i]) < 1e-9 * expected[i], `pair ${i}: ${f} vs ${expected[i]}`));
  // Rounding moves the ramp's ends (8.09 → 8, 17.4 → 18), so pairs inside it differ.
  assert.ok(Math.abs(exact[12] - rounded[12]) > 0.01, `${exact[12]} vs ${rounded[12]}`);
  assert.deepEqual(yarnFreqFactors(base, dim, { factor, originalContext: 4096, betaFast: 32, betaSlow: 1 }), rounded);
});

test("loadModel() gives a gpt-oss HF checkpoint harmony's stops: <|return|> and <|call|>, not <|end|>", async () => {
  // The harmony tokens sit inside the embedding (as in gpt-oss, 201,088 rows): ids past it are no tokens of the model.
  const { hfDir } = await both("stops", { ...SPEC, vocab: 303, seed: 75 });
  const tok = JSON.parse(readFileSync(`${hfDir}/tokenizer.json`, "utf8"));
  const added = ["<|end|>", "<|return|>", "<|call|>"].map((content, i) => ({ id: 300 + i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  tok.added_tokens = [...(tok.added_tokens ?? []), ...added];
  writeFileSync(`${hfDir}/tokenizer.json`, JSON.stringify(tok));
  const cfg = JSON.parse(readFileSync(`${hfDir}/config.json`, "utf8"));
  writeFileSync(`${hfDir}/config.json`, JSON.stringify({ ...cfg, eos_token_id: 300 }));
  const { eosTokenIds } = (await loadModel(hfDir)).config;
  assert.deepEqual([...eosTokenIds].sort(), [301, 302]);
});

test("loadModel() refuses gpt-oss checkpoints it would run wrongly, naming the problem", async () => {
  const { hfDir } = await both("refuse", { ...SPEC, dtype: "mxfp4", ggufDtype: expertsOnly("mxfp4"), seed: 76 });
  const cfg = JSON.parse(readFileSync(`${hfDir}/config.json`, "utf8"));
  const withConfig = async (patch: Record<string, unknown>, pattern: RegExp) => {
    writeFileSync(`${hfDir}/config.json`, JSON.stringify({ ...cfg, ...patch }));
    await assert.rejects(loadModel(hfDir), (e: Error) => e instanceof ModelLoadError && pattern.test(e.message), JSON.stringify(patch));
  };
  await withConfig({ layer_types: ["sliding_attention", "full_attention"] }, /"layer_types" .* each of its 3 layers/);
  await withConfig({ layer_types: ["sliding_attention", "chunked_attention", "full_attention"] }, /"layer_types"/);
  await withConfig({ rope_scaling: { rope_type: "longrope", factor: 4 } }, /rope_scaling type "longrope"; GPT-OSS models support "yarn"/);
  await withConfig({ num_experts_per_tok: 5 }, /"num_experts_per_tok" .* should be 1 to 4, got 5/);
  await withConfig({ sliding_window: 2.5 }, /"sliding_window" .* positive whole number of positions, got 2.5/);
  // MXFP4 scales whose shape does not match their blocks.
  writeFileSync(`${hfDir}/config.json`, JSON.stringify(cfg));
  const path = `${hfDir}/model.safetensors`;
  const bytes = readFileSync(path);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = bytes.subarray(8, 8 + headerLength).toString("utf8");
  const name = "model.layers.1.mlp.experts.down_proj_scales";
  const broken = header.replace(new RegExp(`("${name.replaceAll(".", "\\.")}":\\{"dtype":"U8","shape":)\\[4,32,2\\]`), "$1[4,64,1]");
  assert.notEqual(broken, header);
  writeFileSync(path, Buffer.concat([bytes.subarray(0, 8), Buffer.from(broken, "utf8"), bytes.subarray(8 + headerLength)]));
  await assert.rejects(loadModel(hfDir), /MXFP4 tensors "model\.layers\.1\.mlp\.experts\.down_proj_blocks" .* should be U8 \[experts, rows, blocks, 16\]/);
});

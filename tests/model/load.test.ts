/** loadModel(): the bundled model's config, progress, HF directories ≡ GGUF, and directory errors. */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { type LoadedModel, ModelLoadError, tokenTextOf } from "../../src/model/config.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { appendedToken } from "../../src/model/hf-loader.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { loadModel, type LoadProgress } from "../../src/model/load.ts";
import { encodeSafetensors, readSafetensor, readSafetensorsHeader } from "../../src/model/safetensors.ts";
import { openRandomAccess, readTextFile, writeFile } from "../../src/runtime/fs.ts";
import { projectRoot, test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights, vocabFor, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/load-test-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();

const LLAMA: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, vocab: 300,
  tied: false, dtype: "f32", seed: 11,
};

async function lastLogits(model: LoadedModel, tokens: number[]): Promise<Float32Array> {
  const dm = uploadModel(be, model);
  const kv = allocatePagedKv(be, model.config, 2, 16);
  const out = forward(be, dm, kv, { entries: [{ tokens, startPos: 0, blockTable: [1, 0] }] });
  const data = (await be.download(out)) as Float32Array;
  be.free(out);
  return data;
}

async function writeBoth(name: string, spec: ModelFileSpec): Promise<{ gguf: string; hf: string }> {
  const w = randomHfWeights(spec);
  const gguf = `${dir}/${name}.gguf`;
  await writeFile(gguf, ggufBytes(spec, w));
  await writeHfDirectory(`${dir}/${name}`, spec, w);
  return { gguf, hf: `${dir}/${name}` };
}

test("loadModel() reads stories260K's config and reports progress up to the total", async () => {
  const progress: LoadProgress[] = [];
  const m = await loadModel(`${projectRoot}/models/stories260K.gguf`, { onProgress: (p) => progress.push(p) });
  const c = m.config;
  assert.deepEqual(
    [c.architecture, c.hiddenSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.intermediateSize, c.vocabSize],
    ["llama", 64, 5, 8, 4, 8, 172, 512],
  );
  assert.equal(c.ropeTheta, 10000);
  assert.ok(Math.abs(c.rmsNormEps - 1e-5) < 1e-9);
  assert.equal(c.ropeLayout, "normal");
  assert.deepEqual([c.bosTokenId, c.eosTokenIds, c.addBos, c.qkvBias, c.qkNorm], [1, [2], true, false, false]);
  assert.equal(m.weights.layers.length, 5);
  assert.equal(m.weights.layers[0].attnNorm?.dtype, "f32");
  assert.ok(progress.length > 10);
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].bytesRead > progress[i - 1].bytesRead);
  const last = progress[progress.length - 1];
  assert.equal(last.bytesRead, last.totalBytes);
});

test("loadModel() maps GGUF metadata for Qwen2 and Qwen3 (bias, q/k norm, tied, neox rope, BPE vocab)", async () => {
  const q2 = { ...LLAMA, architecture: "qwen2", tied: true, dtype: "f16", seed: 12 } as const;
  const q3 = { ...LLAMA, architecture: "qwen3", heads: 3, kvHeads: 1, headDim: 16, dtype: "bf16", seed: 13 } as const;
  await writeFile(`${dir}/q2.gguf`, ggufBytes(q2, randomHfWeights(q2)));
  await writeFile(`${dir}/q3.gguf`, ggufBytes(q3, randomHfWeights(q3)));
  const m2 = await loadModel(`${dir}/q2.gguf`);
  const m3 = await loadModel(`${dir}/q3.gguf`);
  assert.deepEqual([m2.config.qkvBias, m2.config.qkNorm, m2.config.tiedEmbeddings, m2.config.ropeLayout], [true, false, true, "neox"]);
  assert.equal(m2.weights.output, undefined);
  assert.equal(m2.weights.layers[0].wq!.dtype, "f16");
  assert.equal(m2.weights.layers[0].bq?.dtype, "f32");
  assert.deepEqual([m3.config.qkvBias, m3.config.qkNorm, m3.config.numHeads, m3.config.numKvHeads, m3.config.headDim], [false, true, 3, 1, 16]);
  assert.deepEqual(m3.weights.layers[1].qNorm?.shape, [16]);
  assert.equal(m3.config.ropeTheta, 1000000);
  assert.equal(m3.config.addBos, false);
  assert.equal(m3.tokenizer.decode(m3.tokenizer.encode("hello world")), "hello world");
});

test("encodeSafetensors() and readSafetensor() round-trip f32, f16 and bf16", async () => {
  const t = (name: string, dtype: "f32" | "f16" | "bf16", shape: number[]) => ({
    name, dtype, shape, data: Uint8Array.from({ length: shape.reduce((a, b) => a * b, 1) * (dtype === "f32" ? 4 : 2) }, (_, i) => (i * 37) & 255),
  });
  const tensors = [t("a", "f32", [3, 5]), t("b.weight", "f16", [7]), t("c", "bf16", [2, 2, 3])];
  await writeFile(`${dir}/rt.safetensors`, encodeSafetensors(tensors, { format: "pt" }));
  const file = await openRandomAccess(`${dir}/rt.safetensors`);
  try {
    const header = await readSafetensorsHeader(file);
    assert.deepEqual(header.metadata, { format: "pt" });
    for (const x of tensors) assert.deepEqual(await readSafetensor(file, header.tensors.get(x.name)!), x);
  } finally {
    await file.close();
  }
  const bytes = encodeSafetensors(tensors);
  await writeFile(`${dir}/cut.safetensors`, bytes.subarray(0, bytes.byteLength - 3));
  const cut = await openRandomAccess(`${dir}/cut.safetensors`);
  await assert.rejects(readSafetensorsHeader(cut), /Safetensors file ".*" is truncated: "c" ends at byte \d+ but the file has \d+/);
  await cut.close();
});

for (const spec of [
  LLAMA,
  { ...LLAMA, architecture: "llama", heads: 3, kvHeads: 1, headDim: 8, hidden: 24, tied: true, seed: 14 },
  { ...LLAMA, architecture: "qwen2", seed: 15 },
  { ...LLAMA, architecture: "qwen3", tied: true, dtype: "bf16", seed: 16 },
] as ModelFileSpec[]) {
  const what = `${spec.architecture} ${spec.heads}/${spec.kvHeads} heads${spec.tied ? " tied" : ""} ${spec.dtype}`;
  test(`loadModel() gives the same logits from a safetensors directory and a GGUF of it (${what})`, async () => {
    const paths = await writeBoth(`same-${spec.seed}`, spec);
    const fromGguf = await loadModel(paths.gguf);
    const fromHf = await loadModel(paths.hf);
    assert.equal(fromHf.config.ropeLayout, "neox");
    assert.equal(fromGguf.config.ropeLayout, spec.architecture === "llama" ? "normal" : "neox");
    const { architecture: _a, ropeLayout: _r, bosTokenId: _b, eosTokenIds: _e, addBos: _ab, ...shapeOnly } = fromHf.config;
    const { architecture: _a2, ropeLayout: _r2, bosTokenId: _b2, eosTokenIds: _e2, addBos: _ab2, ...shapeOnly2 } = fromGguf.config;
    assert.deepEqual(shapeOnly, { ...shapeOnly2, contextLength: shapeOnly.contextLength });
    if (spec.architecture === "llama") {
      // The q rows really differ between the files: the permutation is exercised, not bypassed.
      assert.notDeepEqual(fromHf.weights.layers[0].wq!.data, fromGguf.weights.layers[0].wq!.data);
    }
    const tokens = [5, 77, 200, 3, 3, 150, 299, 42, 18];
    const a = await lastLogits(fromGguf, tokens);
    const b = await lastLogits(fromHf, tokens);
    const scale = Math.max(...a.map(Math.abs));
    a.forEach((v, i) => assert.ok(Math.abs(v - b[i]) <= 1e-4 * scale, `logit ${i}: ${v} vs ${b[i]}`));
  });
}

test("loadModel() reads a sharded safetensors directory through its index", async () => {
  const spec = { ...LLAMA, seed: 17 };
  const w = randomHfWeights(spec);
  await writeHfDirectory(`${dir}/sharded`, spec, w);
  const single = await loadModel(`${dir}/sharded`);
  const names = [...w.keys()];
  const half = Math.ceil(names.length / 2);
  const file = await openRandomAccess(`${dir}/sharded/model.safetensors`);
  const header = await readSafetensorsHeader(file);
  const shard = async (list: string[]) => encodeSafetensors(await Promise.all(list.map((n) => readSafetensor(file, header.tensors.get(n)!))));
  await writeFile(`${dir}/sharded/model-00001-of-00002.safetensors`, await shard(names.slice(0, half)));
  await writeFile(`${dir}/sharded/model-00002-of-00002.safetensors`, await shard(names.slice(half)));
  await file.close();
  rmSync(`${dir}/sharded/model.safetensors`);
  const weightMap = Object.fromEntries(names.map((n, i) => [n, `model-0000${i < half ? 1 : 2}-of-00002.safetensors`]));
  await writeFile(`${dir}/sharded/model.safetensors.index.json`, JSON.stringify({ metadata: {}, weight_map: weightMap }));
  const sharded = await loadModel(`${dir}/sharded`);
  assert.deepEqual(sharded.weights, single.weights);
  assert.match(sharded.chatTemplate ?? "", /im_start/);
});

test("loadModel() explains what a model directory lacks or gets wrong", async () => {
  const spec = { ...LLAMA, seed: 18 };
  await writeHfDirectory(`${dir}/broken`, spec, randomHfWeights(spec));
  rmSync(`${dir}/broken/tokenizer.json`);
  await assert.rejects(loadModel(`${dir}/broken`), (e: unknown) =>
    e instanceof ModelLoadError && /Model directory lacks tokenizer\.json: ".*tokenizer\.json" not found/.test(e.message));
  mkdirSync(`${dir}/empty`);
  await assert.rejects(loadModel(`${dir}/empty`), /Model directory lacks config\.json/);
  await writeHfDirectory(`${dir}/arch`, spec, randomHfWeights(spec));
  const cfg = JSON.parse(await readTextFile(`${dir}/arch/config.json`));
  await writeFile(`${dir}/arch/config.json`, JSON.stringify({ ...cfg, architectures: ["MambaForCausalLM"] }));
  await assert.rejects(loadModel(`${dir}/arch`), /Unknown architecture "MambaForCausalLM" in ".*"; supported: LlamaForCausalLM/);
  await writeFile(`${dir}/arch/config.json`, JSON.stringify({ ...cfg, hidden_size: 40 }));
  await assert.rejects(loadModel(`${dir}/arch`), /Tensor "model\.embed_tokens\.weight" in ".*" has shape \[300,32\], expected \[300,40\]/);
});

test("loadModel() takes a directory's generation_config.json: its end-of-turn tokens and sampling defaults", async () => {
  const spec = { ...LLAMA, seed: 19 };
  await writeHfDirectory(`${dir}/gen`, spec, randomHfWeights(spec));
  const plain = await loadModel(`${dir}/gen`);
  assert.equal(plain.config.samplingDefaults, undefined, "no generation_config.json: no defaults");
  const [eos] = plain.config.eosTokenIds;
  const gen = { eos_token_id: [eos, 77], temperature: 0.6, top_p: 0.95, top_k: 20, max_new_tokens: 64, repetition_penalty: 1.05, min_p: 0, typical_p: 0.9, do_sample: true };
  await writeFile(`${dir}/gen/generation_config.json`, JSON.stringify(gen));
  const m = await loadModel(`${dir}/gen`);
  assert.deepEqual(m.config.eosTokenIds, [eos, 77], "config.json's EOS, then the end-of-turn token it lacks");
  assert.deepEqual(m.config.samplingDefaults, { temperature: 0.6, topP: 0.95, topK: 20, repetitionPenalty: 1.05, maxTokens: 64, unsupported: ["typical_p"] }, "min_p 0 changes nothing");
  await writeFile(`${dir}/gen/generation_config.json`, JSON.stringify({ ...gen, top_p: "0.9" }));
  await assert.rejects(loadModel(`${dir}/gen`), (e: unknown) => e instanceof ModelLoadError && e.message === `generation_config.json's top_p must be a valid number, got "0.9"`);
  await writeFile(`${dir}/gen/generation_config.json`, JSON.stringify({ eos_token_id: 300 }));
  await assert.rejects(loadModel(`${dir}/gen`), /eos_token_id must be token ids of the vocabulary of 300, got 300/);
});

test("loadModel() takes a GGUF's general.sampling.* defaults, reporting those it cannot apply, and refuses values out of range", async () => {
  const w = randomHfWeights(LLAMA);
  const write = async (name: string, metadata: [string, ReturnType<typeof gguf.f32>][]) => {
    await writeFile(`${dir}/${name}.gguf`, ggufBytes(LLAMA, w, undefined, { metadata }));
    return `${dir}/${name}.gguf`;
  };
  assert.equal((await loadModel(await write("sampling-none", []))).config.samplingDefaults, undefined);
  const m = await loadModel(await write("sampling", [
    ["general.sampling.temp", gguf.f32(0.6)], ["general.sampling.top_p", gguf.f32(0.95)], ["general.sampling.top_k", gguf.i32(20)],
    ["general.sampling.min_p", gguf.f32(0)], ["general.sampling.penalty_repeat", gguf.f32(1.05)], ["general.sampling.penalty_last_n", gguf.i32(64)],
    ["general.sampling.mirostat", gguf.u32(0)], ["general.sampling.xtc_probability", gguf.f32(0.5)], ["general.sampling.sequence", gguf.str("penalties;top_k;top_p;temp")],
  ]));
  assert.deepEqual(m.config.samplingDefaults, {
    temperature: 0.6, topP: 0.95, topK: 20, repetitionPenalty: 1.05, unsupported: ["xtc_probability", "penalty_last_n", "sequence"], source: "GGUF general.sampling",
  }, "min_p 0 and mirostat 0 change nothing; f32 values as their shortest decimals");
  await assert.rejects(loadModel(await write("sampling-bad", [["general.sampling.top_p", gguf.f32(1.5)]])), (e: unknown) =>
    e instanceof ModelLoadError && /GGUF metadata "general\.sampling\.top_p" in ".*sampling-bad\.gguf" should be a number above 0 and at most 1, got 1\.5/.test(e.message));
  await assert.rejects(loadModel(await write("sampling-str", [["general.sampling.temp", gguf.str("hot")]])), /"general\.sampling\.temp" .* should be a number from 0, got "hot"/);
});

test("decodeToF32() of loaded norm weights equals the written values", async () => {
  const spec = { ...LLAMA, dtype: "q8_0", ffn: 64, seed: 19 } as ModelFileSpec;
  const w = randomHfWeights(spec);
  await writeFile(`${dir}/q8.gguf`, ggufBytes(spec, w));
  const m = await loadModel(`${dir}/q8.gguf`);
  assert.equal(m.weights.layers[0].wUp!.dtype, "q8_0");
  const norm = m.weights.layers[1].ffnNorm!;
  assert.deepEqual(decodeToF32(norm.data, "f32", spec.hidden), w.get("model.layers.1.post_attention_layernorm.weight")!.values);
});

test("loadModel() reads the token a tokenizer ends texts with (appendEosTokenId) from GGUF add_eos_token and an HF post-processor, and GGUF's pooling type", async () => {
  const w = randomHfWeights(LLAMA);
  const vocab = vocabFor(LLAMA);
  const plain = `${dir}/no-eos.gguf`;
  await writeFile(plain, ggufBytes(LLAMA, w));
  assert.equal((await loadModel(plain)).config.appendEosTokenId, undefined);
  const withEos = `${dir}/add-eos.gguf`;
  await writeFile(withEos, ggufBytes(LLAMA, w, vocab, { metadata: [["tokenizer.ggml.add_eos_token", gguf.bool(true)]] }));
  assert.equal((await loadModel(withEos)).config.appendEosTokenId, vocab.eosId);
  // llama.cpp's pooling type, where an embedding model's file gives it (2: CLS).
  const cls = `${dir}/pooling.gguf`;
  await writeFile(cls, ggufBytes(LLAMA, w, vocab, { metadata: [["llama.pooling_type", gguf.u32(2)]] }));
  assert.equal((await loadModel(cls)).config.poolingType, "cls");
  assert.equal((await loadModel(plain)).config.poolingType, undefined);
  // A Hugging Face directory whose tokenizer.json appends its EOS after the text.
  const hf = `${dir}/hf-eos`;
  await writeHfDirectory(hf, LLAMA, w);
  const before = await loadModel(hf);
  assert.equal(before.config.appendEosTokenId, undefined);
  const tok = JSON.parse(await readTextFile(`${hf}/tokenizer.json`)) as Record<string, unknown>;
  const eosText = tokenTextOf(before.tokenizer, before.config.eosTokenIds[0], { special: true });
  tok.post_processor = { type: "Sequence", processors: [{ type: "ByteLevel" }, { type: "TemplateProcessing", single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: eosText, type_id: 0 } }] }] };
  await writeFile(`${hf}/tokenizer.json`, JSON.stringify(tok));
  assert.equal((await loadModel(hf)).config.appendEosTokenId, before.config.eosTokenIds[0]);
});

test("appendedToken() reads add_eos_token and TemplateProcessing's last special token, and nothing else", () => {
  const tp = (single: unknown[]) => ({ post_processor: { type: "TemplateProcessing", single } });
  assert.equal(appendedToken(tp([{ Sequence: { id: "A" } }, { SpecialToken: { id: "<|endoftext|>" } }]), {}), "<|endoftext|>");
  // Llama 3's: BOS before the text, nothing after it.
  assert.equal(appendedToken(tp([{ SpecialToken: { id: "<|begin_of_text|>" } }, { Sequence: { id: "A" } }]), {}), undefined);
  assert.equal(appendedToken({ post_processor: { type: "ByteLevel" } }, {}), undefined);
  assert.equal(appendedToken({}, { add_eos_token: true, eos_token: { content: "</s>" } }), "</s>");
  assert.equal(appendedToken({}, { add_eos_token: false, eos_token: "</s>" }), undefined);
});

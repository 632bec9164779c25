/**
 * Odd and broken model and adapter files (hunt 5): HF configs whose head size or KV heads no model
 * can have, GGUF metadata of the wrong shape or value, an empty vocabulary, FP8 scales stored as
 * F16, and PEFT adapters scaled by a non-finite number. Each must give a one-line ModelLoadError
 * naming the field and quoting the bad value (or, for F16 scales, load), never a misleading error
 * about another field nor silently wrong numbers.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { type HostTensor, ModelLoadError } from "../../src/model/config.ts";
import { readingFp8 } from "../../src/model/fp8.ts";
import { type GgufEntry, GgufType } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors, type SafetensorsInfo } from "../../src/model/safetensors.ts";
import { hfRopeFreqFactors } from "../../src/model/rope-scaling.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { expectLoadError, ggufBytes, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/loader-hunt5-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300,
  tied: true, dtype: "f32", seed: 5,
};
const WEIGHTS = randomHfWeights(SPEC);

/** The test model as a GGUF with metadata entries added or replaced. */
async function ggufWith(name: string, metadata: [string, GgufEntry][]): Promise<string> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, ggufBytes(SPEC, WEIGHTS, undefined, { metadata }));
  return path;
}

/** The test model's HF directory with config.json replaced by `edit` of it (raw JSON text, so 1e400 can be written). */
async function hfWithConfig(name: string, edit: (cfg: Record<string, unknown>) => string): Promise<string> {
  const path = `${dir}/hf-${name}`;
  await writeHfDirectory(path, SPEC, WEIGHTS);
  await writeFile(`${path}/config.json`, edit(JSON.parse(readFileSync(`${path}/config.json`, "utf8"))));
  return path;
}

test("hfConfig() names head_dim when it is no usable head size instead of blaming partial_rotary_factor", async () => {
  const cases: [string, (cfg: Record<string, unknown>) => string, RegExp][] = [
    ["hd-0", (c) => JSON.stringify({ ...c, head_dim: 0 }), /^"head_dim" in ".*hf-hd-0" should be a positive whole number, got 0$/],
    ["hd-inf", (c) => JSON.stringify({ ...c, head_dim: 8 }).replace('"head_dim":8', '"head_dim":1e400'), /"head_dim" in ".*" should be a positive whole number, got Infinity$/],
    ["hd-frac", (c) => JSON.stringify({ ...c, head_dim: 8.5 }), /"head_dim" in ".*" should be a positive whole number, got 8\.5$/],
    // Without head_dim, transformers' hidden_size // num_attention_heads: 0 when the heads outnumber the hidden size.
    ["hd-derived", ({ head_dim: _, ...c }) => JSON.stringify({ ...c, num_attention_heads: 64, num_key_value_heads: 64 }),
      /^Model ".*hf-hd-derived" has hidden_size 32 over 64 attention heads \(head size 0\); config\.json should give a positive head_dim$/],
  ];
  for (const [name, edit, pattern] of cases) await expectLoadError(loadModel(await hfWithConfig(name, edit)), pattern);
});

test("hfConfig() rejects KV heads that do not divide the attention heads, as ggufConfig() does", async () => {
  // Self-consistent tensors (k/v of 3 heads of 8): only the head counts are wrong.
  const spec: ModelFileSpec = { ...SPEC, hidden: 32, heads: 4, kvHeads: 3 };
  const path = `${dir}/hf-kv3`;
  await writeHfDirectory(path, spec, randomHfWeights(spec));
  await expectLoadError(loadModel(path), /^Model ".*hf-kv3" has 4 attention heads \(num_attention_heads\), not a multiple of its 3 KV heads \(num_key_value_heads\)$/);
});

test("hfConfig() rejects a rope_parameters.rope_theta that is no number instead of running at 10000", async () => {
  const path = await hfWithConfig("rp-theta", (c) => JSON.stringify({ ...c, rope_parameters: { rope_type: "default", rope_theta: "1e6" } }));
  await expectLoadError(loadModel(path), /"rope_parameters\.rope_theta" in ".*" should be a number, got "1e6"$/);
});

test("ggufConfig() rejects an attention.key_length no head can have, naming the key", async () => {
  for (const [i, entry] of [gguf.u32(0), gguf.f32(NaN), gguf.f32(8.5)].entries()) {
    const path = await ggufWith(`key-length-${i}`, [["llama.attention.key_length", entry]]);
    await expectLoadError(loadModel(path), /GGUF metadata "llama\.attention\.key_length" in ".*" should be a positive whole number, got (0|NaN|8\.5)$/);
  }
});

test("ggufConfig() rejects per-layer arrays that are empty or hold no numbers instead of reading \"2\" as 2", async () => {
  const empty = await ggufWith("ffn-empty", [["llama.feed_forward_length", gguf.arr(GgufType.UINT32, [])]]);
  await expectLoadError(loadModel(empty), /GGUF metadata "llama\.feed_forward_length" in ".*" is an empty array; expected a number or one per layer$/);
  const strings = await ggufWith("kv-strings", [["llama.attention.head_count_kv", gguf.arr(GgufType.STRING, ["2"])]]);
  await expectLoadError(loadModel(strings), /GGUF metadata "llama\.attention\.head_count_kv" in ".*" should hold numbers, got "2" at index 0$/);
});

test("ggufTokenizer() rejects an empty vocabulary and NaN scores", async () => {
  const empty = await ggufWith("tokens-empty", [
    ["tokenizer.ggml.tokens", gguf.arr(GgufType.STRING, [])],
    ["tokenizer.ggml.scores", gguf.arr(GgufType.FLOAT32, [])],
    ["tokenizer.ggml.token_type", gguf.arr(GgufType.INT32, [])],
  ]);
  await expectLoadError(loadModel(empty), /^Model ".*tokens-empty\.gguf" has no tokenizer vocab \(tokenizer\.ggml\.tokens is empty\)$/);
  const scores = Array.from({ length: 300 }, (_, i) => (i === 7 ? NaN : -i));
  const nan = await ggufWith("scores-nan", [["tokenizer.ggml.scores", gguf.arr(GgufType.FLOAT32, scores)]]);
  await expectLoadError(loadModel(nan), /GGUF metadata "tokenizer\.ggml\.scores" in ".*" should hold numbers, got NaN at index 7$/);
});

test("ggufMoe() rejects an expert_weights_scale that is not a finite positive number", async () => {
  const moe: ModelFileSpec = { ...SPEC, architecture: "qwen3moe", ffn: 16, experts: { count: 4, used: 2 } };
  const weights = randomHfWeights(moe);
  for (const [i, v] of [NaN, -1].entries()) {
    const path = `${dir}/moe-scale-${i}.gguf`;
    await writeFile(path, ggufBytes(moe, weights, undefined, { metadata: [["qwen3moe.expert_weights_scale", gguf.f32(v)]] }));
    await expectLoadError(loadModel(path), /GGUF metadata "qwen3moe\.expert_weights_scale" in ".*" should be a positive number or 0, got (NaN|-1)$/);
  }
});

test("readingFp8() reads F16 scales, as compressed-tensors writes them for float16 models", async () => {
  // [2, 2] rows are not whole 32-value blocks (dequantized to bf16); [2, 32] ones load as f8_e4m3.
  for (const cols of [2, 32]) {
    const codes = new Uint8Array(2 * cols);
    codes.set([0x38, 0x40]); // 1, 2 in row 0
    codes.set([0xb8, 0x00], cols); // -1, 0 in row 1
    const infos = new Map<string, SafetensorsInfo>([
      ["w", { name: "w", dtype: "F8_E4M3", shape: [2, cols], begin: 0, end: 2 * cols }],
      ["w_scale", { name: "w_scale", dtype: "F16", shape: [2, 1], begin: 0, end: 4 }],
    ]);
    const bytes = new Map([["w", codes], ["w_scale", encodeFromF32(Float32Array.of(0.5, 4), "f16")]]);
    const source = {
      has: (n: string) => infos.has(n),
      byteLength: (n: string) => infos.get(n)!.end,
      read: (): Promise<HostTensor> => Promise.reject(new Error("not reached")),
    };
    const raw = { info: (n: string) => infos.get(n), bytes: (n: string) => Promise.resolve(bytes.get(n)!) };
    const t = await readingFp8(source, raw, {}, "fp16-fp8").read("w");
    assert.equal(t.dtype, cols === 2 ? "bf16" : "f8_e4m3");
    const values = decodeToF32(t.data, t.dtype, 2 * cols);
    assert.deepEqual([values[0], values[1], values[cols], values[cols + 1]], [0.5, 1, -4, 0], `${cols} columns`);
  }
});

/** A PEFT adapter directory adapting layer 0's q_proj at rank 4 with B all ones. */
async function peftDir(name: string, config: string): Promise<string> {
  const path = `${dir}/peft-${name}`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, config);
  const prefix = "base_model.model.model.layers.0.self_attn.q_proj";
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors([
    { name: `${prefix}.lora_A.weight`, shape: [4, 32], dtype: "f32", data: encodeFromF32(new Float32Array(4 * 32).fill(1), "f32") },
    { name: `${prefix}.lora_B.weight`, shape: [32, 4], dtype: "f32", data: encodeFromF32(new Float32Array(32 * 4).fill(1), "f32") },
  ]));
  return path;
}

test("loadPeftLora() rejects a non-finite scale, as loadGgufLora() does, instead of loading NaN weights", async () => {
  const base = await loadModel(await ggufWith("peft-base", []));
  const path = await peftDir("scale", JSON.stringify({ r: 4, lora_alpha: 8 }));
  for (const scale of [NaN, Infinity]) {
    await expectLoadError(loadLoraAdapter(path, base.config, { scale }), /^LoRA scale should be a finite number, got (NaN|Infinity)$/);
  }
  const ok = await loadLoraAdapter(path, base.config, { scale: 0.5 });
  assert.ok(ok.maxRank === 4);
});

test("loadPeftLora() quotes a lora_alpha of 1e400 as Infinity, not as null", async () => {
  const base = await loadModel(await ggufWith("peft-base-2", []));
  const path = await peftDir("alpha-inf", '{"r": 4, "lora_alpha": 1e400}');
  await expectLoadError(loadLoraAdapter(path, base.config), /lora_alpha should be a finite number, got Infinity$/);
});

test("loadGguf() refuses one part of a split GGUF by name instead of reporting a missing tensor", async () => {
  // llama-gguf-split writes split.no (from 0), split.count and split.tensors.count into every part.
  const u16 = (value: number): GgufEntry => ({ type: GgufType.UINT16, value });
  const path = await ggufWith("model-00001-of-00003", [["split.no", u16(0)], ["split.count", u16(3)], ["split.tensors.count", gguf.i32(12)]]);
  await expectLoadError(
    loadModel(path),
    /^GGUF file ".*model-00001-of-00003\.gguf" is part 1 of a 3-file split \(split\.count\); merge the parts with llama-gguf-split --merge and load the merged file$/,
  );
  // A file that names itself the only part loads.
  const whole = await ggufWith("split-of-1", [["split.no", u16(0)], ["split.count", u16(1)]]);
  assert.equal((await loadModel(whole)).config.numLayers, 1);
});

test("loadModel() names the GGUF files of a directory without config.json (a GGUF repository's snapshot)", async () => {
  const path = `${dir}/gguf-repo`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/model-Q8_0.gguf`, ggufBytes(SPEC, WEIGHTS));
  await writeFile(`${path}/README.md`, "# model");
  await expectLoadError(loadModel(path), /^Model directory ".*gguf-repo" has no config\.json but holds GGUF files \("model-Q8_0\.gguf"\); pass one file's path as the model$/);
});

test("readGgufHeader() says a big-endian GGUF is big-endian instead of quoting a version of 50331648", async () => {
  const bytes = ggufBytes(SPEC, WEIGHTS);
  new DataView(bytes.buffer, bytes.byteOffset).setUint32(4, 3, false);
  const path = `${dir}/big-endian.gguf`;
  await writeFile(path, bytes);
  await expectLoadError(loadModel(path), /^GGUF file ".*big-endian\.gguf" is big-endian \(its version 3 is byte-swapped\); only little-endian GGUF files are read$/);
});

test("hfRopeFreqFactors() refuses a rope_scaling factor that names no rope_type, and takes one of 1 as none", () => {
  assert.throws(() => hfRopeFreqFactors({ rope_scaling: { factor: 2 } }, 10000, 8, "m"), (e: Error) => e instanceof ModelLoadError && /gives factor 2 but no rope_type/.test(e.message));
  assert.equal(hfRopeFreqFactors({ rope_scaling: { factor: 1 } }, 10000, 8, "m"), undefined);
  assert.equal(hfRopeFreqFactors({ rope_parameters: { rope_type: "default", rope_theta: 10000 } }, 10000, 8, "m"), undefined);
});

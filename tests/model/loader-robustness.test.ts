/**
 * Hostile and broken model files: every one must give a one-line ModelLoadError naming the file and
 * the bad field, never a TypeError/RangeError from deep inside, a huge allocation, or a silent load.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import type { HostTensor, ModelConfig } from "../../src/model/config.ts";
import { readGgufHeader } from "../../src/model/gguf-reader.ts";
import { type GgufEntry, GgufType } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors, readSafetensorsHeader } from "../../src/model/safetensors.ts";
import { BpeTokenizer } from "../../src/model/tokenizer-bpe.ts";
import { assembleWeights, type TensorNames } from "../../src/model/weights.ts";
import { openRandomAccess, type RandomAccessFile, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { loraGgufBytes } from "./lora-files.ts";
import { expectLoadError, ggufBytes, randomHfWeights, type ModelFileSpec, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/loader-robustness-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300,
  tied: true, dtype: "f32", seed: 7,
};
const WEIGHTS = randomHfWeights(SPEC);

/** Little-endian GGUF bytes written field by field, for headers the writer would never produce. */
class RawGguf {
  private readonly bytes: number[] = [];
  constructor(tensorCount: number | bigint, kvCount: number | bigint) {
    this.u32(0x46554747).u32(3).u64(tensorCount).u64(kvCount);
  }
  u32(v: number): this {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v, true);
    this.bytes.push(...b);
    return this;
  }
  u64(v: number | bigint): this {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(v), true);
    this.bytes.push(...b);
    return this;
  }
  str(s: string): this {
    const e = new TextEncoder().encode(s);
    this.u64(e.length);
    this.bytes.push(...e);
    return this;
  }
  /** A 1-D F32 tensor info of `n` values at `offset` in the data section. */
  tensor(name: string, n: number, offset: number): this {
    return this.str(name).u32(1).u64(n).u32(0).u64(offset);
  }
  /** The header padded with `data` zero bytes of tensor data. */
  build(data = 0): Uint8Array {
    const header = Uint8Array.from(this.bytes);
    const out = new Uint8Array(Math.ceil(header.length / 32) * 32 + data);
    out.set(header);
    return out;
  }
}

/** A file of `size` bytes (zeros after `prefix`) that allocates only what is read (at most 64 MiB at once); records the largest read. */
function virtualFile(size: number, prefix: Uint8Array): RandomAccessFile & { largestRead: number } {
  const f = {
    path: "virtual.gguf",
    size,
    largestRead: 0,
    read(offset: number, length: number): Promise<Uint8Array> {
      f.largestRead = Math.max(f.largestRead, length);
      // Stands in for the memory a real read of that size would take.
      if (length > 1 << 26) return Promise.reject(new Error(`refusing to read ${length} bytes at once`));
      const out = new Uint8Array(length);
      out.set(prefix.subarray(offset, offset + length));
      return Promise.resolve(out);
    },
    close: () => Promise.resolve(),
  };
  return f;
}

async function headerOf(name: string, bytes: Uint8Array) {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, bytes);
  const file = await openRandomAccess(path);
  try {
    return await readGgufHeader(file);
  } finally {
    await file.close();
  }
}

/** The test model as a GGUF with metadata entries added or replaced. */
async function ggufWith(name: string, metadata: [string, GgufEntry][]): Promise<string> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, ggufBytes(SPEC, WEIGHTS, undefined, { metadata }));
  return path;
}

test("readGgufHeader() rejects an array length beyond what the file could hold instead of a RangeError", async () => {
  // 2^32 + 5 one-byte items claimed in an 8 GiB file: `new Array(n)` threw "Invalid array length".
  const bytes = new RawGguf(0, 1).str("x").u32(GgufType.ARRAY).u32(GgufType.UINT8).u64(2n ** 32n + 5n).build();
  await expectLoadError(readGgufHeader(virtualFile(2 ** 33, bytes)), /"virtual\.gguf" is corrupt: array length 4294967301 is over the limit of 67108864 items/);
  const nested = new RawGguf(0, 1).str("x").u32(GgufType.ARRAY).u32(GgufType.ARRAY).u64(2n ** 36n).build();
  await expectLoadError(readGgufHeader(virtualFile(2 ** 40, nested)), /array length 68719476736 is over the limit of 67108864 items/);
  // More items than the file has bytes.
  const beyond = new RawGguf(0, 1).str("x").u32(GgufType.ARRAY).u32(GgufType.UINT8).u64(2n ** 20n).build();
  await expectLoadError(readGgufHeader(virtualFile(2 ** 16, beyond)), /array length 1048576 is larger than the file allows/);
});

test("readGgufHeader() refuses a header that would run past 1 GiB without reading it", async () => {
  // A key length of 32 GiB inside a 1 TiB file: the header window grew to the whole file.
  const file = virtualFile(2 ** 40, new RawGguf(0, 1).u64(2n ** 35n).build());
  await expectLoadError(readGgufHeader(file), /"virtual\.gguf" is corrupt: its header runs past 1073741824 bytes/);
  assert.ok(file.largestRead <= 1 << 20, `read ${file.largestRead} bytes at once`);
});

test("readGgufHeader() rejects a tensor name or metadata key that appears twice", async () => {
  const tensors = new RawGguf(2, 0).tensor("t", 8, 0).tensor("t", 8, 32).build(64);
  await expectLoadError(headerOf("dup-tensor", tensors), /is corrupt: tensor "t" appears twice/);
  const keys = new RawGguf(0, 2).str("a").u32(GgufType.UINT32).u32(1).str("a").u32(GgufType.UINT32).u32(2).build();
  await expectLoadError(headerOf("dup-key", keys), /is corrupt: metadata key "a" appears twice/);
});

test("readGgufHeader() rejects tensor data off the alignment or overlapping another tensor's", async () => {
  await expectLoadError(headerOf("misaligned", new RawGguf(1, 0).tensor("t", 8, 3).build(64)), /tensor "t" has offset 3, not a multiple of the alignment 32/);
  const overlap = new RawGguf(2, 0).tensor("a", 16, 0).tensor("b", 8, 32).build(128);
  await expectLoadError(headerOf("overlap", overlap), /is corrupt: the data of tensors "a" and "b" overlap/);
  // Adjacent and empty tensors are fine.
  const ok = await headerOf("adjacent", new RawGguf(3, 0).tensor("a", 8, 0).tensor("b", 8, 32).tensor("e", 0, 0).build(64));
  assert.deepEqual(ok.tensors.map((t) => t.name), ["a", "b", "e"]);
});

test("readGgufHeader() rejects a general.alignment that is not a power of two", async () => {
  const giant = new RawGguf(0, 1).str("general.alignment").u32(GgufType.UINT64).u64(2n ** 62n).build();
  await expectLoadError(headerOf("align-u64", giant), /general\.alignment is 4611686018427387904; expected a power of two from 1 to 2\^31/);
  const odd = new RawGguf(0, 1).str("general.alignment").u32(GgufType.UINT32).u32(24).build();
  await expectLoadError(headerOf("align-24", odd), /general\.alignment is 24; expected a power of two from 1 to 2\^31/);
});

test("GgufMetadata quotes a 64-bit value where it expected a string instead of failing to serialise it", async () => {
  const path = await ggufWith("arch-u64", [["general.architecture", gguf.u64(2n ** 60n)]]);
  await expectLoadError(loadModel(path), /^GGUF metadata "general\.architecture" in ".*arch-u64\.gguf" should be a string, got 1152921504606846976$/);
});

test("GgufMetadata.bool() rejects a flag stored as a string instead of reading \"false\" as true", async () => {
  const path = await ggufWith("addbos-str", [["tokenizer.ggml.add_bos_token", gguf.str("false")]]);
  await expectLoadError(loadModel(path), /"tokenizer\.ggml\.add_bos_token" in ".*" should be a boolean, got "false"/);
});

test("assembleWeights() fails at the first missing layer of a huge layer count without listing every name", async () => {
  const present = new Set(["embd", "norm", "l0"]);
  let named = 0;
  const names: TensorNames = {
    tokenEmbedding: "embd",
    outputNorm: "norm",
    output: "out",
    layer: (i) => {
      named++;
      return `l${i}`;
    },
  };
  const source = {
    has: (n: string) => present.has(n),
    byteLength: () => 0,
    read: (): Promise<HostTensor> => Promise.reject(new Error("not reached")),
  };
  const config = { numLayers: 200_000, tiedEmbeddings: true, qkvBias: false, qkNorm: false } as ModelConfig;
  await expectLoadError(assembleWeights(config, source, names, "big.gguf"), /^Model "big\.gguf" lacks the tensor "l1"$/);
  assert.ok(named < 100, `named ${named} tensors`);
});

test("ggufConfig() rejects a block count, context length, epsilon or RoPE base no model can have", async () => {
  const cases: [string, GgufEntry, RegExp][] = [
    ["llama.block_count", gguf.f32(1.5), /"llama\.block_count" in ".*" should be a positive whole number, got 1\.5/],
    ["llama.block_count", gguf.u32(0), /"llama\.block_count" in ".*" should be a positive whole number, got 0/],
    ["llama.context_length", gguf.u32(0), /"llama\.context_length" in ".*" should be a positive whole number, got 0/],
    ["llama.attention.head_count", gguf.u32(0), /"llama\.attention\.head_count" in ".*" should be a positive whole number, got 0/],
    ["llama.attention.layer_norm_rms_epsilon", gguf.f32(NaN), /"llama\.attention\.layer_norm_rms_epsilon" in ".*" should be a number from 0, got NaN/],
    ["llama.rope.freq_base", gguf.f32(0), /"llama\.rope\.freq_base" in ".*" should be a positive number, got 0/],
    ["llama.pooling_type", gguf.u32(99), /"llama\.pooling_type" in ".*" is 99; known types are 0 to 4/],
  ];
  for (const [i, [key, entry, pattern]] of cases.entries()) await expectLoadError(loadModel(await ggufWith(`cfg-${i}`, [[key, entry]])), pattern);
});

test("ggufConfig() rejects a vocabulary larger than the embedding and ignores a fractional BOS id", async () => {
  const tokens = Array.from({ length: 400 }, (_, i) => `t${i}`);
  const long = await ggufWith("tokens-long", [
    ["tokenizer.ggml.tokens", gguf.arr(GgufType.STRING, tokens)],
    ["tokenizer.ggml.token_type", gguf.arr(GgufType.INT32, tokens.map(() => 1))],
  ]);
  await expectLoadError(loadModel(long), /has 400 tokens \(tokenizer\.ggml\.tokens\) but its "token_embd\.weight" has only 300 rows/);
  const model = await loadModel(await ggufWith("bos-frac", [["tokenizer.ggml.bos_token_id", gguf.f32(1.5)]]));
  assert.equal(model.config.bosTokenId, undefined);
});

test("ggufTokenizer() rejects non-string tokens and per-token arrays of another length", async () => {
  const numbers = await ggufWith("tokens-int", [["tokenizer.ggml.tokens", gguf.arr(GgufType.INT32, Array.from({ length: 300 }, (_, i) => i))]]);
  await expectLoadError(loadModel(numbers), /"tokenizer\.ggml\.tokens" in ".*" should hold strings, got 0 at index 0/);
  const types = await ggufWith("types-short", [["tokenizer.ggml.token_type", gguf.arr(GgufType.INT32, [1, 2])]]);
  await expectLoadError(loadModel(types), /"tokenizer\.ggml\.token_type" in ".*" has 2 values for 300 tokens/);
  const scores = await ggufWith("scores-str", [["tokenizer.ggml.scores", gguf.arr(GgufType.STRING, Array.from({ length: 300 }, () => "x"))]]);
  await expectLoadError(loadModel(scores), /"tokenizer\.ggml\.scores" in ".*" should hold numbers, got "x" at index 0/);
});

/** Safetensors bytes with a raw header and `data` zero bytes after it. */
function rawSafetensors(header: unknown, data = 0, declaredLength?: bigint): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data);
  new DataView(out.buffer).setBigUint64(0, declaredLength ?? BigInt(json.length), true);
  out.set(json, 8);
  return out;
}

async function safetensorsHeaderOf(name: string, bytes: Uint8Array) {
  const path = `${dir}/${name}.safetensors`;
  await writeFile(path, bytes);
  const file = await openRandomAccess(path);
  try {
    return await readSafetensorsHeader(file);
  } finally {
    await file.close();
  }
}

test("readSafetensorsHeader() rejects null entries, a non-map __metadata__ and inverted offsets by name", async () => {
  await expectLoadError(safetensorsHeaderOf("null-entry", rawSafetensors({ w: null })), /is corrupt: bad header entry for "w": expected an object, got null/);
  await expectLoadError(
    safetensorsHeaderOf("frac-shape", rawSafetensors({ w: { dtype: "F32", shape: [0.5, 16], data_offsets: [0, 32] } }, 32)),
    /bad header entry for "w": shape should be whole numbers from 0, got \[0\.5,16\]/,
  );
  await expectLoadError(
    safetensorsHeaderOf("meta-null", rawSafetensors({ __metadata__: null, w: { dtype: "F32", shape: [2], data_offsets: [0, 8] } }, 8)),
    /is corrupt: its __metadata__ is not a map of strings/,
  );
  await expectLoadError(
    safetensorsHeaderOf("inverted", rawSafetensors({ w: { dtype: "F32", shape: [0], data_offsets: [8, 0] } }, 8)),
    /is corrupt: "w" has data_offsets \[8, 0\], which end before they begin/,
  );
});

test("readSafetensorsHeader() rejects tensors whose data overlap", async () => {
  const header = { a: { dtype: "F32", shape: [4], data_offsets: [0, 16] }, b: { dtype: "F32", shape: [2], data_offsets: [8, 16] } };
  await expectLoadError(safetensorsHeaderOf("overlap", rawSafetensors(header, 16)), /is corrupt: the data of "a" and "b" overlap/);
});

test("readSafetensorsHeader() refuses a header length over 100 MB without reading it", async () => {
  const prefix = rawSafetensors({});
  new DataView(prefix.buffer).setBigUint64(0, 150_000_000n, true);
  const file = virtualFile(200_000_000, prefix);
  await expectLoadError(readSafetensorsHeader(file), /is corrupt: header length 150000000 is over the limit of 100000000 bytes/);
  assert.ok(file.largestRead <= 8, `read ${file.largestRead} bytes at once`);
});

/** A copy of the test model's Hugging Face directory with `edit` applied. */
async function hfWith(name: string, edit: (dir: string) => Promise<void>): Promise<string> {
  const path = `${dir}/hf-${name}`;
  await writeHfDirectory(path, SPEC, WEIGHTS);
  await edit(path);
  return path;
}

const configPatch = (patch: Record<string, unknown>) => async (d: string) => {
  const cfg = JSON.parse(readFileSync(`${d}/config.json`, "utf8"));
  await writeFile(`${d}/config.json`, JSON.stringify({ ...cfg, ...patch }));
};

test("loadHfDirectory() rejects JSON files that hold no object, naming the file", async () => {
  for (const file of ["config.json", "tokenizer_config.json", "generation_config.json", "model.safetensors.index.json"]) {
    const path = await hfWith(`null-${file}`, (d) => writeFile(`${d}/${file}`, "null"));
    await expectLoadError(loadModel(path), new RegExp(`"[^"]*/${file.replaceAll(".", "\\.")}" should hold a JSON object, got null$`));
  }
});

test("hfConfig() rejects token ids that are no ids, ignores ones past the embedding, and rejects unusable sizes", async () => {
  const past = await loadModel(await hfWith("ids-past", configPatch({ eos_token_id: [99999, 2], bos_token_id: 99999 })));
  assert.deepEqual([past.config.eosTokenIds, past.config.bosTokenId], [[2], undefined]);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ eos_token_id: 1.5 }, /"eos_token_id" in ".*" should be token ids \(whole numbers from 0\), got 1\.5/],
    [{ eos_token_id: ["x"] }, /"eos_token_id" in ".*" should be token ids \(whole numbers from 0\), got "x"/],
    [{ bos_token_id: -1 }, /"bos_token_id" in ".*" should be token ids \(whole numbers from 0\), got -1/],
    [{ max_position_embeddings: -1 }, /"max_position_embeddings" in ".*" should be a positive whole number, got -1/],
    [{ num_hidden_layers: 0.5 }, /"num_hidden_layers" in ".*" should be a positive whole number, got 0\.5/],
    [{ rms_norm_eps: -1 }, /"rms_norm_eps" in ".*" should be a number from 0, got -1/],
    [{ rope_theta: 0 }, /"rope_theta" in ".*" should be a positive number, got 0/],
  ];
  for (const [i, [patch, pattern]] of cases.entries()) await expectLoadError(loadModel(await hfWith(`cfg-${i}`, configPatch(patch))), pattern);
});

test("loadHfDirectory() refuses an index naming a shard outside the model directory", async () => {
  const path = await hfWith("traversal", (d) => writeFile(`${d}/model.safetensors.index.json`, JSON.stringify({ weight_map: { w: "../elsewhere/model.safetensors" } })));
  await expectLoadError(loadModel(path), /names shard "\.\.\/elsewhere\/model\.safetensors"; expected a file name in the model directory/);
});

test("loadHfDirectory() skips chat_template entries that are not templates", async () => {
  const path = await hfWith("template-junk", (d) => writeFile(`${d}/tokenizer_config.json`, JSON.stringify({ chat_template: [null, 5, { name: "default", template: "T" }] })));
  assert.equal((await loadModel(path)).chatTemplate, "T");
});

test("applyGenerationConfig() rejects a max_new_tokens beyond exact integers", async () => {
  const path = await hfWith("gen-huge", (d) => writeFile(`${d}/generation_config.json`, JSON.stringify({ max_new_tokens: 1e300 })));
  await expectLoadError(loadModel(path), /generation_config\.json's max_new_tokens must be a valid number, got 1e\+300/);
});

test("HfTokenizer rejects malformed added_tokens and merges by index", async () => {
  const tokenizer = (d: string) => JSON.parse(readFileSync(`${d}/tokenizer.json`, "utf8"));
  const added = await hfWith("added-null", async (d) => {
    await writeFile(`${d}/tokenizer.json`, JSON.stringify({ ...tokenizer(d), added_tokens: [null] }));
  });
  await expectLoadError(loadModel(added), /tokenizer\.json's added_tokens\[0\] should have a whole-number id and a string content, got null/);
  const merges = await hfWith("merges-bad", async (d) => {
    const t = tokenizer(d);
    await writeFile(`${d}/tokenizer.json`, JSON.stringify({ ...t, model: { ...t.model, merges: ["a b", ["a", "b"], 5] } }));
  });
  await expectLoadError(loadModel(merges), /tokenizer\.json's model\.merges\[2\] should be a "left right" string or a \[left, right\] pair, got 5/);
});

/** A PEFT adapter directory adapting layer 0's q_proj at rank 4. */
async function peftDir(name: string, config: string): Promise<string> {
  const path = `${dir}/peft-${name}`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, config);
  const prefix = "base_model.model.model.layers.0.self_attn.q_proj";
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors([
    { name: `${prefix}.lora_A.weight`, shape: [4, 32], dtype: "f32", data: new Uint8Array(4 * 32 * 4) },
    { name: `${prefix}.lora_B.weight`, shape: [32, 4], dtype: "f32", data: new Uint8Array(32 * 4 * 4) },
  ]));
  return path;
}

test("loadPeftLora() rejects an adapter_config.json that is not an object, and a rank that disagrees with r", async () => {
  const base = await loadModel(await ggufWith("lora-base", []));
  await expectLoadError(loadLoraAdapter(await peftDir("null", "null"), base.config), /adapter_config\.json" should hold a JSON object, got null/);
  await expectLoadError(
    loadLoraAdapter(await peftDir("r16", JSON.stringify({ r: 16, lora_alpha: 8 })), base.config),
    /has "model\.layers\.0\.self_attn\.q_proj" of rank 4, but its adapter_config\.json gives r 16/,
  );
  const ok = await loadLoraAdapter(await peftDir("r4", JSON.stringify({ r: 4, lora_alpha: 8 })), base.config);
  assert.equal(ok.maxRank, 4);
});

test("loadPeftLora() rejects one matrix stored twice, with and without PEFT's .default", async () => {
  const base = await loadModel(await ggufWith("lora-base-4", []));
  const path = await peftDir("twice", JSON.stringify({ r: 4, lora_alpha: 8 }));
  const prefix = "base_model.model.model.layers.0.self_attn.q_proj";
  const zeros = (n: number) => new Uint8Array(n * 4);
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors([
    { name: `${prefix}.lora_A.weight`, shape: [4, 32], dtype: "f32", data: zeros(128) },
    { name: `${prefix}.lora_B.weight`, shape: [32, 4], dtype: "f32", data: zeros(128) },
    { name: `${prefix}.lora_A.default.weight`, shape: [4, 32], dtype: "f32", data: zeros(128) },
  ]));
  await expectLoadError(loadLoraAdapter(path, base.config), /has both ".*q_proj\.lora_A\.weight" and ".*q_proj\.lora_A\.default\.weight" for one matrix/);
});

test("loadGgufLora() rejects a non-finite alpha and a 64-bit general.type", async () => {
  const base = await loadModel(await ggufWith("lora-base-2", []));
  const spec = { seed: 1, rank: 2, alpha: 4, targets: [{ layer: 0, target: "wq" as const }] };
  const nan = `${dir}/alpha-nan.gguf`;
  await writeFile(nan, loraGgufBytes(base.config, { ...spec, alpha: NaN }));
  await expectLoadError(loadLoraAdapter(nan, base.config), /has adapter\.lora\.alpha NaN; expected a finite number/);
  const type = `${dir}/type-u64.gguf`;
  await writeFile(type, loraGgufBytes(base.config, { ...spec, metadata: [["general.type", gguf.u64(2n ** 60n)]] }));
  await expectLoadError(loadLoraAdapter(type, base.config), /"general\.type" in ".*" should be a string, got 1152921504606846976/);
});

test("loadLoraAdapter() turns an I/O failure into a ModelLoadError", async () => {
  const base = await loadModel(await ggufWith("lora-base-3", []));
  const path = `${dir}/peft-eisdir`;
  mkdirSync(`${path}/adapter_model.safetensors`, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, JSON.stringify({ r: 4, lora_alpha: 8 }));
  await expectLoadError(loadLoraAdapter(path, base.config), /^Cannot load LoRA adapter ".*peft-eisdir": /);
});

test("BpeTokenizer drops a byte its vocabulary lacks instead of writing token 0", () => {
  const t = new BpeTokenizer({ tokens: ["<pad>", "a", "b"], types: [3, 1, 1], merges: [], pre: "gpt2" });
  assert.deepEqual(t.encode("abc"), [1, 2]);
  assert.equal(t.maxCharsPerToken(), undefined);
});

test("loadHfDirectory() refuses a tensor held by two shards unless the index names one", async () => {
  const norm = { name: "model.norm.weight", shape: [32], dtype: "f32" as const, data: new Uint8Array(32 * 4) };
  const path = await hfWith("two-shards", (d) => writeFile(`${d}/stale.safetensors`, encodeSafetensors([norm])));
  await expectLoadError(loadModel(path), /^Tensor "model\.norm\.weight" is in both ".*\/model\.safetensors" and ".*\/stale\.safetensors"; remove one of them$/);
  // With an index naming model.safetensors for every tensor, the stale copy is not read.
  const header = await safetensorsHeaderOf("two-shards-main", readFileSync(`${path}/model.safetensors`));
  const weightMap = Object.fromEntries([...header.tensors.keys()].map((t) => [t, "model.safetensors"]));
  await writeFile(`${path}/model.safetensors.index.json`, JSON.stringify({ weight_map: { ...weightMap, extra: "stale.safetensors" } }));
  const model = await loadModel(path);
  assert.ok(decodeToF32(model.weights.outputNorm.data, "f32", 32).some((v) => v !== 0), "the norm from model.safetensors");
});

test("checkLastExpert() fails at once on an expert count far beyond the file's tensors", async () => {
  const moe: ModelFileSpec = { ...SPEC, architecture: "qwen3moe", ffn: 16, experts: { count: 4, used: 2 } };
  const path = `${dir}/hf-experts`;
  await writeHfDirectory(path, moe, randomHfWeights(moe));
  await configPatch({ num_experts: 2 ** 22 })(path);
  await expectLoadError(loadModel(path), /lacks the tensor "model\.layers\.0\.mlp\.experts\.4194303\.gate_proj\.weight" of its 4194304 experts/);
  const mixtral: ModelFileSpec = { ...SPEC, ffn: 16, experts: { count: 4, used: 2 } };
  const gguf4 = `${dir}/split-experts.gguf`;
  await writeFile(gguf4, ggufBytes(mixtral, randomHfWeights(mixtral), undefined, { splitExperts: true, metadata: [["llama.expert_count", gguf.u32(2 ** 22)]] }));
  await expectLoadError(loadModel(gguf4), /lacks the tensor "blk\.0\.ffn_gate\.4194303\.weight" of its 4194304 experts/);
});

/**
 * Loader defaults and edges (hunt 6): config.json's `tie_word_embeddings` when absent (transformers'
 * per-architecture default) or not a boolean, an untied checkpoint without `lm_head.weight`, a tied
 * one with it; GGUF `general.alignment` of any power of two (llama.cpp's rule); a safetensors index
 * with an empty `weight_map`.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, unlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { ARCHITECTURES } from "../../src/model/config.ts";
import { readGgufHeader, readGgufTensor } from "../../src/model/gguf-reader.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import { encodeGguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { HF_TIE_WORD_EMBEDDINGS, hfTiedEmbeddings } from "../../src/model/hf-defaults.ts";
import { loadModel } from "../../src/model/load.ts";
import { openRandomAccess, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { expectLoadError, type ModelFileSpec, randomHfWeights, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/loader-defaults-hunt6-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300,
  tied: false, dtype: "f32", seed: 6,
};

/** An HF directory of `spec` with config.json edited by `edit` (the key deleted when it returns undefined for it). */
async function hfDir(name: string, spec: ModelFileSpec, edit: (cfg: Record<string, unknown>) => Record<string, unknown>): Promise<string> {
  const path = `${dir}/${name}`;
  await writeHfDirectory(path, spec, randomHfWeights(spec));
  await writeFile(`${path}/config.json`, JSON.stringify(edit(JSON.parse(readFileSync(`${path}/config.json`, "utf8")))));
  return path;
}

const withoutTie = ({ tie_word_embeddings: _, ...cfg }: Record<string, unknown>) => cfg;

test("HF_TIE_WORD_EMBEDDINGS holds transformers' default for every architecture (Gemma 2 and 3 and SmolLM3 tied, the rest untied)", () => {
  // LlamaConfig, MixtralConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig, Qwen3MoeConfig, Glm4MoeConfig,
  // DeepseekV3Config, GptOssConfig, Phi3Config, GraniteConfig, Olmo2Config, Exaone4Config, Qwen3_5TextConfig, Qwen3NextConfig, Ministral3Config, GraniteMoeHybridConfig, NemotronHConfig, FalconH1Config, MiniMaxM2Config, SeedOssConfig: tie_word_embeddings False; Gemma2Config, Gemma3TextConfig, SmolLM3Config, Lfm2Config, Lfm2MoeConfig: True.
  const expected = { llama: false, qwen2: false, qwen3: false, qwen2moe: false, qwen3moe: false, glm4moe: false, deepseek2: false, "gpt-oss": false, gemma3: true, phi3: false, smollm3: true, granite: false, olmo2: false, exaone4: false, gemma2: true, qwen35: false, qwen35moe: false, qwen3next: false, mistral3: false, lfm2: true, granitehybrid: false, nemotron_h: false, nemotron_h_moe: false, lfm2moe: true, "falcon-h1": false, "minimax-m2": false, seed_oss: false, gemma4: true };
  assert.deepEqual(Object.keys(HF_TIE_WORD_EMBEDDINGS).sort(), [...ARCHITECTURES].sort());
  assert.deepEqual(HF_TIE_WORD_EMBEDDINGS, expected);
  for (const a of ARCHITECTURES) {
    assert.equal(hfTiedEmbeddings({}, a, "c"), expected[a], `${a}: absent`);
    assert.equal(hfTiedEmbeddings({ tie_word_embeddings: null }, a, "c"), expected[a], `${a}: null reads as absent`);
    assert.equal(hfTiedEmbeddings({ tie_word_embeddings: true }, a, "c"), true);
    assert.equal(hfTiedEmbeddings({ tie_word_embeddings: false }, a, "c"), false);
  }
});

test("a tie_word_embeddings that is not a boolean is refused, quoted, instead of read as untied (or tied, for Gemma 3)", async () => {
  const llama = await hfDir("tie-string", SPEC, (c) => ({ ...c, tie_word_embeddings: "true" }));
  await expectLoadError(loadModel(llama), /^"tie_word_embeddings" in ".*tie-string" should be true or false, got "true"$/);
  const gemma: ModelFileSpec = { ...SPEC, architecture: "gemma3", tied: true };
  const g = await hfDir("tie-gemma-string", gemma, (c) => ({ ...c, tie_word_embeddings: "false" }));
  await expectLoadError(loadModel(g), /^"tie_word_embeddings" in ".*tie-gemma-string" should be true or false, got "false"$/);
  const one = await hfDir("tie-one", SPEC, (c) => ({ ...c, tie_word_embeddings: 1 }));
  await expectLoadError(loadModel(one), /should be true or false, got 1$/);
});

test("without tie_word_embeddings, Llama loads untied (lm_head read) and Gemma 3 tied, as transformers", async () => {
  const llama = await loadModel(await hfDir("absent-llama", SPEC, withoutTie));
  assert.equal(llama.config.tiedEmbeddings, false);
  assert.ok(llama.weights.output, "lm_head.weight read");
  const gemma: ModelFileSpec = { ...SPEC, architecture: "gemma3", tied: true };
  const g = await loadModel(await hfDir("absent-gemma", gemma, withoutTie));
  assert.equal(g.config.tiedEmbeddings, true);
  assert.equal(g.weights.output, undefined);
});

test("an untied checkpoint without lm_head.weight names the tensor and why it is wanted", async () => {
  // Tied weights (no lm_head.weight) under a config that unties them: explicitly, then by Llama's default.
  const tied = { ...SPEC, tied: true };
  const explicit = await hfDir("untied-no-head", tied, (c) => ({ ...c, tie_word_embeddings: false }));
  await expectLoadError(
    loadModel(explicit),
    /^Model ".*untied-no-head" lacks the tensor "lm_head\.weight", its output projection \(config\.json's tie_word_embeddings is false\)$/,
  );
  const absent = await hfDir("default-no-head", tied, withoutTie);
  await expectLoadError(
    loadModel(absent),
    /^Model ".*default-no-head" lacks the tensor "lm_head\.weight", its output projection \(config\.json leaves out tie_word_embeddings, which is false by default for llama; set it to true if the output shares the token embedding\)$/,
  );
});

test("a tied checkpoint that also holds lm_head.weight loads, its output the token embedding", async () => {
  const path = await hfDir("tied-with-head", SPEC, (c) => ({ ...c, tie_word_embeddings: true }));
  const m = await loadModel(path);
  assert.equal(m.config.tiedEmbeddings, true);
  assert.equal(m.weights.output, undefined, "lm_head.weight is left unread: the output is the embedding");
});

/** A GGUF of two f32 tensors (5 and 7 values, so offsets fall off any alignment above 4) aligned to `alignment`. */
function alignedGguf(alignment: number): Uint8Array {
  const a = hostTensorFromF32("a", [5], Float32Array.from([1, 2, 3, 4, 5]), "f32");
  const b = hostTensorFromF32("b", [7], Float32Array.from([6, 7, 8, 9, 10, 11, 12]), "f32");
  return encodeGguf({ metadata: [], tensors: [a, b], alignment });
}

test("readGgufHeader() accepts every power of two as general.alignment, as llama.cpp does", async () => {
  for (const alignment of [1, 2, 4, 8, 16, 64]) {
    const path = `${dir}/align-${alignment}.gguf`;
    await writeFile(path, alignedGguf(alignment));
    const file = await openRandomAccess(path);
    try {
      const header = await readGgufHeader(file);
      assert.equal(header.alignment, alignment);
      const [a, b] = await Promise.all(header.tensors.map((t) => readGgufTensor(file, t)));
      assert.deepEqual(Array.from(decodeToF32(a.data, "f32", 5)), [1, 2, 3, 4, 5], `alignment ${alignment}`);
      assert.deepEqual(Array.from(decodeToF32(b.data, "f32", 7)), [6, 7, 8, 9, 10, 11, 12], `alignment ${alignment}`);
      if (alignment === 1) assert.equal(header.tensors[1].offset - header.tensors[0].offset, 20, "packed with no padding");
    } finally {
      await file.close();
    }
  }
});

/** A GGUF with no tensors whose one metadata entry is general.alignment of `type`, `bytes` its value. */
function alignmentOnly(type: GgufType, bytes: Uint8Array): Uint8Array {
  const key = new TextEncoder().encode("general.alignment");
  const head = new Uint8Array(24 + 8 + key.length + 4);
  const v = new DataView(head.buffer);
  v.setUint32(0, 0x46554747, true);
  v.setUint32(4, 3, true);
  v.setBigUint64(8, 0n, true);
  v.setBigUint64(16, 1n, true);
  v.setBigUint64(24, BigInt(key.length), true);
  head.set(key, 32);
  v.setUint32(32 + key.length, type, true);
  const out = new Uint8Array(head.length + bytes.length + 64);
  out.set(head);
  out.set(bytes, head.length);
  return out;
}

function u32(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, true);
  return b;
}

function u64(n: bigint): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, n, true);
  return b;
}

test("readGgufHeader() refuses a general.alignment that is 0, not a power of two or past 2^31, quoting it", async () => {
  const cases: [string, Uint8Array, string][] = [
    ["zero", alignmentOnly(GgufType.UINT32, u32(0)), "0"],
    ["three", alignmentOnly(GgufType.UINT32, u32(3)), "3"],
    ["24", alignmentOnly(GgufType.UINT32, u32(24)), "24"],
    // 3·2^32: its low 32 bits are 0, which a 32-bit `a & (a - 1)` would take for a power of two.
    ["3x2^32", alignmentOnly(GgufType.UINT64, u64(3n << 32n)), "12884901888"],
    ["2^32", alignmentOnly(GgufType.UINT64, u64(1n << 32n)), "4294967296"],
    ["2^62", alignmentOnly(GgufType.UINT64, u64(1n << 62n)), "4611686018427387904"],
    ["float", alignmentOnly(GgufType.FLOAT32, new Uint8Array(Float32Array.of(8.5).buffer)), "8.5"],
  ];
  for (const [name, bytes, quoted] of cases) {
    const path = `${dir}/align-bad-${name}.gguf`;
    await writeFile(path, bytes);
    const file = await openRandomAccess(path);
    try {
      await expectLoadError(
        readGgufHeader(file),
        new RegExp(`^GGUF file ".*align-bad-${name.replace("^", "\\^")}\\.gguf" is corrupt: general\\.alignment is ${quoted}; expected a power of two from 1 to 2\\^31$`),
      );
    } finally {
      await file.close();
    }
  }
});

test("a safetensors index with an empty weight_map is refused naming the index, not as a directory without shards", async () => {
  const path = await hfDir("empty-map", SPEC, (c) => c);
  await writeFile(`${path}/model.safetensors.index.json`, JSON.stringify({ metadata: { total_size: 0 }, weight_map: {} }));
  await expectLoadError(
    loadModel(path),
    /^".*empty-map\/model\.safetensors\.index\.json" has an empty weight_map; it should map each tensor name to its shard file$/,
  );
  // Without the shard itself as well, the index is still what is named.
  unlinkSync(`${path}/model.safetensors`);
  await expectLoadError(loadModel(path), /model\.safetensors\.index\.json" has an empty weight_map/);
});

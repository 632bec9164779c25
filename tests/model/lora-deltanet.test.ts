/**
 * LoRA on Gated DeltaNet projections (lora.ts `ssm*` targets): a PEFT adapter of Qwen3.5's
 * `linear_attn` modules (value heads grouped, as Hugging Face holds them; trained on the released
 * checkpoint, so under `model.language_model.`) computes on a GGUF base (heads tiled) and on the
 * checkpoint itself what llama.cpp's conversion of it (heads tiled) computes on the GGUF base; a
 * Qwen3-Next adapter of its fused `in_proj_qkvz` and `in_proj_ba` likewise. (The GGUF adapters'
 * agreement with llama.cpp itself: tests/oracle/llama-cpp-lora.test.ts.)
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import type { HostTensor, LoadedModel } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { uploadLoraSet } from "../../src/model/lora-set.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { type ModelFileSpec, seededRandom, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";
import { tileHeads } from "./qwen35-files.ts";
import { qwen3nextGgufParts } from "./qwen3next-files.ts";

const dir = mkdtempSync(`${tmpdir()}/lora-deltanet-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const be = createReferenceBackend();
const RANK = 4, ALPHA = 8;
const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64];

/** The prompt's logits at every position, with the adapter at `adapterPath` (none: the base alone). */
async function logits(base: LoadedModel, adapterPath?: string): Promise<Float32Array> {
  const set = adapterPath ? uploadLoraSet(be, base.config, [await loadLoraAdapter(adapterPath, base.config)], !base.config.tiedEmbeddings) : undefined;
  const out = forward(be, uploadModel(be, base), allocatePagedKv(be, base.config, 1, 16), {
    entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0], stateSlot: 0 }], allPositions: true, ...(set ? { lora: { set, slots: [1] } } : {}),
  });
  return (await be.download(out)) as Float32Array;
}

const maxDiff = (x: Float32Array, y: Float32Array) => Math.max(...x.map((v, i) => Math.abs(v - y[i])));

/** One module's random A [rank, in] and B [out, rank]. */
function draw(rand: () => number, inDim: number, outDim: number): { a: Float32Array; b: Float32Array } {
  const d = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.3);
  return { a: d(RANK * inDim), b: d(outDim * RANK) };
}

async function writePeft(name: string, tensors: HostTensor[]): Promise<string> {
  const path = `${dir}/${name}`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, JSON.stringify({ peft_type: "LORA", r: RANK, lora_alpha: ALPHA, target_modules: ["in_proj_qkv"], bias: "none" }));
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors(tensors));
  return path;
}

async function writeGgufAdapter(name: string, arch: string, tensors: HostTensor[]): Promise<string> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, encodeGguf({
    metadata: [["general.architecture", gguf.str(arch)], ["general.type", gguf.str("adapter")], ["adapter.type", gguf.str("lora")], ["adapter.lora.alpha", gguf.f32(ALPHA)]],
    tensors,
  }));
  return path;
}

test("loadLoraAdapter() reads a PEFT adapter of Qwen3.5's linear_attn modules (model.language_model.) as llama.cpp's tiled GGUF adapter, on GGUF and Hugging Face bases", async () => {
  const spec: ModelFileSpec = {
    architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 331,
    deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 },
  };
  const d = spec.deltaNet!;
  const keys = d.kHeads * d.dim, values = d.vHeads * d.dim;
  const ggufBase = await loadModel(await writeTestGguf(dir, "q35", spec));
  const hfBase = await loadModel(await writeTestHfDirectory(dir, "q35-hf", spec));
  const rand = seededRandom(41);
  const peft: HostTensor[] = [];
  const ggufLora: HostTensor[] = [];
  // [module, GGUF stem, in, out, value heads' first row (B) or column (A of out_proj), head width]
  const modules: [string, string, number, number, number, number][] = [
    ["in_proj_qkv", "attn_qkv", 32, 2 * keys + values, 2 * keys, d.dim], ["in_proj_z", "attn_gate", 32, values, 0, d.dim],
    ["in_proj_b", "ssm_beta", 32, d.vHeads, 0, 1], ["in_proj_a", "ssm_alpha", 32, d.vHeads, 0, 1], ["out_proj", "ssm_out", values, 32, 0, d.dim],
  ];
  for (const layer of [0, 2]) {
    for (const [module, stem, inDim, outDim, from, width] of modules) {
      const { a, b } = draw(rand, inDim, outDim);
      const hf = `base_model.model.model.language_model.layers.${layer}.linear_attn.${module}`;
      peft.push(hostTensorFromF32(`${hf}.lora_A.weight`, [RANK, inDim], a, "f32"), hostTensorFromF32(`${hf}.lora_B.weight`, [outDim, RANK], b, "f32"));
      // llama.cpp's converter tiles the value heads: B's rows, or the output projection's A columns.
      const out = module === "out_proj";
      const aG = out ? tileHeads(a, RANK, inDim, from, spec, width, true) : a;
      const bG = out ? b : tileHeads(b, outDim, RANK, from, spec, width, false);
      ggufLora.push(hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_a`, [RANK, inDim], aG, "f32"), hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_b`, [outDim, RANK], bG, "f32"));
    }
  }
  const peftPath = await writePeft("q35-peft", peft);
  const ggufPath = await writeGgufAdapter("q35-lora", "qwen35", ggufLora);
  const want = await logits(ggufBase, ggufPath);
  assert.ok(maxDiff(want, await logits(ggufBase)) > 0.05, "the adapter changes the logits");
  for (const [base, adapter, what] of [[ggufBase, peftPath, "PEFT on the GGUF base"], [hfBase, peftPath, "PEFT on the checkpoint"], [hfBase, ggufPath, "GGUF adapter on the checkpoint"]] as const) {
    const got = await logits(base, adapter);
    assert.ok(maxDiff(got, want) < 1e-4, `${what}: max |Δlogit| ${maxDiff(got, want)}`);
  }
});

test("loadLoraAdapter() reads a PEFT adapter of Qwen3-Next's fused in_proj_qkvz and in_proj_ba as llama.cpp's split GGUF adapter", async () => {
  const spec: ModelFileSpec = {
    architecture: "qwen3next", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 332,
    deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 }, experts: { count: 4, used: 2, sharedFfn: 32 },
  };
  const d = spec.deltaNet!;
  const keys = d.kHeads * d.dim, values = d.vHeads * d.dim;
  const ggufBase = await loadModel(await writeTestGguf(dir, "next", spec));
  const hfBase = await loadModel(await writeTestHfDirectory(dir, "next-hf", spec));
  const rand = seededRandom(42);
  const peft: HostTensor[] = [];
  const ggufLora: HostTensor[] = [];
  for (const layer of [0, 2]) {
    for (const [module, outDim] of [["in_proj_qkvz", 2 * keys + 2 * values], ["in_proj_ba", 2 * d.vHeads]] as const) {
      const { a, b } = draw(rand, 32, outDim);
      const hf = `base_model.model.model.layers.${layer}.linear_attn.${module}`;
      peft.push(hostTensorFromF32(`${hf}.lora_A.weight`, [RANK, 32], a, "f32"), hostTensorFromF32(`${hf}.lora_B.weight`, [outDim, RANK], b, "f32"));
      // As the converter splits the base's qkvz (B's rows alike; A shared), and keeps ba whole.
      for (const part of qwen3nextGgufParts(spec, `model.layers.${layer}.linear_attn.${module}.weight`, [outDim, RANK], b)!) {
        const stem = part.name.replace(/\.weight$/, "");
        ggufLora.push(hostTensorFromF32(`${stem}.weight.lora_a`, [RANK, 32], a, "f32"), hostTensorFromF32(`${stem}.weight.lora_b`, part.shape, part.values, "f32"));
      }
    }
  }
  const peftPath = await writePeft("next-peft", peft);
  const ggufPath = await writeGgufAdapter("next-lora", "qwen3next", ggufLora);
  const want = await logits(ggufBase, ggufPath);
  assert.ok(maxDiff(want, await logits(ggufBase)) > 0.05, "the adapter changes the logits");
  for (const [base, adapter, what] of [[ggufBase, peftPath, "PEFT on the GGUF base"], [hfBase, peftPath, "PEFT on the checkpoint"]] as const) {
    const got = await logits(base, adapter);
    assert.ok(maxDiff(got, want) < 1e-4, `${what}: max |Δlogit| ${maxDiff(got, want)}`);
  }
});

test("loadLoraAdapter() refuses a Gated DeltaNet projection on an attention layer and an attention projection on a DeltaNet layer, naming the layer's kind", async () => {
  const spec: ModelFileSpec = {
    architecture: "qwen35", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 333,
    deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 },
  };
  const base = await loadModel(await writeTestGguf(dir, "refuse", spec));
  const rand = seededRandom(43);
  const onAttention = draw(rand, 32, 4);
  const bad = await writePeft("bad-ssm", [
    hostTensorFromF32("base_model.model.model.layers.1.linear_attn.in_proj_b.lora_A.weight", [RANK, 32], onAttention.a, "f32"),
    hostTensorFromF32("base_model.model.model.layers.1.linear_attn.in_proj_b.lora_B.weight", [4, RANK], onAttention.b, "f32"),
  ]);
  await assert.rejects(loadLoraAdapter(bad, base.config), /adapts "model\.layers\.1\.linear_attn\.in_proj_b", but it is not a Gated DeltaNet layer/);
  const q = draw(rand, 32, 128);
  const badQ = await writePeft("bad-q", [
    hostTensorFromF32("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", [RANK, 32], q.a, "f32"),
    hostTensorFromF32("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", [128, RANK], q.b, "f32"),
  ]);
  await assert.rejects(loadLoraAdapter(badQ, base.config), /but it is a Gated DeltaNet layer, which has no attention projections/);
});

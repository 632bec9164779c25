/**
 * Hugging Face PEFT LoRA directories (loadLoraAdapter on a directory, lora-peft.ts): the same
 * adapter written as PEFT (Hugging Face row order) and as a llama.cpp GGUF (q/k rows permuted as
 * convert_lora_to_gguf.py does) loads to the same weights for a GGUF Llama base, and a Hugging Face
 * base with the PEFT adapter computes the logits of the GGUF base with the GGUF adapter.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { ModelLoadError, type HostTensor } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { uploadLoraSet } from "../../src/model/lora-set.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, permuteForGguf, randomHfWeights, seededRandom, writeHfDirectory } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/lora-peft-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const SPEC: ModelFileSpec = { architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 301 };
const weights = randomHfWeights(SPEC);
await writeFile(`${dir}/base.gguf`, ggufBytes(SPEC, weights));
await writeHfDirectory(`${dir}/base-hf`, SPEC, weights);
const ggufBase = await loadModel(`${dir}/base.gguf`);
const hfBase = await loadModel(`${dir}/base-hf`);

const RANK = 4, ALPHA = 12;
/** [HF module, GGUF stem, in, out, heads to permute by (q/k)] */
const MODULES: [string, string, number, number, number?][] = [
  ["self_attn.q_proj", "attn_q", 32, 32, 4], ["self_attn.k_proj", "attn_k", 32, 16, 2], ["self_attn.v_proj", "attn_v", 32, 16],
  ["self_attn.o_proj", "attn_output", 32, 32], ["mlp.gate_proj", "ffn_gate", 32, 64], ["mlp.up_proj", "ffn_up", 32, 64], ["mlp.down_proj", "ffn_down", 64, 32],
];
const rand = seededRandom(99);
const draw = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.4);
const hfTensors: HostTensor[] = [];
const ggufTensors: HostTensor[] = [];
for (let layer = 0; layer < SPEC.layers; layer++) {
  for (const [module, stem, inDim, outDim, heads] of MODULES) {
    const a = draw(RANK * inDim), b = draw(outDim * RANK);
    const hf = `base_model.model.model.layers.${layer}.${module}`;
    hfTensors.push(hostTensorFromF32(`${hf}.lora_A.weight`, [RANK, inDim], a, "f32"), hostTensorFromF32(`${hf}.lora_B.weight`, [outDim, RANK], b, "bf16"));
    const bGguf = heads ? permuteForGguf(b, outDim, RANK, heads) : b;
    ggufTensors.push(hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_a`, [RANK, inDim], a, "f32"), hostTensorFromF32(`blk.${layer}.${stem}.weight.lora_b`, [outDim, RANK], bGguf, "bf16"));
  }
}
const lmA = draw(RANK * 32), lmB = draw(300 * RANK);
hfTensors.push(hostTensorFromF32("base_model.model.lm_head.lora_A.weight", [RANK, 32], lmA, "f32"), hostTensorFromF32("base_model.model.lm_head.lora_B.weight", [300, RANK], lmB, "f32"));
ggufTensors.push(hostTensorFromF32("output.weight.lora_a", [RANK, 32], lmA, "f32"), hostTensorFromF32("output.weight.lora_b", [300, RANK], lmB, "f32"));

async function peftDir(name: string, config: Record<string, unknown>, tensors = hfTensors): Promise<string> {
  const path = `${dir}/${name}`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, JSON.stringify({ peft_type: "LORA", r: RANK, lora_alpha: ALPHA, target_modules: ["q_proj", "k_proj"], bias: "none", ...config }));
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors(tensors));
  return path;
}
const peft = await peftDir("peft", {});
const ggufAdapter = `${dir}/adapter.gguf`;
await writeFile(ggufAdapter, encodeGguf({
  metadata: [["general.architecture", gguf.str("llama")], ["general.type", gguf.str("adapter")], ["adapter.type", gguf.str("lora")], ["adapter.lora.alpha", gguf.f32(ALPHA)]],
  tensors: ggufTensors,
}));

test("loadLoraAdapter() reads a PEFT directory as the GGUF adapter of the same weights, q/k rows permuted for a GGUF Llama base", async () => {
  const fromPeft = await loadLoraAdapter(peft, ggufBase.config);
  const fromGguf = await loadLoraAdapter(ggufAdapter, ggufBase.config);
  assert.equal(fromPeft.weights.length, 2 * 7 + 1);
  assert.deepEqual(fromPeft.weights.map((w) => [w.layer, w.target, w.rank]), fromGguf.weights.map((w) => [w.layer, w.target, w.rank]));
  fromPeft.weights.forEach((w, i) => {
    assert.deepEqual(w.a, fromGguf.weights[i].a);
    assert.deepEqual(w.b, fromGguf.weights[i].b, `${w.layer}.${w.target}: B as the GGUF adapter's (scaled by alpha / rank, permuted)`);
  });
  assert.equal(fromPeft.fingerprint, fromGguf.fingerprint);
  // rsLoRA scales by alpha / √rank instead: twice alpha / rank at rank 4.
  const rs = await loadLoraAdapter(await peftDir("rslora", { use_rslora: true }), ggufBase.config);
  rs.weights[0].b.forEach((v, k) => assert.ok(Math.abs(v - 2 * fromPeft.weights[0].b[k]) < 1e-6));
});

test("forward() of a Hugging Face base with a PEFT adapter equals the GGUF base with the GGUF adapter", async () => {
  const be = createReferenceBackend();
  const run = async (base: typeof ggufBase, adapterPath: string) => {
    const model = uploadModel(be, base);
    const set = uploadLoraSet(be, base.config, [await loadLoraAdapter(adapterPath, base.config)], true);
    const kv = allocatePagedKv(be, base.config, 4, 4);
    const logits = forward(be, model, kv, { entries: [{ tokens: [1, 17, 120, 255, 3, 42, 299, 64], startPos: 0, blockTable: [0, 1] }], allPositions: true, lora: { set, slots: [1] } });
    return (await be.download(logits)) as Float32Array;
  };
  const hf = await run(hfBase, peft), gg = await run(ggufBase, ggufAdapter);
  const plain = (await be.download(forward(be, uploadModel(be, ggufBase), allocatePagedKv(be, ggufBase.config, 4, 4), {
    entries: [{ tokens: [1, 17, 120, 255, 3, 42, 299, 64], startPos: 0, blockTable: [0, 1] }], allPositions: true,
  }))) as Float32Array;
  const diff = (x: Float32Array, y: Float32Array) => Math.max(...x.map((v, i) => Math.abs(v - y[i])));
  assert.ok(diff(hf, gg) < 1e-4, `max |Δlogit| ${diff(hf, gg)}`);
  assert.ok(diff(gg, plain) > 0.05, "the adapter changes the logits");
});

test("loadLoraAdapter() refuses PEFT settings it would not honour, naming them", async () => {
  const refuse = async (name: string, config: Record<string, unknown>, re: RegExp, tensors = hfTensors) => {
    await assert.rejects(loadLoraAdapter(await peftDir(name, config, tensors), ggufBase.config), (e: Error) => e instanceof ModelLoadError && re.test(e.message), name);
  };
  await refuse("dora", { use_dora: true }, /use_dora is true; DoRA adapters are not supported/);
  await refuse("saved", { modules_to_save: ["embed_tokens"] }, /modules_to_save lists \["embed_tokens"\]/);
  await refuse("pattern", { rank_pattern: { q_proj: 8 } }, /rank_pattern is set/);
  await refuse("bias", { bias: "all" }, /bias is "all"; only "none"/);
  await refuse("ia3", { peft_type: "IA3" }, /peft_type is "IA3"; only "LORA"/);
  await refuse("embed", {}, /tensor "base_model.model.model.embed_tokens.lora_A.weight", which names no projection/, [
    ...hfTensors, hostTensorFromF32("base_model.model.model.embed_tokens.lora_A.weight", [RANK, 300], draw(RANK * 300), "f32"),
  ]);
  await refuse("half", {}, /has lora_A for "model.layers.0.self_attn.q_proj" but not lora_B/, hfTensors.filter((t) => t.name !== "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"));
  const bin = `${dir}/bin-only`;
  mkdirSync(bin);
  await writeFile(`${bin}/adapter_config.json`, JSON.stringify({ r: RANK, lora_alpha: ALPHA }));
  await writeFile(`${bin}/adapter_model.bin`, "pickle");
  await assert.rejects(loadLoraAdapter(bin, ggufBase.config), /has no adapter_model.safetensors \(adapter_model.bin is a pickle/);
  await assert.rejects(loadLoraAdapter(`${dir}/nothing-here`, ggufBase.config), /LoRA adapter not found: ".*nothing-here"/);
});

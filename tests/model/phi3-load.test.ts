/**
 * Loading Phi-3 (phi3) GGUFs: the fused q/k/v and gate/up matrices cut into the plain roles (any
 * storage), LongRoPE's long or short divisors and its magnitude factor in the scores' scale, partial
 * RoPE, `<|end|>` as a stop, the window llama.cpp does not apply, Phi3ForCausalLM checkpoints
 * (`qkv_proj`, `gate_up_proj`, `rope_scaling` "longrope") read as their GGUFs, and refusals. The forward is
 * checked against llama.cpp in tests/oracle/llama-cpp.test.ts.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { numel } from "../../src/backend/types.ts";
import { type HostTensor, layerWindow } from "../../src/model/config.ts";
import { hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { expectLoadError, type GgufExtras, type ModelFileSpec, randomHfWeights, seededRandom, vocabFor, writeTestGguf, writeTestHfDirectory } from "./model-files.ts";
import { longRopeAttnFactor } from "./phi3-files.ts";
import { longRopeFor } from "../../src/model/phi3.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { stepLogits } from "./step-logits.ts";

const dir = mkdtempSync(`${tmpdir()}/phi3-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** Phi-4-mini's shape in small: GQA, three quarters of each head turned, LongRoPE from a 64-token original context. */
const SPEC: ModelFileSpec = {
  hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 12, ffn: 48, vocab: 300, tied: false, dtype: "f32", architecture: "phi3", seed: 91,
  longRope: { originalContext: 64, long: [1, 1.5, 2, 4, 8, 16], short: [1, 1, 1.25, 1.5, 2, 3] },
};

const write = (name: string, spec: ModelFileSpec, extras?: GgufExtras) => writeTestGguf(dir, name, spec, extras);

const values = (t: HostTensor) => decodeToF32(t.data, t.dtype, numel(t.shape));

test("loadModel() cuts a phi3 GGUF's fused attn_qkv and ffn_up into q, k, v, gate and up", async () => {
  const hf = randomHfWeights(SPEC);
  const m = await loadModel(await write("fused", SPEC));
  const l = m.weights.layers[1];
  const expect = (role: "wq" | "wk" | "wv" | "wGate" | "wUp", hfName: string) => {
    const t = l[role] as HostTensor;
    const want = hf.get(`model.layers.1.${hfName}.weight`)!;
    assert.deepEqual(t.shape, want.shape, role);
    assert.deepEqual(values(t), want.values, role);
  };
  expect("wq", "self_attn.q_proj");
  expect("wk", "self_attn.k_proj");
  expect("wv", "self_attn.v_proj");
  expect("wGate", "mlp.gate_proj");
  expect("wUp", "mlp.up_proj");
  const c = m.config;
  assert.deepEqual([c.architecture, c.ropeLayout, c.rotaryDim, c.qkvBias, c.qkNorm, c.tiedEmbeddings], ["phi3", "neox", 12, false, false, false]);
});

test("loadModel() cuts fused phi3 rows of a block format at row boundaries (q8_0)", async () => {
  const spec: ModelFileSpec = { ...SPEC, hidden: 64, heads: 4, headDim: 16, ffn: 64, dtype: "q8_0", seed: 92 };
  const fused = await loadModel(await write("q8-fused", spec));
  const plain = await loadModel(await write("q8-plain", { ...spec, unfused: true }));
  for (const role of ["wq", "wk", "wv", "wGate", "wUp"] as const) {
    const a = fused.weights.layers[0][role] as HostTensor;
    const b = plain.weights.layers[0][role] as HostTensor;
    assert.equal(a.dtype, "q8_0", role);
    assert.deepEqual([a.shape, a.data], [b.shape, b.data], role);
  }
});

test("a fused phi3 GGUF runs as the same weights written apart (forward logits equal)", async () => {
  const backend = createReferenceBackend();
  const fused = await loadModel(await write("run-fused", SPEC));
  const plain = await loadModel(await write("run-plain", { ...SPEC, unfused: true }));
  const prompt = [1, 17, 120, 255, 3, 42];
  const entries = [{ tokens: prompt, startPos: 0, blockTable: [0] }];
  const a = await stepLogits(backend, fused, entries);
  assert.ok(a.some((x) => x !== 0));
  assert.deepEqual(a, await stepLogits(backend, plain, entries));
});

test("loadModel() takes phi3's long RoPE factors past the original context, its short ones within, and the magnitude factor for the rotation", async () => {
  const long = (await loadModel(await write("long", SPEC))).config;
  assert.deepEqual(long.ropeFreqFactors, SPEC.longRope!.long);
  // The magnitude turns with the rotated dims (Backend.rope), so the scores keep 1/√headDim.
  assert.ok(Math.abs(long.ropeMagnitude! - longRopeAttnFactor(256, 64)) < 1e-6, `${long.ropeMagnitude}`);
  assert.equal(long.attentionScale, undefined);
  // An original context at the file's 256 (no extension): the short factors, and the file's factor 1.
  const short = (await loadModel(await write("short", { ...SPEC, longRope: { ...SPEC.longRope!, originalContext: 256 } }))).config;
  assert.deepEqual(short.ropeFreqFactors, SPEC.longRope!.short);
  assert.equal(short.ropeMagnitude, undefined);
  // Phi-3-mini-4k: no LongRoPE at all.
  const plain = (await loadModel(await write("no-longrope", { ...SPEC, longRope: undefined }))).config;
  assert.deepEqual([plain.ropeFreqFactors, plain.ropeMagnitude], [undefined, undefined]);
});

test("loadModel() leaves phi3's declared sliding window unapplied, as llama.cpp does", async () => {
  const c = (await loadModel(await write("window", SPEC))).config;
  assert.equal(c.slidingWindow, undefined);
  assert.equal(layerWindow(c, 0), undefined);
});

test("loadModel() stops phi3 at <|end|> though the file names no EOT", async () => {
  const vocab = vocabFor(SPEC);
  const end = vocab.tokens.indexOf("<|end|>");
  assert.ok(end > vocab.eosId);
  const c = (await loadModel(await write("end", SPEC))).config;
  assert.deepEqual(c.eosTokenIds.toSorted((a, b) => a - b), [vocab.eosId, end]);
});

test("loadModel() refuses phi3 files whose LongRoPE it would run wrongly, naming the problem", async () => {
  const shortOnly = await write("short-only", { ...SPEC, longRope: undefined }, {
    tensors: [{ name: "rope_factors_short.weight", shape: [6], dtype: "f32", data: new Uint8Array(Float32Array.from([1, 1, 1, 1, 1, 1]).buffer) }],
  });
  await expectLoadError(loadModel(shortOnly), /has short RoPE factors but no long ones/);
  const wrongLength = await write("wrong-length", { ...SPEC, longRope: { ...SPEC.longRope!, long: [1, 2, 3, 4] } });
  await expectLoadError(loadModel(wrongLength), /has 4 RoPE frequency factors; head dim 12 needs 6/);
  const zero = await write("zero", { ...SPEC, longRope: { ...SPEC.longRope!, long: [1, 0, 1, 1, 1, 1] } });
  await expectLoadError(loadModel(zero), /RoPE frequency factor 0 at index 1/);
});

const hfDir = (name: string, spec: ModelFileSpec, edit?: (cfg: Record<string, unknown>) => Record<string, unknown>) => writeTestHfDirectory(dir, name, spec, edit);

test("loadModel() reads a Phi3ForCausalLM checkpoint (fused qkv_proj and gate_up_proj, longrope) as its GGUF", async () => {
  const gguf = await loadModel(await write("hf-twin", SPEC));
  const hf = await loadModel(await hfDir("hf", SPEC));
  const c = hf.config;
  assert.deepEqual([c.architecture, c.rotaryDim, c.ropeFreqFactors, c.slidingWindow], ["phi3", 12, SPEC.longRope!.long, undefined]);
  assert.ok(Math.abs(c.ropeMagnitude! - gguf.config.ropeMagnitude!) < 1e-6, `${c.ropeMagnitude} vs ${gguf.config.ropeMagnitude}`);
  for (const role of ["wq", "wk", "wv", "wGate", "wUp"] as const) {
    assert.deepEqual(values(hf.weights.layers[1][role] as HostTensor), values(gguf.weights.layers[1][role] as HostTensor), role);
  }
  const backend = createReferenceBackend();
  const entries = [{ tokens: [1, 17, 120, 255, 3, 42], startPos: 0, blockTable: [0] }];
  const a = await stepLogits(backend, hf, entries);
  const b = await stepLogits(backend, gguf, entries);
  assert.ok(a.every((x, i) => Math.abs(x - b[i]) < 1e-4), "the same logits as the GGUF's");
  // An attention_factor given in the config wins over the computed one; within the original context the short factors.
  const given = await loadModel(await hfDir("hf-given", SPEC, (cfg) => ({ ...cfg, rope_scaling: { ...(cfg.rope_scaling as object), attention_factor: 1.25 } })));
  assert.equal(given.config.ropeMagnitude, 1.25);
  const short = await loadModel(await hfDir("hf-short", SPEC, (cfg) => ({ ...cfg, original_max_position_embeddings: 256 })));
  assert.deepEqual([short.config.ropeFreqFactors, short.config.ropeMagnitude], [SPEC.longRope!.short, undefined]);
});

test("loadModel() refuses a Phi3ForCausalLM config whose RoPE scaling it cannot run, naming it", async () => {
  const yarn = await hfDir("hf-yarn", SPEC, (cfg) => ({ ...cfg, rope_scaling: { type: "yarn", factor: 4 } }));
  await expectLoadError(loadModel(yarn), /uses rope_scaling type "yarn"; Phi-3 checkpoints use "longrope"/);
  const noOriginal = await hfDir("hf-no-original", SPEC, ({ original_max_position_embeddings: _, ...cfg }) => cfg);
  await expectLoadError(loadModel(noOriginal), /gives no original_max_position_embeddings/);
  const badList = await hfDir("hf-bad-list", SPEC, (cfg) => ({ ...cfg, rope_scaling: { type: "longrope", long_factor: "1,2", short_factor: [1] } }));
  await expectLoadError(loadModel(badList), /"rope_scaling.long_factor" in ".*" should be a list of numbers, got "1,2"/);
});

/** A PEFT adapter directory of `tensors` (rank 4, alpha 8). */
async function peftDir(name: string, tensors: HostTensor[]): Promise<string> {
  const path = `${dir}/${name}`;
  mkdirSync(path, { recursive: true });
  await writeFile(`${path}/adapter_config.json`, JSON.stringify({ peft_type: "LORA", r: 4, lora_alpha: 8, bias: "none" }));
  await writeFile(`${path}/adapter_model.safetensors`, encodeSafetensors(tensors));
  return path;
}

test("loadLoraAdapter() takes a Phi-3 PEFT adapter on the fused qkv_proj and gate_up_proj as adapters of their parts", async () => {
  const base = await loadModel(await write("lora-base", SPEC));
  const rand = seededRandom(7);
  const draw = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.4);
  const fused: HostTensor[] = [];
  const apart: HostTensor[] = [];
  const t = (name: string, shape: number[], v: Float32Array) => hostTensorFromF32(`base_model.model.model.layers.0.${name}`, shape, v, "f32");
  // q 64 rows, k and v 32 each; gate and up 48 each.
  for (const [module, parts] of [["self_attn.qkv_proj", [["self_attn.q_proj", 64], ["self_attn.k_proj", 32], ["self_attn.v_proj", 32]]], ["mlp.gate_up_proj", [["mlp.gate_proj", 48], ["mlp.up_proj", 48]]]] as const) {
    const rows = parts.reduce((a, [, r]) => a + r, 0);
    const a = draw(4 * 32), b = draw(rows * 4);
    fused.push(t(`${module}.lora_A.weight`, [4, 32], a), t(`${module}.lora_B.weight`, [rows, 4], b));
    let first = 0;
    for (const [name, r] of parts) {
      apart.push(t(`${name}.lora_A.weight`, [4, 32], a), t(`${name}.lora_B.weight`, [r, 4], b.slice(first * 4, (first + r) * 4)));
      first += r;
    }
  }
  const fromFused = await loadLoraAdapter(await peftDir("lora-fused", fused), base.config);
  const fromApart = await loadLoraAdapter(await peftDir("lora-apart", apart), base.config);
  const key = (w: { layer: number; target: string }) => `${w.layer}.${w.target}`;
  const byKey = new Map(fromApart.weights.map((w) => [key(w), w]));
  assert.deepEqual(fromFused.weights.map(key).sort(), ["0.wGate", "0.wUp", "0.wk", "0.wq", "0.wv"]);
  for (const w of fromFused.weights) {
    const other = byKey.get(key(w))!;
    assert.deepEqual([w.rank, w.inDim, w.outDim, w.a, w.b], [other.rank, other.inDim, other.outDim, other.a, other.b], key(w));
  }
  // A fused B whose rows are not its parts' sum is refused, naming the shape wanted.
  const short = [fused[0], t("self_attn.qkv_proj.lora_B.weight", [100, 4], draw(400))];
  await expectLoadError(loadLoraAdapter(await peftDir("lora-short", short), base.config), /"model\.layers\.0\.self_attn\.qkv_proj" lora_B of shape \[100,4\]; expected \[64 \+ 32 \+ 32, rank\]/);
});

test("longRopeFor() and an engine take LongRoPE's short divisors for a context within the original, its long ones past it (llama.cpp's choice by its context)", async () => {
  const m = await loadModel(await write("engine-ctx", SPEC));
  assert.deepEqual(longRopeFor(m.config, 64).ropeFreqFactors, SPEC.longRope!.short);
  assert.deepEqual(longRopeFor(m.config, 65).ropeFreqFactors, SPEC.longRope!.long);
  assert.equal(longRopeFor(m.config, 256), m.config, "the loaded choice kept as it is");
  // An engine serving 64 positions runs the short divisors: its first token's log probability is the
  // forward's with them, not with the long ones.
  // 40 positions: enough for the two sets' angles to part.
  const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 290 + 3);
  const entries = [{ tokens: prompt, startPos: 0, blockTable: [0, 1, 2] }];
  const backend = createReferenceBackend();
  const logSoftmax = (x: Float32Array) => {
    const max = Math.max(...x);
    const z = Math.log(x.reduce((a, v) => a + Math.exp(v - max), 0)) + max;
    return Array.from(x, (v) => v - z);
  };
  const short = logSoftmax(await stepLogits(backend, { ...m, config: longRopeFor(m.config, 64) }, entries));
  const long = logSoftmax(await stepLogits(backend, m, entries));
  for (const [maxModelLen, want, other] of [[64, short, long], [256, long, short]] as const) {
    const e = createEngine(createReferenceBackend(), m, { numBlocks: 32, maxModelLen });
    try {
      const r = await e.submit({ prompt, maxTokens: 1, temperature: 0, logprobs: 0 }).result;
      const lp = r.logprobs![0].logprob;
      const token = r.tokenIds[0];
      assert.ok(Math.abs(lp - want[token]) < 1e-4, `maxModelLen ${maxModelLen}: ${lp} vs ${want[token]}`);
      assert.ok(Math.abs(lp - other[token]) > 1e-3, `maxModelLen ${maxModelLen}: the other set gives another log probability`);
    } finally {
      await e.stop();
    }
  }
});

/**
 * LoRA adapters: llama.cpp GGUF adapter files read and checked (loadLoraAdapter), and a batch whose
 * entries each run their own adapter (forward() with StepLora) agreeing, row for row, with the
 * adapter merged into the weights (W + s·B·A) run alone, on every backend.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend, Tensor } from "../../src/backend/types.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import { ModelLoadError } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { forward, ForwardInputError } from "../../src/model/forward.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { freeLoraSet, uploadLoraSet } from "../../src/model/lora-set.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import type { LoraAdapter } from "../../src/model/lora.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { type HostModel, randomModel, type RandomModelSpec } from "./forward-fixtures.ts";
import { type LoraFileSpec, loraGgufBytes, mergeLora } from "./lora-files.ts";

const dir = mkdtempSync(`${tmpdir()}/lora-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const LLAMA: RandomModelSpec = {
  architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 40, vocab: 37,
  ropeLayout: "normal", tied: false, dtype: "f32", seed: 11,
};
const QWEN2: RandomModelSpec = { ...LLAMA, architecture: "qwen2", ropeLayout: "neox", tied: true, seed: 12 };
const ALL_LAYER = (layers: number) =>
  Array.from({ length: layers }, (_, layer) => (["wq", "wk", "wv", "wo", "wGate", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();

async function adapterFile(host: HostModel, name: string, spec: LoraFileSpec): Promise<string> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, loraGgufBytes(host.config, spec));
  return path;
}

test("loadLoraAdapter() reads A and B in rows-outermost order and scales B by scale · alpha / rank", async () => {
  const host = randomModel(LLAMA);
  const spec: LoraFileSpec = { seed: 1, rank: 4, alpha: 8, targets: [{ layer: 1, target: "wv" }] };
  const plain = await loadLoraAdapter(await adapterFile(host, "alpha0", { ...spec, alpha: 0 }), host.config);
  const scaled = await loadLoraAdapter(await adapterFile(host, "alpha8", spec), host.config, { scale: 0.5 });
  assert.equal(plain.weights.length, 1);
  const [p, s] = [plain.weights[0], scaled.weights[0]];
  assert.deepEqual([p.layer, p.target, p.rank, p.inDim, p.outDim], [1, "wv", 4, 32, 16]);
  assert.deepEqual(s.a, p.a);
  // alpha 0: B as written (times the scale, 1); alpha 8 at rank 4 and scale 0.5: B × 1.
  s.b.forEach((v, i) => assert.ok(Math.abs(v - p.b[i] * 0.5 * 8 / 4) < 1e-7));
  assert.notEqual(plain.fingerprint, (await loadLoraAdapter(await adapterFile(host, "alpha0", { ...spec, alpha: 0 }), host.config, { scale: 2 })).fingerprint);
  assert.equal(plain.fingerprint, (await loadLoraAdapter(await adapterFile(host, "alpha0", { ...spec, alpha: 0 }), host.config)).fingerprint);
});

test("loadLoraAdapter() refuses files that are not plain LoRA adapters of the base, naming the fault", async () => {
  const host = randomModel(LLAMA);
  const tied = randomModel(QWEN2);
  const ok: LoraFileSpec = { seed: 2, rank: 2, alpha: 0, targets: [{ layer: 0, target: "wq" }] };
  const refuse = async (name: string, bytes: Uint8Array, re: RegExp, config = host.config) => {
    const path = `${dir}/${name}.gguf`;
    await writeFile(path, bytes);
    await assert.rejects(loadLoraAdapter(path, config), (e: Error) => e instanceof ModelLoadError && re.test(e.message), name);
  };
  await refuse("arch", loraGgufBytes(host.config, { ...ok, metadata: [["general.architecture", gguf.str("qwen2")]] }), /is for architecture "qwen2", the base model is "llama"/);
  await refuse("type", loraGgufBytes(host.config, { ...ok, metadata: [["general.type", gguf.str("model")]] }), /is not a LoRA adapter: its general.type is "model"/);
  await refuse("kind", loraGgufBytes(host.config, { ...ok, metadata: [["adapter.type", gguf.str("control_vector")]] }), /adapter of type "control_vector"/);
  await refuse("layer", loraGgufBytes({ ...host.config, numLayers: 5 }, { ...ok, targets: [{ layer: 4, target: "wq" }] }), /"blk.4.attn_q.weight", but the base model has 2 layers/);
  await refuse("shape", loraGgufBytes({ ...host.config, hiddenSize: 48 }, ok), /"blk.0.attn_q.weight" lora_a of shape \[2,48\].*expected \[rank, 32\]/);
  await refuse("tied", loraGgufBytes({ ...tied.config, tiedEmbeddings: false }, { ...ok, targets: [{ layer: -1, target: "output" }] }), /"output.weight", but the base model's output projection is its token embedding/, tied.config);
  // One side of a pair only.
  const a = hostTensorFromF32("blk.0.attn_q.weight.lora_a", [2, 32], new Float32Array(64), "f32");
  const meta: [string, ReturnType<typeof gguf.str>][] = [
    ["general.architecture", gguf.str("llama")], ["general.type", gguf.str("adapter")], ["adapter.type", gguf.str("lora")],
  ];
  await refuse("half", encodeGguf({ metadata: meta, tensors: [a] }), /has lora_a for "blk.0.attn_q.weight" but not lora_b/);
  await refuse("expert", encodeGguf({ metadata: meta, tensors: [{ ...a, name: "blk.0.ffn_gate_exps.weight.lora_a" }] }), /tensor "blk.0.ffn_gate_exps.weight.lora_a", which names no projection/);
});

const webgpu = await poisonedWebGpu("the LoRA forward test on WebGPU");
const ref = createReferenceBackend();

/** Logits rows of a tensor (freed). */
async function rows(backend: Backend, t: Tensor): Promise<Float32Array[]> {
  const data = (await backend.download(t)) as Float32Array;
  backend.free(t);
  const vocab = t.shape[1];
  return Array.from({ length: t.shape[0] }, (_, i) => data.slice(i * vocab, (i + 1) * vocab));
}

const PROMPTS = [[1, 5, 9, 30, 2, 17], [3, 3, 8], [36, 0, 11, 4, 7]];

for (const [name, backend, skip] of [["reference", ref, false], ["webgpu", webgpu.gpu, webgpu.skip]] as const) {
  for (const spec of [LLAMA, QWEN2]) {
    test(`forward() on ${name} runs each entry's LoRA adapter as if merged into the weights (${spec.architecture})`, async () => {
      assert.ok(backend, webgpu.why);
      const host = randomModel(spec);
      const targets = ALL_LAYER(spec.layers);
      // Adapter 1 changes everything (the output projection too where it is not tied); adapter 2,
      // at a lower rank, only the attention of layer 1 and the feed-forward's down projection of layer 0.
      const a1 = await loadLoraAdapter(await adapterFile(host, `${spec.seed}-a1`, {
        seed: 21, rank: 4, alpha: 8, targets: spec.tied ? targets : [...targets, { layer: -1, target: "output" }],
      }), host.config);
      const a2 = await loadLoraAdapter(await adapterFile(host, `${spec.seed}-a2`, {
        seed: 22, rank: 2, alpha: 0, targets: [{ layer: 1, target: "wq" }, { layer: 1, target: "wo" }, { layer: 0, target: "wDown" }],
      }), host.config, { scale: 1.5 });
      const hasOutput = !spec.tied;
      const expected: Float32Array[][] = [];
      for (const [i, adapter] of [a1, undefined, a2].entries()) {
        const model = uploadModel(backend, adapter ? mergeLora(host, adapter) : host);
        const kv = allocatePagedKv(backend, host.config, 8, 4);
        expected.push(await rows(backend, forward(backend, model, kv, {
          entries: [{ tokens: PROMPTS[i], startPos: 0, blockTable: [0, 1] }], allPositions: true,
        })));
        freePagedKv(backend, kv);
        freeDeviceModel(backend, model);
      }
      const model = uploadModel(backend, host);
      // An empty slot between them (an unloaded adapter) must not disturb the others.
      const set = uploadLoraSet(backend, host.config, [a1, undefined as LoraAdapter | undefined, a2], hasOutput);
      const kv = allocatePagedKv(backend, host.config, 8, 4);
      const entries = PROMPTS.map((tokens, i) => ({ tokens, startPos: 0, blockTable: [2 * i, 2 * i + 1] }));
      const all = await rows(backend, forward(backend, model, kv, { entries, allPositions: true, lora: { set, slots: [1, 0, 3] } }));
      let row = 0;
      PROMPTS.forEach((p, i) => {
        for (let j = 0; j < p.length; j++, row++) {
          const got = all[row], want = expected[i][j];
          const err = Math.max(...got.map((v, k) => Math.abs(v - want[k])));
          assert.ok(err < 2e-4, `entry ${i} position ${j}: max |Δlogit| ${err}`);
        }
      });
      // The adapters change the logits (the comparison is not vacuous), and the last rows alone come out right too.
      const base = expected[1][0];
      const spread = (xs: Float32Array, ys: Float32Array) => Math.max(...xs.map((v, k) => Math.abs(v - ys[k])));
      assert.ok(spread(expected[0][0], (await rows(backend, forward(backend, model, kv, { entries: [{ tokens: PROMPTS[0], startPos: 0, blockTable: [0, 1] }], allPositions: true })))[0]) > 0.05);
      assert.ok(spread(base, expected[1][0]) === 0);
      const last = await rows(backend, forward(backend, model, kv, { entries, extraRows: [1], lora: { set, slots: [1, 0, 3] } }));
      [expected[0][PROMPTS[0].length - 1], expected[1][2], expected[2][4], expected[0][1]].forEach((want, r) => {
        assert.ok(spread(last[r], want) < 2e-4, `result row ${r}`);
      });
      assert.throws(() => forward(backend, model, kv, { entries, lora: { set, slots: [1, 0, 4] } }), (e: Error) => e instanceof ForwardInputError && /slot 4 is outside the set's 0..3/.test(e.message));
      freeLoraSet(backend, set);
      freePagedKv(backend, kv);
      freeDeviceModel(backend, model);
    }, { ignore: skip });
  }
}

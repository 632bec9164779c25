/**
 * Speculative decoding with the model's own multi-token-prediction block (GLM-4.5's NextN, a random
 * GGUF): the block loads only when asked, its forward is the composition it claims to be (checked
 * against a one-layer model built from its weights and inputs computed on the host), and an engine
 * drafting with it gives the outputs it gives without drafts; a block that predicts exactly (built so)
 * has every draft token taken, chained ones included.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { parseSpeculativeConfig } from "../../src/engine/ngram-draft.ts";
import { type HostTensor, type LoadedModel, ModelLoadError } from "../../src/model/config.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward, forwardWithHidden } from "../../src/model/forward.ts";
import { mtpForward } from "../../src/model/forward-mtp.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeTestGguf, writeTestHfDirectory } from "../model/model-files.ts";
import { draftedOutputs, DEEPSEEK_MTP_SPEC, exactMtpModel, MTP_SPEC, QWEN35_MTP_SPEC, QWEN3NEXT_MTP_SPEC, rmsnorm, tensor, values } from "./mtp-fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/mtp-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const path = await writeTestGguf(dir, "glm", MTP_SPEC);
const model = await loadModel(path, { mtp: true });
// DeepSeek V3's block: latent attention.
const deepseek = await loadModel(await writeTestGguf(dir, "deepseek", DEEPSEEK_MTP_SPEC), { mtp: true });
// Qwen3.5's: gated attention after Gated DeltaNet layers.
const qwen35 = await loadModel(await writeTestGguf(dir, "qwen35", QWEN35_MTP_SPEC), { mtp: true });
// Qwen3-Next's: Qwen3.5's names, its layer's experts per expert with a gated shared one.
const qwen3next = await loadModel(await writeTestGguf(dir, "qwen3next", QWEN3NEXT_MTP_SPEC), { mtp: true });
const backend = createReferenceBackend();

test("loadModel() loads the multi-token-prediction block only when asked, and refuses files without one", async () => {
  assert.deepEqual(model.config.mtp, { layer: 2 });
  assert.equal(model.config.nextnLayers, 1);
  const m = model.weights.mtp!;
  assert.deepEqual(m.ehProj.shape, [32, 64]);
  assert.ok(m.layer.router && m.layer.wGate, "its layer is a whole MoE layer");
  assert.ok(m.headNorm && !m.head && !m.embedding, "the file's shared head norm; the model's head and embedding");
  const plain = await loadModel(path);
  assert.equal(plain.config.mtp, undefined);
  assert.equal(plain.weights.mtp, undefined);
  const none = await writeTestGguf(dir, "plain", { ...MTP_SPEC, nextn: 0, seed: 602 });
  await assert.rejects(loadModel(none, { mtp: true }), (e: unknown) => e instanceof ModelLoadError && /has no multi-token-prediction layers/.test(e.message));
  // The same weights as a Hugging Face checkpoint (model.layers.2.eh_proj …): the same block.
  const hf = await loadModel(await writeTestHfDirectory(dir, "glm-hf", MTP_SPEC), { mtp: true });
  assert.deepEqual(hf.config.mtp, { layer: 2 });
  const same = (a: HostTensor, b: HostTensor) => assert.deepEqual(values(a), values(b));
  same(hf.weights.mtp!.ehProj, m.ehProj);
  same(hf.weights.mtp!.hnorm!, m.hnorm!);
  same(hf.weights.mtp!.headNorm!, m.headNorm!);
  same(hf.weights.mtp!.layer.wq!, m.layer.wq!);
  same(hf.weights.mtp!.layer.wGate!, m.layer.wGate!);
  // A block with the model's embedding repeated (DeepSeek V3's checkpoints) keeps one copy; a head of its own is its own.
  const ownHead = new Float32Array(300 * 32).map((_, i) => Math.sin(i));
  const extras = { tensors: [{ ...model.weights.tokenEmbedding, name: "blk.2.nextn.embed_tokens.weight" }, tensor("blk.2.nextn.shared_head_head.weight", [300, 32], ownHead)] };
  const both = (await loadModel(await writeTestGguf(dir, "glm-own", MTP_SPEC, extras), { mtp: true })).weights.mtp!;
  assert.equal(both.embedding, undefined);
  assert.deepEqual(values(both.head!), ownHead);
  // Qwen3.5's block from its checkpoint (`mtp.fc`, `mtp.layers.0.`, norms weighing by 1 + w) is the GGUF's (1 + w stored).
  const q = qwen35.weights.mtp!;
  const qhf = (await loadModel(await writeTestHfDirectory(dir, "qwen35-hf", QWEN35_MTP_SPEC), { mtp: true })).weights.mtp!;
  assert.deepEqual(qwen35.config.mtp, { layer: 4 });
  for (const [a, b] of [[qhf.ehProj, q.ehProj], [qhf.enorm!, q.enorm!], [qhf.hnorm!, q.hnorm!], [qhf.headNorm!, q.headNorm!], [qhf.layer.wq!, q.layer.wq!], [qhf.layer.attnNorm!, q.layer.attnNorm!], [qhf.layer.qNorm!, q.layer.qNorm!]] as const) {
    const [x, y] = [values(a), values(b)];
    assert.ok(x.every((v, i) => Math.abs(v - y[i]) < 1e-6), a.name);
  }
  assert.ok(values(q.enorm!).every((v) => v > 0.5), "the norms weigh by 1 + w");
  // Qwen3.5-MoE's, its experts fused per layer as transformers 5 saves them (`mtp.layers.0.mlp.experts.gate_up_proj`).
  const moeSpec = { ...QWEN35_MTP_SPEC, architecture: "qwen35moe" as const, seed: 621, experts: { count: 4, used: 2, sharedFfn: 64 }, deltaNet: { ...QWEN35_MTP_SPEC.deltaNet!, fusedExperts: true } };
  const moeGguf = (await loadModel(await writeTestGguf(dir, "qwen35moe", moeSpec), { mtp: true })).weights.mtp!.layer;
  const moeHf = (await loadModel(await writeTestHfDirectory(dir, "qwen35moe-hf", moeSpec), { mtp: true })).weights.mtp!.layer;
  for (const r of ["wGate", "wUp", "wDown", "router", "wGateShared", "sharedGate"] as const) assert.deepEqual(values(moeHf[r]!), values(moeGguf[r]!), r);
  // Qwen3-Next's, from a checkpoint whose config.json names no block (as released): the `mtp.` tensors count one.
  const nextDir = await writeTestHfDirectory(dir, "qwen3next-hf", QWEN3NEXT_MTP_SPEC);
  const nextCfg = JSON.parse(readFileSync(`${nextDir}/config.json`, "utf8"));
  delete nextCfg.mtp_num_hidden_layers;
  writeFileSync(`${nextDir}/config.json`, JSON.stringify(nextCfg));
  const nextHf = await loadModel(nextDir, { mtp: true });
  assert.deepEqual([nextHf.config.nextnLayers, nextHf.config.mtp], [1, { layer: 4 }]);
  const [nh, ng] = [nextHf.weights.mtp!, qwen3next.weights.mtp!];
  for (const [a, b] of [[nh.ehProj, ng.ehProj], [nh.enorm!, ng.enorm!], [nh.headNorm!, ng.headNorm!], [nh.layer.wq!, ng.layer.wq!], [nh.layer.router!, ng.layer.router!], [nh.layer.wGate!, ng.layer.wGate!], [nh.layer.sharedGate!, ng.layer.sharedGate!]] as const) {
    assert.deepEqual(values(a), values(b), a.name);
  }
  // Another architecture's block is refused by name.
  const qwen = await writeTestGguf(dir, "qwen3", { ...MTP_SPEC, architecture: "qwen3", experts: undefined, nextn: undefined, seed: 604 }, { metadata: [["qwen3.nextn_predict_layers", gguf.u32(1)], ["qwen3.block_count", gguf.u32(3)]] });
  await assert.rejects(loadModel(qwen, { mtp: true }), (e: unknown) => e instanceof ModelLoadError && /those of the "qwen3" architecture are not run; glm4moe, deepseek2, qwen35, qwen35moe and qwen3next ones are/.test(e.message));
});

for (const [name, loaded] of [["GLM-4.5", model], ["DeepSeek V3", deepseek], ["Qwen3.5", qwen35], ["Qwen3-Next", qwen3next]] as const) {
  test(`mtpForward() on a ${name} is eh_proj([enorm(embedding); hnorm(hidden)]), then its layer and head, over a paged cache`, async () => {
    const model = loaded;
    const c = model.config;
    const device = uploadModel(backend, model);
    const kv = allocatePagedKv(backend, c, 8, 4);
    const prompt = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61];
    const n = prompt.length;
    const entries = [{ tokens: prompt, startPos: 0, blockTable: [0, 1, 2], stateSlot: 0 }];
    const target = forwardWithHidden(backend, device, kv, { entries, allHidden: true });
    backend.free(target.logits);
    const hidden = (await backend.download(target.allHidden!)) as Float32Array;
    // Row j takes the token after position j; the last row a token of our choosing.
    const next = [...prompt.slice(1), 77];
    // The block's rows in two steps, so the second reads K/V the first wrote.
    const split = 6;
    const rowsOf = (from: number, to: number) => ({ tokens: next.slice(from, to), startPos: from, blockTable: [0, 1, 2] });
    const h1 = backend.upload(hidden.slice(0, split * 32), [split, 32]);
    const h2 = backend.upload(hidden.slice(split * 32), [n - split, 32]);
    const a = mtpForward(backend, device, kv, { entries: [rowsOf(0, split)], hidden: h1, rows: Array.from({ length: split }, (_, i) => i) })!;
    const b = mtpForward(backend, device, kv, { entries: [rowsOf(split, n)], hidden: h2, rows: Array.from({ length: n - split }, (_, i) => i) })!;
    const got = [...(await backend.download(a.logits)), ...(await backend.download(b.logits))];
    // The same computation as a one-layer model: its "token" j embeds as the block's input at row j.
    const m = model.weights.mtp!;
    const emb = values(model.weights.tokenEmbedding), eh = values(m.ehProj), en = values(m.enorm!), hn = values(m.hnorm!);
    const table = new Float32Array(c.vocabSize * 32);
    for (let j = 0; j < n; j++) {
      const joined = [...rmsnorm(emb.subarray(next[j] * 32, next[j] * 32 + 32), en, c.rmsNormEps), ...rmsnorm(hidden.subarray(j * 32, j * 32 + 32), hn, c.rmsNormEps)];
      for (let o = 0; o < 32; o++) table[j * 32 + o] = joined.reduce((acc, v, i) => acc + v * eh[o * 64 + i], 0);
    }
    const one: LoadedModel = {
      ...model,
      // Its layer alone: attention (Qwen3.5's Gated DeltaNet layers gone), experts from the first layer.
      config: { ...c, numLayers: 1, ...(c.moe ? { moe: { ...c.moe, denseLayers: 0 } } : {}), deltaNet: undefined, mtp: undefined, nextnLayers: undefined },
      weights: { tokenEmbedding: tensor("table", [c.vocabSize, 32], table), layers: [m.layer], outputNorm: m.headNorm!, output: model.weights.output },
    };
    const oneKv = allocatePagedKv(backend, one.config, 8, 4);
    const want = await backend.download(forward(backend, uploadModel(backend, one), oneKv, { entries: [{ tokens: next.map((_, j) => j), startPos: 0, blockTable: [0, 1, 2] }], allPositions: true }));
    assert.equal(got.length, want.length);
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
    assert.ok(worst < 1e-4, `largest difference ${worst}`);
    // The hidden rows it returns are the head's input: the head over them gives the logits.
    const rows = (await backend.download(a.hidden)) as Float32Array;
    const head = values(model.weights.output!);
    const logit = (r: number, t: number) => rows.subarray(r * 32, r * 32 + 32).reduce((acc, v, i) => acc + v * head[t * 32 + i], 0);
    assert.ok(Math.abs(logit(2, 11) - got[2 * c.vocabSize + 11]) < 1e-4);
  });
}

const outputs = (m: LoadedModel, o: CreateEngineOptions, maxTokens = 20) => draftedOutputs(backend, m, o, maxTokens);

test("Engine with speculative method mtp gives the tokens it gives without drafts (GLM-4.5, DeepSeek V3, Qwen3.5, Qwen3-Next)", async () => {
  const base = { numBlocks: 40, blockSize: 4, scheduler: { maxRunning: 3, maxBatchTokens: 9 } };
  for (const m of [model, deepseek, qwen35, qwen3next]) {
    const plain = await outputs(m, base);
    for (const numTokens of [1, 3]) {
      const spec = await outputs(m, { ...base, speculative: { method: "mtp", numTokens } });
      assert.deepEqual(spec.tokens, plain.tokens, `${m.config.architecture}, ${numTokens} draft tokens`);
      assert.ok(spec.drafted > 0, "drafts were verified");
      assert.ok(spec.accepted <= spec.drafted);
    }
  }
  // The heuristic schedule (the default) pauses a sequence whose one-token drafts are rejected; constant drafts every step.
  const constant = await outputs(model, { ...base, speculative: { method: "mtp", numTokens: 1, schedule: "constant" } });
  const heuristic = await outputs(model, { ...base, speculative: { method: "mtp", numTokens: 1 } });
  assert.deepEqual(constant.tokens, heuristic.tokens);
  assert.ok(heuristic.drafted < constant.drafted && constant.accepted < constant.drafted, `drafted ${heuristic.drafted} against ${constant.drafted} (${constant.accepted} taken)`);
  // A model loaded without its block is refused by name.
  const without = await loadModel(path);
  assert.throws(() => createEngine(backend, without, { ...base, speculative: { method: "mtp", numTokens: 1 } }), /block was not loaded/);
});

test("Engine with speculative method mtp takes every draft token of a block that predicts exactly", async () => {
  const exact = exactMtpModel(model);
  const base = { numBlocks: 40, blockSize: 4, scheduler: { maxRunning: 3 } };
  const plain = await outputs(exact, base, 16);
  const spec = await outputs(exact, { ...base, speculative: { method: "mtp", numTokens: 3 } }, 16);
  assert.deepEqual(spec.tokens, plain.tokens);
  assert.ok(spec.drafted >= 20, `${spec.drafted} draft tokens`);
  assert.equal(spec.accepted, spec.drafted);
});

test("parseSpeculativeConfig() reads the mtp method and vLLM's older names of it", () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "mtp"}'), { method: "mtp", numTokens: 1 });
  assert.deepEqual(parseSpeculativeConfig('{"method": "deepseek_mtp", "num_speculative_tokens": 3, "disable_by_batch_size": 8}'), { method: "mtp", numTokens: 3, disableByBatchSize: 8 });
  assert.deepEqual(parseSpeculativeConfig('{"method": "glm4_moe_mtp", "num_speculative_tokens": 2}'), { method: "mtp", numTokens: 2 });
  assert.deepEqual(parseSpeculativeConfig('{"method": "mtp", "num_speculative_tokens_schedule": "constant"}'), { method: "mtp", numTokens: 1, schedule: "constant" });
  assert.throws(() => parseSpeculativeConfig('{"method": "mtp", "num_speculative_tokens_schedule": "cost"}'), /must be "heuristic" or "constant" for method "mtp", got "cost"/);
  assert.throws(() => parseSpeculativeConfig('{"method": "mtp", "model": "x.gguf"}'), /Unknown speculative config key "model" for method "mtp"/);
  assert.throws(() => parseSpeculativeConfig('{"method": "mtp", "num_speculative_tokens": 0}'), /num_speculative_tokens must be an integer from 1 to 32, got 0/);
});

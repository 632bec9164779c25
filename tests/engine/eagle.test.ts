/**
 * Speculative decoding with an EAGLE head (vLLM's methods "eagle3" and "eagle"; random heads written
 * as their checkpoints are): the head loads beside a model and is refused where it cannot draft for
 * it, its forward is the composition EAGLE-3 and EAGLE define (checked against the same arithmetic
 * on the host, a smaller vocabulary's ids mapped by d2t), the states entering the fused layers are
 * the model's, and an engine drafting with a head gives the outputs it gives without drafts; a head
 * built to predict exactly has every draft token taken, chained ones included.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import { GREEDY_ROW, modelStepRunner } from "../../src/engine/engine-runner.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { parseSpeculativeConfig } from "../../src/engine/ngram-draft.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { attachEagleHead } from "../../src/model/eagle-head.ts";
import { forwardWithHidden } from "../../src/model/forward.ts";
import { mtpForward } from "../../src/model/forward-mtp.ts";
import { loadModel } from "../../src/model/load.ts";
import { expectLoadError, firstLayers, writeTestGguf } from "../model/model-files.ts";
import { EAGLE_TARGET_SPEC, type EagleHeadSpec, writeEagleHead } from "./eagle-files.ts";
import { DRAFT_PROMPTS, draftedOutputs, QWEN35_MTP_SPEC, rmsnorm, tensor, values } from "./mtp-fixtures.ts";

const dir = mkdtempSync(`${tmpdir()}/eagle-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const targetPath = await writeTestGguf(dir, "llama", EAGLE_TARGET_SPEC);
const backend = createReferenceBackend();
let heads = 0;

/** A head written with `spec`, its tensors, and the target loaded with it. */
async function withHead(spec: EagleHeadSpec): Promise<{ path: string; model: LoadedModel; tensors: ReturnType<typeof writeEagleHead> }> {
  const path = `${dir}/head${heads++}`;
  const tensors = writeEagleHead(path, spec);
  return { path, tensors, model: await loadModel(targetPath, { eagle: { method: spec.method, path } }) };
}

// A head over 200 ids of the model's 300: draft id d is the model's d + d2t[d].
const D2T = Array.from({ length: 200 }, (_, d) => (d * 7) % 100);

test("attachEagleHead() reads EAGLE-3 and EAGLE checkpoints in vLLM's layouts, mapping a smaller vocabulary by d2t", async () => {
  const { model } = await withHead({ method: "eagle3", seed: 1, draftVocab: 200, d2t: D2T, midlayer: true });
  const e = model.config.mtp!.eagle!;
  assert.equal(model.config.mtp!.layer, 5);
  assert.deepEqual([e.method, e.numHeads, e.headDim, e.auxLayers], ["eagle3", 4, 8, [2, 2, 2]]);
  assert.deepEqual(Array.from(e.draftToTarget!.subarray(0, 4)), [0, 8, 16, 24]);
  const m = model.weights.mtp!;
  assert.deepEqual([m.ehProj.shape, m.layer.wq!.shape, m.head!.shape], [[32, 96], [32, 64], [200, 32]]);
  // The draft ids' embeddings are the model's rows at their ids.
  const emb = values(model.weights.tokenEmbedding), draft = values(m.draftEmbedding!);
  for (const d of [0, 3, 199]) assert.deepEqual(draft.subarray(d * 32, d * 32 + 32), emb.subarray(e.draftToTarget![d] * 32, e.draftToTarget![d] * 32 + 32));
  // The speculators format, its own aux layers; EAGLE with fc.bias and no head of its own.
  const spec = (await withHead({ method: "eagle3", seed: 2, speculators: true, auxLayerIds: [1, 3, 4], normBeforeResidual: true })).model.config.mtp!.eagle!;
  assert.deepEqual([spec.auxLayers, spec.normBeforeResidual, spec.draftToTarget], [[1, 3, 4], true, undefined]);
  // norm_before_residual: absent, the speculators format's default is true (as vLLM converts it), the others' false; NVIDIA's nest it.
  assert.equal(e.normBeforeResidual, undefined);
  const implied = (await withHead({ method: "eagle3", seed: 2, speculators: true })).model.config.mtp!.eagle!;
  const off = (await withHead({ method: "eagle3", seed: 2, speculators: true, extraConfig: { norm_before_residual: false } })).model.config.mtp!.eagle!;
  const nested = (await withHead({ method: "eagle3", seed: 2, extraConfig: { eagle_config: { norm_before_residual: true } } })).model.config.mtp!.eagle!;
  assert.deepEqual([implied.normBeforeResidual, off.normBeforeResidual, nested.normBeforeResidual], [true, undefined, true]);
  const eagle = (await withHead({ method: "eagle", seed: 3, fcBias: true })).model;
  assert.deepEqual([eagle.weights.mtp!.ehProj.shape, eagle.weights.mtp!.ehBias!.shape, eagle.weights.mtp!.head], [[32, 64], [32], undefined]);
  // Without the option the model has no head.
  assert.equal((await loadModel(targetPath)).config.mtp, undefined);
});

test("attachEagleHead() refuses a head that cannot draft for the model, naming the problem", async () => {
  const refuses = async (spec: EagleHeadSpec, pattern: RegExp) => {
    const path = `${dir}/bad${heads++}`;
    writeEagleHead(path, spec);
    await expectLoadError(loadModel(targetPath, { eagle: { method: spec.method, path } }), pattern);
  };
  await refuses({ method: "eagle3", seed: 4, hidden: 16 }, /has hidden_size 16; the model's is 32/);
  await refuses({ method: "eagle3", seed: 4, kvHeads: 4 }, /has 4 key\/value heads of 8; its cache is the model's, of 2 heads of 8/);
  await refuses({ method: "eagle3", seed: 4, layers: 2 }, /has 2 layers; heads of one layer are run/);
  await refuses({ method: "eagle3", seed: 4, speculators: true, extraConfig: { model_type: "gemma3" } }, /model_type "gemma3"; llama, qwen2, qwen3 and mistral ones are run/);
  await refuses({ method: "eagle3", seed: 4, qkNorm: true, omit: ["layers.0.self_attn.k_norm.weight"] }, /lacks the tensor "layers.0.self_attn.k_norm.weight"/);
  await refuses({ method: "eagle3", seed: 4, omit: ["layers.0.hidden_norm.weight"] }, /lacks the tensor "layers.0.hidden_norm.weight"/);
  await refuses({ method: "eagle3", seed: 4, draftVocab: 200 }, /drafts over 200 ids of the model's 300 but lacks the tensor "d2t"/);
  await refuses({ method: "eagle3", seed: 4, draftVocab: 200, d2t: D2T.map((v, d) => (d === 150 ? 200 : v)) }, /maps its id 150 to 350 \(d2t\), outside the model's 300 ids/);
  await refuses({ method: "eagle3", seed: 4, auxLayerIds: [1, 2, 9] }, /eagle_aux_hidden_state_layer_ids \[1,2,9\].* are not three of them/);
  await refuses({ method: "eagle3", seed: 4, speculators: true, extraConfig: { layer_types: ["chunked_attention"] } }, /"layer_types" of EAGLE head .* should list "sliding_attention" or "full_attention", got \["chunked_attention"\]/);
  await refuses({ method: "eagle3", seed: 4, speculators: true, extraConfig: { use_sliding_window: true } }, /lacks "sliding_window"/);
  await refuses({ method: "eagle3", seed: 4, fcNorm: "whole", extraConfig: { fc_norm: true } }, /sets both norm_before_fc and fc_norm, which exclude each other/);
  await refuses({ method: "eagle3", seed: 4, fcNorm: "whole", omit: ["input_norm.weight"] }, /lacks the tensor "input_norm.weight"/);
  // Written as EAGLE-3, read as EAGLE: the fc's width gives it away.
  const path = `${dir}/bad${heads++}`;
  writeEagleHead(path, { method: "eagle3", seed: 4 });
  await expectLoadError(loadModel(targetPath, { eagle: { method: "eagle", path } }), /"layers.0.self_attn.q_proj.weight" in .* is \[32,64\]; expected \[32,32\]/);
  await expectLoadError(loadModel(targetPath, { eagle: { method: "eagle3", path: `${dir}/none` } }), /EAGLE head not found/);
  // A model with the head is refused for another method, and a model without one for the head's.
  const { model } = await withHead({ method: "eagle3", seed: 5 });
  const o = { numBlocks: 16, blockSize: 4 };
  assert.throws(() => createEngine(backend, model, { ...o, speculative: { method: "mtp", numTokens: 1 } }), /the one loaded is EAGLE head/);
  assert.throws(() => createEngine(backend, model, { ...o, speculative: { method: "eagle", model: "x", numTokens: 1 } }), /is run as "eagle3"/);
  const plain = await loadModel(targetPath);
  assert.throws(() => createEngine(backend, plain, { ...o, speculative: { method: "eagle3", model: "x", numTokens: 1 } }), /no head was loaded/);
  await assert.rejects(attachEagleHead(model, "eagle3", path), /already has a draft block loaded/);
});

/** Host arithmetic of one head pass over one sequence's rows at positions 0.. (a fresh cache), per vLLM's Llama EAGLE and EAGLE-3. */
function hostHead(
  method: "eagle" | "eagle3", t: ReturnType<typeof writeEagleHead>, embeds: Float32Array[], states: Float32Array[], head: Float32Array, normBeforeResidual = false, normOutput = false,
  attention: { window?: number; divisors?: Float32Array; scale?: number } = {},
) {
  const h = 32, heads = 4, kv = 2, hd = 8, eps = 1e-5;
  const w = (name: string) => (t.get(name) ?? t.get(name.replace("layers.0.", "midlayer."))!).values;
  const mv = (m: Float32Array, x: Float32Array, bias?: Float32Array) => {
    const out = new Float32Array(m.length / x.length);
    for (let o = 0; o < out.length; o++) out[o] = x.reduce((a, v, i) => a + v * m[o * x.length + i], bias ? bias[o] : 0);
    return out;
  };
  const cat = (a: Float32Array, b: Float32Array) => Float32Array.from([...a, ...b]);
  const add = (a: Float32Array, b: Float32Array) => a.map((v, i) => v + b[i]);
  const rope = (x: Float32Array, pos: number) => {
    const y = x.slice();
    for (let i = 0; i < hd / 2; i++) {
      const a = (pos * Math.pow(10000, (-2 * i) / hd)) / (attention.divisors?.[i] ?? 1), [c, s] = [Math.cos(a), Math.sin(a)];
      y[i] = x[i] * c - x[i + hd / 2] * s;
      y[i + hd / 2] = x[i] * s + x[i + hd / 2] * c;
    }
    return y;
  };
  const p = "layers.0.";
  const inputs = embeds.map((e, r) => {
    if (method === "eagle") {
      const x = mv(w("fc.weight"), cat(e, states[r]), t.get("fc.bias")?.values);
      return { attnIn: x, residual: x };
    }
    // norm_before_fc: one norm over the three states; fc_norm: each its own.
    const normedIn = (x: Float32Array) => t.has("input_norm.weight") ? rmsnorm(x, w("input_norm.weight"), eps) : t.has("fc_norm.0.weight") ? Float32Array.from([0, 1, 2].flatMap((j) => [...rmsnorm(x.subarray(j * h, j * h + h), w(`fc_norm.${j}.weight`), eps)])) : x;
    const fused = states[r].length === h ? states[r] : mv(w("fc.weight"), normedIn(states[r]));
    const normed = rmsnorm(fused, w(`${p}hidden_norm.weight`), eps);
    return { attnIn: cat(rmsnorm(e, w(`${p}input_layernorm.weight`), eps), normed), residual: normBeforeResidual ? normed : fused };
  });
  // A Qwen3-style head norms each head's query and key before turning them.
  const qk = (x: Float32Array, which: "q" | "k") => (t.has(`${p}self_attn.${which}_norm.weight`) || t.has(`midlayer.self_attn.${which}_norm.weight`) ? rmsnorm(x, w(`${p}self_attn.${which}_norm.weight`), eps) : x);
  const ks = inputs.map(({ attnIn }, r) => Array.from({ length: kv }, (_, j) => rope(qk(mv(w(`${p}self_attn.k_proj.weight`), attnIn).subarray(j * hd, j * hd + hd), "k"), r)));
  const vs = inputs.map(({ attnIn }) => Array.from({ length: kv }, (_, j) => mv(w(`${p}self_attn.v_proj.weight`), attnIn).subarray(j * hd, j * hd + hd)));
  return inputs.map(({ attnIn, residual }, r) => {
    const q = mv(w(`${p}self_attn.q_proj.weight`), attnIn);
    const att = new Float32Array(heads * hd);
    for (let hh = 0; hh < heads; hh++) {
      const qh = rope(qk(q.subarray(hh * hd, hh * hd + hd), "q"), r), g = Math.floor(hh / (heads / kv));
      // A window of W sees positions r − W + 1 .. r.
      const from = attention.window ? Math.max(0, r - attention.window + 1) : 0;
      const scores = Array.from({ length: r + 1 - from }, (_, j) => ks[from + j][g].reduce((a, v, i) => a + v * qh[i], 0) * (attention.scale ?? 1 / Math.sqrt(hd)));
      const top = Math.max(...scores), ex = scores.map((s) => Math.exp(s - top)), sum = ex.reduce((a, b) => a + b, 0);
      for (let j = from; j <= r; j++) for (let i = 0; i < hd; i++) att[hh * hd + i] += (ex[j - from] / sum) * vs[j][g][i];
    }
    const afterAttn = add(mv(w(`${p}self_attn.o_proj.weight`), att), residual);
    const f = rmsnorm(afterAttn, w(`${p}post_attention_layernorm.weight`), eps);
    const gate = mv(w(`${p}mlp.gate_proj.weight`), f), up = mv(w(`${p}mlp.up_proj.weight`), f);
    const out = add(mv(w(`${p}mlp.down_proj.weight`), gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i])), afterAttn);
    const headIn = method === "eagle3" ? rmsnorm(out, w("norm.weight"), eps) : out;
    return { logits: mv(head, headIn), hidden: normOutput ? headIn : out };
  });
}

const close = (got: Float32Array, want: Float32Array, what: string) => {
  let worst = 0;
  want.forEach((v, i) => (worst = Math.max(worst, Math.abs(got[i] - v))));
  assert.ok(worst < 1e-3, `${what}: largest difference ${worst}`);
};

for (const [name, spec] of [
  ["EAGLE-3 head (vocabulary of its own)", { method: "eagle3", seed: 6, draftVocab: 200, d2t: D2T }],
  ["EAGLE-3 head (norm_before_residual)", { method: "eagle3", seed: 7, normBeforeResidual: true, midlayer: true }],
  ["EAGLE head (fc.bias, the model's head)", { method: "eagle", seed: 8, fcBias: true }],
  ["EAGLE-3 head of Qwen3's layer (q/k norms)", { method: "eagle3", seed: 16, qkNorm: true, speculators: true, extraConfig: { norm_before_residual: false } }],
  ["EAGLE-3 head with norm_before_fc and norm_output", { method: "eagle3", seed: 17, fcNorm: "whole", normOutput: true }],
  ["EAGLE-3 head with fc_norm", { method: "eagle3", seed: 18, fcNorm: "each", draftVocab: 200, d2t: D2T }],
  ["EAGLE-3 head with a sliding window and YaRN RoPE", {
    method: "eagle3", seed: 19, speculators: true,
    extraConfig: { layer_types: ["sliding_attention"], sliding_window: 2, rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 2, beta_fast: 32, beta_slow: 1 } },
  }],
] as [string, EagleHeadSpec][]) {
  test(`mtpForward() runs an ${name} as its checkpoint defines it, fused states or chained`, async () => {
    const { model, tensors } = await withHead(spec);
    const device = uploadModel(backend, model);
    const kv = allocatePagedKv(backend, model.config, 8, 4);
    const n = 3, tokens = [17, 250, 4];
    const width = spec.method === "eagle3" ? 96 : 32;
    const states = Array.from({ length: n }, (_, r) => Float32Array.from({ length: width }, (_, i) => Math.sin(r * 7 + i * 0.37)));
    const emb = values(model.weights.tokenEmbedding);
    const e = model.config.mtp!.eagle!, divisors = model.weights.mtp!.ropeFreqFactors;
    const attention = { ...(e.window ? { window: e.window } : {}), ...(divisors ? { divisors: values(divisors) } : {}), ...(e.attentionScale ? { scale: e.attentionScale } : {}) };
    const want = hostHead(spec.method, tensors, tokens.map((t) => emb.slice(t * 32, t * 32 + 32)), states, values(model.weights.mtp!.head ?? model.weights.output!), e.normBeforeResidual, spec.normOutput, attention);
    const hidden = backend.upload(Float32Array.from(states.flatMap((s) => [...s])), [n, width]);
    const out = mtpForward(backend, device, kv, { entries: [{ tokens, startPos: 0, blockTable: [0] }], hidden, rows: [0, 1, 2] })!;
    const logits = (await backend.download(out.logits)) as Float32Array, got = (await backend.download(out.hidden)) as Float32Array;
    const vocab = out.logits.shape[1];
    for (let r = 0; r < n; r++) {
      close(logits.subarray(r * vocab, (r + 1) * vocab), want[r].logits, `logits of row ${r}`);
      close(got.subarray(r * 32, r * 32 + 32), want[r].hidden, `state of row ${r}`);
    }
    // A chained pass at position 3: the head's own state (EAGLE-3 skips fc), a token its own pick.
    const chainedState = want[2].hidden, pick = 9;
    const chained = mtpForward(backend, device, kv, { entries: [{ tokens: [pick], startPos: 3, blockTable: [0] }], hidden: backend.upload(chainedState, [1, 32]), rows: [0], tokenIds: backend.upload(Int32Array.of(pick), [1]) })!;
    const map = model.config.mtp!.eagle!.draftToTarget;
    const modelId = map ? map[pick] : pick;
    const all = hostHead(spec.method, tensors, [...tokens, modelId].map((t) => emb.slice(t * 32, t * 32 + 32)), [...states, chainedState], values(model.weights.mtp!.head ?? model.weights.output!), e.normBeforeResidual, spec.normOutput, attention);
    close((await backend.download(chained.logits)) as Float32Array, all[3].logits, "the chained pass's logits");
  });
}

test("forwardWithHidden() auxLayers returns the states entering those layers, side by side", async () => {
  const model = await loadModel(targetPath);
  const device = uploadModel(backend, model);
  const entries = [{ tokens: [3, 99, 41, 7], startPos: 0, blockTable: [0] }, { tokens: [250, 8], startPos: 0, blockTable: [1] }];
  const out = forwardWithHidden(backend, device, allocatePagedKv(backend, model.config, 4, 4), { entries, auxLayers: [1, 3, 1] });
  const aux = (await backend.download(out.auxHidden!)) as Float32Array;
  assert.deepEqual(out.auxHidden!.shape, [6, 96]);
  // The state entering layer i is what i layers leave: normed, the truncated model's every-row states.
  for (const [part, layer] of [[0, 1], [1, 3], [2, 1]]) {
    const cut = firstLayers(model, layer);
    const want = (await backend.download(forwardWithHidden(backend, uploadModel(backend, cut), allocatePagedKv(backend, cut.config, 4, 4), { entries, allHidden: true }).allHidden!)) as Float32Array;
    const norm = values(model.weights.outputNorm);
    for (let r = 0; r < 6; r++) close(rmsnorm(aux.slice(r * 96 + part * 32, r * 96 + part * 32 + 32), norm, model.config.rmsNormEps), want.subarray(r * 32, r * 32 + 32), `row ${r}, layer ${layer}`);
  }
});

const outputs = (m: LoadedModel, o: CreateEngineOptions, maxTokens = 20) => draftedOutputs(backend, m, o, maxTokens);

test("Engine with speculative method eagle3 or eagle gives the tokens it gives without drafts", async () => {
  const base = { numBlocks: 40, blockSize: 4, scheduler: { maxRunning: 3, maxBatchTokens: 9 } };
  const plain = await outputs(await loadModel(targetPath), base);
  for (const spec of [{ method: "eagle3", seed: 9, draftVocab: 200, d2t: D2T }, { method: "eagle", seed: 10 }] as EagleHeadSpec[]) {
    const { model, path } = await withHead(spec);
    for (const numTokens of [1, 3]) {
      const got = await outputs(model, { ...base, speculative: { method: spec.method, model: path, numTokens, schedule: "constant" } });
      assert.deepEqual(got.tokens, plain.tokens, `${spec.method}, ${numTokens} draft tokens`);
      assert.ok(got.drafted > 0, "drafts were verified");
    }
  }
});

test("modelStepRunner() drafts with an EAGLE-3 head from the fused states, its picks read as the model's ids (d2t), chained too", async () => {
  const { model, tensors } = await withHead({ method: "eagle3", seed: 11, draftVocab: 200, d2t: D2T });
  const device = uploadModel(backend, model);
  const kv = allocatePagedKv(backend, model.config, 3, 4);
  kv.reserved = 1;
  const runner = modelStepRunner(backend, device, kv);
  const prompt = [5, 9, 44, 120, 7, 3, 88];
  const entry = { seqId: 1, tokens: prompt, startPos: 0, blockTable: [0, 1], sample: true, prefill: true };
  const out = await runner.run([entry], [GREEDY_ROW], { mtp: { tokens: 2, draft: [true], next: [undefined] } });
  // On the host: the head over the prompt's rows, fed the states entering layers 2, 2, 2 (checked
  // above) and each next token, the last row the one sampled; then one chained row.
  const states = (await backend.download(forwardWithHidden(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 3, 4), { entries: [entry], auxLayers: [2, 2, 2] }).auxHidden!)) as Float32Array;
  const emb = values(model.weights.tokenEmbedding), head = values(model.weights.mtp!.head!), map = model.config.mtp!.eagle!.draftToTarget!;
  const embed = (t: number) => emb.slice(t * 32, t * 32 + 32);
  const fed = [...prompt.slice(1), out.ids[0]];
  const rows = prompt.map((_, r) => states.slice(r * 96, r * 96 + 96));
  const argmax = (x: Float32Array) => x.reduce((best, v, i) => (v > x[best] ? i : best), 0);
  const first = hostHead("eagle3", tensors, fed.map(embed), rows, head);
  const d1 = map[argmax(first[prompt.length - 1].logits)];
  const second = hostHead("eagle3", tensors, [...fed, d1].map(embed), [...rows, first[prompt.length - 1].hidden], head);
  const d2 = map[argmax(second[prompt.length].logits)];
  assert.deepEqual(Array.from(out.mtpDrafts![0]!), [d1, d2]);
  assert.ok(d1 !== argmax(first[prompt.length - 1].logits) || d2 !== argmax(second[prompt.length].logits), "the map moved an id (the test would not see it missing)");
});

test("Engine with speculative method eagle takes every draft token of a head that predicts exactly", async () => {
  // A one-layer target whose attention adds nothing predicts from the last token alone; an EAGLE
  // head whose fc passes the embedding through, with the target's layer and its head scaled by the
  // output norm (argmax is blind to the norm's positive scale), predicts what the target will.
  const cut = firstLayers(await loadModel(targetPath), 1);
  const l = cut.weights.layers[0];
  const zeroWo = tensor("wo", l.wo!.shape, new Float32Array(l.wo!.shape[0] * l.wo!.shape[1]));
  const target: LoadedModel = { ...cut, weights: { ...cut.weights, layers: [{ ...l, wo: zeroWo }] } };
  const fc = new Float32Array(32 * 64);
  for (let i = 0; i < 32; i++) fc[i * 64 + i] = 1;
  const out = values(cut.weights.output!), norm = values(cut.weights.outputNorm);
  const head = out.map((v, k) => v * norm[k % 32]);
  const path = `${dir}/exact`;
  writeEagleHead(path, { method: "eagle", seed: 12, replace: { "fc.weight": fc } });
  const withHeadModel: LoadedModel = { ...target, config: { ...target.config }, weights: { ...target.weights } };
  await attachEagleHead(withHeadModel, "eagle", path);
  const m = withHeadModel.weights.mtp!;
  withHeadModel.weights.mtp = { ...m, layer: { ...m.layer, wo: zeroWo, ffnNorm: l.ffnNorm, wGate: l.wGate, wUp: l.wUp, wDown: l.wDown }, head: tensor("head", [300, 32], head) };
  const base = { numBlocks: 40, blockSize: 4, scheduler: { maxRunning: 3 } };
  const plain = await outputs(target, base, 16);
  const spec = await outputs(withHeadModel, { ...base, speculative: { method: "eagle", model: path, numTokens: 3 } }, 16);
  assert.deepEqual(spec.tokens, plain.tokens);
  assert.ok(spec.drafted >= 20, `${spec.drafted} draft tokens`);
  assert.equal(spec.accepted, spec.drafted);
});

test("parseSpeculativeConfig() reads the eagle3 and eagle methods as vLLM does: a head's directory and a draft length", () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "eagle3", "model": "head", "num_speculative_tokens": 3}'), { method: "eagle3", model: "head", numTokens: 3 });
  assert.deepEqual(parseSpeculativeConfig('{"method": "eagle", "model": "h", "num_speculative_tokens": 2, "disable_by_batch_size": 4, "num_speculative_tokens_schedule": "constant"}'), {
    method: "eagle", model: "h", numTokens: 2, disableByBatchSize: 4, schedule: "constant",
  });
  assert.throws(() => parseSpeculativeConfig('{"method": "eagle3", "num_speculative_tokens": 3}'), /The speculative model must be the directory of an EAGLE head for method "eagle3", got null/);
  assert.throws(() => parseSpeculativeConfig('{"method": "eagle3", "model": "h"}'), /needs num_speculative_tokens/);
  assert.throws(() => parseSpeculativeConfig('{"method": "eagle", "model": "h", "num_speculative_tokens": 1, "prompt_lookup_max": 3}'), /Unknown speculative config key "prompt_lookup_max" for method "eagle"/);
});

test("modelStepRunner() runs a draft block's pass after each step of a group run ahead: its cache is the one-token steps' (an EAGLE-3 head)", async () => {
  const { model } = await withHead({ method: "eagle3", seed: 13, draftVocab: 200, d2t: D2T });
  const device = uploadModel(backend, model);
  const prompt = [5, 9, 44, 120, 7, 3, 88];
  const ask = { tokens: 1, draft: [false], next: [undefined] };
  const entry = (tokens: number[], startPos: number, lookahead?: number) => ({ seqId: 1, tokens, startPos, blockTable: [0, 1, 2], sample: true, prefill: startPos === 0, ...(lookahead ? { lookahead } : {}) });
  const caches = [];
  for (const grouped of [false, true]) {
    const kv = allocatePagedKv(backend, model.config, 3, 4);
    const runner = modelStepRunner(backend, device, kv);
    const first = await runner.run([entry(prompt, 0)], [GREEDY_ROW], { mtp: ask });
    let ids = [first.ids[0]];
    if (grouped) {
      const out = await runner.run([entry([ids[0]], prompt.length, 3)], [GREEDY_ROW], { mtp: ask, lookahead: [[GREEDY_ROW], [GREEDY_ROW], [GREEDY_ROW]] });
      ids = [...ids, out.ids[0], ...out.lookaheadIds![0]];
    } else {
      for (let j = 0; j < 4; j++) ids.push((await runner.run([entry([ids[j]], prompt.length + j)], [GREEDY_ROW], { mtp: ask })).ids[0]);
    }
    const last = kv.k.length - 1;
    caches.push({ ids, k: (await backend.download(kv.k[last])) as Float32Array, v: (await backend.download(kv.v[last])) as Float32Array });
  }
  assert.deepEqual(caches[1].ids, caches[0].ids);
  // Positions 0..10 (the prompt and four decodes) of the head's layer: 2 heads of 8 each.
  const used = (prompt.length + 4) * 2 * 8;
  for (const key of ["k", "v"] as const) close(caches[1][key].subarray(0, used), caches[0][key].subarray(0, used), `the head's ${key} cache`);
  // A group's steps never draft.
  const kv = allocatePagedKv(backend, model.config, 3, 4);
  await assert.rejects(modelStepRunner(backend, device, kv).run([entry([5], 0, 1)], [GREEDY_ROW], { mtp: { ...ask, draft: [true] }, lookahead: [[GREEDY_ROW]] }), /cannot take multi-token-prediction drafts/);
});

test("Engine with an EAGLE head runs steps ahead while no sequence drafts (multi-step decoding), with the tokens it gives without drafts", async () => {
  const { model, path } = await withHead({ method: "eagle3", seed: 14, draftVocab: 200, d2t: D2T });
  const base = { numBlocks: 40, blockSize: 4, schedulerSteps: 4, scheduler: { maxRunning: 3, maxBatchTokens: 9 } };
  const plain = await outputs(await loadModel(targetPath), base, 40);
  const e = createEngine(backend, model, { ...base, speculative: { method: "eagle3", model: path, numTokens: 1 } });
  try {
    const rs = await Promise.all(DRAFT_PROMPTS.map((prompt) => e.submit({ prompt, maxTokens: 40, temperature: 0, ignoreEos: true }).result));
    assert.deepEqual(rs.map((r) => r.tokenIds), plain.tokens);
    const s = e.stats();
    // The random head's one-token drafts are rejected, its sequences pause, and their steps run ahead.
    assert.ok(s.specDraftTokens > 0 && s.stepsRunAhead > 0, `${s.specDraftTokens} draft tokens, ${s.stepsRunAhead} steps run ahead`);
  } finally {
    await e.stop();
  }
});

test("Engine with an EAGLE-3 head on Qwen3.5 (Gated DeltaNet layers) gives the tokens it gives without drafts, its states put back", async () => {
  const spec = { ...QWEN35_MTP_SPEC, nextn: undefined, seed: 631 };
  const target = await writeTestGguf(dir, "qwen35-target", spec);
  const path = `${dir}/qwen35-head`;
  writeEagleHead(path, { method: "eagle3", seed: 15, headDim: 16, draftVocab: 200, d2t: D2T });
  const model = await loadModel(target, { eagle: { method: "eagle3", path } });
  assert.deepEqual(model.config.mtp!.eagle!.auxLayers, [2, 2, 1]);
  const base = { numBlocks: 40, blockSize: 4, scheduler: { maxRunning: 3, maxBatchTokens: 9 } };
  const plain = await outputs(await loadModel(target), base);
  const got = await outputs(model, { ...base, speculative: { method: "eagle3", model: path, numTokens: 3, schedule: "constant" } });
  assert.deepEqual(got.tokens, plain.tokens);
  assert.ok(got.drafted > 0 && got.accepted < got.drafted, `${got.drafted} drafted, ${got.accepted} taken: rejected drafts' states were put back`);
});

const gpu = await poisonedWebGpu("the EAGLE forward test");
gpu.gpu?.destroy();

test("mtpForward() on WebGPU gives the reference backend's logits and states for EAGLE-3 and EAGLE heads of every layout", async () => {
  const webgpu = await createWebGpuBackend({ poison: true });
  try {
    for (const spec of [
      { method: "eagle3", seed: 25, draftVocab: 200, d2t: D2T },
      {
        method: "eagle3", seed: 26, speculators: true, qkNorm: true, fcNorm: "each", normOutput: true,
        extraConfig: { layer_types: ["sliding_attention"], sliding_window: 2, rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 2 } },
      },
      { method: "eagle3", seed: 27, fcNorm: "whole" },
      { method: "eagle", seed: 28, fcBias: true },
    ] as EagleHeadSpec[]) {
      const { model } = await withHead(spec);
      const width = spec.method === "eagle3" ? 96 : 32;
      const states = Float32Array.from({ length: 4 * width }, (_, i) => Math.sin(i * 0.37));
      const run = async (b: typeof backend) => {
        const out = mtpForward(b, uploadModel(b, model), allocatePagedKv(b, model.config, 8, 4), {
          entries: [{ tokens: [17, 250, 4, 9], startPos: 0, blockTable: [0, 1] }], hidden: b.upload(states, [4, width]), rows: [1, 3],
        })!;
        return [(await b.download(out.logits)) as Float32Array, (await b.download(out.hidden)) as Float32Array];
      };
      const [want, got] = [await run(backend), await run(webgpu)];
      close(got[0], want[0], `${JSON.stringify(spec).slice(0, 60)}: logits`);
      close(got[1], want[1], `${JSON.stringify(spec).slice(0, 60)}: states`);
    }
  } finally {
    webgpu.destroy();
  }
}, { ignore: gpu.skip });

test("Engine with an EAGLE-3 head on gpt-oss (sliding layers, sinks) gives the tokens it gives without drafts, its sliding layers paged or in rings", async () => {
  const spec = {
    hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "gpt-oss",
    ropeTheta: 10000, seed: 632, slidingWindow: 5, experts: { count: 4, used: 2 },
  } as const;
  const target = await writeTestGguf(dir, "gpt-oss-target", spec);
  const path = `${dir}/gpt-oss-head`;
  writeEagleHead(path, {
    method: "eagle3", seed: 29, speculators: true, fcNorm: "whole", draftVocab: 200, d2t: D2T,
    extraConfig: { layer_types: ["sliding_attention"], sliding_window: 4, rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 8 } },
  });
  const model = await loadModel(target, { eagle: { method: "eagle3", path } });
  assert.deepEqual(model.config.mtp!.eagle!.auxLayers, [2, 1, 0]);
  for (const slidingWindowKv of ["paged", "window"] as const) {
    const base = { numBlocks: 40, blockSize: 4, slidingWindowKv, scheduler: { maxRunning: 3, maxBatchTokens: 9 } };
    const plain = await outputs(await loadModel(target), base);
    const got = await outputs(model, { ...base, speculative: { method: "eagle3", model: path, numTokens: 2, schedule: "constant" } });
    assert.deepEqual(got.tokens, plain.tokens, slidingWindowKv);
    assert.ok(got.drafted > 0, `${slidingWindowKv}: ${got.drafted} drafted`);
  }
});

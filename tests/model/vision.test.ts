/**
 * The vision tower: llama.cpp projector files read (and refused), the tower's embeddings on the
 * reference backend against its arithmetic written out on the host, on WebGPU against the reference,
 * and a forward whose image rows take given embeddings.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { hostValues, loadVisionModel } from "../../src/model/vision/mmproj.ts";
import { encodeImage, freeVision, uploadVision, writeRows } from "../../src/model/vision/vision-encoder.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { expectLoadError, writeTestGguf } from "./model-files.ts";
import { hostVision, type MmprojSpec, writeMmproj } from "./vision-files.ts";
import { loadModel } from "../../src/model/load.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { forward } from "../../src/model/forward.ts";

const backend = createReferenceBackend();
const dir = mkdtempSync(`${tmpdir()}/vision-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

let files = 0;
/** The values each projector file written holds, by path. */
const writtenOf = new Map<string, Map<string, Float32Array>>();
/** Writes a projector file and returns its path. */
function mmproj(spec: MmprojSpec): string {
  const path = `${dir}/mmproj-${files++}.gguf`;
  writtenOf.set(path, writeMmproj(path, spec));
  return path;
}

/** Pixels of a deterministic image, preprocessed-like values in [-2, 2]. */
function pixelsOf(size: number, seed: number): Float32Array {
  return Float32Array.from({ length: 3 * size * size }, (_, i) => 2 * Math.sin(i * 0.731 + seed));
}

function close(got: Float32Array, want: Float32Array, what: string, tol = 2e-3): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
  assert.ok(worst < tol && Number.isFinite(worst), `${what}: worst relative error ${worst}`);
}

test("loadVisionModel() reads a LLaVA projector file: sizes, the layers LLaVA takes its features after, the activation", async () => {
  const m = await loadVisionModel(mmproj({ lmHidden: 64, seed: 1, layers: 3 }), 64);
  const c = m.config;
  assert.deepEqual([c.projector, c.imageSize, c.patchSize, c.hidden, c.ffn, c.heads, c.tokensPerImage, c.activation], ["mlp", 28, 14, 32, 48, 4, 4, "quick_gelu"]);
  // All but the last stored layer, as llama.cpp runs LLaVA's (its features are the penultimate layer's).
  assert.equal(c.layers, 2);
  assert.equal(m.weights.layers.length, 2);
  assert.ok(m.weights.classEmbedding && m.weights.preNorm && !m.weights.postNorm);
  assert.deepEqual(m.weights.patchEmbedding.shape, [32, 3 * 14 * 14]);
  assert.equal(c.preprocess.padToSquare, true);
  assert.equal(c.preprocess.resample, "bicubic", "CLIP's processor resizes with BICUBIC");
  assert.ok(Math.abs(c.preprocess.mean[0] - 0.48145466) < 1e-6);
  const featured = await loadVisionModel(mmproj({ lmHidden: 64, seed: 2, layers: 3, featureLayers: [3], gelu: true, clip: false, postNorm: true }), 64);
  assert.equal(featured.config.layers, 3);
  assert.equal(featured.config.activation, "gelu");
  assert.ok(!featured.weights.classEmbedding && !featured.weights.preNorm && featured.weights.postNorm);
  assert.equal(featured.config.tokensPerImage, 4);
});

test("loadVisionModel() reads a Gemma 3 projector file: all layers, pooled positions, the projection turned for x · Wᵀ, images both ways, no padding", async () => {
  const path = mmproj({ lmHidden: 64, seed: 5, projectorType: "gemma3", clip: false, postNorm: true, gelu: true, imageSize: 56, patchSize: 7, layers: 2 });
  const m = await loadVisionModel(path, 64);
  const c = m.config;
  assert.deepEqual([c.projector, c.layers, c.pooling, c.tokensPerImage, c.bidirectional, c.preprocess.padToSquare, c.preprocess.resample], ["gemma3", 2, 4, 4, true, false, "bilinear"]);
  assert.deepEqual(c.wrap, { before: "\n\n<start_of_image>", after: "<end_of_image>\n\n" });
  assert.ok(m.weights.projector.kind === "gemma3");
  const w = m.weights.projector.w;
  assert.deepEqual(w.shape, [64, 32]);
  // Row o of the loaded matrix is column o of the file's [hidden, lmHidden].
  const raw = writtenOf.get(path)!.get("mm.input_projection.weight")!;
  const loaded = hostValues(w);
  for (const [o, i] of [[0, 0], [5, 3], [63, 31]]) assert.equal(loaded[o * 32 + i], raw[i * 64 + o]);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 5, projectorType: "gemma3", clip: false, imageSize: 56, patchSize: 7, pooling: 3 }), 64), /pools 3 × 3 patches, which do not divide its 8 × 8 grid/);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 48, seed: 5, projectorType: "gemma3", clip: false, imageSize: 56, patchSize: 7 }), 64), /embeddings 48 wide; the language model's are 64/);
});

test("loadVisionModel() reads an Idefics3 (SmolVLM) projector file: all layers, shuffled positions, its global image's wrap, causal images", async () => {
  const m = await loadVisionModel(mmproj({ lmHidden: 64, seed: 6, projectorType: "idefics3", clip: false, postNorm: true, gelu: true, imageSize: 48, patchSize: 8, layers: 2, pooling: 2 }), 64);
  const c = m.config;
  assert.deepEqual([c.projector, c.layers, c.shuffle, c.tokensPerImage, c.bidirectional, c.preprocess.padToSquare, c.preprocess.resample], ["idefics3", 2, 2, 9, false, false, "lanczos"]);
  assert.deepEqual(c.wrap, { before: "<fake_token_around_image><global-img>", after: "<fake_token_around_image>" });
  assert.ok(m.weights.projector.kind === "idefics3");
  assert.deepEqual(m.weights.projector.w.shape, [64, 32 * 4]);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 6, projectorType: "idefics3", clip: false, imageSize: 48, patchSize: 8, pooling: 4 }), 64), /shuffles 4 × 4 patches, which do not divide its 6 × 6 grid/);
});

test("loadVisionModel() takes the legacy converter's swapped ffn_up/ffn_down names by their shapes", async () => {
  const plain = await loadVisionModel(mmproj({ lmHidden: 64, seed: 3 }), 64);
  const legacy = await loadVisionModel(mmproj({ lmHidden: 64, seed: 3, legacyFfnNames: true }), 64);
  assert.deepEqual(legacy.weights.layers[0].wUp.shape, [48, 32]);
  assert.deepEqual(legacy.weights.layers[0].wUp.data, plain.weights.layers[0].wUp.data);
  assert.deepEqual(legacy.weights.layers[1].wDown.data, plain.weights.layers[1].wDown.data);
});

test("loadVisionModel() refuses other projectors, another model's width, missing tensors, stacked feature layers and language-model files by name", async () => {
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 4, projectorType: "qwen2vl" }), 64), /projector type "qwen2vl"; this engine runs "mlp", "gemma3", "idefics3"/);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 48, seed: 4 }), 64), /embeddings 48 wide; the language model's are 64/);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 4, omit: ["v.blk.1.attn_k.bias"] }), 64), /lacks the tensor "v\.blk\.1\.attn_k\.bias"/);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 4, featureLayers: [1, 3] }), 64), /stacks the states of layers \[1, 3\]/);
  await expectLoadError(loadVisionModel(mmproj({ lmHidden: 64, seed: 4, extraMeta: [["clip.vision.image_size", gguf.u32(30)]] }), 64), /30 pixels, not a whole number of 14-pixel patches/);
  await expectLoadError(loadVisionModel(`${dir}/nothing.gguf`, 64), /Projector file not found: ".*nothing\.gguf"/);
  const lm = await writeTestGguf(dir, "lm.gguf", { architecture: "llama", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 5 });
  await expectLoadError(loadVisionModel(lm, 64), /is a "llama" GGUF file, not a projector file/);
  await expectLoadError(loadModel(lm, { mmproj: mmproj({ lmHidden: 64, seed: 4 }) }), /embeddings 64 wide; the language model's are 32/);
});

/** The tower's embeddings on a backend. */
async function encoded(b: Backend, path: string, pixels: Float32Array, lmHidden = 64): Promise<Float32Array> {
  const v = uploadVision(b, await loadVisionModel(path, lmHidden));
  try {
    const t = encodeImage(b, v, pixels);
    const out = (await b.download(t)) as Float32Array;
    b.free(t);
    return out;
  } finally {
    freeVision(b, v);
  }
}

const TOWERS: [string, MmprojSpec][] = [
  ["CLIP (class token, pre-norm, quick GELU)", { lmHidden: 64, seed: 11 }],
  ["SigLIP (no class token, post-norm, GELU, a feature layer)", { lmHidden: 64, seed: 12, clip: false, postNorm: true, gelu: true, featureLayers: [2], heads: 2 }],
  ["a 3 × 3 grid of 8-pixel patches, legacy names, f32 patches", { lmHidden: 64, seed: 13, imageSize: 24, patchSize: 8, legacyFfnNames: true, f16Patch: false }],
  ["Gemma 3 (SigLIP, 8 × 8 patches pooled 4 × 4, RMS norm, x · W)", { lmHidden: 64, seed: 16, projectorType: "gemma3", clip: false, postNorm: true, gelu: true, imageSize: 56, patchSize: 7 }],
  ["Gemma 3 pooled 2 × 2 (clip.vision.projector.scale_factor)", { lmHidden: 64, seed: 17, projectorType: "gemma3", clip: false, postNorm: true, gelu: true, imageSize: 56, patchSize: 7, pooling: 2 }],
  ["Idefics3 (SmolVLM: 6 × 6 patches shuffled 3 × 3)", { lmHidden: 64, seed: 19, projectorType: "idefics3", clip: false, postNorm: true, gelu: true, imageSize: 48, patchSize: 8 }],
  ["Idefics3 shuffled 2 × 2", { lmHidden: 64, seed: 20, projectorType: "idefics3", clip: false, postNorm: true, gelu: true, imageSize: 48, patchSize: 8, pooling: 2 }],
];

test("encodeImage() on the reference backend gives the tower's arithmetic written out on the host, for CLIP, SigLIP, Gemma 3 and Idefics3 towers", async () => {
  for (const [what, spec] of TOWERS) {
    const path = mmproj(spec);
    const model = await loadVisionModel(path, 64);
    const pixels = pixelsOf(model.config.imageSize, spec.seed);
    const want = hostVision(model, pixels, writtenOf.get(path));
    const got = await encoded(backend, path, pixels);
    close(got, want, what);
    // Not a tower that ignores its image.
    const other = await encoded(backend, path, pixelsOf(model.config.imageSize, spec.seed + 100));
    assert.ok(other.some((x, i) => Math.abs(x - got[i]) > 1e-3), `${what}: another image gives other embeddings`);
  }
});

test("encodeImage() from composed ops (a backend without layerNorm and gelu, as CUDA's) gives the host's arithmetic too", async () => {
  // LayerNorm as a centring matmul and an RMS norm, GELU as geluMul(x, 1).
  const bare: Backend = { ...backend, layerNorm: undefined, gelu: undefined };
  for (const [what, spec] of TOWERS) {
    const path = mmproj(spec);
    const model = await loadVisionModel(path, 64);
    const pixels = pixelsOf(model.config.imageSize, spec.seed);
    close(await encoded(bare, path, pixels), hostVision(model, pixels, writtenOf.get(path)), `${what}, composed`);
  }
});

test("encodeImage() refuses pixels of another size, naming both", async () => {
  const v = uploadVision(backend, await loadVisionModel(mmproj({ lmHidden: 64, seed: 14 }), 64));
  assert.throws(() => encodeImage(backend, v, new Float32Array(10)), /hold 10 values; this vision tower takes 2352 \(3 × 28 × 28\)/);
  freeVision(backend, v);
});

test("writeRows() overwrites exactly the given rows", async () => {
  const x = backend.upload(Float32Array.from({ length: 5 * 4 }, (_, i) => i), [5, 4]);
  writeRows(backend, x, backend.upload(Int32Array.from([3, 0]), [2]), backend.upload(Float32Array.from([-1, -2, -3, -4, -5, -6, -7, -8]), [2, 4]));
  assert.deepEqual(Array.from((await backend.download(x)) as Float32Array), [-5, -6, -7, -8, 4, 5, 6, 7, 8, 9, 10, 11, -1, -2, -3, -4, 16, 17, 18, 19]);
});

test("forward() with inputRows: rows given their tokens' embeddings give the logits of those tokens, and the given rows are not scaled", async () => {
  for (const architecture of ["llama", "gemma3"] as const) {
    const path = await writeTestGguf(dir, `${architecture}-lm.gguf`, { architecture, hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 15 });
    const model = await loadModel(path);
    const device = uploadModel(backend, model);
    const tokens = [5, 77, 140, 9, 33, 250];
    const run = async (ids: number[], given?: { rows: number[]; of: number[] }) => {
      const kv = allocatePagedKv(backend, model.config, 4, 4);
      const inputRows = given && [{
        rows: backend.upload(Int32Array.from(given.rows), [given.rows.length]),
        // The rows the model's own embedding (and scale) gives those tokens.
        values: await embeddingRows(given.of, model.config.embeddingScale ?? 1),
      }];
      const out = forward(backend, device, kv, { entries: [{ tokens: ids, startPos: 0, blockTable: [0, 1] }], allPositions: true, ...(inputRows ? { inputRows } : {}) });
      return (await backend.download(out)) as Float32Array;
    };
    const embeddingRows = async (ids: number[], scale: number) => {
      const e = (await backend.download(backend.embedding(device.weights.tokenEmbedding, backend.upload(Int32Array.from(ids), [ids.length])))) as Float32Array;
      return backend.upload(e.map((v) => v * scale), [ids.length, 32]);
    };
    const want = await run(tokens);
    // Rows 2 and 3 fed placeholder ids, given the embeddings of tokens 140 and 9.
    const got = await run([5, 77, 0, 0, 33, 250], { rows: [2, 3], of: [140, 9] });
    close(got, want, `${architecture}: given rows`, 1e-5);
    const placeholders = await run([5, 77, 0, 0, 33, 250]);
    assert.ok(placeholders.some((x, i) => Math.abs(x - want[i]) > 1e-3), `${architecture}: the placeholders alone give other logits`);
  }
});

const gpu = await poisonedWebGpu("the vision tower's WebGPU test");
gpu.gpu?.destroy();

test("encodeImage() on WebGPU gives the reference backend's embeddings, for every tower", async () => {
  const webgpu = gpu.skip ? undefined : (await poisonedWebGpu("the vision tower's WebGPU test")).gpu!;
  try {
    for (const [what, spec] of TOWERS) {
      const path = mmproj(spec);
      const model = await loadVisionModel(path, 64);
      const pixels = pixelsOf(model.config.imageSize, spec.seed);
      close(await encoded(webgpu!, path, pixels), await encoded(backend, path, pixels), `${what} on WebGPU`, 5e-3);
    }
    const x = webgpu!.upload(Float32Array.from({ length: 3 * 2 }, (_, i) => i), [3, 2]);
    writeRows(webgpu!, x, webgpu!.upload(Int32Array.from([1]), [1]), webgpu!.upload(Float32Array.from([-1, -2]), [1, 2]));
    assert.deepEqual(Array.from((await webgpu!.download(x)) as Float32Array), [0, 1, -1, -2, 4, 5]);
  } finally {
    webgpu?.destroy();
  }
}, { ignore: gpu.skip });

test("forward() with bidirectional spans: a span's rows see its later rows, the rest stay causal, and a step resuming inside a span gives the same logits", async () => {
  const path = await writeTestGguf(dir, "gemma3-bidi.gguf", { architecture: "gemma3", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 18 });
  const model = await loadModel(path);
  const device = uploadModel(backend, model);
  const tokens = [5, 77, 0, 0, 0, 0, 33, 250];
  const rows = (seed: number) => Float32Array.from({ length: 4 * 32 }, (_, i) => Math.sin(i * 0.61 + seed));
  const run = async (image: Float32Array, spans?: [number, number][]) => {
    const kv = allocatePagedKv(backend, model.config, 4, 4);
    const out = forward(backend, device, kv, {
      entries: [{ tokens, startPos: 0, blockTable: [0, 1], ...(spans ? { bidirectional: spans } : {}) }], allPositions: true,
      inputRows: [{ rows: backend.upload(Int32Array.from([2, 3, 4, 5]), [4]), values: backend.upload(image, [4, 32]) }],
    });
    return { logits: (await backend.download(out)) as Float32Array, kv };
  };
  const vocab = 300;
  const row = (x: Float32Array, r: number) => x.subarray(r * vocab, (r + 1) * vocab);
  const differs = (a: Float32Array, b: Float32Array) => a.some((v, i) => Math.abs(v - b[i]) > 1e-4);
  // The image's last row changed: with the span, its first row's logits change; causal, they do not.
  const a = rows(1), b = rows(1).map((v, i) => (i >= 3 * 32 ? v + 1 : v));
  const [bi, biOther, causal, causalOther] = [await run(a, [[2, 6]]), await run(b, [[2, 6]]), await run(a), await run(b)];
  assert.ok(differs(row(bi.logits, 2), row(biOther.logits, 2)), "a span row sees the span's later rows");
  assert.ok(!differs(row(causal.logits, 2), row(causalOther.logits, 2)), "causal: it does not");
  assert.ok(!differs(row(bi.logits, 1), row(biOther.logits, 1)), "rows before the span stay causal");
  assert.ok(differs(row(bi.logits, 2), row(causal.logits, 2)));
  // Resuming at position 4 (inside the span) over block 0 as the first step wrote it (a cache hit
  // there), the span's later rows and what follows give the whole step's logits.
  const out = forward(backend, device, bi.kv, {
    entries: [{ tokens: tokens.slice(4), startPos: 4, blockTable: [0, 2], bidirectional: [[2, 6]] }], allPositions: true,
    inputRows: [{ rows: backend.upload(Int32Array.from([0, 1]), [2]), values: backend.upload(a.slice(2 * 32), [2, 32]) }],
  });
  const resumed = (await backend.download(out)) as Float32Array;
  close(resumed, bi.logits.slice(4 * vocab), "resumed inside the span", 1e-5);
  // A step whose rows end inside a span it reaches is refused: the span's later keys would be missing.
  assert.throws(() => forward(backend, device, allocatePagedKv(backend, model.config, 4, 4), { entries: [{ tokens: tokens.slice(0, 4), startPos: 0, blockTable: [0], bidirectional: [[2, 6]] }] }), /rows end at position 3, inside its bidirectional span \[2, 6\)/);
});

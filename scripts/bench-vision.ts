/**
 * Images through the engine (`--mmproj`): what an agent's screenshot costs. A random Llama GGUF
 * (8 layers, hidden 256, f16) and a random SigLIP-shaped tower (hidden 256, 4 layers, 224-pixel
 * images of 14-pixel patches: 256 positions an image), both written here. Per setting, medians of
 * `--rounds` runs, time to the first token (prefill only: one output token) of:
 *
 * - "text only": the conversation's text, no image (the same length without the image's positions);
 * - "new image": text, then an image never seen (the tower encodes it, the prompt computes all of it);
 * - "same image again": the same prompt resent (the prefix cache holds it through the image);
 * - "same image, new turn": the conversation grown by a turn after the image (cache hit through the
 *   image, only the new turn computed) — an agent resending its screenshot with its next step;
 * - "encode only": the tower alone on one image (encodeImage, read back);
 * - "encode only, composed ops": the same on the backend seen without its `layerNorm` and `gelu`
 *   (LayerNorm as a centring matmul and an RMS norm, GELU as geluMul(x, 1): CUDA's way).
 *
 *   npx deno run -A --no-check scripts/bench-vision.ts [--backend webgpu] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import type { Backend } from "../src/backend/types.ts";
import { parseArgs } from "../src/cli/args.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { GenerateRequest, PromptImage } from "../src/engine/engine-types.ts";
import { loadModel } from "../src/model/load.ts";
import { imageKey, imageTokenIds } from "../src/model/vision/image-tokens.ts";
import { encodeImage, uploadVision } from "../src/model/vision/vision-encoder.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { writeMmproj } from "../tests/model/vision-files.ts";
import { median } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  rounds: { kind: "int", min: 1, help: "rounds over the settings (default 3)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const rounds = f.rounds ?? 3;
const HIDDEN = 256, VOCAB = 2048, SIZE = 224;
const dir = mkdtempSync(`${tmpdir()}/bench-vision-`);
const modelPath = await writeTestGguf(dir, "llama", {
  architecture: "llama", hidden: HIDDEN, layers: 8, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, vocab: VOCAB, tied: false, dtype: "f16", seed: 13, contextLength: 8192,
});
writeMmproj(`${dir}/mmproj.gguf`, { lmHidden: HIDDEN, hidden: 256, ffn: 1024, heads: 4, layers: 5, imageSize: SIZE, patchSize: 14, clip: false, postNorm: true, gelu: true, seed: 17 });
const model = await loadModel(modelPath, { mmproj: `${dir}/mmproj.gguf` });
const tokensPerImage = model.config.vision!.tokensPerImage;

let seed = 0;
/** A new image's preprocessed pixels (never seen before: its own key). */
function newImage(): { pixels: Float32Array; key: string } {
  seed++;
  const pixels = Float32Array.from({ length: 3 * SIZE * SIZE }, (_, i) => Math.sin(i * 0.0173 + seed * 1.37));
  return { pixels, key: imageKey(pixels) };
}
const text = (n: number, from: number) => Array.from({ length: n }, (_, i) => 3 + ((from + i * 7) % (VOCAB - 3)));
/** A prompt: 200 tokens of text, the image, `after` tokens of text. */
function prompt(im: { pixels: Float32Array; key: string } | undefined, after: number): GenerateRequest {
  const ids = [1, ...text(200, 0)];
  const images: PromptImage[] = [];
  if (im) {
    images.push({ start: ids.length, length: tokensPerImage, ...im });
    ids.push(...imageTokenIds(im.key, tokensPerImage, VOCAB));
  } else {
    ids.push(...text(tokensPerImage, 500));
  }
  ids.push(...text(after, 900));
  return { prompt: ids, ...(im ? { images } : {}), maxTokens: 1, temperature: 0, ignoreEos: true };
}

const engine = createEngine(backend, model, { numBlocks: 512 });
await engine.warmUp();
const timeOf = async (r: GenerateRequest) => {
  const t0 = performance.now();
  const out = await engine.submit(r).result;
  if (out.error) throw new Error(out.error);
  return { ms: performance.now() - t0, cached: out.cachedTokens };
};
const rows = new Map<string, { ms: number[]; cached: number[] }>();
const note = (name: string, r: { ms: number; cached: number }) => {
  const row = rows.get(name) ?? { ms: [], cached: [] };
  row.ms.push(r.ms);
  row.cached.push(r.cached);
  rows.set(name, row);
};
const vision = uploadVision(backend, model.vision!);
// The same device without the two optional ops the tower prefers.
const bare = new Proxy(backend, {
  get: (t, k) => (k === "layerNorm" || k === "gelu" ? undefined : typeof Reflect.get(t, k) === "function" ? Reflect.get(t, k).bind(t) : Reflect.get(t, k)),
}) as Backend;
const composed = uploadVision(bare, model.vision!);
const encodeTime = async (b: Backend, v: typeof vision) => {
  const t0 = performance.now();
  const t = encodeImage(b, v, newImage().pixels);
  await b.download(t);
  b.free(t);
  return { ms: performance.now() - t0, cached: 0 };
};
for (let round = 0; round < rounds; round++) {
  // Each round's text (and the text-only prompt's) starts differently, so nothing is cached from another.
  const salted = (r: GenerateRequest, s: number): GenerateRequest => ({ ...r, prompt: [r.prompt[0], s, ...r.prompt.slice(1)], ...(r.images ? { images: r.images.map((im) => ({ ...im, start: im.start + 1 })) } : {}) });
  const salt = (r: GenerateRequest) => salted(r, 3 + round * 11);
  note("text only", await timeOf(salted(prompt(undefined, 32), 4 + round * 11)));
  const im = newImage();
  note("new image", await timeOf(salt(prompt(im, 32))));
  note("same image again", await timeOf(salt(prompt(im, 32))));
  note("same image, new turn", await timeOf(salt(prompt(im, 96))));
  note("encode only", await encodeTime(backend, vision));
  note("encode only, composed ops", await encodeTime(bare, composed));
}
await engine.stop();
console.log(`bench-vision: ${runtimeName()}, backend ${reason}; Llama hidden ${HIDDEN} × 8 layers f16, SigLIP-shaped tower hidden 256 × 4 layers, ${SIZE}-pixel images, ${tokensPerImage} positions an image; medians of ${rounds}`);
console.log("| setting | prompt tokens | time to first token (ms) | cached tokens |");
console.log("|---|---|---|---|");
const lengths: Record<string, number> = { "text only": 1 + 1 + 200 + tokensPerImage + 32, "new image": 1 + 1 + 200 + tokensPerImage + 32, "same image again": 1 + 1 + 200 + tokensPerImage + 32, "same image, new turn": 1 + 1 + 200 + tokensPerImage + 96, "encode only": tokensPerImage, "encode only, composed ops": tokensPerImage };
for (const [name, r] of rows) console.log(`| ${name} | ${lengths[name]} | ${median(r.ms).toFixed(1)} | ${median(r.cached)} |`);
backend.destroy();
rmSync(dir, { recursive: true, force: true });
exitProcess(0);

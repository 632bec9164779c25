/**
 * What a KV cache dtype costs in accuracy: on the reference backend, a prompt's next-token
 * log-probabilities through an f16 and an f8_e4m3 (`--kv-cache-dtype fp8`) cache against an f32 one
 * (the prompt's last token attends to the rest through the cache), and each dtype's greedy
 * continuation. Figures: docs/bench-engine.md ("The fp8 KV cache").
 *
 *   npx tsx scripts/bench-kv-dtype-accuracy.ts [--model models/stories260K.gguf] [--prompt TEXT] [--tokens 48]
 */
import { ArgsError, parseArgs } from "../src/cli/args.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { KvDType } from "../src/backend/types.ts";
import { generate } from "../src/engine/generate.ts";
import { allocatePagedKv, freePagedKv } from "../src/engine/kv-cache.ts";
import { freeDeviceModel, uploadModel } from "../src/model/device-weights.ts";
import { forward } from "../src/model/forward.ts";
import { loadModel } from "../src/model/load.ts";

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    model: { kind: "string", help: "GGUF file or Hugging Face directory (default models/stories260K.gguf)" },
    prompt: { kind: "string", help: "the prompt (default a TinyStories opening)" },
    tokens: { kind: "int", min: 1, help: "greedy tokens to generate (default 48)" },
  });
  const model = await loadModel(f.model ?? "models/stories260K.gguf");
  const b = createReferenceBackend();
  const prompt = model.tokenizer.encode(f.prompt ?? "Once upon a time there was a little girl named Lily. She loved to play", { addBos: true });
  const dm = uploadModel(b, model);
  const blocks = Math.ceil(prompt.length / 16) + 1;
  const table = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
  const logProbs = async (dtype: KvDType): Promise<Float64Array> => {
    const kv = allocatePagedKv(b, model.config, blocks, 16, dtype);
    try {
      b.free(forward(b, dm, kv, { entries: [{ tokens: prompt.slice(0, -1), startPos: 0, blockTable: table }] }));
      const out = forward(b, dm, kv, { entries: [{ tokens: prompt.slice(-1), startPos: prompt.length - 1, blockTable: table }] });
      const d = (await b.download(out)) as Float32Array;
      b.free(out);
      const max = Math.max(...d);
      const lse = max + Math.log(d.reduce((a, x) => a + Math.exp(x - max), 0));
      return Float64Array.from(d, (x) => x - lse);
    } finally {
      freePagedKv(b, kv);
    }
  };
  const f32 = await logProbs("f32");
  const spread = Math.max(...f32) - Math.min(...f32);
  console.log(`${model.source}: ${prompt.length}-token prompt, next-token log-probabilities against an f32 cache (spread ${spread.toFixed(2)})`);
  for (const dtype of ["f16", "f8_e4m3"] as const) {
    const x = await logProbs(dtype);
    const err = x.reduce((w, v, i) => Math.max(w, Math.abs(v - f32[i])), 0);
    console.log(`${dtype.padEnd(8)} max |error| ${err.toFixed(4)} (${((100 * err) / spread).toFixed(2)}% of the spread)`);
  }
  for (const dtype of ["f32", "f16", "f8_e4m3"] as const) {
    const [r] = await generate(dm, b, [prompt], { maxTokens: f.tokens ?? 48, kvCacheDtype: dtype, stopAtEos: false });
    console.log(`${dtype.padEnd(8)} ${JSON.stringify(model.tokenizer.decode(r.ids))}`);
  }
  freeDeviceModel(b, dm);
}

main().then(() => exitProcess(0), (e) => {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(e instanceof ArgsError ? 2 : 1);
});

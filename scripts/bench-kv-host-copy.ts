/**
 * Host copies of KV blocks (kv-copy.ts: swap preemption, the host-memory tier, moving a prefix to a
 * peer) for a Llama-3.2-1B-shaped cache (16 layers, 8 KV heads of 64; 16-token blocks): host bytes per
 * block, and the time to read blocks out (`readSlots`, through the download and, for an f16 cache,
 * packing to half bits) and to write them back (`writeSlots`, widening half bits for the upload, then
 * a one-value download so the device work is done), per block, for f32 and f16 caches, on the
 * reference backend and on WebGPU (lavapipe on a GPU-less machine; an f16 cache also copied the old
 * way, through f32, beside `downloadHalfRows` / `writeHalfRows`). Medians of `--repeats` copies of
 * `--blocks` blocks. Figures: docs/results/bench-kv-host-copy.md.
 *
 *   npx tsx scripts/bench-kv-host-copy.ts [--blocks 8] [--repeats 9]
 */
import { parseArgs } from "../src/cli/args.ts";
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { Backend, KvDType } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { allocatePagedKv, freePagedKv, kvBytesPerBlock } from "../src/engine/kv-cache.ts";
import { hostKvBytes, readSlots, slotsOf, writeSlots } from "../src/engine/kv-copy.ts";
import type { ModelConfig } from "../src/model/config.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";

const CONFIG: ModelConfig = {
  architecture: "llama", vocabSize: 128256, hiddenSize: 2048, numLayers: 16, numHeads: 32, numKvHeads: 8,
  headDim: 64, intermediateSize: 8192, rmsNormEps: 1e-5, ropeTheta: 500000, ropeLayout: "normal",
  contextLength: 131072, tiedEmbeddings: true, qkvBias: false, qkNorm: false, eosTokenIds: [128001], addBos: true,
};
const BLOCK = 16;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function bench(be: Backend, label: string, dtype: KvDType, blocks: number, repeats: number): Promise<string> {
  const kv = allocatePagedKv(be, CONFIG, 2 * blocks, BLOCK, dtype);
  const probe = be.upload(new Int32Array([0]), [1]);
  try {
    const src = slotsOf(Array.from({ length: blocks }, (_, i) => i), blocks * BLOCK, BLOCK);
    const dst = slotsOf(Array.from({ length: blocks }, (_, i) => blocks + i), blocks * BLOCK, BLOCK);
    const read: number[] = [], write: number[] = [];
    let bytes = 0;
    for (let r = 0; r < repeats; r++) {
      let t = performance.now();
      const host = await readSlots(be, kv, src);
      read.push((performance.now() - t) / blocks);
      bytes = hostKvBytes(host) / blocks;
      t = performance.now();
      writeSlots(be, kv, dst, host);
      // A one-value gather from the last layer's cache waits for the writes before it.
      const one = be.embedding(be.reshape(kv.k[CONFIG.numLayers - 1], [2 * blocks * BLOCK, CONFIG.numKvHeads * CONFIG.headDim]), probe);
      await be.download(one);
      be.free(one);
      write.push((performance.now() - t) / blocks);
    }
    const want = kvBytesPerBlock(CONFIG, BLOCK, dtype);
    if (bytes !== want) throw new Error(`A ${dtype} block's host copy holds ${bytes} bytes, not ${want}`);
    return `| ${label} | ${dtype} | ${(bytes / 1024).toFixed(0)} KiB | ${median(read).toFixed(2)} | ${median(write).toFixed(2)} |`;
  } finally {
    be.free(probe);
    freePagedKv(be, kv);
  }
}

/** `be` as it was before Backend.downloadHalfRows and writeHalfRows: its own methods, those left out. */
function withoutHalfRows(be: Backend): Backend {
  return new Proxy(be, {
    get: (t, p) => {
      if (p === "downloadHalfRows" || p === "writeHalfRows") return undefined;
      const v = Reflect.get(t, p);
      return typeof v === "function" ? v.bind(t) : v;
    },
  });
}

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    blocks: { kind: "int", min: 1, help: "blocks per copy (default 8)" },
    repeats: { kind: "int", min: 1, help: "copies timed per figure (default 9)" },
  });
  const blocks = f.blocks ?? 8, repeats = f.repeats ?? 9;
  const rows = ["| backend | cache | host bytes / block | read ms / block | write ms / block |", "|---|---|---|---|---|"];
  const ref = createReferenceBackend();
  for (const dtype of ["f32", "f16"] as const) rows.push(await bench(ref, "reference", dtype, blocks, repeats));
  const gpu = await createWebGpuBackend().catch((e: unknown) => e as Error);
  if (gpu instanceof Error) rows.push(`| webgpu | — | unavailable: ${gpu.message} | | |`);
  else {
    try {
      for (const dtype of ["f32", "f16"] as const) rows.push(await bench(gpu, `webgpu (${gpu.info.device})`, dtype, blocks, repeats));
      // The same f16 copies without the half-bit ops: gathered as f32 and packed on the host, widened
      // for the upload and rounded by kvWrite (the path before them).
      rows.push(await bench(withoutHalfRows(gpu), "webgpu, f16 through f32", "f16", blocks, repeats));
    } finally {
      gpu.destroy();
    }
  }
  console.log(rows.join("\n"));
}

main().then(() => exitProcess(0), (e: unknown) => {
  console.error(e instanceof Error ? e.message : e);
  exitProcess(1);
});

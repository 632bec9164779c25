/**
 * An engine serving Gemma 4's layouts (src/model/gguf-gemma4.ts): KV caches of two widths (sliding
 * layers' 2 heads of 8, a full layer's 2 of 16; E2B/E4B's last layers reading the caches before them,
 * with per-layer inputs), on the reference backend and WebGPU, through chunked
 * prefills, multi-step decoding, a prefix-cache hit and a prefix moved to another engine (the host copy
 * per layer width): every output is the one a lone forward gives.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const SPEC: ModelFileSpec = {
  architecture: "gemma4", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 16, ffn: 48, vocab: 300, tied: true, dtype: "f32", seed: 392,
  gemma4: { pattern: [true, false, true], window: 6, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 10000, partialFull: 0.25, keyAsValue: true, softcap: 25 },
};
const dir = mkdtempSync(`${tmpdir()}/gemma4-engine-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const denseModel = await loadModel(await writeTestGguf(dir, "gemma4", SPEC));
/** E2B/E4B's layout: per-layer inputs, the last 2 of 5 layers reading the caches of the two before them. */
const E_SPEC: ModelFileSpec = {
  ...SPEC, layers: 5, seed: 393,
  gemma4: { ...SPEC.gemma4!, pattern: [true, true, false, true, false], ple: 4, sharedKv: 2, doubleWide: true },
};
const eModel = await loadModel(await writeTestGguf(dir, "gemma4-e", E_SPEC));
const PROMPTS = [[5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99], [7, 7, 1, 254], [13, 42, 2, 5, 77, 160, 31, 9, 12, 290, 6, 48, 3]];
const MAX_TOKENS = 10;
const webgpu = await poisonedWebGpu("Gemma 4's engine test on WebGPU");
const backends: [string, Backend | undefined, boolean][] = [["reference", createReferenceBackend(), false], ["webgpu", webgpu.gpu, webgpu.skip]];

for (const [name, backend, skip] of backends) for (const [layout, model, widths] of [["the 31B's", denseModel, [16, 32, 16]], ["E2B/E4B's", eModel, [16, 16, 32]]] as const) {
  test(`Engine on ${name} with Gemma 4's two KV widths (${layout} layout): chunked prefills, multi-step decoding, a prefix hit and a moved prefix give the lone greedy tokens`, async () => {
    const b = backend!;
    const lone = async (prompt: number[]) => (await greedySteps(b, uploadModel(b, model), allocatePagedKv(b, model.config, 24, 4), prompt, MAX_TOKENS, Array.from({ length: 24 }, (_, i) => i))).tokens;
    const want = await Promise.all(PROMPTS.map(lone));
    const e = createEngine(b, model, { numBlocks: 64, blockSize: 4, schedulerSteps: 3, scheduler: { maxBatchTokens: 5, maxRunning: 3 } });
    const peer = createEngine(b, model, { numBlocks: 64, blockSize: 4 });
    try {
      const ask = (engine: typeof e, prompt: number[]) => engine.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
      assert.deepEqual((await Promise.all(PROMPTS.map((p) => ask(e, p)))).map((r) => r.tokenIds), want);
      const turn2 = [...PROMPTS[0], ...want[0], 150, 151, 152];
      const want2 = await lone(turn2);
      const r = await ask(e, turn2);
      assert.ok(r.cachedTokens >= 28, `the first turn's blocks were hit (${r.cachedTokens} tokens)`);
      assert.deepEqual(r.tokenIds, want2);
      // The same turn on another engine, from the blocks of both widths moved there.
      const moved = await e.exportPrefix(turn2);
      // One cache a layer that has its own (E2B/E4B's sharing layers have none), each at its width.
      assert.ok(moved && moved.kv.k.length === 3);
      assert.deepEqual(moved.kv.k.map((a) => a.length / moved.kv.numTokens), widths);
      peer.importPrefix(moved);
      const p = await ask(peer, turn2);
      assert.ok(p.cachedTokens > 0);
      assert.deepEqual(p.tokenIds, want2);
    } finally {
      await e.stop();
      await peer.stop();
    }
  }, { ignore: skip });
}

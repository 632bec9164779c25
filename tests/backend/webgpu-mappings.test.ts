/**
 * The WebGPU backend's memory mappings stay bounded over repeated model load → forward → free
 * cycles, as the llama.cpp oracle file runs them in one process. On lavapipe every live bind group
 * holds a 4 KiB mapping of its own, freed only when the garbage collector finalizes the bind group;
 * one bind group per dispatch took the oracle file from 19k to 64k lines of /proc/self/maps, near
 * Linux's 65530 vm.max_map_count, where Deno crashed. The recorder now caches bind groups, so
 * decode steps reuse them: the first test checks that through the recorder's counters (whatever
 * the garbage collector does), the second the process's mappings themselves.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { createWebGpuBackend, type WebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { loadModel } from "../../src/model/load.ts";
import { test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "../model/model-files.ts";
import { inCi } from "../webgpu-fixture.ts";

const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64];
const BASE = { architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32" } as const;
/** Two shapes, so later rounds bind buffers of other size classes than the round before, as the oracle's models do. */
const SPECS: ModelFileSpec[] = [{ ...BASE, seed: 201 }, { ...BASE, hidden: 48, heads: 6, kvHeads: 3, ffn: 96, seed: 202 }];

/** Lines of /proc/self/maps, or undefined where there is none (not Linux). */
function mapCount(): number | undefined {
  try {
    return readFileSync("/proc/self/maps", "utf8").split("\n").length;
  } catch {
    return undefined;
  }
}

const gpuOrWhy: { gpu?: WebGpuBackend; why: string } = await createWebGpuBackend().then(
  (gpu) => ({ gpu, why: "" }),
  (e: unknown) => ({ why: e instanceof Error ? e.message : String(e) }),
);
// Outside CI a machine without an adapter skips; in CI (lavapipe provides one) it fails.
const noGpu = !gpuOrWhy.gpu && !inCi;
if (noGpu) console.error(`skipping webgpu mapping tests: ${gpuOrWhy.why}`);
const noMaps = mapCount() === undefined;
if (noMaps) console.error("skipping the /proc/self/maps bound: /proc/self/maps is unreadable here");

const dir = mkdtempSync(`${tmpdir()}/webgpu-mappings-`);
const paths = SPECS.map((spec) => {
  const path = `${dir}/${spec.seed}.gguf`;
  writeFileSync(path, ggufBytes(spec, randomHfWeights(spec)));
  return path;
});

/** Loads a model, runs the prompt and `steps` decode steps of fixed tokens (downloading each output), frees all. */
async function cycle(gpu: WebGpuBackend, path: string, steps: number, afterStep?: (step: number) => void): Promise<void> {
  const host = await loadModel(path);
  const model = uploadModel(gpu, host);
  const kv = allocatePagedKv(gpu, host.config, 3, 16);
  const table = [2, 0, 1];
  try {
    let entry = { tokens: PROMPT, startPos: 0, blockTable: table };
    for (let step = 0; step <= steps; step++) {
      const out = forward(gpu, model, kv, { entries: [entry] });
      await gpu.download(out);
      gpu.free(out);
      afterStep?.(step);
      entry = { tokens: [(step * 37) % 300], startPos: PROMPT.length + step, blockTable: table };
    }
  } finally {
    freePagedKv(gpu, kv);
    freeDeviceModel(gpu, model);
  }
}

test("WebGPU decode steps reuse their bind groups instead of creating one per dispatch", async () => {
  assert.ok(gpuOrWhy.gpu, `webgpu is unavailable: ${gpuOrWhy.why}`);
  const gpu = gpuOrWhy.gpu;
  const at: { dispatches: number; bindGroups: number }[] = [];
  await cycle(gpu, paths[0], 12, () => at.push(gpu.stats().recorder));
  // From the third step on the pool hands back the same buffers, so the same bind groups serve.
  const dispatches = at[12].dispatches - at[2].dispatches;
  const created = at[12].bindGroups - at[2].bindGroups;
  assert.ok(dispatches >= 100, `only ${dispatches} dispatches in 10 decode steps`);
  assert.ok(created <= dispatches / 20, `${created} bind groups created for ${dispatches} dispatches in 10 decode steps`);
}, { ignore: noGpu });

test("repeated load → forward → free cycles on WebGPU keep /proc/self/maps bounded", async () => {
  assert.ok(gpuOrWhy.gpu, `webgpu is unavailable: ${gpuOrWhy.why}`);
  const gpu = gpuOrWhy.gpu;
  await cycle(gpu, paths[0], 16);
  await cycle(gpu, paths[1], 16);
  const counts = [mapCount() ?? 0];
  for (let round = 0; round < 6; round++) {
    const before = gpu.stats().recorder.dispatches;
    // 32 decode steps: with the fused ops a step of these 2-layer models is about 21 dispatches.
    await cycle(gpu, paths[round % 2], 32);
    counts.push(mapCount() ?? 0);
    // One mapping per dispatch (the leak) would add about this many lines a round.
    assert.ok(gpu.stats().recorder.dispatches - before >= 500, "a round dispatches too little to show the leak");
  }
  // A leak grows every round by about one line per dispatch, less whatever a collection frees;
  // the runtime may also map a few hundred lines once (Dawn does, at some round). So: most rounds
  // (the upper median) must stay flat, and the whole run within a one-time allowance.
  const rounds = counts.slice(1).map((c, i) => c - counts[i]).sort((a, b) => a - b);
  const median = rounds[Math.floor(rounds.length / 2)];
  const growth = counts[counts.length - 1] - counts[0];
  assert.ok(median <= 150 && growth <= 1000, `maps lines after each round ${counts.join(" → ")} (a leak of mappings, e.g. one bind group per dispatch?)`);
}, { ignore: noGpu || noMaps });

test("webgpu mapping test backend is released", () => {
  gpuOrWhy.gpu?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

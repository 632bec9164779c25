/**
 * The CUDA build without a GPU: scripts/build-cuda.sh's resource report (no register spills in
 * the kernels), the addon loading on Node and Deno, and the clean "no CUDA device" fallback.
 * The build output is git-ignored; these tests run when it exists (CI builds it first).
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { projectRoot, test } from "../harness.ts";
import { createCudaBackend, probeCuda } from "../../src/backend/cuda/index.ts";
import { loadCudaAddon } from "../../src/backend/cuda/addon.ts";
import { planAttention } from "../../src/backend/cuda/attention-plan.ts";
import { BackendUnavailableError } from "../../src/backend/types.ts";

const buildDir = `${projectRoot}/kernels-cuda/build`;
const addon = `${buildDir}/evolving_cuda.node`;
const report = `${buildDir}/resource-usage.txt`;
const built = existsSync(addon) && existsSync(report);

/** Kernels on the decode/prefill hot path; each must appear in the report for every built arch. */
const HOT = ["gemv_kernel", "mma_gemm_kernel", "decode_kernel", "decode_reduce_kernel", "prefill_kernel",
  "add_rmsnorm_kernel", "rope_kv_write_kernel", "sample_pick_kernel", "argmax_kernel"];

interface KernelUsage {
  name: string;
  arch: string;
  spillStores: number;
  spillLoads: number;
}

/** Parses ptxas -v output: "Compiling entry function 'X' for 'sm_Y'" then its spill line. */
function parseReport(text: string): KernelUsage[] {
  const out: KernelUsage[] = [];
  let current: { name: string; arch: string } | undefined;
  for (const line of text.split("\n")) {
    const entry = /Compiling entry function '([^']+)' for '(sm_\w+)'/.exec(line);
    if (entry) current = { name: entry[1], arch: entry[2] };
    const spill = /(\d+) bytes spill stores, (\d+) bytes spill loads/.exec(line);
    if (spill && current) {
      out.push({ ...current, spillStores: Number(spill[1]), spillLoads: Number(spill[2]) });
      current = undefined;
    }
  }
  return out;
}

test("build-cuda.sh resource report lists every hot kernel for every arch, with 0 bytes of spills", () => {
  const usage = parseReport(readFileSync(report, "utf8"));
  const stamp = readFileSync(`${buildDir}/build.stamp`, "utf8");
  const archs = /archs=([\w ]+?) ptx=/.exec(stamp)![1].split(" ").map((a) => `sm_${a}`);
  assert.ok(archs.length >= 1, `no archs in ${stamp}`);
  for (const arch of archs) {
    for (const hot of HOT) {
      assert.ok(usage.some((u) => u.arch === arch && u.name.includes(hot)), `${hot} missing for ${arch}`);
    }
  }
  const ours = usage.filter((u) => u.name.includes("ek"));
  const spilled = ours.filter((u) => u.spillStores > 0 || u.spillLoads > 0);
  assert.deepEqual(spilled.map((u) => `${u.name} ${u.arch}`), []);
}, { ignore: !built });

test("loadCudaAddon() loads the addon without a driver and deviceCount() answers", () => {
  const mod = loadCudaAddon(addon);
  const probe = mod.deviceCount();
  assert.equal(typeof probe.count, "number");
  assert.equal(probe.runtimeVersion! >= 13000, true, `runtime ${probe.runtimeVersion}`);
  if (probe.count === 0) assert.match(probe.error ?? "", /cudaGetDeviceCount: cudaError\w+/);
}, { ignore: !built });

test("createCudaBackend() throws BackendUnavailableError 'no CUDA device' when no device is present", () => {
  const probe = loadCudaAddon(addon).deviceCount();
  if (probe.count > 0) {
    const be = createCudaBackend({ addonPath: addon });
    assert.equal(be.info.name, "cuda");
    be.destroy();
    return;
  }
  assert.throws(() => createCudaBackend({ addonPath: addon }), (err: unknown) => {
    assert.ok(err instanceof BackendUnavailableError);
    assert.match(err.message, /^no CUDA device: cudaGetDeviceCount: cudaError/);
    return true;
  });
  assert.equal(probeCuda(addon).available, false);
}, { ignore: !built });

test("createContext() turns a failing CUDA call into a JS Error naming the call", () => {
  const mod = loadCudaAddon(addon);
  if (mod.deviceCount().count > 0) {
    assert.throws(() => mod.createContext(1 << 20), /^Error: CUDA call cudaSetDevice failed: cudaErrorInvalidDevice/);
    return;
  }
  assert.throws(() => mod.createContext(0), (err: unknown) => {
    assert.ok(err instanceof Error);
    assert.match(err.message, /^CUDA call cudaSetDevice failed: cudaErrorInsufficientDriver \(.+\)$/);
    return true;
  });
}, { ignore: !built });

test("createCudaBackend() reports a missing addon as BackendUnavailableError 'no CUDA addon'", () => {
  const missing = `${buildDir}/does-not-exist.node`;
  assert.throws(() => createCudaBackend({ addonPath: missing }), (err: unknown) => {
    assert.ok(err instanceof BackendUnavailableError);
    assert.match(err.message, /^no CUDA addon: could not load ".*does-not-exist\.node"/);
    return true;
  });
});

test("planAttention() sends runs of ≥4 rows of one sequence to flash tiles of ≤32 rows, the rest to decode", () => {
  // seq 0: 3 rows (decode), seq 1: 40 rows (tiles 32 + 8), seq 2: 1 row, seq 1 again: 4 rows (tile).
  const seq = Int32Array.from([0, 0, 0, ...Array(40).fill(1), 2, 1, 1, 1, 1]);
  const plan = planAttention(seq);
  assert.deepEqual(Array.from(plan.decodeRows), [0, 1, 2, 43]);
  assert.deepEqual(Array.from(plan.tiles), [3, 32, 35, 8, 44, 4]);
});

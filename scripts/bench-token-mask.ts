/**
 * What barring tokens costs per step at a 150k-token vocabulary (output grammars): the token mask as
 * a bit per token (`TokenMask` → `maskLogitRows` → `Backend.maskLogits`, now) against the scatter of
 * one -1e30 per barred token that the engine used before (`addToLogits` over a Map-like of the
 * barred ids, kept here as it was). 40 tokens allowed per row (a grammar at a structural position),
 * 1 and 8 constrained rows, on the reference backend and on WebGPU (lavapipe on a GPU-less machine).
 * Each figure is the median of 15 steps: host time (building the mask or the scatter lists, and
 * recording) and total (through a one-row download, so the device work is done).
 *
 *   npx tsx scripts/bench-token-mask.ts
 */
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { Backend } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { addToLogits, maskLogitRows } from "../src/engine/engine-runner.ts";
import { TokenMask } from "../src/engine/output-constraint.ts";

const VOCAB = 151_936;
const ALLOWED = Array.from({ length: 40 }, (_, i) => i * 997);

/** The engine's former barring: a Map-like of every barred id, read by addToLogits one entry at a time. */
class BarredTokens {
  readonly size: number;
  constructor(private readonly ok: Uint8Array) {
    let n = 0;
    for (let id = 0; id < ok.length; id++) n += 1 - ok[id];
    this.size = n;
  }
  *[Symbol.iterator](): Generator<[number, number]> {
    for (let id = 0; id < this.ok.length; id++) if (this.ok[id] === 0) yield [id, -1e30];
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function bench(be: Backend, label: string, rows: number, way: "scatter" | "bitmask"): Promise<string> {
  const logits = be.upload(new Float32Array(rows * VOCAB), [rows, VOCAB]);
  const first = be.upload(new Int32Array([0]), [1]);
  const host: number[] = [];
  const total: number[] = [];
  for (let it = 0; it < 15; it++) {
    const t0 = performance.now();
    if (way === "scatter") {
      const ok = new Uint8Array(VOCAB);
      for (const id of ALLOWED) ok[id] = 1;
      addToLogits(be, logits, Array.from({ length: rows }, () => new BarredTokens(ok) as unknown as ReadonlyMap<number, number>));
    } else {
      maskLogitRows(be, logits, Array.from({ length: rows }, () => {
        const m = new TokenMask(VOCAB);
        for (const id of ALLOWED) m.set(id);
        return m;
      }));
    }
    const t1 = performance.now();
    const probe = be.gatherRows(logits, first);
    await be.download(probe);
    be.free(probe);
    host.push(t1 - t0);
    total.push(performance.now() - t0);
  }
  be.free(logits);
  be.free(first);
  return `${label.padEnd(9)} rows ${rows}  ${way.padEnd(7)}  host ${median(host).toFixed(2).padStart(7)} ms  total ${median(total).toFixed(2).padStart(7)} ms`;
}

const backends: [string, Backend][] = [["reference", createReferenceBackend()]];
try {
  backends.push(["webgpu", await createWebGpuBackend()]);
} catch (e) {
  console.log(`(no WebGPU: ${e instanceof Error ? e.message : e})`);
}
console.log(`vocabulary ${VOCAB}, ${ALLOWED.length} tokens allowed per row; medians of 15 steps`);
for (const [label, be] of backends) {
  for (const rows of [1, 8]) {
    const [before, after] = [await bench(be, label, rows, "scatter"), await bench(be, label, rows, "bitmask")];
    console.log(`${before}\n${after}`);
  }
}

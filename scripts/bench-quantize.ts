/**
 * `--quantize` quality and cost: for each block format, the largest next-token log-prob error of the
 * quantized stories260K against its f32 self (after a fixed prompt, reference backend), and the host
 * encoder's time per value on 4 Mi values. stories260K's rows are 64 and 172 values wide, so the
 * 256-value k-quants quantize none of its matrices (their error is 0 by construction).
 *
 *   npx tsx scripts/bench-quantize.ts
 */
import { encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import { allocatePagedKv, freePagedKv } from "../src/engine/kv-cache.ts";
import type { LoadedModel } from "../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../src/model/device-weights.ts";
import { forward } from "../src/model/forward.ts";
import { loadModel } from "../src/model/load.ts";
import { QUANTIZE_DTYPES } from "../src/model/weights.ts";
import { exitProcess } from "../src/runtime/env.ts";

const MODEL = new URL("../models/stories260K.gguf", import.meta.url).pathname;
const PROMPT = [1, 403, 407, 261, 378, 505, 267, 1];
const be = createReferenceBackend();

/** Next-token log-probabilities after PROMPT. */
async function logProbs(m: LoadedModel): Promise<Float64Array> {
  const dev = uploadModel(be, m);
  const kv = allocatePagedKv(be, m.config, 1, 16);
  try {
    const logits = (await be.download(forward(be, dev, kv, { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [0] }] }))) as Float32Array;
    const max = Math.max(...logits);
    const lse = max + Math.log(logits.reduce((a, v) => a + Math.exp(v - max), 0));
    return Float64Array.from(logits, (v) => v - lse);
  } finally {
    freePagedKv(be, kv);
    freeDeviceModel(be, dev);
  }
}

const base = await logProbs(await loadModel(MODEL));
const spread = Math.max(...base) - Math.min(...base);
const values = Float32Array.from({ length: 1 << 22 }, (_, i) => Math.sin(i * 0.37) * 0.02);
console.log("| format | matrices quantized | max |Δ log-prob| (stories260K) | % of spread | encode ns/value |\n|---|---:|---:|---:|---:|");
for (const q of QUANTIZE_DTYPES) {
  const m = await loadModel(MODEL, { quantize: q });
  const mats = [m.weights.tokenEmbedding, ...(m.weights.output ? [m.weights.output] : []), ...m.weights.layers.flatMap((l) => [l.wq, l.wk, l.wv, l.wo, l.wGate, l.wUp, l.wDown])].filter((t) => t !== undefined);
  const lp = await logProbs(m);
  let err = 0;
  for (let i = 0; i < lp.length; i++) err = Math.max(err, Math.abs(lp[i] - base[i]));
  const t0 = performance.now();
  encodeFromF32(values, q);
  const ns = ((performance.now() - t0) * 1e6) / values.length;
  console.log(`| ${q} | ${mats.filter((t) => t.dtype === q).length} of ${mats.length} | ${err.toFixed(3)} | ${((100 * err) / spread).toFixed(2)}% | ${ns.toFixed(1)} |`);
}
exitProcess(0);

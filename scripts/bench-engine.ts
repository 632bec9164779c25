/**
 * Engine benchmark: prefill and decode tokens/s at several batch sizes, for stories260K and for a
 * random-weight model of Llama-3.2-1B's shape in f16 or a GGUF block format (built in memory: no download), on each
 * available backend, with achieved GB/s and GFLOP/s next to the device's measured ceilings, and the
 * number of dispatches one decode step records (WebGPU). Figures are medians over repeats.
 *
 *   npx deno run -A scripts/bench-engine.ts [--models stories,llama1b] [--backends reference,webgpu,cuda]
 *     [--batches 1,8,32] [--prompt-tokens N] [--decode-steps N] [--repeats N] [--dtype f16|q8_0|q4_k_m|…]
 *     [--kv-dtype f32|f16] [--json]
 *
 * Method: each batch runs B sequences. Prefill is one forward step over B prompts of P tokens
 * (ragged batch), then argmax and a download of the ids, timed end to end. Decode is one step of B
 * single tokens, same timing. Bytes count what a step must move at least (every weight once, each
 * sequence's KV once, the new KV written); FLOPs count 2 per multiply-add in matmuls plus attention.
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "../src/cli/args.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { selectBackend } from "../src/backend/select.ts";
import { type Backend, type KvDType, WEIGHT_DTYPES, type WeightDType } from "../src/backend/types.ts";
import { blockValues, byteSize, f16ToF32, f32ToBf16, f32ToF16 } from "../src/backend/dtype-codec.ts";
import type { HostTensor, LayerWeights, LoadedModel, ModelConfig } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { freeDeviceModel, uploadModel } from "../src/model/device-weights.ts";
import { forward, type ForwardEntry } from "../src/model/forward.ts";
import { allocatePagedKv, freePagedKv } from "../src/engine/kv-cache.ts";
import { measureCeilings } from "../src/backend/webgpu/ceilings.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/index.ts";

const flags = parseArgs(cliArgs(), {
  models: { kind: "string", help: "comma list of stories,llama1b" },
  backends: { kind: "string", help: "comma list of reference,webgpu,cuda (default: all available)" },
  batches: { kind: "string", help: "comma list of batch sizes (default 1,8,32)" },
  "prompt-tokens": { kind: "int", min: 1, help: "prompt tokens per sequence (default 32 stories, 2 llama1b)" },
  "decode-steps": { kind: "int", min: 1, help: "decode steps timed (default 5 stories, 3 llama1b)" },
  repeats: { kind: "int", min: 1, help: "prefill repeats (default 3)" },
  dtype: { kind: "string", help: "the 1B model's matrices: f16 (default), a block format (q8_0, q4_k, q6_k, …) or q4_k_m (llama.cpp's mix)" },
  "kv-dtype": { kind: "string", help: "KV cache element type: f32, f16 or f8_e4m3 (default f32; f16 where the backend takes it is the engine's default)" },
  json: { kind: "boolean", help: "print one JSON object per row" },
});
const kvDtype: KvDType = flags["kv-dtype"] === "f16" ? "f16" : flags["kv-dtype"] === "f8_e4m3" ? "f8_e4m3" : "f32";
if (flags["kv-dtype"] !== undefined && flags["kv-dtype"] !== kvDtype) throw new Error(`Unknown --kv-dtype "${flags["kv-dtype"]}"; use f16, f32 or f8_e4m3`);

/** Bytes of each block that hold f16 scales (the rest are codes, any bits of which decode to finite values). */
const SCALE_BYTES: Partial<Record<WeightDType, number[]>> = {
  q8_0: [0], q4_0: [0], q5_0: [0], q4_1: [0, 2], q5_1: [0, 2], q4_k: [0, 2], q5_k: [0, 2], q6_k: [208], iq4_nl: [0], iq4_xs: [0],
  iq2_xxs: [0], iq2_xs: [0], iq2_s: [0], iq3_xxs: [0], iq3_s: [0], iq1_s: [0],
};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (x: number | undefined, d = 1) => (x === undefined ? "-" : x.toFixed(d));

/**
 * Llama-3.2-1B's shape (tied embeddings, GQA 32/8, head 64), with random f16 weights, or random
 * codes with small scales in a block format; "q4_k_m" stores the embedding (the output too, tied),
 * attn_v and ffn_down as q6_k and the rest as q4_k, as llama.cpp's Q4_K_M file of this model does.
 */
function llama1bModel(dtypeName: string): LoadedModel {
  const config: ModelConfig = {
    architecture: "llama", vocabSize: 128256, hiddenSize: 2048, numLayers: 16, numHeads: 32, numKvHeads: 8,
    headDim: 64, intermediateSize: 8192, rmsNormEps: 1e-5, ropeTheta: 500000, ropeLayout: "normal",
    contextLength: 131072, tiedEmbeddings: true, qkvBias: false, qkNorm: false, eosTokenIds: [128001], addBos: true,
  };
  let s = 0x9e3779b9;
  // Random f16 bits: random sign and mantissa, magnitude 2^-8..2^-5 (the scale of trained weights).
  const f16 = (name: string, shape: number[]): HostTensor => {
    const n = shape[0] * shape[1];
    const u16 = new Uint16Array(n);
    for (let i = 0; i < n; i++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      u16[i] = (s & 0x83ff) | ((7 + (((s >>> 10) & 3) % 3)) << 10);
    }
    return { name, shape, dtype: "f16", data: new Uint8Array(u16.buffer) };
  };
  const mix = dtypeName === "q4_k_m";
  if (!mix && !(WEIGHT_DTYPES as readonly string[]).includes(dtypeName)) throw new Error(`Unknown --dtype "${dtypeName}"`);
  const blocks = (name: string, shape: number[], dtype: WeightDType): HostTensor => {
    const n = shape[0] * shape[1];
    const data = new Uint8Array(byteSize(dtype, n));
    const words = new Uint32Array(data.buffer, 0, data.byteLength >>> 2);
    for (let i = 0; i < words.length; i++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      words[i] = s;
    }
    const values = blockValues(dtype);
    const bytes = byteSize(dtype, values);
    const view = new DataView(data.buffer);
    const small = f32ToF16(2 ** -12);
    for (let b = 0; b < n / values; b++) for (const at of SCALE_BYTES[dtype] ?? []) view.setUint16(b * bytes + at, small, true);
    // mxfp4's scale is one E8M0 byte, 2^(e − 128) as the codes are doubled: the same 2^-12.
    if (dtype === "mxfp4") for (let b = 0; b < n / values; b++) data[b * bytes] = 128 - 12;
    // f8_e4m3's scale is an f32 (its codes reach 448: 2^-18 keeps values below 2^-9).
    if (dtype === "f8_e4m3") for (let b = 0; b < n / values; b++) view.setFloat32(b * bytes, 2 ** -18, true);
    // iq1_m's f16 d is the top nibbles of its four u16 scales (bytes 48–55).
    if (dtype === "iq1_m") {
      for (let b = 0; b < n / values; b++) {
        for (let i = 0; i < 4; i++) {
          const at = b * bytes + 48 + 2 * i;
          view.setUint16(at, (view.getUint16(at, true) & 0x0fff) | (((small >> (4 * i)) & 0xf) << 12), true);
        }
      }
    }
    return { name, shape, dtype, data };
  };
  const weight = (name: string, shape: number[], role: "q6" | "q4"): HostTensor => {
    if (dtypeName === "f16") return f16(name, shape);
    // bf16: the same magnitudes as f16's, each value's top half (its sign, exponent and 7 mantissa bits).
    if (dtypeName === "bf16") {
      const f16Bits = new Uint16Array(f16(name, shape).data.buffer);
      const out = new Uint16Array(f16Bits.length);
      for (let i = 0; i < out.length; i++) out[i] = f32ToBf16(f16ToF32(f16Bits[i]));
      return { name, shape, dtype: "bf16", data: new Uint8Array(out.buffer) };
    }
    return blocks(name, shape, mix ? (role === "q6" ? "q6_k" : "q4_k") : dtypeName as WeightDType);
  };
  const ones = (name: string, n: number): HostTensor =>
    ({ name, shape: [n], dtype: "f32", data: new Uint8Array(new Float32Array(n).fill(1).buffer) });
  const { hiddenSize: h, numHeads: nh, numKvHeads: kv, headDim: hd, intermediateSize: ff } = config;
  const layers: LayerWeights<HostTensor>[] = Array.from({ length: config.numLayers }, (_, i) => ({
    attnNorm: ones(`blk.${i}.attn_norm`, h), ffnNorm: ones(`blk.${i}.ffn_norm`, h),
    wq: weight("wq", [nh * hd, h], "q4"), wk: weight("wk", [kv * hd, h], "q4"), wv: weight("wv", [kv * hd, h], "q6"),
    wo: weight("wo", [h, nh * hd], "q4"), wGate: weight("gate", [ff, h], "q4"), wUp: weight("up", [ff, h], "q4"),
    wDown: weight("down", [h, ff], "q6"),
  }));
  const tokenizer = { vocabSize: config.vocabSize, encode: () => [], decode: () => "" };
  return {
    config, tokenizer, source: `random Llama-3.2-1B shape (${dtypeName})`,
    weights: { tokenEmbedding: weight("token_embd", [config.vocabSize, h], "q6"), layers, outputNorm: ones("output_norm", h) },
  };
}

/** Matrix parameters and bytes: per layer stack, and of the output projection. */
function sizes(m: LoadedModel) {
  const mats = m.weights.layers.flatMap((l) => [l.wq, l.wk, l.wv, l.wo, l.wGate, l.wUp, l.wDown]).filter((t) => t !== undefined);
  const out = m.weights.output ?? m.weights.tokenEmbedding;
  const count = (t: HostTensor) => t.shape[0] * t.shape[1];
  return {
    layerParams: mats.reduce((a, t) => a + count(t), 0),
    layerBytes: mats.reduce((a, t) => a + byteSize(t.dtype, count(t)), 0),
    outParams: count(out),
    outBytes: byteSize(out.dtype, count(out)),
  };
}

/** Minimum bytes moved and FLOPs of one step: `ctx[i]` = context after the step, `fresh[i]` = new tokens. */
function stepCost(m: LoadedModel, ctx: number[], fresh: number[]) {
  const c = m.config;
  const z = sizes(m);
  const kvRow = c.numLayers * c.numKvHeads * c.headDim * (kvDtype === "f16" ? 2 : kvDtype === "f8_e4m3" ? 36 / 32 : 4) * 2;
  const tokens = fresh.reduce((a, b) => a + b, 0);
  let attn = 0;
  ctx.forEach((end, i) => {
    for (let p = end - fresh[i]; p < end; p++) attn += 4 * c.numLayers * c.numHeads * c.headDim * (p + 1);
  });
  return {
    bytes: z.layerBytes + z.outBytes + ctx.reduce((a, n) => a + n * kvRow, 0) + tokens * kvRow,
    flops: 2 * z.layerParams * tokens + 2 * z.outParams * ctx.length + attn,
  };
}

interface Row {
  model: string; backend: string; phase: "prefill" | "decode"; batch: number; tokensPerStep: number;
  stepMs: number; tokPerS: number; gbps: number; gflops: number; dispatches?: number;
}

/**
 * Times `run`, a step that ends by reading its ids back: the read waits for every kernel before it
 * on the queue, so no flush follows (under Deno a flush waits a 10 ms poll period more).
 */
async function timeStep(run: () => void | Promise<void>): Promise<number> {
  const t0 = performance.now();
  await run();
  return performance.now() - t0;
}

/** Times `run`, work that reads nothing back, to its queue's end. */
async function timeFlushed(b: Backend, run: () => void | Promise<void>): Promise<number> {
  const t0 = performance.now();
  await run();
  await b.flush();
  return performance.now() - t0;
}

async function benchModel(name: string, m: LoadedModel, b: Backend, batches: number[], opts: { p: number; d: number; r: number }) {
  const rows: Row[] = [];
  const dev = uploadModel(b, m);
  const bs = 16;
  const perSeq = Math.ceil((opts.p + opts.d) / bs);
  const kv = allocatePagedKv(b, m.config, perSeq * Math.max(...batches), bs, kvDtype);
  const stats = () => (b as Partial<WebGpuBackend>).stats?.().recorder.dispatches;
  const step = (entries: ForwardEntry[]) => async () => {
    const logits = forward(b, dev, kv, { entries });
    const ids = b.argmax(logits);
    b.free(logits);
    await b.download(ids);
    b.free(ids);
  };
  for (const B of batches) {
    const tables = Array.from({ length: B }, (_, i) => Array.from({ length: perSeq }, (_, j) => i * perSeq + j));
    const prompt = (i: number) => Array.from({ length: opts.p }, (_, j) => (i * 7919 + j * 31 + 1) % m.config.vocabSize);
    const prefill = tables.map((t, i): ForwardEntry => ({ tokens: prompt(i), startPos: 0, blockTable: t }));
    if (B === batches[0]) await timeStep(step(prefill)); // warm-up: pipelines, first touch
    const pre: number[] = [];
    for (let r = 0; r < opts.r; r++) pre.push(await timeStep(step(prefill)));
    const preCost = stepCost(m, tables.map(() => opts.p), tables.map(() => opts.p));
    const dec: number[] = [];
    let dispatches: number | undefined;
    for (let s = 0; s < opts.d; s++) {
      const entries = tables.map((t, i): ForwardEntry => ({ tokens: [(i + s) % m.config.vocabSize], startPos: opts.p + s, blockTable: t }));
      const before = stats();
      dec.push(await timeStep(step(entries)));
      const after = stats();
      if (before !== undefined && after !== undefined) dispatches = after - before;
    }
    const decCost = stepCost(m, tables.map(() => opts.p + Math.ceil(opts.d / 2)), tables.map(() => 1));
    for (const [phase, times, cost, tokens] of [["prefill", pre, preCost, B * opts.p], ["decode", dec, decCost, B]] as const) {
      const t = median([...times]) / 1000;
      rows.push({
        model: name, backend: b.info.name, phase, batch: B, tokensPerStep: tokens, stepMs: t * 1000, tokPerS: tokens / t,
        gbps: cost.bytes / t / 1e9, gflops: cost.flops / t / 1e9, dispatches: phase === "decode" ? dispatches : undefined,
      });
    }
  }
  freePagedKv(b, kv);
  freeDeviceModel(b, dev);
  return rows;
}

/** Ceilings: the dedicated kernels on WebGPU; on CUDA an add (bandwidth) and a large matmul (FLOPs). */
async function ceilings(b: Backend): Promise<{ gbps?: number; gflops?: number; how: string }> {
  if (b.info.name === "reference") return { how: "not measured: the host reference is not a device" };
  if (b.info.name === "webgpu") {
    const c = await measureCeilings(b as WebGpuBackend, { bytes: 32 << 20 });
    return { gbps: c.copyGBps, gflops: c.fmaGflops, how: "vec4 copy kernel; f32 FMA kernel" };
  }
  const n = 1 << 22;
  const x = b.upload(new Float32Array(n).fill(1), [n]);
  const bw = median(await Promise.all([0, 1, 2].map(() => timeFlushed(b, () => b.free(b.add(x, x)))))) / 1000;
  const [rows, k] = [512, 4096];
  const a = b.upload(new Float32Array(rows * k).fill(0.5), [rows, k]);
  const w = b.uploadWeight(new Uint8Array(k * k * 2), [k, k], "f16");
  const mm: number[] = [];
  for (let i = 0; i < 3; i++) mm.push(await timeFlushed(b, () => b.free(b.matmul(a, w))));
  for (const t of [x, a, w]) b.free(t);
  return { gbps: (3 * n * 4) / bw / 1e9, gflops: (2 * rows * k * k) / (median(mm) / 1000) / 1e9, how: "add op; f16 matmul op" };
}

async function main(): Promise<void> {
  const models = (flags.models ?? "stories,llama1b").split(",");
  const names = (flags.backends ?? "reference,webgpu,cuda").split(",");
  const batches = (flags.batches ?? "1,8,32").split(",").map(Number);
  const out: Row[] = [];
  for (const bn of names) {
    let b: Backend;
    try {
      b = (await selectBackend(bn as "reference" | "webgpu" | "cuda")).backend;
    } catch (e) {
      console.log(`# ${bn}: unavailable (${e instanceof Error ? e.message : e})`);
      continue;
    }
    for (const mn of models) {
      if (bn === "reference" && mn === "llama1b") continue; // tens of minutes on the host reference
      // Ceilings are measured again before each model: on a shared machine they drift with the load.
      const ceil = await ceilings(b);
      console.log(`# ${bn} on ${b.info.device}, KV cache ${kvDtype}: ceilings ${fmt(ceil.gbps)} GB/s, ${fmt(ceil.gflops)} GFLOP/s (${ceil.how})`);
      const big = mn === "llama1b";
      const m = big ? llama1bModel(flags.dtype ?? "f16") : await loadModel(fileURLToPath(new URL("../models/stories260K.gguf", import.meta.url)));
      const opts = { p: flags["prompt-tokens"] ?? (big ? 2 : 32), d: flags["decode-steps"] ?? (big ? 3 : 5), r: flags.repeats ?? 3 };
      const rows = await benchModel(big ? `llama1b ${flags.dtype ?? "f16"}` : mn, m, b, batches, opts);
      out.push(...rows);
      for (const r of rows) {
        if (flags.json) console.log(JSON.stringify({ ...r, ceilGBps: ceil.gbps, ceilGflops: ceil.gflops }));
        else {
          console.log(
            `${r.model.padEnd(8)} ${r.backend.padEnd(9)} ${r.phase.padEnd(7)} B=${String(r.batch).padEnd(3)} ` +
              `${fmt(r.tokPerS).padStart(9)} tok/s  step ${fmt(r.stepMs).padStart(8)} ms  ` +
              `${fmt(r.gbps, 2).padStart(7)}/${fmt(ceil.gbps)} GB/s  ${fmt(r.gflops, 2).padStart(7)}/${fmt(ceil.gflops)} GFLOP/s` +
              (r.dispatches !== undefined ? `  ${r.dispatches} dispatches/step` : ""),
          );
        }
      }
    }
    b.destroy();
  }
}

main().then(() => exitProcess(0), (e) => {
  console.error(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
  exitProcess(1);
});

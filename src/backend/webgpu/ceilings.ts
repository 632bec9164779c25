/**
 * Device ceilings measured on the device itself, for benchmark reports: copy bandwidth (a vec4
 * copy kernel, bytes read + written) and peak f32 FMA throughput (independent FMA chains held in
 * registers). Each figure is the median of several timed runs after a warm-up.
 */
import type { WebGpuBackend } from "./backend.ts";
import { F32 } from "./recorder.ts";

/** Measured ceilings of a device. */
export interface Ceilings {
  /** Copy bandwidth in GB/s (10⁹ bytes per second, read + write). */
  copyGBps: number;
  /** f32 FMA throughput in GFLOP/s (an FMA counts as 2 FLOP). */
  fmaGflops: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function timed(gpu: WebGpuBackend, record: () => void, repeats: number): Promise<number> {
  record();
  await gpu.flush(); // warm-up: pipeline creation and first touch of the buffers
  const times: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    record();
    await gpu.flush();
    times.push((performance.now() - t0) / 1000);
  }
  return median(times);
}

/** Measures copy bandwidth over `bytes`-sized buffers and FMA throughput with `threads` threads. */
export async function measureCeilings(
  gpu: WebGpuBackend,
  options: { bytes?: number; threads?: number; iters?: number; repeats?: number } = {},
): Promise<Ceilings> {
  const ctx = gpu.context;
  const bytes = options.bytes ?? 64 << 20;
  const repeats = options.repeats ?? 5;
  const src = ctx.pool.acquire(bytes);
  const dst = ctx.pool.acquire(bytes);
  const n4 = bytes / 16;
  const copySeconds = await timed(gpu, () => {
    ctx.recorder.dispatch("bench_copy", {}, [n4, 0, 0, 0], [[1, src], [2, dst]], Math.ceil(n4 / 256));
  }, repeats);
  ctx.pool.release(src);
  ctx.pool.release(dst);
  const threads = options.threads ?? 1 << 16;
  const iters = options.iters ?? 256;
  const out = ctx.pool.acquire(threads * 4);
  const fmaSeconds = await timed(gpu, () => {
    ctx.recorder.dispatch("bench_fma", {}, [threads, iters, 0, new F32(0)], [[1, out]], Math.ceil(threads / 256));
  }, repeats);
  ctx.pool.release(out);
  return {
    copyGBps: (2 * bytes) / copySeconds / 1e9,
    fmaGflops: (threads * iters * 64) / fmaSeconds / 1e9,
  };
}

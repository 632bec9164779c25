/**
 * The baseline's offline profile (Dynamo's profiler output): per-worker prefill throughput as a
 * function of input length, and per-worker decode throughput as a function of context length and the
 * ITL it must meet. The sweep itself runs outside (the simulator sweeps its cost model, a real
 * deployment sweeps its engines); this module stores and interpolates it.
 */
import { PlannerConfigError } from "./types.ts";

/** One prefill point: tokens/s one worker sustains at this ISL, and its TTFT alone. */
export interface PrefillPoint {
  isl: number;
  tokensPerS: number;
  ttftS: number;
}

/** One decode point: at this context, this batch gives this ITL and tokens/s per worker. */
export interface DecodePoint {
  context: number;
  batch: number;
  itlS: number;
  tokensPerS: number;
}

/** Offline profile of one worker type. */
export interface OfflineProfile {
  prefill: PrefillPoint[];
  decode: DecodePoint[];
  /**
   * One profiled chunk step next to a decode batch: as one mixed step, and as a prefill-only plus a
   * decode-only step (optional). An operator picks mixed or separate steps from it
   * ({@link profileSplitsSteps}).
   */
  mixedChunk?: { mixedS: number; prefillS: number; decodeS: number };
  /** The ISL / OSL the profile was taken at (documentation; the planner interpolates). */
  profiledIsl: number;
  profiledOsl: number;
}

function interp(xs: number[], ys: number[], x: number): number {
  if (xs.length === 0) throw new PlannerConfigError("Offline profile is empty");
  if (x <= xs[0]) return ys[0];
  for (let i = 1; i < xs.length; i++) {
    // At a profiled point, its value exactly (ys[i-1] + 1·(ys[i] − ys[i-1]) can miss it by a rounding).
    if (x === xs[i]) return ys[i];
    if (x < xs[i]) {
      const f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
      return ys[i - 1] + f * (ys[i] - ys[i - 1]);
    }
  }
  return ys[ys.length - 1];
}

/** Prefill tokens/s per worker at `isl` (linear interpolation, clamped). */
export function prefillThroughput(p: OfflineProfile, isl: number): number {
  const pts = [...p.prefill].sort((a, b) => a.isl - b.isl);
  return interp(pts.map((q) => q.isl), pts.map((q) => q.tokensPerS), isl);
}

/** Expected TTFT (s) of one request alone at `isl`. */
export function expectedTtft(p: OfflineProfile, isl: number): number {
  const pts = [...p.prefill].sort((a, b) => a.isl - b.isl);
  return interp(pts.map((q) => q.isl), pts.map((q) => q.ttftS), isl);
}

/** The profiled context lengths nearest `context` (below and above). */
function nearestContexts(p: OfflineProfile, context: number): number[] {
  const ctxs = [...new Set(p.decode.map((d) => d.context))].sort((a, b) => a - b);
  if (ctxs.length === 0) throw new PlannerConfigError("Offline profile has no decode points");
  let lo = ctxs[0];
  for (const c of ctxs) if (c <= context) lo = c;
  return [lo];
}

/**
 * Decode tokens/s per worker at `context` with ITL ≤ `itlTargetS`: the best profiled batch that
 * meets the target (the smallest batch's throughput when none does).
 */
export function decodeThroughput(p: OfflineProfile, context: number, itlTargetS: number): number {
  const [ctx] = nearestContexts(p, context);
  const pts = p.decode.filter((d) => d.context === ctx).sort((a, b) => a.batch - b.batch);
  let best = pts[0].tokensPerS;
  for (const d of pts) if (d.itlS <= itlTargetS && d.tokensPerS > best) best = d.tokensPerS;
  return best;
}

/** Expected ITL (s) at `context` for the batch that the throughput above assumes. */
export function expectedItl(p: OfflineProfile, context: number, itlTargetS: number): number {
  const [ctx] = nearestContexts(p, context);
  const pts = p.decode.filter((d) => d.context === ctx).sort((a, b) => a.batch - b.batch);
  let itl = pts[0].itlS;
  for (const d of pts) if (d.itlS <= itlTargetS) itl = d.itlS;
  return itl;
}

/**
 * True when the profile shows a chunk step mixed with decodes costing more than the same chunk and
 * decodes as two separate steps: an operator then runs an engine that does not mix them (SGLang's
 * default; vLLM and TensorRT-LLM mix).
 */
export function profileSplitsSteps(p: OfflineProfile): boolean {
  const m = p.mixedChunk;
  return m !== undefined && m.mixedS > m.prefillS + m.decodeS;
}

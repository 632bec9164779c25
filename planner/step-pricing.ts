/**
 * What the online planner prices splits with once its step model has a fit: the model itself, fed
 * with every worker's sampled steps, and the workload facts its predictions need — the mean context a
 * prompt token attends to, the mean context a decoding sequence reads, and how many sequences a
 * worker's KV memory holds. All measured; nothing comes from an offline profile.
 */
import { OnlineStepModel, type StepCoefficients } from "./step-model.ts";
import type { WorkerSnapshot } from "./types.ts";

/** Planner ticks between refits of the step model (the hardware does not change between ticks; a fit costs about 10 ms). */
const FIT_EVERY_TICKS = 10;

/** Online step pricing for {@link OnlinePlanner}. */
export class StepPricing {
  private readonly model = new OnlineStepModel();
  private ctxPrefill = 0; // mean attended context per prompt token computed (EWMA)
  private ctxDecode = 0; // mean context read per decoding sequence (EWMA)
  private memSeqs = 0; // decoding sequences a worker's KV memory holds, from measured usage (EWMA; 0 = unknown)
  private ticksSinceFit = 0;

  /** The model's current fit (null before it has one). */
  coefficients(): StepCoefficients | null {
    return this.model.coefficients();
  }

  /** True once steps can be priced. */
  get ready(): boolean {
    return this.model.coefficients() !== null;
  }

  /** Learns from one tick's live workers. */
  learn(live: readonly WorkerSnapshot[]): void {
    // Sequences per worker at full KV memory, from the workers that decode.
    let held = 0, used = 0;
    for (const w of live) if (w.role === "decode" || w.role === "mixed") { held += w.decodeBatch; used += w.kvUsage; }
    if (used > 0.5 && held > 0) this.memSeqs = this.memSeqs === 0 ? held / used : 0.9 * this.memSeqs + 0.1 * (held / used);
    let pt = 0, pp = 0, ds = 0, da = 0;
    for (const w of live) {
      if (w.steps === undefined) continue;
      this.model.add(w.steps);
      for (const x of w.steps) {
        const k = x.count ?? 1;
        pt += x.prefillTokens * k; pp += x.prefillAttnPairs * k; ds += x.decodeSeqs * k; da += x.decodeAttnTokens * k;
      }
    }
    if (pt > 0) this.ctxPrefill = this.ctxPrefill === 0 ? pp / pt : 0.9 * this.ctxPrefill + 0.1 * (pp / pt);
    if (ds > 0) this.ctxDecode = this.ctxDecode === 0 ? da / ds : 0.9 * this.ctxDecode + 0.1 * (da / ds);
    if (!this.ready || ++this.ticksSinceFit >= FIT_EVERY_TICKS) {
      this.model.fit();
      this.ticksSinceFit = 0;
    }
  }

  /** The decode batch a worker can hold: `limit`, or fewer when its KV memory fits fewer sequences. */
  batchLimit(limit: number): number {
    return this.memSeqs > 0 ? Math.max(1, Math.min(limit, 0.95 * this.memSeqs)) : limit;
  }

  /** Seconds of a prefill-only step of `n` prompt tokens. */
  prefillStep(n: number): number {
    return this.model.predict({ prefillTokens: n, prefillAttnPairs: n * this.ctxPrefill, decodeSeqs: 0, decodeAttnTokens: 0 });
  }

  /** Seconds of a mixed step: a chunk filling `budget` tokens beside `b` decoding sequences. */
  chunkStep(b: number, budget: number): number {
    const n = Math.max(1, budget - b);
    return this.model.predict({ prefillTokens: n, prefillAttnPairs: n * this.ctxPrefill, decodeSeqs: b, decodeAttnTokens: b * this.ctxDecode });
  }

  /** Seconds of a decode-only step of `b` sequences. */
  decodeStep(b: number): number {
    return this.model.predict({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: b, decodeAttnTokens: b * this.ctxDecode });
  }
}

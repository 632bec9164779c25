/**
 * The baseline's offline profiling sweep, run against the simulator's cost model the way Dynamo's
 * profiler runs against a real engine: prefill at several ISLs without prefix cache, decode at
 * several contexts and batch sizes.
 */
import type { DecodePoint, OfflineProfile, PrefillPoint } from "../../planner/profile.ts";
import type { CostModel } from "./cost-model.ts";

const ISLS = [256, 512, 1024, 2048, 3000, 4096, 8192, 16384, 32768, 65536, 131072];
const CONTEXTS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
const BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 384, 512];

/** Sweeps `cost` and returns the profile (ISL 3000 / OSL 150 is Dynamo's default centre). */
export function profileSweep(cost: CostModel, chunk = 16384): OfflineProfile {
  const prefill: PrefillPoint[] = ISLS.map((isl) => {
    let t = 0;
    for (let pos = 0; pos < isl; pos += chunk) {
      const n = Math.min(chunk, isl - pos);
      t += cost.stepTime({ prefillTokens: n, prefillAttnPairs: cost.prefillPairs(pos, n), decodeSeqs: 0, decodeAttnTokens: 0 });
    }
    return { isl, tokensPerS: isl / t, ttftS: t };
  });
  const decode: DecodePoint[] = [];
  for (const context of CONTEXTS) {
    for (const batch of BATCHES) {
      const itlS = cost.stepTime({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: batch, decodeAttnTokens: batch * cost.attended(context) });
      decode.push({ context, batch, itlS, tokensPerS: batch / itlS });
    }
  }
  return { prefill, decode, profiledIsl: 3000, profiledOsl: 150 };
}

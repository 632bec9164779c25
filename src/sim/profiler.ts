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

/** Prefill tokens of a mixed worker's chunk step (the simulator's chunk budget). */
const MIXED_CHUNK = 8192;

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
  // A mixed worker's chunk step beside 64 sequences decoding at 8k context, mixed and split.
  const pairs = cost.prefillPairs(4096, MIXED_CHUNK), attn = 64 * cost.attended(8192);
  const mixedChunk = {
    mixedS: cost.stepTime({ prefillTokens: MIXED_CHUNK, prefillAttnPairs: pairs, decodeSeqs: 64, decodeAttnTokens: attn }),
    prefillS: cost.stepTime({ prefillTokens: MIXED_CHUNK, prefillAttnPairs: pairs, decodeSeqs: 0, decodeAttnTokens: 0 }),
    decodeS: cost.stepTime({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: attn }),
  };
  return { prefill, decode, mixedChunk, profiledIsl: 3000, profiledOsl: 150 };
}

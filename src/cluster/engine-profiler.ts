/**
 * The baseline planner's offline profile (planner/profile.ts) measured on a real engine, as Dynamo's
 * pre-deployment profiler measures one (the simulator sweeps its cost model instead: sim/profiler.ts).
 *
 * Method. Every prompt is random token ids in [16, vocabSize) under a cacheSalt of its own, so no
 * request finds another's prefix cached; every request is greedy and ignores EOS. One untimed
 * warm-up request (the shortest ISL, decodeTokens output tokens) goes first, so one-off costs (kernel
 * compilation, first allocations) land in no point.
 * - Prefill, at each ISL: one request of ISL prompt tokens and 1 output token on the idle engine,
 *   timed from `submit` to its first token-bearing delta; the median over `repeats` runs is `ttftS`,
 *   and `tokensPerS` = ISL / ttftS.
 * - Decode, at each (context, batch): `batch` requests submitted at once, each of `context` prompt
 *   tokens and `decodeTokens` output tokens, with the arrival time of each token-bearing delta. Only
 *   the window where every sequence decodes counts: from the last request's first token to the first
 *   request's last, so no prefill is interleaved and no sequence has finished. `itlS` is the median
 *   gap between consecutive deltas of one request both inside that window (a gap over a delta of n
 *   tokens counts as gap / n), and `tokensPerS` = batch / itlS. As a batch's prefill runs while its
 *   first requests decode, each request's output is decodeTokens plus the tokens the first request of
 *   the previous batch (same context) decoded before the window, scaled to this batch; when some
 *   request still has fewer than (decodeTokens - 1) / 2 tokens in the window, the point runs again
 *   with outputs twice as long (while they fit the context). A batch whose KV would not fit the blocks
 *   free now (batch × ⌈(context + output) / blockSize⌉ > freeBlocks()) is skipped; a context with no
 *   batch left is dropped, and a sweep that measures no decode point at all throws.
 * `profiledIsl` is the middle ISL and `profiledOsl` is `decodeTokens`; `mixedChunk` is not measured.
 */
import type { DecodePoint, OfflineProfile, PrefillPoint } from "../../planner/profile.ts";
import type { GenerateRequest, RequestHandle } from "../engine/engine-types.ts";
import { seededUniforms } from "../engine/sampler-rng.ts";

/** What profiling needs of an engine: a subset of a cluster's WorkerEngine (worker-engine.ts). */
export interface ProfilableEngine {
  /** Context limit (prompt + output). */
  readonly maxModelLen: number;
  /** Tokens per KV block. */
  readonly blockSize: number;
  submit(req: GenerateRequest): RequestHandle;
  /** Device KV blocks free or evictable now. */
  freeBlocks(): number;
}

/** The sweep of {@link profileEngine}; every list defaults to one derived from the engine's maxModelLen. */
export interface EngineProfileOptions {
  /** The model's vocabulary size (prompt token ids are drawn below it). */
  vocabSize: number;
  /** Prompt lengths of the prefill points (default ⅛, ¼, ½ and ¾ of maxModelLen - 1). */
  isls?: number[];
  /** Prompt lengths of the decode points (default ¼ and ½ of maxModelLen). */
  contexts?: number[];
  /** Batch sizes of the decode points (default 1, 2, 4, 8, 16). */
  batches?: number[];
  /** Output tokens of each decode request (default 16; at least 2). */
  decodeTokens?: number;
  /** Timed runs of each prefill point, of which the median counts (default 3). */
  repeats?: number;
  /** Clock in milliseconds (default `performance.now`). */
  now?: () => number;
  /** Uniform numbers in [0, 1) for prompt tokens (default a seeded generator). */
  random?: () => number;
}

/** A profile file that is not a valid {@link OfflineProfile}. */
export class ProfileFormatError extends Error {
  override name = "ProfileFormatError";
}

/** Prompt token ids start here: small vocabularies keep BOS, EOS and other control tokens low. */
const FIRST_ID = 16;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** `given` sorted and deduplicated after checking each is an integer in [1, max]; else `fallback` clamped there. */
function sweep(what: string, given: number[] | undefined, fallback: number[], max: number, why: string): number[] {
  const vs = given ?? fallback.map((v) => Math.min(max, Math.max(1, Math.round(v))));
  const bad = vs.filter((v) => !Number.isInteger(v) || v < 1 || v > max);
  if (given !== undefined && (bad.length > 0 || given.length === 0)) {
    throw new RangeError(`Profile ${what} [${given.join(", ")}] must be integers from 1 to ${max} (${why})`);
  }
  return [...new Set(vs.filter((v) => !bad.includes(v)))].sort((a, b) => a - b);
}

/** Runs the sweep described in this module's comment on `engine`, alone on it, and returns the profile. */
export async function profileEngine(engine: ProfilableEngine, o: EngineProfileOptions): Promise<OfflineProfile> {
  const { maxModelLen: len, blockSize } = engine;
  const decodeTokens = o.decodeTokens ?? 16, repeats = o.repeats ?? 3;
  if (!Number.isInteger(o.vocabSize) || o.vocabSize <= FIRST_ID) throw new RangeError(`Profile vocabSize must be an integer above ${FIRST_ID}, got ${o.vocabSize}`);
  if (!Number.isInteger(decodeTokens) || decodeTokens < 2 || decodeTokens >= len) throw new RangeError(`Profile decodeTokens must be an integer from 2 to ${len - 1}, got ${decodeTokens}`);
  if (!Number.isInteger(repeats) || repeats < 1) throw new RangeError(`Profile repeats must be a positive integer, got ${repeats}`);
  const isls = sweep("isls", o.isls, [1 / 8, 1 / 4, 1 / 2, 3 / 4].map((f) => f * (len - 1)), len - 1, `maxModelLen ${len} less 1 output token`);
  const contexts = sweep("contexts", o.contexts, [len / 4, len / 2], len - decodeTokens, `maxModelLen ${len} less ${decodeTokens} decode tokens`);
  const batches = sweep("batches", o.batches, [1, 2, 4, 8, 16], Number.MAX_SAFE_INTEGER, "any positive batch");
  const now = o.now ?? (() => performance.now());
  const rng = seededUniforms(0x5eed);
  const random = o.random ?? (() => rng.next());
  const span = o.vocabSize - FIRST_ID, run = Date.now().toString(36);
  let serial = 0;
  const request = (n: number, maxTokens: number): GenerateRequest => ({
    prompt: Array.from({ length: n }, () => FIRST_ID + Math.min(span - 1, Math.floor(random() * span))),
    maxTokens, temperature: 0, ignoreEos: true, cacheSalt: `engine-profile-${run}-${serial++}`,
  });
  /** Submits `req` and returns the arrival time and token count of each token-bearing delta. */
  const deltas = async (req: GenerateRequest): Promise<{ t: number; n: number }[]> => {
    const h = engine.submit(req), seen: { t: number; n: number }[] = [];
    for await (const d of h.stream) if (d.tokenIds.length > 0) seen.push({ t: now(), n: d.tokenIds.length });
    const r = await h.result;
    if (r.error !== undefined) throw new Error(`A profiling request (${req.prompt.length} prompt tokens) failed: ${r.error}`);
    if (seen.length === 0) throw new Error(`A profiling request (${req.prompt.length} prompt tokens) streamed no token`);
    return seen;
  };

  await deltas(request(isls[0], decodeTokens));
  const prefill: PrefillPoint[] = [];
  for (const isl of isls) {
    const ttfts: number[] = [];
    for (let i = 0; i < repeats; i++) {
      const t0 = now();
      ttfts.push(((await deltas(request(isl, 1)))[0].t - t0) / 1000);
    }
    const ttftS = median(ttfts);
    prefill.push({ isl, ttftS, tokensPerS: isl / ttftS });
  }
  const decode: DecodePoint[] = [];
  let need = Infinity;
  for (const context of contexts) {
    let lead = 0; // tokens the first request decoded before the last one's first, per request of the batch
    for (const batch of batches) {
      const guess = Math.min(len - context, decodeTokens + Math.ceil(lead * batch));
      for (let maxTokens = guess; context + maxTokens <= len; maxTokens *= 2) {
        const blocks = batch * Math.ceil((context + maxTokens) / blockSize);
        if (blocks > engine.freeBlocks()) {
          need = Math.min(need, blocks);
          break;
        }
        const runs = await Promise.all(Array.from({ length: batch }, () => deltas(request(context, maxTokens))));
        const from = Math.max(...runs.map((r) => r[0].t)), to = Math.min(...runs.map((r) => r[r.length - 1].t));
        lead = runs[0].filter((d) => d.t < from).reduce((sum, d) => sum + d.n, 0) / batch;
        const gaps: number[] = [];
        let fewest = Infinity; // tokens in the window, of the request with fewest
        for (const r of runs) {
          let tokens = 0;
          for (let j = 1; j < r.length; j++) {
            if (r[j - 1].t < from || r[j].t > to) continue;
            gaps.push((r[j].t - r[j - 1].t) / r[j].n);
            tokens += r[j].n;
          }
          fewest = Math.min(fewest, tokens);
        }
        if (2 * fewest < decodeTokens - 1) continue; // the window was too short: again with longer outputs
        const itlS = median(gaps) / 1000;
        decode.push({ context, batch, itlS, tokensPerS: batch / itlS });
        break;
      }
    }
  }
  if (decode.length === 0) {
    const why = need < Infinity ? `; the smallest needs ${need} KV blocks and ${engine.freeBlocks()} are free` : "";
    throw new Error(`No decode point could be measured at contexts [${contexts.join(", ")}] and batches [${batches.join(", ")}]${why}`);
  }
  return { prefill, decode, profiledIsl: isls[isls.length >> 1], profiledOsl: decodeTokens };
}

/** The key a written profile names its model's fingerprint under. */
export const PROFILE_MODEL_KEY = "modelFingerprint";

/** The JSON a server writes for `profile` measured on the model whose fingerprint is `model`. */
export function profileJson(profile: OfflineProfile, model: string): string {
  return JSON.stringify({ [PROFILE_MODEL_KEY]: model, ...profile }, null, 2) + "\n";
}

/**
 * Reads an {@link OfflineProfile} from JSON `text` (`source` names it in errors); throws {@link ProfileFormatError}.
 * A profile the server measured names its model (`modelFingerprint`, src/model/fingerprint.ts): with
 * `model` given, one measured on another model is refused (a hand-written one, naming none, is taken).
 */
export function parseOfflineProfile(text: string, source: string, model?: string): OfflineProfile {
  const fail = (what: string): never => {
    throw new ProfileFormatError(`Profile "${source}" ${what}`);
  };
  const json = (): unknown => {
    try {
      return JSON.parse(text);
    } catch (e) {
      return fail(`is not JSON: ${e instanceof Error ? e.message : String(e)}`);
    }
  };
  const raw = json();
  const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObj(raw)) return fail("is not a JSON object");
  /** `obj[key]`: a finite number above 0 (at least 0 where `zeroOk`). */
  const num = (obj: Record<string, unknown>, key: string, where: string, zeroOk = false): number => {
    const v = obj[key];
    if (v === undefined) return fail(`${where}has no "${key}"`);
    if (typeof v === "number" && Number.isFinite(v) && (v > 0 || (zeroOk && v === 0))) return v;
    return fail(`${where}has ${key} ${JSON.stringify(v)}; it must be a ${zeroOk ? "non-negative" : "positive"} finite number`);
  };
  const points = (key: string, name: string): Record<string, unknown>[] => {
    const list = raw[key];
    if (list === undefined) return fail(`has no ${name} points ("${key}" is missing)`);
    if (!Array.isArray(list)) return fail(`has "${key}" ${JSON.stringify(list)}; it must be a list of ${name} points`);
    if (list.length === 0) return fail(`has no ${name} points`);
    return list.map((p: unknown, i) => (isObj(p) ? p : fail(`${name} point ${i} is ${JSON.stringify(p)}, not an object`)));
  };
  const prefill = points("prefill", "prefill").map((p, i) => {
    const at = `prefill point ${i} `;
    return { isl: num(p, "isl", at), tokensPerS: num(p, "tokensPerS", at), ttftS: num(p, "ttftS", at) };
  });
  const decode = points("decode", "decode").map((p, i) => {
    const at = `decode point ${i} `;
    return { context: num(p, "context", at), batch: num(p, "batch", at), itlS: num(p, "itlS", at), tokensPerS: num(p, "tokensPerS", at) };
  });
  const measuredOn = raw[PROFILE_MODEL_KEY];
  if (measuredOn !== undefined && typeof measuredOn !== "string") fail(`has ${PROFILE_MODEL_KEY} ${JSON.stringify(measuredOn)}; it must be a string`);
  if (model !== undefined && measuredOn !== undefined && measuredOn !== model) {
    fail(`was measured on another model (${PROFILE_MODEL_KEY} ${measuredOn}, this model's ${model}): its rates are not this model's; measure it again (a server with --workers 2 --planner sla --sla-profile FILE writes one where the file does not exist)`);
  }
  const profile: OfflineProfile = { prefill, decode, profiledIsl: num(raw, "profiledIsl", ""), profiledOsl: num(raw, "profiledOsl", "") };
  if (raw.mixedChunk !== undefined) {
    const m = isObj(raw.mixedChunk) ? raw.mixedChunk : fail(`has mixedChunk ${JSON.stringify(raw.mixedChunk)}, not an object`);
    profile.mixedChunk = { mixedS: num(m, "mixedS", "mixedChunk ", true), prefillS: num(m, "prefillS", "mixedChunk ", true), decodeS: num(m, "decodeS", "mixedChunk ", true) };
  }
  return profile;
}

/** The offline profile measured on an engine (src/cluster/engine-profiler.ts): a real sweep, and the method pinned on a fake clock. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { model } from "./fixtures.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest, RequestHandle, StreamDelta } from "../../src/engine/engine-types.ts";
import { localWorkerEngine } from "../../src/cluster/worker-engine.ts";
import { parseOfflineProfile, PROFILE_MODEL_KEY, profileEngine, profileJson, type ProfilableEngine, ProfileFormatError } from "../../src/cluster/engine-profiler.ts";
import { decodeThroughput, type OfflineProfile, prefillThroughput } from "../../planner/profile.ts";

const vocabSize = model.config.vocabSize;

/** A delta the fake streams `at` ms after the request was submitted, with this many tokens. */
interface Beat {
  at: number;
  tokens: number;
}

/**
 * A ProfilableEngine on a fake clock: request k (in submission order) streams `script(req, k)`.
 * Deltas of all requests come out in time order (from the next macrotask after submission), each
 * setting the clock to its time, and the next one waits until the reader of the last has come back
 * for more, so the profiler reads exactly the scripted times.
 */
function fakeEngine(script: (req: GenerateRequest, k: number) => Beat[], o: { maxModelLen?: number; freeBlocks?: number } = {}) {
  const clock = { t: 1000 };
  const submitted: GenerateRequest[] = [];
  const pending: { at: number; seq: number; tokens: number }[] = [];
  let seq = 0;
  let waiters: (() => void)[] = [];
  const engine: ProfilableEngine = {
    maxModelLen: o.maxModelLen ?? 512,
    blockSize: 16,
    freeBlocks: () => o.freeBlocks ?? 10_000,
    submit(req: GenerateRequest): RequestHandle {
      const t0 = clock.t, id = submitted.push(req) - 1;
      const beats = script(req, id).map((b) => ({ at: t0 + b.at, seq: seq++, tokens: b.tokens }));
      pending.push(...beats);
      async function* stream(): AsyncGenerator<StreamDelta> {
        await new Promise((r) => setTimeout(r, 0)); // the requests submitted with this one are all in
        for (const b of beats) {
          while (pending.some((p) => p.at < b.at || (p.at === b.at && p.seq < b.seq))) await new Promise<void>((r) => waiters.push(r));
          clock.t = b.at;
          yield { text: "", tokenIds: new Array<number>(b.tokens).fill(20) };
          pending.splice(pending.indexOf(b), 1);
          const wake = waiters;
          waiters = [];
          for (const w of wake) w();
        }
      }
      const n = beats.reduce((s, b) => s + b.tokens, 0);
      return {
        id, stream: stream(), cancel() {},
        result: Promise.resolve({ text: "", tokenIds: [], finishReason: "length", promptTokens: req.prompt.length, completionTokens: n, cachedTokens: 0 }),
      };
    },
  };
  return { engine, now: () => clock.t, submitted };
}

/** `count` tokens, one a delta, `every` ms apart from `start`. */
const steady = (start: number, count: number, every = 1): Beat[] => Array.from({ length: count }, (_, i) => ({ at: start + i * every, tokens: 1 }));

const finitePositive = (p: OfflineProfile): boolean =>
  [...p.prefill.flatMap((q) => [q.isl, q.ttftS, q.tokensPerS]), ...p.decode.flatMap((d) => [d.context, d.batch, d.itlS, d.tokensPerS])]
    .every((v) => Number.isFinite(v) && v > 0);

test("profileEngine measures stories260K on the reference backend: TTFT grows with ISL, ITL with batch, and the planner reads it", async () => {
  const e = createEngine(createReferenceBackend(), model, { maxModelLen: 512 });
  try {
    const p = await profileEngine(localWorkerEngine(e), { vocabSize, contexts: [64], batches: [1, 4, 16] });
    assert.ok(finitePositive(p), JSON.stringify(p));
    assert.deepEqual(p.prefill.map((q) => q.isl), [64, 128, 256, 383]); // ⅛ … ¾ of maxModelLen - 1
    assert.ok(p.prefill.at(-1)!.ttftS > p.prefill[0].ttftS, JSON.stringify(p.prefill));
    assert.deepEqual(p.decode.map((d) => [d.context, d.batch]), [[64, 1], [64, 4], [64, 16]]);
    // A step of 16 sequences takes longer than a step of one, yet yields more tokens a second than a
    // sixteenth of one's. (The reference backend is compute-bound: batching gains it only ~5-30% here,
    // within its noise at batch 1, so "more tokens a second than batch 1" would be flaky.)
    assert.ok(p.decode[2].itlS > 2 * p.decode[0].itlS, JSON.stringify(p.decode));
    assert.ok(p.decode[2].tokensPerS > p.decode[0].tokensPerS / 2, JSON.stringify(p.decode));
    assert.equal(p.profiledIsl, 256);
    assert.equal(p.profiledOsl, 16);
    assert.deepEqual(parseOfflineProfile(JSON.stringify(p), "stories.json"), p);
    assert.equal(prefillThroughput(p, 128), p.prefill[1].tokensPerS);
    assert.equal(decodeThroughput(p, 64, Infinity), Math.max(...p.decode.map((d) => d.tokensPerS)));
    assert.equal(decodeThroughput(p, 64, 0), p.decode[0].tokensPerS); // no batch meets it: batch 1's
  } finally {
    await e.stop();
  }
});

test("profileEngine skips decode batches whose KV does not fit the blocks free", async () => {
  // 30 blocks of 16: a request of 64 + 16 tokens takes 5, so batches of 1, 2, 4 fit (with room for longer outputs) and 8 (40), 16 do not.
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 30 });
  try {
    const w = localWorkerEngine(e);
    assert.equal(w.freeBlocks(), 30);
    const p = await profileEngine(w, { vocabSize, isls: [16], repeats: 1, contexts: [64], batches: [1, 2, 4, 8, 16] });
    assert.deepEqual(p.decode.map((d) => d.batch), [1, 2, 4]);
    assert.ok(finitePositive(p));
  } finally {
    await e.stop();
  }
});

test("profileEngine computes TTFT and ITL exactly as the clock says: medians, the all-decoding window, multi-token deltas", async () => {
  const ttfts: Record<number, number[]> = { 100: [50, 20, 30], 200: [60, 200, 70] };
  const seen: Record<number, number> = { 100: 0, 200: 0 };
  const decodes: Beat[][] = [
    // Batch 1: gaps 2, 3, 2, 3, 2, 3, 2 → median 2 ms.
    [2, 3, 2, 3, 2, 3, 2].reduce<Beat[]>((bs, g) => [...bs, { at: bs.at(-1)!.at + g, tokens: 1 }], [{ at: 10, tokens: 1 }]),
    // Batch 2. Request 0 decodes at 30 and 50 while request 1 prefills (outside the window), then both
    // decode at 53, 57, 62, 68, 75 (request 1 gets 57's token with 62's); request 1 ends alone at 76, 77.
    [{ at: 10, tokens: 1 }, ...[30, 50, 53, 57, 62, 68, 75].map((at) => ({ at, tokens: 1 }))],
    [{ at: 50, tokens: 1 }, { at: 53, tokens: 1 }, { at: 62, tokens: 2 }, { at: 68, tokens: 1 }, { at: 75, tokens: 1 }, { at: 76, tokens: 1 }, { at: 77, tokens: 1 }],
  ];
  const { engine, now, submitted } = fakeEngine((req, k) => {
    if (k === 0) return steady(5, req.maxTokens!); // the warm-up
    if (req.maxTokens === 1) return [{ at: 3, tokens: 0 }, { at: ttfts[req.prompt.length][seen[req.prompt.length]++], tokens: 1 }];
    return decodes.shift()!;
  });
  const p = await profileEngine(engine, { vocabSize, isls: [200, 100], contexts: [40], batches: [2, 1], decodeTokens: 8, now });
  assert.deepEqual(p, {
    prefill: [{ isl: 100, ttftS: 30 / 1000, tokensPerS: 100 / (30 / 1000) }, { isl: 200, ttftS: 70 / 1000, tokensPerS: 200 / (70 / 1000) }],
    // Window gaps of batch 2: 3, 4, 5, 6, 7 and 3, 9 / 2, 6, 7 → median 5 (with the 20s before it, 6; with the 1s after it, 4.5).
    decode: [{ context: 40, batch: 1, itlS: 2 / 1000, tokensPerS: 1 / (2 / 1000) }, { context: 40, batch: 2, itlS: 5 / 1000, tokensPerS: 2 / (5 / 1000) }],
    profiledIsl: 200, profiledOsl: 8,
  });
  assert.deepEqual(submitted.map((r) => [r.prompt.length, r.maxTokens]), [[100, 8], [100, 1], [100, 1], [100, 1], [200, 1], [200, 1], [200, 1], [40, 8], [40, 8], [40, 8]]);
  for (const r of submitted) {
    assert.equal(r.temperature, 0);
    assert.equal(r.ignoreEos, true);
    assert.ok(r.prompt.every((id) => Number.isInteger(id) && id >= 16 && id < vocabSize));
  }
  assert.equal(new Set(submitted.map((r) => r.cacheSalt)).size, submitted.length);
  assert.equal(new Set(submitted.map((r) => r.prompt.slice(0, 8).join())).size, submitted.length);
});

test("profileEngine runs a decode point again with longer outputs when the batch's prefill outlasts the window", async () => {
  // Request 0 finishes (at 40) before request 1's first token (at 50): no window. With 8 tokens each, it is 50 … 80.
  const tries: Beat[][] = [steady(10, 4, 10), [{ at: 50, tokens: 1 }, ...steady(60, 3, 10)], [...steady(10, 4, 10), ...steady(54, 4, 4)], [{ at: 50, tokens: 1 }, ...steady(54, 7, 4)]];
  const { engine, now, submitted } = fakeEngine((req, k) => (k === 0 || req.maxTokens === 1 ? steady(5, req.maxTokens!) : tries.shift()!));
  const p = await profileEngine(engine, { vocabSize, isls: [32], repeats: 1, contexts: [40], batches: [2], decodeTokens: 4, now });
  assert.deepEqual(submitted.slice(2).map((r) => r.maxTokens), [4, 4, 8, 8]);
  assert.deepEqual(p.decode, [{ context: 40, batch: 2, itlS: 4 / 1000, tokensPerS: 2 / (4 / 1000) }]);
});

test("profileEngine derives its sweep from maxModelLen and refuses values that do not fit", async () => {
  const { engine, submitted } = fakeEngine((req) => steady(1, req.maxTokens!));
  const p = await profileEngine(engine, { vocabSize });
  assert.deepEqual(p.prefill.map((q) => q.isl), [64, 128, 256, 383]);
  assert.deepEqual([...new Set(submitted.slice(1).filter((r) => r.maxTokens === 16).map((r) => r.prompt.length))], [128, 256]); // after the warm-up
  assert.deepEqual(p.decode.map((d) => `${d.context}x${d.batch}`), ["128x1", "128x2", "128x4", "128x8", "128x16", "256x1", "256x2", "256x4", "256x8", "256x16"]);
  assert.deepEqual([p.profiledIsl, p.profiledOsl], [256, 16]);

  await assert.rejects(profileEngine(engine, { vocabSize, isls: [64, 600] }), (e: Error) => e instanceof RangeError && /isls \[64, 600\].*1 to 511/.test(e.message));
  await assert.rejects(profileEngine(engine, { vocabSize, contexts: [500] }), (e: Error) => e instanceof RangeError && /contexts \[500\].*1 to 496/.test(e.message));
  await assert.rejects(profileEngine(engine, { vocabSize, batches: [0] }), (e: Error) => e instanceof RangeError && /batches \[0\]/.test(e.message));
  await assert.rejects(profileEngine(engine, { vocabSize, decodeTokens: 1 }), (e: Error) => e instanceof RangeError && /decodeTokens .* got 1/.test(e.message));
});

test("profileEngine throws when no decode point fits the KV cache", async () => {
  const { engine } = fakeEngine((req) => steady(1, req.maxTokens!), { freeBlocks: 4 });
  await assert.rejects(
    profileEngine(engine, { vocabSize, isls: [16], repeats: 1, contexts: [64], batches: [1, 2] }),
    (e: Error) => /No decode point could be measured at contexts \[64\] and batches \[1, 2\]; the smallest needs 5 KV blocks and 4 are free/.test(e.message),
  );
});

test("parseOfflineProfile rejects what is not a profile, naming the problem and the source", () => {
  const good = { prefill: [{ isl: 64, ttftS: 0.02, tokensPerS: 3200 }], decode: [{ context: 128, batch: 1, itlS: 0.001, tokensPerS: 1000 }], profiledIsl: 64, profiledOsl: 16 };
  assert.deepEqual(parseOfflineProfile(JSON.stringify(good), "good.json"), good);
  const mixed = { ...good, mixedChunk: { mixedS: 0.3, prefillS: 0.2, decodeS: 0 } };
  assert.deepEqual(parseOfflineProfile(JSON.stringify(mixed), "mixed.json"), mixed);
  const bad = (text: string, message: RegExp) => assert.throws(() => parseOfflineProfile(text, "x.json"), (e: Error) => e instanceof ProfileFormatError && message.test(e.message));
  bad("{prefill", /^Profile "x\.json" is not JSON/);
  bad("[1, 2]", /^Profile "x\.json" is not a JSON object$/);
  bad(JSON.stringify({ ...good, prefill: undefined }), /^Profile "x\.json" has no prefill points \("prefill" is missing\)$/);
  bad(JSON.stringify({ ...good, decode: [] }), /^Profile "x\.json" has no decode points$/);
  bad(JSON.stringify({ ...good, decode: [{ ...good.decode[0], tokensPerS: -3 }] }), /^Profile "x\.json" decode point 0 has tokensPerS -3; it must be a positive finite number$/);
  bad(JSON.stringify({ ...good, prefill: [{ isl: 64, ttftS: Infinity, tokensPerS: 1 }] }), /^Profile "x\.json" prefill point 0 has ttftS null; it must be a positive finite number$/);
  bad(JSON.stringify({ ...good, prefill: [{ isl: 64, tokensPerS: 1 }] }), /^Profile "x\.json" prefill point 0 has no "ttftS"$/);
  bad(JSON.stringify({ ...good, profiledOsl: undefined }), /^Profile "x\.json" has no "profiledOsl"$/);
});

test("parseOfflineProfile refuses a profile measured on another model, and profileJson() names the model it was measured on", () => {
  const good = { prefill: [{ isl: 64, ttftS: 0.02, tokensPerS: 3200 }], decode: [{ context: 128, batch: 1, itlS: 0.001, tokensPerS: 1000 }], profiledIsl: 64, profiledOsl: 16 };
  const written = profileJson(good, "aaaa");
  assert.equal((JSON.parse(written) as Record<string, unknown>)[PROFILE_MODEL_KEY], "aaaa");
  assert.deepEqual(parseOfflineProfile(written, "p.json", "aaaa"), good);
  assert.throws(
    () => parseOfflineProfile(written, "p.json", "bbbb"),
    (e: Error) => e instanceof ProfileFormatError && /^Profile "p\.json" was measured on another model \(modelFingerprint aaaa, this model's bbbb\)/.test(e.message),
  );
  // One naming no model (hand-written, or written before profiles named theirs) is taken as it is.
  assert.deepEqual(parseOfflineProfile(JSON.stringify(good), "hand.json", "bbbb"), good);
  assert.throws(() => parseOfflineProfile(JSON.stringify({ ...good, [PROFILE_MODEL_KEY]: 7 }), "x.json", "bbbb"), /has modelFingerprint 7; it must be a string/);
});

/**
 * A seeded hunt over what per-sequence state (a recurrent model's, windowed sliding layers') now runs
 * with, in random combinations: chunk sizes, multi-step decoding, recompute or swap preemption in a tight
 * pool, a host KV tier, few device checkpoints with or without host state checkpoints, n-gram speculation
 * (windows only), sessions whose turns share a system prompt and repeat their history. Whatever the
 * combination, every answer must be the one a lone forward over paged caches gives.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { SeededRng } from "../../kv/rng.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/state-combos-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const GPT_OSS: ModelFileSpec = {
  hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "gpt-oss",
  ropeTheta: 10000, seed: 821, slidingWindow: 5, experts: { count: 4, used: 2 },
};
const QWEN35: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 822,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const models: [string, LoadedModel, CreateEngineOptions][] = [
  ["windowed GPT-OSS", await loadModel(await writeTestGguf(dir, "gpt-oss", GPT_OSS)), { slidingWindowKv: "window" }],
  ["Qwen3.5", await loadModel(await writeTestGguf(dir, "qwen35", QWEN35)), {}],
];
const backend = createReferenceBackend();
const MAX_TOKENS = 6;

/** The greedy tokens of a lone forward over paged caches. */
async function lone(model: LoadedModel, prompt: number[]): Promise<number[]> {
  const kv = allocatePagedKv(backend, model.config, 32, 4);
  try {
    return (await greedySteps(backend, uploadModel(backend, model), kv, prompt, MAX_TOKENS, Array.from({ length: 32 }, (_, i) => i))).tokens;
  } finally {
    freePagedKv(backend, kv);
  }
}

/** Random engine options for `seed` (speculation for the windowed model here; the recurrent one's is drawn beside). */
function combo(rng: SeededRng, windowed: boolean): CreateEngineOptions {
  const maxBatchTokens = rng.int(5, 12);
  return {
    blockSize: 4,
    numBlocks: rng.int(11, 18),
    schedulerSteps: rng.int(1, 3),
    stateCheckpoints: rng.int(1, 3),
    ...(rng.next() < 0.5 ? { hostStateCheckpoints: rng.int(2, 6) } : {}),
    ...(rng.next() < 0.5 ? { kvOffloadBlocks: 32 } : {}),
    ...(windowed && rng.next() < 0.4 ? { speculative: { method: "ngram" as const, numTokens: rng.int(1, 3), maxN: 3, minN: 1 } } : {}),
    scheduler: { maxBatchTokens, maxRunning: rng.int(2, 3), preemption: rng.next() < 0.5 ? "swap" : "recompute" },
  };
}

for (const [name, model, base] of models) {
  test(`Engine with ${name}: random combinations of chunking, per-sequence step limits, multi-step, preemption, host tiers, few checkpoints and speculation give the lone greedy tokens`, async () => {
    for (let seed = 1; seed <= 12; seed++) {
      const rng = new SeededRng(seed * 7919);
      const o = { ...base, ...combo(rng, base.slidingWindowKv === "window") };
      // A per-sequence step limit (and, windowed, rings sized by it) from a generator of its own, so the draws above stay the seed's.
      const cap = new SeededRng(seed * 104729);
      if (cap.next() < 0.5) o.scheduler = { ...o.scheduler, longPrefillTokenThreshold: cap.int(1, 5) };
      // Speculation for the recurrent model too (its state put back where a draft is not all taken), drawn there as well.
      if (base.slidingWindowKv !== "window" && cap.next() < 0.5) o.speculative = { method: "ngram", numTokens: cap.int(1, 3), maxN: 3, minN: 1 };
      const system = Array.from({ length: rng.int(6, 14) }, () => rng.int(5, 290));
      const sessions = Array.from({ length: 3 }, () => [...system, ...Array.from({ length: rng.int(2, 9) }, () => rng.int(5, 290))]);
      const e = createEngine(backend, model, o);
      try {
        for (let turn = 0; turn < 2; turn++) {
          const rs = await Promise.all(sessions.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
          for (const [i, r] of rs.entries()) {
            assert.equal(r.finishReason, "length", `seed ${seed} ${JSON.stringify(o)}: ${r.error}`);
            assert.deepEqual(r.tokenIds, await lone(model, sessions[i]), `seed ${seed}, turn ${turn + 1}, session ${i}: ${JSON.stringify(o)}`);
            sessions[i] = [...sessions[i], ...r.tokenIds, rng.int(5, 290), rng.int(5, 290)];
          }
        }
      } finally {
        await e.stop();
      }
    }
  });
}

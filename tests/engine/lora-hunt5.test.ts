/**
 * Hunt 5 over multi-LoRA serving in the engine: batch invariance across adapters and the base model on
 * prompts that share a prefix, no stale prefix-cache KV when a name or a slot is reused with other
 * weights, adapters of different ranks in one batch, the slot limit, and speculative decoding (n-gram
 * and suffix drafts, the suffix cache shared across adapters) verified under the adapter's weights.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import type { LoraAdapter } from "../../src/model/lora.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { LoraAdapterError, MAX_LORA_ADAPTERS } from "../../src/engine/engine-adapters.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { EngineOptions } from "../../src/engine/engine-options.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { parseSpeculativeConfig } from "../../src/engine/ngram-draft.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { loraGgufBytes, mergeLora } from "../model/lora-files.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const dir = mkdtempSync(`${tmpdir()}/lora-hunt5-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const c = model.config;
type Target = { layer: number; target: "wq" | "wk" | "wv" | "wo" | "wUp" | "wDown" | "wGate" };
const every: Target[] = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wv", "wo", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();
async function adapter(name: string, seed: number, rank = 8, targets = every): Promise<LoraAdapter> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, loraGgufBytes(c, { seed, rank, alpha: 16, targets, magnitude: 0.5 }));
  return loadLoraAdapter(path, c);
}
const A = await adapter("a", 21);
const A2 = await adapter("a2", 22);
const R2 = await adapter("r2", 23, 2, every.filter((t) => t.target !== "wo"));

const encode = (text: string) => model.tokenizer.encode(text, { addBos: true });
const STORY = encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.");
const greedy = (extra: Partial<GenerateRequest> = {}): GenerateRequest => ({ prompt: STORY, maxTokens: 16, temperature: 0, ignoreEos: true, ...extra });

async function withEngine<T>(fn: (e: Engine) => Promise<T>, m = model, opts: Partial<EngineOptions> = {}): Promise<T> {
  const e = createEngine(createReferenceBackend(), m, { numBlocks: 192, blockSize: 4, ...opts });
  try {
    return await fn(e);
  } finally {
    await e.stop();
  }
}
const alone = (m = model, extra: Partial<GenerateRequest> = {}) => withEngine(async (e) => (await e.submit(greedy(extra)).result).tokenIds, m);

const base = await alone();
const mergedA = await alone(mergeLora(model, A));
const mergedA2 = await alone(mergeLora(model, A2));
const mergedR2 = await alone(mergeLora(model, R2));

test("adapters and the base model on one shared prompt, in one batch, each generate what they generate alone", async () => {
  assert.equal(new Set([base, mergedA, mergedA2, mergedR2].map((t) => t.join())).size, 4, "all four differ (the check is not vacuous)");
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    e.loadAdapter("r2", R2); // rank 2 beside rank 8
    // Same prompt, no sessions: each may wait on another's prefix, but none may use another's KV.
    const runs = [undefined, "a", "r2", "a", undefined, "r2"].map((adapter) => e.submit(greedy(adapter ? { adapter } : {})).result);
    const out = await Promise.all(runs);
    assert.deepEqual(out.map((r) => r.tokenIds), [base, mergedA, mergedR2, mergedA, base, mergedR2]);
    // And after the cache is warm, once more (each now hits its own namespace only).
    const again = await Promise.all(["r2", undefined, "a"].map((adapter) => e.submit(greedy(adapter ? { adapter } : {})).result));
    assert.deepEqual(again.map((r) => r.tokenIds), [mergedR2, base, mergedA]);
    for (const r of again) assert.ok(r.cachedTokens >= 32, `each reuses its own KV (cached ${r.cachedTokens})`);
  });
});

test("a name, and its slot, reloaded with other weights never hits the old weights' KV", async () => {
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    assert.deepEqual((await e.submit(greedy({ adapter: "a" })).result).tokenIds, mergedA);
    e.unloadAdapter("a");
    e.loadAdapter("a", A2); // same name, same slot 1, other weights
    const r = await e.submit(greedy({ adapter: "a" })).result;
    assert.equal(r.cachedTokens, 0, "the old weights' KV is not reused");
    assert.deepEqual(r.tokenIds, mergedA2);
    e.unloadAdapter("a");
    e.loadAdapter("other", A); // the first weights again, under another name: their KV is still right
    const back = await e.submit(greedy({ adapter: "other" })).result;
    assert.deepEqual(back.tokenIds, mergedA);
    assert.ok(back.cachedTokens >= 32, `the same weights share their KV (cached ${back.cachedTokens})`);
  });
});

test(`loading past ${MAX_LORA_ADAPTERS} adapters is refused naming the limit, and an unload frees a slot`, async () => {
  const tiny = await adapter("tiny", 30, 1, [{ layer: 0, target: "wq" }]);
  await withEngine(async (e) => {
    for (let i = 0; i < MAX_LORA_ADAPTERS; i++) e.loadAdapter(`t${i}`, tiny);
    assert.throws(() => e.loadAdapter("over", tiny), (err: Error) => err instanceof LoraAdapterError && !err.notFound && /64 LoRA adapters are already loaded/.test(err.message));
    e.unloadAdapter("t5");
    e.loadAdapter("a", A);
    assert.deepEqual((await e.submit(greedy({ adapter: "a" })).result).tokenIds, mergedA);
  });
});

for (const spec of ['{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}', '{"method": "suffix", "num_speculative_tokens": 6}']) {
  const method = (JSON.parse(spec) as { method: string }).method;
  test(`${method} drafts under an adapter are verified with its weights (outputs as without speculation)`, async () => {
    // A repetitive prompt, so drafts are proposed and some accepted.
    const loop = encode("the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat");
    const ask = (extra: Partial<GenerateRequest>) => greedy({ prompt: loop, maxTokens: 24, ...extra });
    const plain = await withEngine(async (e) => {
      e.loadAdapter("a", A);
      e.loadAdapter("a2", A2);
      return await Promise.all([ask({ adapter: "a2" }), ask({ adapter: "a" }), ask({})].map(async (r) => (await e.submit(r).result).tokenIds));
    });
    await withEngine(async (e) => {
      e.loadAdapter("a", A);
      e.loadAdapter("a2", A2);
      // One after another: the suffix cache holds a2's output when a's request drafts, then both's for the base.
      const seq: number[][] = [];
      for (const r of [ask({ adapter: "a2" }), ask({ adapter: "a" }), ask({})]) seq.push((await e.submit(r).result).tokenIds);
      assert.deepEqual(seq, plain);
      const batch = await Promise.all([ask({ adapter: "a" }), ask({}), ask({ adapter: "a2" })].map(async (r) => (await e.submit(r).result).tokenIds));
      assert.deepEqual(batch, [plain[1], plain[2], plain[0]]);
      assert.ok(e.stats().specDraftTokens > 0, "drafts were proposed (the check is not vacuous)");
    }, model, { speculative: parseSpeculativeConfig(spec) });
  });
}

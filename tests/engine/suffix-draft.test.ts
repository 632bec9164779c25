/**
 * Suffix decoding (src/engine/suffix-draft.ts, `--speculative-config '{"method": "suffix"}'`): drafts
 * from the longest recurring suffix in the request's own context and in earlier requests' outputs,
 * by frequency; and in the engine, the tokens of plain decoding in fewer steps once a repeated
 * request finds its answer in the cache.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { parseSpeculativeConfig, SpeculationConfigError } from "../../src/engine/ngram-draft.ts";
import { SuffixCache, type SuffixSpeculation } from "../../src/engine/suffix-draft.ts";
import { loadModel } from "../../src/model/load.ts";

const S = { maxDepth: 24, maxSpecFactor: 1, minTokenProb: 0.1 };

test("SuffixCache.draft() continues the longest suffix an earlier output shares, as long as the match at most (maxSpecFactor)", () => {
  const c = new SuffixCache(10);
  c.add([1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(c.draft([9, 9, 2, 3], S, 10), [4, 5], "a 2-token match drafts 2 tokens");
  assert.deepEqual(c.draft([9, 1, 2, 3], S, 10), [4, 5, 6], "a 3-token match drafts 3");
  assert.deepEqual(c.draft([9, 9, 2, 3], { ...S, maxSpecFactor: 4 }, 10), [4, 5, 6, 7], "up to the output's end");
  assert.deepEqual(c.draft([9, 9, 2, 3], { ...S, maxSpecFactor: 4 }, 1), [4], "and the limit");
  assert.deepEqual(c.draft([9, 9, 3, 2], S, 10), [], "a pair that never occurred");
  // The longest match decides between outputs that share the last pair.
  c.add([8, 8, 2, 3, 20, 21, 22]);
  assert.deepEqual(c.draft([0, 8, 8, 2, 3], S, 10), [20, 21, 22]);
  assert.deepEqual(c.draft([0, 1, 2, 3], S, 10), [4, 5, 6]);
});

test("SuffixCache.draft() follows the most frequent continuation while its path's frequency holds (minTokenProb)", () => {
  const c = new SuffixCache(10);
  for (const next of [4, 4, 6]) c.add([5, 2, 3, next, 7, 8]);
  const wide = { ...S, maxSpecFactor: 2 };
  assert.deepEqual(c.draft([5, 2, 3], wide, 10), [4, 7, 8]);
  assert.deepEqual(c.draft([5, 2, 3], { ...wide, minTokenProb: 0.7 }, 10), [], "2 of 3 is below 0.7");
  assert.deepEqual(c.draft([5, 2, 3], { ...wide, minTokenProb: 0.6 }, 10), [4, 7, 8]);
});

test("SuffixCache.draft() drafts from the request's own context without any cached output, and forgets the oldest output past maxRequests", () => {
  const none = new SuffixCache(0);
  none.add([1, 2, 3, 4]);
  assert.equal(none.size, 0);
  assert.deepEqual(none.draft([1, 2, 3, 4, 9, 1, 2], { ...S, maxSpecFactor: 2 }, 10), [3, 4, 9, 1], "copied from earlier in the context, up to its end");
  const one = new SuffixCache(1);
  one.add([1, 2, 3, 4]);
  one.add([7, 8, 9, 10]);
  assert.equal(one.size, 1);
  assert.deepEqual(one.draft([0, 1, 2], S, 10), [], "the first output is gone");
  assert.deepEqual(one.draft([0, 7, 8], S, 10), [9, 10]);
});

test("parseSpeculativeConfig() reads vLLM's suffix keys with its defaults and refuses the rest by name", () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "suffix"}'), { method: "suffix", numTokens: 24, maxDepth: 24, maxCachedRequests: 10000, maxSpecFactor: 1, minTokenProb: 0.1 });
  assert.deepEqual(
    parseSpeculativeConfig('{"method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 12, "suffix_decoding_max_cached_requests": 5, "suffix_decoding_max_spec_factor": 2.5, "suffix_decoding_min_token_prob": 0.3, "disable_by_batch_size": 4}'),
    { method: "suffix", numTokens: 8, maxDepth: 12, maxCachedRequests: 5, maxSpecFactor: 2.5, minTokenProb: 0.3, disableByBatchSize: 4 },
  );
  const refuses = (text: string, re: RegExp) => assert.throws(() => parseSpeculativeConfig(text), (e: Error) => e instanceof SpeculationConfigError && re.test(e.message));
  refuses('{"method": "suffix", "prompt_lookup_max": 3}', /Unknown speculative config key "prompt_lookup_max" for method "suffix"/);
  refuses('{"method": "suffix", "suffix_decoding_min_token_prob": 2}', /min_token_prob must be a number from 0 to 1, got 2/);
  refuses('{"method": "suffix", "suffix_decoding_max_tree_depth": 1}', /max_tree_depth must be an integer from 2 to 256, got 1/);
  refuses('{"method": "medusa"}', /"medusa" is not supported; "ngram" \(prompt lookup\), "suffix" \(suffix decoding\), "draft_model", "mtp" \(the model.s own multi-token-prediction block\), "eagle3" and "eagle" \(an EAGLE head\) are/);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time there was a little dog", { addBos: true });

/** Runs `reqs` one after another on one engine; returns each one's tokens and the draft tokens accepted in all. */
async function sequence(reqs: GenerateRequest[], speculative?: SuffixSpeculation) {
  let steps = 0;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, onStep: () => steps++, ...(speculative ? { speculative } : {}) });
  try {
    const tokens: number[][] = [];
    const accepted: number[] = [];
    for (const r of reqs) {
      tokens.push((await e.submit(r).result).tokenIds);
      accepted.push(e.stats().specAcceptedTokens - accepted.reduce((a, b) => a + b, 0));
    }
    return { tokens, accepted, steps };
  } finally {
    await e.stop();
  }
}

test("Engine with suffix speculation gives plain decoding's tokens, and a repeated request drafts its answer from the first one's output", async () => {
  const spec = parseSpeculativeConfig('{"method": "suffix", "suffix_decoding_max_spec_factor": 4}') as SuffixSpeculation;
  const greedy: GenerateRequest = { prompt, maxTokens: 60, temperature: 0, ignoreEos: true };
  const seeded: GenerateRequest = { ...greedy, temperature: 0.8, seed: 5 };
  const reqs = [greedy, greedy, seeded, seeded];
  const plain = await sequence(reqs);
  const spec1 = await sequence(reqs, spec);
  assert.deepEqual(spec1.tokens, plain.tokens, "the same tokens, greedy and seeded");
  assert.ok(spec1.accepted[1] >= 40, `the repeat found its answer cached: ${spec1.accepted[1]} of 59 accepted (first run: ${spec1.accepted[0]})`);
  assert.ok(spec1.accepted[1] > 2 * spec1.accepted[0]);
  assert.ok(spec1.steps < plain.steps, `${spec1.steps} steps against ${plain.steps}`);
});

test("Engine with suffix speculation keeps salted requests out of the shared outputs, both ways", async () => {
  const spec = parseSpeculativeConfig('{"method": "suffix", "suffix_decoding_max_spec_factor": 4}') as SuffixSpeculation;
  const greedy: GenerateRequest = { prompt, maxTokens: 60, temperature: 0, ignoreEos: true };
  const salted: GenerateRequest = { ...greedy, cacheSalt: "tenant-b" };
  // A salted repeat of an unsalted answer drafts only from its own context: no more accepted than the first run.
  const after = await sequence([greedy, salted], spec);
  assert.deepEqual(after.tokens[1], after.tokens[0]);
  assert.ok(after.accepted[1] <= after.accepted[0], `salted repeat accepted ${after.accepted[1]}, first ${after.accepted[0]}`);
  // And a salted answer is not kept for others: the unsalted repeat after it gains nothing either.
  const before = await sequence([salted, greedy], spec);
  assert.ok(before.accepted[1] <= before.accepted[0], `unsalted after salted accepted ${before.accepted[1]}, first ${before.accepted[0]}`);
  // The control: unsalted twice, the repeat drafts its answer (the test above, at this engine's settings).
  const plain = await sequence([greedy, greedy], spec);
  assert.ok(plain.accepted[1] >= 40 && plain.accepted[1] > 2 * plain.accepted[0]);
});

/**
 * `--speculative-config` as vLLM users write it: the n-gram method under vLLM's older spelling
 * (`"model": "[ngram]"`), and suffix decoding with a tree deeper than this engine's longest draft.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { parseSpeculativeConfig, SpeculationConfigError } from "../../src/engine/ngram-draft.ts";

test("parseSpeculativeConfig() reads vLLM's \"[ngram]\" model spelling as the n-gram method", () => {
  const ngram = { method: "ngram", numTokens: 3, maxN: 4, minN: 4 };
  // vLLM (config/speculative.py): a method-less `model` of "ngram" or "[ngram]" is the n-gram method, not a draft model file.
  assert.deepEqual(parseSpeculativeConfig('{"model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'), ngram);
  assert.deepEqual(parseSpeculativeConfig('{"model": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'), ngram);
  assert.deepEqual(parseSpeculativeConfig('{"method": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_min": 4}'), ngram);
  assert.deepEqual(parseSpeculativeConfig('{"method": "ngram", "model": "[ngram]", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'), ngram);
  assert.throws(
    () => parseSpeculativeConfig('{"method": "ngram", "model": "draft.gguf", "num_speculative_tokens": 3}'),
    (e: Error) => e instanceof SpeculationConfigError && /Unknown speculative config key "model" for method "ngram"/.test(e.message),
  );
  assert.equal(parseSpeculativeConfig('{"model": "draft.gguf", "num_speculative_tokens": 3}').method, "draft_model");
});

test("parseSpeculativeConfig() takes a suffix tree deeper than the longest draft without num_speculative_tokens", () => {
  const deep = parseSpeculativeConfig('{"method": "suffix", "suffix_decoding_max_tree_depth": 100}');
  assert.equal(deep.method, "suffix");
  assert.ok(deep.method === "suffix" && deep.maxDepth === 100);
  assert.ok(deep.numTokens >= 1 && deep.numTokens <= 100, `drafts up to ${deep.numTokens} tokens`);
  // Given explicitly, an out-of-range draft length is still refused by name.
  assert.throws(
    () => parseSpeculativeConfig('{"method": "suffix", "suffix_decoding_max_tree_depth": 100, "num_speculative_tokens": 100}'),
    (e: Error) => e instanceof SpeculationConfigError && /num_speculative_tokens must be an integer from 1 to \d+, got 100/.test(e.message),
  );
});

/** Sampling parameters the engine refuses or honours, checked against vLLM's SamplingParams rules. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import { checkSamplingRequest } from "../../src/engine/logit-adjust.ts";

const req = (extra: Partial<GenerateRequest>): GenerateRequest => ({ prompt: [1, 2, 3], ...extra });

test("checkSamplingRequest() refuses a min_tokens above max_tokens and allows it equal or without max_tokens", () => {
  // vLLM: "min_tokens must be less than or equal to max_tokens" (SamplingParams._verify_args).
  assert.throws(() => checkSamplingRequest(req({ maxTokens: 4, minTokens: 5 }), 100), (e: unknown) => e instanceof RequestParamError && /min_tokens/.test(e.message) && /\b5\b/.test(e.message) && /\b4\b/.test(e.message));
  checkSamplingRequest(req({ maxTokens: 4, minTokens: 4 }), 100);
  checkSamplingRequest(req({ minTokens: 50 }), 100);
  checkSamplingRequest(req({ maxTokens: 1, minTokens: 0 }), 100);
});

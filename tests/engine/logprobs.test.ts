/** Log probabilities of generated tokens: the host computation, and what the engine streams and returns. */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import { type TokenLogprob, tokenLogprob } from "../../src/engine/logprobs.ts";
import { loadModel } from "../../src/model/load.ts";

test("tokenLogprob() matches a full sort and a softmax in f64, ties to the lower id", () => {
  let s = 12345;
  const rand = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (const vocab of [1, 7, 300]) {
    const logits = Float32Array.from({ length: vocab }, () => Math.round(rand() * 40 - 20) / 4); // many ties
    const z = Math.log(logits.reduce((a, l) => a + Math.exp(l), 0));
    const order = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b);
    for (const top of [0, 1, 5, 20]) {
      const got = tokenLogprob(logits, vocab - 1, top);
      assert.ok(Math.abs(got.logprob - (logits[vocab - 1] - z)) < 1e-9);
      assert.deepEqual(got.top.map((t) => t[0]), order.slice(0, top));
      got.top.forEach(([id, lp]) => assert.ok(Math.abs(lp - (logits[id] - z)) < 1e-9));
    }
  }
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });

async function generate(extra: Partial<GenerateRequest>): Promise<{ ids: number[]; streamed: TokenLogprob[]; logprobs?: TokenLogprob[] }> {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const h = e.submit({ prompt, maxTokens: 6, temperature: 0, ignoreEos: true, ...extra });
    const streamed: TokenLogprob[] = [];
    for await (const d of h.stream) streamed.push(...(d.logprobs ?? []));
    const r = await h.result;
    return { ids: r.tokenIds, streamed, logprobs: r.logprobs };
  } finally {
    await e.stop();
  }
}

test("tokenLogprob() ranks a token by how many are likelier, ties sharing the better rank", () => {
  const logits = Float32Array.from([0.5, 2, -1, 2, 0.5, 3]);
  assert.deepEqual([5, 1, 3, 0, 4, 2].map((id) => tokenLogprob(logits, id, 0).rank), [1, 2, 2, 4, 4, 6]);
});

test("Engine returns and streams each token's log probability with its top alternatives", async () => {
  const plain = await generate({});
  assert.equal(plain.logprobs, undefined, "none unless asked");
  const r = await generate({ logprobs: 3 });
  assert.deepEqual(r.ids, plain.ids, "asking changes nothing generated");
  assert.equal(r.logprobs!.length, r.ids.length);
  assert.deepEqual(r.streamed, r.logprobs);
  r.logprobs!.forEach((lp, i) => {
    assert.equal(lp.id, r.ids[i]);
    assert.equal(lp.top.length, 3);
    assert.deepEqual(lp.top[0], [lp.id, lp.logprob], "greedy picks the most likely token");
    assert.ok(lp.logprob <= 0 && lp.top[1][1] <= lp.top[0][1] && lp.top[2][1] <= lp.top[1][1]);
  });
});

test("Engine reports log probabilities of the raw logits, before logit_bias", async () => {
  const { ids } = await generate({});
  const banned = await generate({ logprobs: 1, logitBias: [[ids[0], -100]] });
  const first = banned.logprobs![0];
  assert.notEqual(first.id, ids[0]);
  assert.equal(first.top[0][0], ids[0], "the banned token is still the most likely under the model");
  assert.ok(first.logprob < first.top[0][1]);
});

test("Engine refuses a top log-probability count outside 0..20", () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 8 });
  for (const logprobs of [21, -1, 1.5]) {
    assert.throws(() => e.submit({ prompt, logprobs }), (err: unknown) => err instanceof RequestParamError && /from 0 to 20, got/.test(err.message));
  }
  void e.stop();
});

/**
 * `serve --speculative-config` through the real openai client: n-gram drafts and a draft model's change
 * no answer (greedy here, so the same text as without them), are counted in /metrics under vLLM's
 * spec_decode names, and requests asking log probabilities get the same ones, top alternatives
 * included; in one engine, in-process workers and worker threads (which load the draft model themselves).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ClusterTransport } from "../../src/serve/serve-cluster.ts";
import { startServer } from "../../src/serve/server.ts";
import type { Speculation } from "../../src/engine/ngram-draft.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const TALE = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park.";
const PROMPT = `${TALE} ${TALE} ${TALE.slice(0, 40)}`;

const NGRAM: Speculation = { method: "ngram", numTokens: 4, maxN: 3, minN: 2 };
// The model as its own draft: every draft token is the model's, so all are accepted.
const DRAFT_MODEL: Speculation = { method: "draft_model", model: modelPath, numTokens: 3 };

async function answers(speculative: Speculation | undefined, workers = 1, transport?: ClusterTransport) {
  const s = await startServer({
    modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, ...(workers > 1 ? { workers, planner: "none" as const } : {}),
    ...(speculative ? { speculative } : {}), ...(transport ? { transport } : {}),
  });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const plain = await client.completions.create({ model: "stories260K", prompt: PROMPT, max_tokens: 40, temperature: 0 });
    const chunks: string[] = [];
    for await (const c of await client.completions.create({ model: "stories260K", prompt: PROMPT, max_tokens: 40, temperature: 0, stream: true })) chunks.push(c.choices[0]?.text ?? "");
    const scored = await client.completions.create({ model: "stories260K", prompt: PROMPT, max_tokens: 10, temperature: 0, logprobs: 1 });
    const metrics = await (await fetch(`${s.url}/metrics`)).text();
    const count = (name: string) => Number(new RegExp(`vllm:spec_decode_${name}_total\\{[^}]*\\} (\\d+)`).exec(metrics)?.[1]);
    const perPos = [...metrics.matchAll(/vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"\} (\d+)/g)].map((m) => [Number(m[1]), Number(m[2])]);
    return { text: plain.choices[0].text, streamed: chunks.join(""), scored, drafts: count("num_drafts"), drafted: count("num_draft_tokens"), accepted: count("num_accepted_tokens"), perPos };
  } finally {
    await s.shutdown();
  }
}

const off1 = await answers(undefined);
const cases: [Speculation, number, ClusterTransport?][] = [[NGRAM, 1], [NGRAM, 2], [DRAFT_MODEL, 1], [DRAFT_MODEL, 2, "threads"]];
for (const [speculative, workers, transport] of cases) test(`startServer({ speculative: ${speculative.method}${workers > 1 ? `, workers: 2, ${transport ?? "in-process"}` : ""} }) answers as without it and counts drafts in /metrics`, async () => {
  const [off, on] = [workers > 1 ? await answers(undefined, workers, transport) : off1, await answers(speculative, workers, transport)];
  assert.equal(on.text, off.text);
  assert.equal(on.streamed, off.text, "the stream carries the same text");
  assert.equal(on.scored.choices[0].text, off.scored.choices[0].text);
  assert.deepEqual(on.scored.choices[0].logprobs, off.scored.choices[0].logprobs);
  assert.equal(on.scored.choices[0].logprobs?.token_logprobs?.length, 10);
  assert.deepEqual([off.drafts, off.drafted, off.accepted], [0, 0, 0]);
  assert.ok(on.drafts > 0 && on.accepted > 0 && on.accepted <= on.drafted, `drafts ${on.drafts}, draft tokens ${on.drafted}, accepted ${on.accepted}`);
  if (speculative.method === "draft_model") assert.equal(on.accepted, on.drafted, "the model's own drafts are all accepted");
  // Per position: in order from 0, summing to the accepted tokens, never more at a later position.
  assert.deepEqual(on.perPos.map(([p]) => p), on.perPos.map((_, i) => i));
  assert.equal(on.perPos.reduce((a, [, n]) => a + n, 0), on.accepted);
  on.perPos.forEach(([, n], i) => assert.ok(n <= (i === 0 ? on.drafts : on.perPos[i - 1][1]), `position ${i}: ${n}`));
  assert.deepEqual(off.perPos, []);
});

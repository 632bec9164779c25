/**
 * A Qwen3.5 (random weights, Gated DeltaNet layers) served over HTTP to the real openai client: a
 * conversation's second turn resumes from the state checkpoint the first left (usage's
 * cached_tokens), streamed and whole alike, on the reference and WebGPU backends; two workers serve
 * its sessions as one engine does, under the online planner and with every prompt handed from a
 * prefill worker to a decode worker (its state checkpoint moved with its blocks), each next turn
 * resuming from a checkpoint; speculative decoding answers as a server without it, one engine and a
 * prefill/decode pair alike.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 321,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/qwen35-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const modelPath = await writeTestGguf(dir, "qwen35", SPEC);
const probe = await poisonedWebGpu("the Qwen3.5 WebGPU serving test");
probe.gpu?.destroy();
const TURN1 = "the agent reads the file, then it calls a tool and waits for the result of that tool call";

for (const backend of ["reference", "webgpu"] as const) {
  test(`serve on ${backend}: a Qwen3.5's second turn resumes from the first turn's state checkpoint (cached_tokens), streamed and whole alike`, async () => {
    const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend, kvBlocks: 64, maxNumSeqs: 4 });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const first = await client.completions.create({ model: "qwen35", prompt: TURN1, max_tokens: 8, temperature: 0 });
      assert.equal(first.usage!.prompt_tokens_details?.cached_tokens ?? 0, 0);
      const turn2 = `${TURN1}${first.choices[0].text} and the tool says: done.`;
      const second = await client.completions.create({ model: "qwen35", prompt: turn2, max_tokens: 8, temperature: 0 });
      const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
      assert.ok(cached >= 16 && cached % 16 === 0 && cached <= first.usage!.prompt_tokens, `cached ${cached} of the first prompt's ${first.usage!.prompt_tokens}`);
      // The same prompt streamed, resuming from its own checkpoint now, gives the same greedy text.
      const stream = await client.completions.create({ model: "qwen35", prompt: turn2, max_tokens: 8, temperature: 0, stream: true });
      let text = "";
      for await (const c of stream) text += c.choices[0]?.text ?? "";
      assert.equal(text, second.choices[0].text);
    } finally {
      await s.shutdown();
    }
  }, { ignore: backend === "webgpu" && probe.skip });
}

const CLUSTERS: { name: string; o: Partial<Parameters<typeof startServer>[0]>; planner: string }[] = [
  { name: "--workers 2 (the online planner, its default)", o: { workers: 2 }, planner: "online" },
  { name: "--workers 2 --roles prefill,decode --planner none (every prompt handed off)", o: { workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 }, planner: "none" },
];

for (const c of CLUSTERS) {
  test(`serve with ${c.name}: a Qwen3.5's sessions answer as one engine does, each next turn from a state checkpoint`, async () => {
    const sessions = ["alpha", "beta", "gamma"];
    const opening = (k: string) => `${TURN1} (${k} session)`;
    /** Each session's two turns: the answers and the second turn's cached tokens. */
    const run = async (o: Partial<Parameters<typeof startServer>[0]>) => {
      const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 4, ...o });
      try {
        assert.equal(s.planner, o.workers ? c.planner : undefined);
        const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
        const turns = await Promise.all(sessions.map(async (key) => {
          const ask = (prompt: string) => client.completions.create({ model: "qwen35", prompt, max_tokens: 8, temperature: 0, prompt_cache_key: key } as OpenAI.CompletionCreateParamsNonStreaming);
          const first = await ask(opening(key));
          const second = await ask(`${opening(key)}${first.choices[0].text} and the tool says: done.`);
          return { texts: [first.choices[0].text, second.choices[0].text], cached: second.usage!.prompt_tokens_details?.cached_tokens ?? 0 };
        }));
        const metrics = await (await fetch(`${s.url}/metrics`)).text();
        const handoffs = Number(/^evolving:prefill_handoffs_total\{[^}]*\} (\d+)$/m.exec(metrics)?.[1] ?? 0);
        return { turns, workers: s.serving.workerStatuses().length, handoffs };
      } finally {
        await s.shutdown();
      }
    };
    const alone = await run({});
    const cluster = await run(c.o);
    assert.deepEqual(cluster.turns.map((r) => r.texts), alone.turns.map((r) => r.texts));
    assert.equal(cluster.workers, 2);
    assert.equal(alone.workers, 1);
    if (c.o.roles) assert.equal(cluster.handoffs, 6, "every prompt was prefilled on one worker and decoded on the other");
    for (const [i, r] of cluster.turns.entries()) assert.ok(r.cached >= 16, `session ${sessions[i]}: its second turn resumed from a checkpoint (cached ${r.cached})`);
  });
}

test("serve with speculative decoding for a Qwen3.5, one engine and a prefill/decode pair: the openai client gets the answers of a server without it, drafts taken and not", async () => {
  const base = { modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 4 } as const;
  const prompts = [TURN1, "the agent writes the patch and runs the tests"];
  // Greedy twice, then seeded: suffix drafts in the second round (the first's answers, taken), n-gram drafts throughout (mostly not).
  const rounds = [{ temperature: 0 }, { temperature: 0 }, { temperature: 0.9, seed: 5 }];
  const run = async (o: Partial<Parameters<typeof startServer>[0]>) => {
    const s = await startServer({ ...base, ...o });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const texts: string[] = [];
      for (const r of rounds) {
        const answers = await Promise.all(prompts.map((prompt) => client.completions.create({ model: "qwen35", prompt, max_tokens: 12, ...r })));
        texts.push(...answers.map((a) => a.choices[0].text));
      }
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      const count = (name: string) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)$`, "m").exec(metrics)?.[1] ?? NaN);
      return { texts, drafted: count("vllm:spec_decode_num_draft_tokens_total"), taken: count("vllm:spec_decode_num_accepted_tokens_total"), rollbacks: count("evolving:spec_decode_state_rollbacks_total") };
    } finally {
      await s.shutdown();
    }
  };
  const plain = await run({});
  const suffix = { method: "suffix", numTokens: 4, maxDepth: 24, maxCachedRequests: 100, maxSpecFactor: 4, minTokenProb: 0.1 } as const;
  const ngram = { method: "ngram", numTokens: 3, maxN: 2, minN: 1 } as const;
  for (const o of [{}, { workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 }] as Partial<Parameters<typeof startServer>[0]>[]) {
    let [taken, drafted, rollbacks] = [0, 0, 0];
    for (const speculative of [suffix, ngram]) {
      const spec = await run({ ...o, speculative });
      assert.deepEqual(spec.texts, plain.texts, `${JSON.stringify(o)} ${speculative.method}`);
      taken += spec.taken;
      drafted += spec.drafted;
      rollbacks += spec.rollbacks;
    }
    assert.ok(taken > 0 && taken < drafted, `${JSON.stringify(o)}: drafts taken and not (${taken} of ${drafted})`);
    assert.ok(rollbacks > 0, "/metrics counts the states put back");
  }
});

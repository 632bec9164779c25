/**
 * A Qwen3.5 (random weights, Gated DeltaNet layers) served over HTTP to the real openai client: a
 * conversation's second turn resumes from the state checkpoint the first left (usage's
 * cached_tokens), streamed and whole alike, on the reference and WebGPU backends; two workers serve
 * its sessions as one engine does, each session's next turn on the worker holding its checkpoint;
 * what the model cannot do (move a sequence between workers, speculate) is refused at start with its reason.
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

test("serve with --workers 2: a Qwen3.5's sessions keep to the worker holding their checkpoints, and answer as one engine does", async () => {
  const sessions = ["alpha", "beta", "gamma"];
  const opening = (k: string) => `${TURN1} (${k} session)`;
  /** Each session's two turns: the answers and the second turn's cached tokens. */
  const run = async (workers: number) => {
    const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 4, workers });
    try {
      assert.equal(s.planner, workers > 1 ? "none" : undefined, "a Qwen3.5's cluster runs no planner");
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const turns = await Promise.all(sessions.map(async (key) => {
        const ask = (prompt: string) => client.completions.create({ model: "qwen35", prompt, max_tokens: 8, temperature: 0, prompt_cache_key: key } as OpenAI.CompletionCreateParamsNonStreaming);
        const first = await ask(opening(key));
        const second = await ask(`${opening(key)}${first.choices[0].text} and the tool says: done.`);
        return { texts: [first.choices[0].text, second.choices[0].text], cached: second.usage!.prompt_tokens_details?.cached_tokens ?? 0 };
      }));
      // Sessions each worker's retention tracks: the three spread over both workers.
      const perWorker = s.serving.workerStatuses().map((w) => Object.values(w.sessions ?? {}).reduce((a, b) => a + b, 0));
      return { turns, perWorker };
    } finally {
      await s.shutdown();
    }
  };
  const alone = await run(1);
  const cluster = await run(2);
  assert.deepEqual(cluster.turns.map((r) => r.texts), alone.turns.map((r) => r.texts));
  assert.equal(cluster.perWorker.length, 2);
  assert.ok(cluster.perWorker.every((n) => n > 0), `sessions per worker: ${cluster.perWorker}`);
  for (const [i, r] of cluster.turns.entries()) assert.ok(r.cached >= 16, `session ${sessions[i]}: its second turn resumed from its checkpoint (cached ${r.cached})`);
});

test("startServer() refuses what would move a Qwen3.5's sequences between workers, and speculative decoding, naming why", async () => {
  const base = { modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 } as const;
  const why = /a model with Gated DeltaNet layers \(qwen35\) keeps each sequence's recurrent state on the worker running it/;
  const refused: [Parameters<typeof startServer>[0], RegExp][] = [
    [{ ...base, workers: 2, planner: "online" }, /^--planner online moves sequences between prefill and decode workers, and .*: serve it with --planner none/],
    [{ ...base, workers: 2, planner: "sla" }, /^--planner sla moves sequences/],
    [{ ...base, workers: 2, roles: ["prefill", "decode"] }, /^--roles prefill,decode gives a worker the "prefill" role/],
    [{ ...base, workers: 2, peerTransfer: "host" }, /^--peer-transfer host pulls cached prefixes from other workers without their recurrent state/],
    [{ ...base, workers: 2, itlAdmissionTargetS: 0.05 }, /^--itl-admission-ms is the online planner's/],
  ];
  for (const [o, pattern] of refused) {
    await assert.rejects(startServer(o), (e: unknown) => e instanceof RangeError && pattern.test(e.message) && why.test(e.message), String(o.planner ?? o.roles ?? o.peerTransfer));
  }
  await assert.rejects(
    startServer({ ...base, speculative: { method: "ngram", numTokens: 2, maxN: 3, minN: 1 } }),
    /Speculative decoding is not supported for models with Gated DeltaNet layers/,
  );
});

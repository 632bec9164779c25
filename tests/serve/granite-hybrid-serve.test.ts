/**
 * A Granite 4.0-H and a Nemotron-H (random weights, Mamba-2 layers around a NoPE attention layer;
 * Nemotron-H's with a feed-forward layer of its own and B and C in groups) served over HTTP to
 * the real openai client: an agent's second turn resumes from the first turn's state checkpoint, on
 * one engine and on two workers where every prompt is prefilled on one and handed with its blocks and
 * scan state to the other, which answers as one engine does.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import OpenAI from "openai";
import { test } from "../harness.ts";
import { startServer } from "../../src/serve/server.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const SPECS: [string, ModelFileSpec][] = [
  ["Granite 4.0-H", {
    architecture: "granitehybrid", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 331,
    mamba2: { attention: [2], heads: 4, stateSize: 16, conv: 4 }, granite: { embedding: 2, attention: 0.2, residual: 0.5, logit: 3 },
  }],
  ["Nemotron-H", {
    architecture: "nemotron_h", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 332,
    nemotronH: { pattern: "MM*-M", heads: 4, headDim: 16, stateSize: 16, groups: 2, conv: 4 },
  }],
];
const dir = mkdtempSync(`${tmpdir()}/mamba2-serve-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const TURN1 = "the agent lists the directory, then it calls a tool and waits for what the tool returns";

for (const [name, spec] of SPECS) {
  test(`serve a ${name}: the second turn resumes from a scan-state checkpoint, on one engine and handed from a prefill worker to a decode worker alike`, async () => {
    const modelPath = await writeTestGguf(dir, spec.architecture, spec);
    const run = async (o: Partial<Parameters<typeof startServer>[0]>) => {
      const s = await startServer({ modelPath, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 4, ...o });
      try {
        const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
        const ask = (prompt: string) =>
          client.completions.create({ model: s.modelName, prompt, max_tokens: 8, temperature: 0, prompt_cache_key: "agent" } as OpenAI.CompletionCreateParamsNonStreaming);
        const first = await ask(TURN1);
        const second = await ask(`${TURN1}${first.choices[0].text} and the tool says: three files.`);
        const metrics = await (await fetch(`${s.url}/metrics`)).text();
        const handoffs = Number(/^evolving:prefill_handoffs_total\{[^}]*\} (\d+)$/m.exec(metrics)?.[1] ?? 0);
        return { texts: [first.choices[0].text, second.choices[0].text], cached: second.usage!.prompt_tokens_details?.cached_tokens ?? 0, handoffs };
      } finally {
        await s.shutdown();
      }
    };
    const alone = await run({});
    assert.ok(alone.cached >= 16, `the second turn resumed from a checkpoint (cached ${alone.cached})`);
    const split = await run({ workers: 2, roles: ["prefill", "decode"], planner: "none", router: "kv-aware", localPrefillTokens: 0 });
    assert.deepEqual(split.texts, alone.texts);
    assert.equal(split.handoffs, 2);
    assert.ok(split.cached >= 16, `handed off, the second turn still resumed from a checkpoint (cached ${split.cached})`);
  });
}

import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const PROMPTS = ["Once upon a time", "Tom had a red ball", "The sun was hot and", "Lily saw a big dog"];

async function complete(url: string, prompt: string): Promise<string> {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "stories260K", prompt, max_tokens: 40, temperature: 0, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  const body = (await r.json()) as { choices: { text: string }[] };
  return body.choices[0].text;
}

function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`));
  assert.ok(line, `metric ${name} is exported`);
  return Number(line.split(" ").pop());
}

test("server --preemption swap: a tiny KV pool swaps, outputs match an unpressured server, /metrics counts it", async () => {
  const texts: string[][] = [];
  for (const o of [{ kvBlocks: 64 }, { kvBlocks: 7, preemption: "swap" as const, swapSpaceBlocks: 16 }]) {
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", maxBatchTokens: 64, ...o });
    try {
      texts.push(await Promise.all(PROMPTS.map((p) => complete(s.url, p))));
      const m = await (await fetch(`${s.url}/metrics`)).text();
      if (o.kvBlocks === 7) {
        assert.ok(metric(m, "vllm:num_preemptions_total") > 0);
        assert.equal(metric(m, "vllm:num_preemptions_swapped_total"), metric(m, "vllm:num_preemptions_total"));
        assert.ok(metric(m, "vllm:kv_swapped_out_blocks_total") > 0);
        assert.equal(metric(m, "vllm:kv_swapped_in_blocks_total"), metric(m, "vllm:kv_swapped_out_blocks_total"));
        assert.equal(metric(m, "vllm:num_recomputed_tokens_total"), 0);
        assert.equal(metric(m, "vllm:cpu_cache_usage_perc"), 0);
        assert.equal(metric(m, "vllm:kv_cache_blocks_used"), 0);
      }
    } finally {
      await s.shutdown();
    }
  }
  assert.deepEqual(texts[1], texts[0]);
});

/**
 * The path users run (`deno task serve` on WebGPU, multi-step decoding on by default) through the
 * real server and the `openai` client: streamed and whole completions with penalties, a logit bias,
 * log probabilities and stop strings give at the default scheduler steps (4, groups running ahead)
 * what one step a read gives, and the stream adds up to the whole answer; /metrics counts the
 * forwards run ahead.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import type { RunningServer } from "../../src/serve/server-options.ts";
import { projectRoot, test } from "../harness.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const probe = await poisonedWebGpu("the WebGPU serving test");
probe.gpu?.destroy();

const ASKS: Partial<OpenAI.CompletionCreateParamsNonStreaming>[] = [
  { temperature: 0.8, seed: 3, max_tokens: 48 },
  { temperature: 0.7, seed: 5, max_tokens: 40, frequency_penalty: 0.5, presence_penalty: 0.25, logprobs: 2 },
  { temperature: 0, max_tokens: 40, stop: [" park"], logit_bias: { "426": -100 } },
  { temperature: 0.9, seed: 8, max_tokens: 40, repetition_penalty: 1.25 } as Partial<OpenAI.CompletionCreateParamsNonStreaming>,
];

async function answers(s: RunningServer): Promise<{ whole: string[]; streamed: string[]; logprobs: unknown[] }> {
  const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
  const base = { model: "stories260K", prompt: "Once upon a time, there was a little girl named Lily." };
  // Together, so that the steps hold several requests.
  const whole = await Promise.all(ASKS.map((a) => client.completions.create({ ...base, ...a, stream: false } as OpenAI.CompletionCreateParamsNonStreaming)));
  const streamed = await Promise.all(ASKS.map(async (a) => {
    let text = "";
    for await (const chunk of await client.completions.create({ ...base, ...a, stream: true } as OpenAI.CompletionCreateParamsStreaming)) text += chunk.choices[0]?.text ?? "";
    return text;
  }));
  return { whole: whole.map((c) => c.choices[0].text), streamed, logprobs: whole.map((c) => c.choices[0].logprobs?.token_logprobs ?? null) };
}

test("serve on WebGPU gives at its default scheduler steps what one step a read gives, streamed and whole", async () => {
  const run = async (schedulerSteps?: number) => {
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "webgpu", kvBlocks: 64, ...(schedulerSteps ? { schedulerSteps } : {}) });
    try {
      const got = await answers(s);
      const scraped = /evolving:steps_run_ahead_total\{model_name="stories260K"\} (\d+)/.exec(await (await fetch(`${s.url}/metrics`)).text());
      return { ...got, ahead: Number(scraped?.[1]), steps: s.engine.schedulerSteps };
    } finally {
      await s.shutdown();
    }
  };
  const grouped = await run();
  const single = await run(1);
  assert.equal(grouped.steps, 4, "WebGPU's default");
  assert.ok(grouped.ahead > 0, "steps ran ahead (evolving:steps_run_ahead_total)");
  assert.equal(single.ahead, 0);
  assert.deepEqual(grouped.whole, single.whole);
  assert.deepEqual(grouped.logprobs, single.logprobs);
  assert.deepEqual(grouped.streamed, grouped.whole, "the stream adds up to the whole answer");
  assert.ok(grouped.whole.every((t) => t.length > 0));
  assert.ok(!grouped.whole[2].includes(" park"), grouped.whole[2]);
}, { ignore: probe.skip });

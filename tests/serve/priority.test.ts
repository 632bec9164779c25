/**
 * vLLM's request `priority` through the real server and the `openai` client: an urgent request gets
 * the only running slot from a less urgent one (which is recomputed and ends as it would have), and
 * `--scheduling-policy fcfs` refuses priorities as vLLM's default does.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

type Completion = OpenAI.CompletionCreateParamsNonStreaming & { priority?: number; ignore_eos?: boolean };
type Chat = OpenAI.ChatCompletionCreateParamsNonStreaming & { priority?: number };

function metric(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`));
  assert.ok(line, `metric ${name} is exported`);
  return Number(line.split(" ").pop());
}

test("completions with priority: an urgent request preempts the one running slot, and the preempted one ends as it would have", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 1, maxBatchTokens: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const slow = { model: "stories260K", prompt: "Once upon a time", max_tokens: 120, temperature: 0, ignore_eos: true, priority: 3 };
    const alone = await client.completions.create(slow as Completion);
    // The same request, streamed; once its first tokens are out it holds the only slot.
    const events: string[] = [];
    const stream = await client.completions.create({ ...slow, stream: true } as OpenAI.CompletionCreateParamsStreaming);
    let slowText = "";
    let urgent: Promise<void> | undefined;
    for await (const chunk of stream) {
      slowText += chunk.choices[0]?.text ?? "";
      urgent ??= client.completions.create({ model: "stories260K", prompt: "Tom had a red ball", max_tokens: 8, temperature: 0, priority: -1 } as Completion)
        .then((r) => {
          assert.ok(r.choices[0].text.length > 0);
          events.push("urgent done");
        });
    }
    events.push("slow done");
    await urgent;
    assert.deepEqual(events, ["urgent done", "slow done"], "the urgent request did not wait for the running one");
    assert.equal(slowText, alone.choices[0].text, "recomputed after its preemption, the output is unchanged");
    const m = await (await fetch(`${s.url}/metrics`)).text();
    assert.ok(metric(m, "evolving:num_priority_preemptions_total") >= 1);
    assert.equal(metric(m, "evolving:num_priority_preemptions_total"), metric(m, "vllm:num_preemptions_total"), "every preemption was for priority: the pool had room");
    // A priority that is not a whole number is a 400 naming it.
    const err = await client.completions.create({ model: "stories260K", prompt: "Hi", max_tokens: 1, priority: 1.5 } as Completion).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "priority", String(err));
  } finally {
    await s.shutdown();
  }
});

test("--scheduling-policy fcfs refuses any priority but 0, on chat completions and the Responses API", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, schedulingPolicy: "fcfs" });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const chat = (priority: number) => client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, priority } as Chat);
    assert.equal((await chat(0)).choices.length, 1);
    const err = await chat(2).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "priority", String(err));
    assert.match(String(err), /--scheduling-policy priority.*priority = 2/);
    const res = await client.responses.create({ model: "stories260K", input: "Hi", max_output_tokens: 2, priority: -1 } as OpenAI.Responses.ResponseCreateParamsNonStreaming)
      .then(() => null, (e: unknown) => e);
    assert.ok(res instanceof OpenAI.APIError && res.status === 400 && res.param === "priority", String(res));
  } finally {
    await s.shutdown();
  }
});

test("service_tier \"priority\" and \"flex\" schedule as priorities -1 and 1, and come back in the response (openai client)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, maxNumSeqs: 1, maxBatchTokens: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    // A flex request holds the one slot; a priority one takes it.
    const stream = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 120, temperature: 0, ignore_eos: true, stream: true, service_tier: "flex" } as OpenAI.CompletionCreateParamsStreaming & { ignore_eos: boolean });
    let urgent: Promise<OpenAI.Chat.ChatCompletion> | undefined;
    let tier: unknown;
    for await (const chunk of stream) {
      tier ??= (chunk as unknown as { service_tier?: string }).service_tier;
      urgent ??= client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, service_tier: "priority" });
    }
    assert.equal(tier, "flex");
    assert.equal((await urgent!).service_tier, "priority");
    const m = await (await fetch(`${s.url}/metrics`)).text();
    assert.ok(metric(m, "evolving:num_priority_preemptions_total") >= 1, "the priority tier preempted the flex one");
    const response = await client.responses.create({ model: "stories260K", input: "Hi", max_output_tokens: 2, service_tier: "priority" });
    assert.equal(response.service_tier, "priority");
    const err = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 1, service_tier: "turbo" } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && err.param === "service_tier", String(err));
  } finally {
    await s.shutdown();
  }
  // Without priority scheduling every tier is served as the default one, and says so.
  const fcfs = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, schedulingPolicy: "fcfs" });
  try {
    const client = new OpenAI({ baseURL: `${fcfs.url}/v1`, apiKey: "none", maxRetries: 0 });
    const r = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, service_tier: "priority" });
    assert.equal(r.service_tier, "default");
  } finally {
    await fcfs.shutdown();
  }
});

/**
 * Sampling parameters and log probabilities as a client sees them on /v1/completions and
 * /v1/chat/completions, with the real openai client on stories260K (reference backend).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { chatLogprobs } from "../../src/serve/logprobs-json.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const M = "stories260K";

async function withClient(fn: (client: OpenAI) => Promise<void>, maxModelLen?: number) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 128, ...(maxModelLen ? { maxModelLen } : {}) });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

test("completionLogprobs() lists the sampled token in top_logprobs, also outside the top alternatives", async () => {
  await withClient(async (client) => {
    for (const logprobs of [0, 2]) {
      // Temperature 2 samples tokens outside the likeliest few.
      const c = await client.completions.create({ model: M, prompt: "Once upon a time", max_tokens: 12, temperature: 2, seed: 3, logprobs });
      const lp = c.choices[0].logprobs!;
      let outside = 0;
      lp.tokens!.forEach((t, i) => {
        const top = lp.top_logprobs![i];
        assert.equal(top[t], lp.token_logprobs![i], `logprobs ${logprobs}, step ${i}: the sampled ${JSON.stringify(t)} is listed`);
        const likelier = Object.values(top).filter((l) => l > lp.token_logprobs![i]).length;
        assert.ok(Object.keys(top).length <= logprobs + 1, `step ${i}: at most logprobs + 1 entries`);
        if (likelier >= logprobs && logprobs > 0) outside++;
      });
      if (logprobs > 0) assert.ok(outside > 0, "some sampled token lies outside the top alternatives");
    }
  });
});

test("checkSamplingRequest() answers 400 for a min_tokens above max_tokens, as vLLM does", async () => {
  await withClient(async (client) => {
    await assert.rejects(
      client.completions.create({ model: M, prompt: "Once upon a time", max_tokens: 4, min_tokens: 10 } as OpenAI.CompletionCreateParamsNonStreaming),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /min_tokens/.test(e.message) && /10/.test(e.message),
    );
    await assert.rejects(
      client.chat.completions.create({ model: M, messages: [{ role: "user", content: "hi" }], max_completion_tokens: 3, min_tokens: 5 } as OpenAI.ChatCompletionCreateParamsNonStreaming),
      (e: unknown) => e instanceof OpenAI.BadRequestError && /min_tokens/.test(e.message),
    );
    // Equal is allowed: exactly that many tokens, EOS held back until then.
    const c = await client.completions.create({ model: M, prompt: "Once upon a time", max_tokens: 6, min_tokens: 6, temperature: 0 } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(c.usage!.completion_tokens, 6);
  });
});

test("chatLogprobs() gives byte-fallback tokens their own bytes, so an emoji's pieces join to it", () => {
  const text = "é€😀";
  const ids = model.tokenizer.encode(text, { addBos: false });
  const lps = ids.map((id) => ({ id, logprob: -1, rank: 1, top: [[id, -1]] as [number, number][] }));
  const { content } = chatLogprobs(model.tokenizer, lps);
  assert.ok(content.some((c) => c.token.includes("\uFFFD")), "the emoji is spelt with byte tokens");
  const joined = new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(content.flatMap((c) => c.bytes)));
  // SentencePiece writes the text after a space.
  assert.equal(joined.trimStart(), text);
  assert.deepEqual(content.map((c) => c.top_logprobs[0].bytes), content.map((c) => c.bytes));
});

test("submit() keeps a seed's high bits: seeds 2^32 apart sample differently, each choice i with seed + i", async () => {
  await withClient(async (client) => {
    const ask = (seed: number, n = 1) => client.completions.create({ model: M, prompt: "Once upon a time", max_tokens: 24, temperature: 2, seed, n });
    const [low, high, high1, pair] = await Promise.all([ask(5), ask(5 + 2 ** 32), ask(6 + 2 ** 32), ask(5 + 2 ** 32, 2)]);
    assert.notEqual(high.choices[0].text, low.choices[0].text, "seed 2^32 + 5 is not seed 5");
    assert.deepEqual(pair.choices.map((c) => c.text), [high.choices[0].text, high1.choices[0].text]);
    // A negative seed is a seed too (OpenAI's is any integer).
    const [neg, neg2] = await Promise.all([ask(-7), ask(-7)]);
    assert.equal(neg.choices[0].text, neg2.choices[0].text);
  });
});

test("submitCompletion() generates 16 tokens at most when max_tokens is left out, as OpenAI and vLLM do; chat runs on", async () => {
  await withClient(async (client) => {
    const c = await client.completions.create({ model: M, prompt: "Once upon a time", temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(c.usage!.completion_tokens, 16);
    assert.equal(c.choices[0].finish_reason, "length");
    const st = await client.completions.create({ model: M, prompt: "Once upon a time", temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } } as OpenAI.CompletionCreateParamsStreaming);
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of st) usage = chunk.usage ?? usage;
    assert.equal(usage!.completion_tokens, 16);
    // Within what the context leaves: 12 tokens after a 20-token prompt in a 32-token context.
    const ids = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park.", { addBos: true }).slice(0, 20);
    assert.equal(ids.length, 20);
    const near = await client.completions.create({ model: M, prompt: ids, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(near.usage!.completion_tokens, 12);
    const chat = await client.chat.completions.create({ model: M, messages: [{ role: "user", content: "Hi" }], temperature: 0, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.ok(chat.usage!.prompt_tokens < 16);
    assert.equal(chat.usage!.completion_tokens, 32 - chat.usage!.prompt_tokens, "chat has no default of 16: up to the context");
  }, 32);
});

test("checkUnsupported() answers 400 naming vLLM fields it cannot honour (use_beam_search) instead of ignoring them", async () => {
  await withClient(async (client) => {
    const base = { model: M, prompt: "Once upon a time", max_tokens: 8, temperature: 0, stop: ["girl"] };
    for (const [param, value] of [["use_beam_search", true], ["return_tokens_as_token_ids", true], ["logprob_token_ids", [5]]] as const) {
      await assert.rejects(
        client.completions.create({ ...base, [param]: value } as OpenAI.CompletionCreateParamsNonStreaming),
        (e: unknown) => e instanceof OpenAI.BadRequestError && (e.error as { param?: string }).param === param && e.message.includes(param),
      );
    }
    // Their defaults ask for nothing.
    const c = await client.completions.create({ ...base, use_beam_search: false, logprob_token_ids: null } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(c.choices[0].finish_reason, "stop");
  });
});

test("include_stop_str_in_output keeps the stop string that ended the answer, streamed and not, as vLLM", async () => {
  await withClient(async (client) => {
    const base = { model: M, prompt: "Once upon a time", max_tokens: 16, temperature: 0 };
    const free = (await client.completions.create(base as OpenAI.CompletionCreateParamsNonStreaming)).choices[0].text;
    // A stop string in the middle of the free answer: the answer up to its end, once with it and once without.
    const stop = free.slice(5, 8);
    const cut = free.indexOf(stop);
    const without = (await client.completions.create({ ...base, stop: [stop] } as OpenAI.CompletionCreateParamsNonStreaming)).choices[0];
    assert.equal(without.text, free.slice(0, cut));
    const body = { ...base, stop: [stop], include_stop_str_in_output: true };
    const withStop = (await client.completions.create(body as OpenAI.CompletionCreateParamsNonStreaming)).choices[0];
    assert.deepEqual([withStop.text, withStop.finish_reason], [free.slice(0, cut + stop.length), "stop"]);
    let streamed = "";
    for await (const c of await client.completions.create({ ...body, stream: true } as OpenAI.CompletionCreateParamsStreaming)) streamed += c.choices[0]?.text ?? "";
    assert.equal(streamed, withStop.text);
    const chat = await client.chat.completions.create({ model: M, messages: [{ role: "user", content: "Hi" }], max_tokens: 16, temperature: 0, include_stop_str_in_output: true, stop: ["e"] } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const content = chat.choices[0].message.content!;
    assert.ok(chat.choices[0].finish_reason !== "stop" || (content.endsWith("e") && content.indexOf("e") === content.length - 1), JSON.stringify(content));
  });
});

import assert from "node:assert/strict";
import OpenAI from "openai";
import { eventually } from "../eventually.ts";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { grammarFeed, grammarStart } from "../../src/engine/grammar.ts";

/** Whether `text` can start one JSON object. */
const startsJsonObject = (text: string) => grammarFeed(grammarStart({ kind: "json", schema: { type: "object" } }), text).length > 0;

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";

async function withServer(opts: { apiKey?: string; maxWaiting?: number; maxNumSeqs?: number; jumpForward?: boolean }, fn: (url: string, s: Awaited<ReturnType<typeof startServer>>) => Promise<void>) {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, ...opts });
  try {
    await fn(s.url, s);
  } finally {
    await s.shutdown();
  }
}

test("openai client: chat and completions, streaming and not, usage with cached_tokens", async () => {
  await withServer({ apiKey: "sk-test" }, async (url, s) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test", maxRetries: 0 });
    const models = await client.models.list();
    assert.equal(models.data[0].id, "stories260K");
    // A Unix time, as vLLM's and OpenAI's cards carry (it was 0).
    assert.ok(Math.abs(models.data[0].created - Date.now() / 1000) < 3600, `created ${models.data[0].created}`);

    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 12, temperature: 0 });
    assert.equal(chat.object, "chat.completion");
    assert.equal(chat.choices[0].finish_reason, "length");
    assert.ok(chat.choices[0].message.content!.length > 0);
    assert.equal(chat.usage!.completion_tokens, 12);

    const stream = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_completion_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? "";
      finish = c.choices[0]?.finish_reason ?? finish;
      usage = c.usage ?? usage;
    }
    assert.equal(text, chat.choices[0].message.content, "streamed greedy text equals the non-streamed one");
    assert.equal(finish, "length");
    assert.equal(usage!.prompt_tokens, chat.usage!.prompt_tokens);
    assert.ok(usage!.prompt_tokens_details!.cached_tokens! > 0, "the repeated prompt is served from the prefix cache");

    const comp = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
    assert.equal(comp.choices[0].text, ", there was a little girl named Lily. She loved to play outsid");
    const cs = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0, stream: true });
    let ctext = "";
    for await (const c of cs) ctext += c.choices[0]?.text ?? "";
    assert.equal(ctext, comp.choices[0].text);

    const stopped = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 20, temperature: 0, stop: ["girl"] });
    assert.equal(stopped.choices[0].text, ", there was a little ");
    assert.equal(stopped.choices[0].finish_reason, "stop");

    const noKey = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(noKey.models.list(), (e: unknown) => e instanceof OpenAI.AuthenticationError);
    await assert.rejects(
      client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "hi" }], n: 17 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && (e.error as { param?: string }).param === "n",
    );
    await assert.rejects(
      client.completions.create({ model: "stories260K", prompt: "hi ".repeat(3000), max_tokens: 5 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && (e.error as { code?: string }).code === "context_length_exceeded",
    );
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  });
});

test("server: a client that disconnects mid-stream cancels its request and frees its KV blocks", async () => {
  await withServer({}, async (url, s) => {
    const ctl = new AbortController();
    const res = await fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "stories260K", prompt: STORY, max_tokens: 1500, temperature: 0, ignore_eos: true, stream: true }),
      signal: ctl.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    assert.ok(s.engine.pool.numUsedBlocks() > 0, "the request holds KV while streaming");
    ctl.abort();
    await reader.cancel().catch(() => {});
    // (The server sees the hang-up "soon": poll, with a deadline only against a hang.)
    await eventually(() => s.engine.activeRequests, (n) => n === 0);
    assert.equal(s.engine.activeRequests, 0, "the request was cancelled");
    assert.equal(s.engine.pool.numUsedBlocks(), 0, "all KV blocks are back in the pool");
    assert.ok((s.engine.metrics.finished.get("abort") ?? 0) >= 1);

    // Same for a non-streaming request whose client gives up before the answer.
    const ctl2 = new AbortController();
    const pending = fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "stories260K", prompt: STORY, max_tokens: 1500, temperature: 0, ignore_eos: true }),
      signal: ctl2.signal,
    }).catch(() => undefined);
    await eventually(() => s.engine.activeRequests, (n) => n > 0, undefined, 5);
    assert.equal(s.engine.activeRequests, 1, "the non-streaming request is running");
    ctl2.abort();
    await pending;
    await eventually(() => s.engine.activeRequests, (n) => n === 0);
    assert.equal(s.engine.activeRequests, 0, "the non-streaming request was cancelled");
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  });
});

test("server: a full queue answers 429 with Retry-After and the rest complete", async () => {
  await withServer({ maxWaiting: 2, maxNumSeqs: 1 }, async (url, s) => {
    const send = () =>
      fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "stories260K", prompt: "Once upon a time", max_tokens: 30, temperature: 0, ignore_eos: true }),
      });
    const res = await Promise.all(Array.from({ length: 12 }, send));
    const codes = res.map((r) => r.status);
    assert.ok(codes.includes(429), `some requests were refused: ${codes}`);
    assert.ok(codes.includes(200), `some requests completed: ${codes}`);
    const refused = res.find((r) => r.status === 429)!;
    assert.equal(refused.headers.get("retry-after"), "1");
    assert.equal(((await refused.json()) as { error: { type: string } }).error.type, "rate_limit_error");
    await Promise.all(res.filter((r) => r !== refused).map((r) => r.text()));
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  });
});

test("openai client: logit_bias and frequency_penalty change what is generated; a bias outside the vocabulary is a 400", async () => {
  await withServer({}, async (url, s) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });
    // What the engine generates when asked directly, in the engine's own terms.
    const direct = async (extra: Partial<GenerateRequest>) => {
      const h = s.engine.submit({ prompt, maxTokens: 8, temperature: 0, ...extra });
      for await (const _ of h.stream) { /* drain */ }
      return (await h.result).tokenIds;
    };
    const complete = async (extra: Partial<OpenAI.CompletionCreateParamsNonStreaming>) =>
      (await client.completions.create({ model: "stories260K", prompt, max_tokens: 8, temperature: 0, ...extra })).choices[0].text;
    const plain = await direct({});
    const first = plain[0];
    const forced = await complete({ logit_bias: { [first]: 100 } });
    assert.equal(forced, model.tokenizer.decode(Array(8).fill(first)), "logit_bias +100 repeats the token");
    const banned = await complete({ logit_bias: { [first]: -100 } });
    const bannedIds = await direct({ logitBias: [[first, -100]] });
    assert.ok(!bannedIds.includes(first));
    assert.equal(banned, model.tokenizer.decode(bannedIds));
    assert.notEqual(banned, model.tokenizer.decode(plain));
    // Two tokens forced alike: one repeats, unless each appearance costs it (tests/engine/logit-adjust.test.ts).
    const second = plain[1];
    const pair = { [first]: 100, [second]: 100 };
    const unpenalized = await complete({ logit_bias: pair });
    const penalized = await complete({ logit_bias: pair, frequency_penalty: 2, presence_penalty: 0.5 });
    assert.notEqual(penalized, unpenalized, "frequency_penalty changes the output");
    const penalizedIds = await direct({ logitBias: [[first, 100], [second, 100]], frequencyPenalty: 2, presencePenalty: 0.5 });
    assert.equal(penalized, model.tokenizer.decode(penalizedIds));
    await assert.rejects(complete({ logit_bias: { "100000": 1 } }), (e: unknown) => e instanceof OpenAI.BadRequestError && /Token 100000 in logit_bias/.test(e.message));
  });
});

test("openai client: logprobs and top_logprobs in chat and completions, streamed as generated", async () => {
  await withServer({}, async (url) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: STORY }];
    const chat = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = chat.choices[0].logprobs!.content!;
    assert.equal(content.length, chat.usage!.completion_tokens);
    assert.equal(content.map((c) => c.token).join(""), chat.choices[0].message.content);
    for (const c of content) {
      assert.ok(c.logprob <= 0);
      assert.equal(c.top_logprobs.length, 2);
      assert.deepEqual(c.top_logprobs[0], { token: c.token, logprob: c.logprob, bytes: c.bytes }, "greedy takes the likeliest token");
      assert.deepEqual(c.bytes, [...new TextEncoder().encode(c.token)]);
    }
    const stream = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
    const streamed: OpenAI.ChatCompletionTokenLogprob[] = [];
    for await (const c of stream) streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
    assert.deepEqual(streamed, content);
    const without = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 8, temperature: 0 });
    assert.equal(without.choices[0].logprobs, null);
    assert.equal(without.choices[0].message.content, chat.choices[0].message.content);

    const comp = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 3 });
    const lp = comp.choices[0].logprobs!;
    assert.equal(lp.tokens!.join(""), comp.choices[0].text);
    assert.equal(lp.token_logprobs!.length, 8);
    lp.top_logprobs!.forEach((top, i) => {
      assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 3);
      assert.equal(Math.max(...Object.values(top)), lp.token_logprobs![i]);
    });
    assert.deepEqual(lp.text_offset, lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join("").length));
    const cs = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 3, stream: true });
    const tokens: string[] = [], offsets: number[] = [];
    for await (const c of cs) {
      tokens.push(...(c.choices[0]?.logprobs?.tokens ?? []));
      offsets.push(...(c.choices[0]?.logprobs?.text_offset ?? []));
    }
    assert.deepEqual(tokens, lp.tokens);
    assert.deepEqual(offsets, lp.text_offset);

    await assert.rejects(
      client.chat.completions.create({ model: "stories260K", messages, max_tokens: 2, top_logprobs: 2 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError && (e.error as { param?: string }).param === "top_logprobs",
    );
    await assert.rejects(
      client.completions.create({ model: "stories260K", prompt: "x", max_tokens: 2, logprobs: 21 }),
      (e: unknown) => e instanceof OpenAI.BadRequestError,
    );
  });
});

test("openai client: n choices, each its own sample (seed + i), streamed interleaved by index, usage summed", async () => {
  await withServer({}, async (url, s) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const prompt = "Once upon a time";
    const one = async (seed: number) => (await client.completions.create({ model: "stories260K", prompt, max_tokens: 10, temperature: 1, seed })).choices[0].text;
    const three = await client.completions.create({ model: "stories260K", prompt, max_tokens: 10, temperature: 1, seed: 7, n: 3 });
    assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
    assert.deepEqual(three.choices.map((c) => c.text), [await one(7), await one(8), await one(9)], "choice i samples as a request with seed + i");
    assert.ok(new Set(three.choices.map((c) => c.text)).size > 1, "the choices differ");
    assert.equal(three.usage!.completion_tokens, 30);
    assert.equal(three.usage!.prompt_tokens, (await client.completions.create({ model: "stories260K", prompt, max_tokens: 1 })).usage!.prompt_tokens, "the prompt counts once");

    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: STORY }];
    const chat = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 8, temperature: 1, seed: 3, n: 2 });
    const stream = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 8, temperature: 1, seed: 3, n: 2, stream: true, stream_options: { include_usage: true } });
    const texts = ["", ""], finishes: (string | null)[] = [null, null];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      for (const ch of c.choices) {
        texts[ch.index] += ch.delta.content ?? "";
        finishes[ch.index] = ch.finish_reason ?? finishes[ch.index];
      }
      usage = c.usage ?? usage;
    }
    assert.deepEqual(texts, chat.choices.map((c) => c.message.content));
    assert.deepEqual(finishes, ["length", "length"]);
    assert.equal(usage!.completion_tokens, 16);
    assert.equal(s.engine.pool.numUsedBlocks(), 0);
  });
});

test("server: n choices the queue cannot all take answer 429 and leave none of them queued", async () => {
  await withServer({ maxWaiting: 2, maxNumSeqs: 1 }, async (url, s) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const lengthBefore = s.engine.metrics.finished.get("length") ?? 0;
    await assert.rejects(
      // Two wait (and one may already run): the fourth at the latest is refused.
      client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 200, n: 4, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming),
      (e: unknown) => e instanceof OpenAI.RateLimitError,
    );
    // Cancelled, not run to their end: none finished with its 200 tokens ("length"), however long a
    // loaded machine took to go idle (a wall-clock bound on the wait was the check before).
    await eventually(() => s.engine.activeRequests + s.engine.stats().waiting, (n) => n === 0);
    assert.equal(s.engine.activeRequests, 0, "the choices already taken were cancelled");
    assert.equal(s.engine.metrics.finished.get("length") ?? 0, lengthBefore, "no choice ran to its max_tokens");
    const ok = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 2, n: 2 });
    assert.equal(ok.choices.length, 2);
  });
});

test("openai client: response_format json_object constrains the answer to one JSON object", async () => {
  await withServer({}, async (url) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: STORY }];
    const free = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 30, temperature: 0 });
    assert.ok(!startsJsonObject(free.choices[0].message.content!), "unconstrained, the story model writes prose");
    const json = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 30, temperature: 0, response_format: { type: "json_object" } });
    assert.ok(startsJsonObject(json.choices[0].message.content!), json.choices[0].message.content!);
    // Pushed to close at once: "{}", then EOS, the only token left.
    const close = model.tokenizer.encode("}", { addBos: false }).filter((id) => model.tokenizer.decode([id]).includes("}"));
    const closed = await client.chat.completions.create({
      model: "stories260K", messages, max_tokens: 30, temperature: 0, response_format: { type: "json_object" }, logit_bias: Object.fromEntries(close.map((id) => [id, 50])),
    });
    assert.equal(closed.choices[0].finish_reason, "stop");
    assert.deepEqual(JSON.parse(closed.choices[0].message.content!), {});
  });
});

test("openai client: response_format json_schema makes the answer a whole value of the schema", async () => {
  await withServer({}, async (url) => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
    const schema = {
      type: "object",
      properties: {
        mood: { enum: ["happy", "sad"] }, ok: { type: "boolean" },
        tags: { type: "array", uniqueItems: true, items: { enum: ["a", "b", "c"] }, minItems: 2 },
        pair: { type: "array", prefixItems: [{ type: "integer", multipleOf: 5, minimum: 0, maximum: 50 }, { type: "boolean" }], items: false, minItems: 2 },
      },
      required: ["mood", "ok", "tags", "pair"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 200, temperature: 0.8, seed: 4,
      response_format: { type: "json_schema", json_schema: { name: "mood", schema, strict: true } },
    });
    const text = r.choices[0].message.content!;
    assert.equal(r.choices[0].finish_reason, "stop", text);
    const v = JSON.parse(text) as { mood: string; ok: boolean; tags: string[]; pair: [number, boolean] };
    assert.ok(["happy", "sad"].includes(v.mood) && typeof v.ok === "boolean" && Object.keys(v).length === 4, text);
    assert.ok(v.tags.length >= 2 && new Set(v.tags).size === v.tags.length && v.tags.every((t) => ["a", "b", "c"].includes(t)), text);
    assert.ok(v.pair.length === 2 && v.pair[0] % 5 === 0 && v.pair[0] >= 0 && v.pair[0] <= 50 && typeof v.pair[1] === "boolean", text);
  });
});

test("openai client: json_schema answers are whole with jump-forward on and off, and /metrics counts the jumped tokens", async () => {
  const schema = {
    type: "object", additionalProperties: false, required: ["character", "mood"],
    properties: { character: { enum: ["Lily", "Ben", "Tom"] }, mood: { enum: ["happy", "sad"] } },
  };
  const jumped: number[] = [];
  for (const jumpForward of [true, false]) {
    await withServer({ jumpForward }, async (url) => {
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
      const r = await client.chat.completions.create({
        model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 80, temperature: 0,
        response_format: { type: "json_schema", json_schema: { name: "who", schema, strict: true } },
      });
      const text = r.choices[0].message.content!;
      assert.equal(r.choices[0].finish_reason, "stop", text);
      const v = JSON.parse(text) as { character: string; mood: string };
      assert.ok(["Lily", "Ben", "Tom"].includes(v.character) && ["happy", "sad"].includes(v.mood), text);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const m = /evolving:jump_forward_tokens_total\{model_name="stories260K"\} (\d+)/.exec(metrics);
      assert.ok(m, "the counter is exported");
      jumped.push(Number(m[1]));
      assert.ok(Number(m[1]) < r.usage!.completion_tokens, "some tokens were sampled");
    });
  }
  assert.ok(jumped[0] >= 4, `keys and enum tails jumped: ${jumped[0]}`);
  assert.equal(jumped[1], 0, "none with --jump-forward off");
});

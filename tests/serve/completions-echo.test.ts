/**
 * /v1/completions beyond one prompt and its continuation, with the real openai client: arrays of
 * prompts, `echo` (with the prompt's log probabilities, and `max_tokens` 0 to score a prompt, as
 * evaluation harnesses such as lm-evaluation-harness do), and `best_of`.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, sharedRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { readTextFile } from "../../src/runtime/fs.ts";
import type { GenerateResult } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";
const OTHER = "The dog ran to the big tree and saw a bird.";

async function withClient(fn: (client: OpenAI, url: string) => Promise<void>, workers?: number) {
  const s = await startServer({
    modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256,
    ...(workers ? { workers, roles: ["prefill", "decode"] as const, planner: "none" as const, routerOptions: { localPrefillThreshold: 0 } } : {}),
  });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.url);
  } finally {
    await s.shutdown();
  }
}

type Logprobs = { tokens: string[]; token_logprobs: (number | null)[]; top_logprobs: (Record<string, number> | null)[]; text_offset: number[] };
const logprobsOf = (c: { logprobs: unknown }) => c.logprobs as Logprobs;

/**
 * What lm-evaluation-harness checks of a scored continuation: its summed log probability and
 * whether each of its tokens was the most likely one (its top-1 alternative).
 */
function scoreContinuation(lp: Logprobs, contextTokens: number) {
  const tokens = lp.token_logprobs.slice(contextTokens);
  const tops = lp.top_logprobs.slice(contextTokens);
  return {
    sum: tokens.reduce((a: number, b) => a + b!, 0),
    greedy: tokens.every((t, i) => t === Math.max(...Object.values(tops[i]!))),
  };
}

/** llama.cpp's greedy continuation of "Once upon a time" (../shared/reference): an independent oracle. */
const golden = JSON.parse(await readTextFile(`${sharedRoot}/reference/stories260K-greedy.json`)) as { prompt_ids_with_bos: number[]; greedy20: number[] };

for (const workers of [undefined, 2]) {
  const where = workers ? "a prefill and a decode worker" : "one engine";
  test(`/v1/completions echo with max_tokens 0 scores token-id prompts as their greedy generation did (${where})`, async () => {
    await withClient(async (client) => {
      const context = [golden.prompt_ids_with_bos, model.tokenizer.encode(OTHER, { addBos: true })];
      // Each context's greedy continuation with its log probabilities, from one engine.
      const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
      const gens: GenerateResult[] = [];
      for (const prompt of context) gens.push(await e.submit({ prompt, maxTokens: 6, temperature: 0, ignoreEos: true, logprobs: 1 }).result);
      await e.stop();
      assert.deepEqual(gens[0].tokenIds, golden.greedy20.slice(0, 6), "llama.cpp continues the golden prompt the same way");
      // Score context + continuation in one request, as an evaluation harness does.
      const full = context.map((p, i) => [...p, ...gens[i].tokenIds]);
      const scored = await client.completions.create({ model: "stories260K", prompt: full, max_tokens: 0, echo: true, logprobs: 1, temperature: 0 });
      assert.equal(scored.choices.length, 2);
      assert.equal(scored.usage!.prompt_tokens, full[0].length + full[1].length);
      assert.equal(scored.usage!.completion_tokens, 0);
      scored.choices.forEach((c, i) => {
        assert.equal(c.index, i);
        assert.equal(c.finish_reason, "length");
        assert.equal(c.text, model.tokenizer.decode(full[i]), "the prompt, and nothing generated");
        const lp = logprobsOf(c);
        assert.equal(lp.tokens.length, full[i].length);
        assert.equal(lp.token_logprobs[0], null);
        assert.equal(lp.top_logprobs[0], null);
        const { sum, greedy } = scoreContinuation(lp, context[i].length);
        const want = gens[i].logprobs!.reduce((a, l) => a + l.logprob, 0);
        assert.ok(Math.abs(sum - want) < 1e-4, `prompt ${i}: ${sum} vs the generation's ${want}`);
        assert.ok(greedy, "every continuation token was the most likely");
        lp.token_logprobs.slice(1).forEach((l) => assert.ok(l! <= 0 && Number.isFinite(l)));
      });
      // A continuation that is not the greedy one is scored lower and not greedy.
      const swapped = [...context[0], ...golden.greedy20.slice(0, 5), golden.greedy20[7]];
      const off = await client.completions.create({ model: "stories260K", prompt: swapped, max_tokens: 0, echo: true, logprobs: 1 });
      assert.equal(scoreContinuation(logprobsOf(off.choices[0]), context[0].length).greedy, false);
    }, workers);
  });
}

test("/v1/completions echo returns the prompt before the continuation, streamed or not, with offsets across both", async () => {
  await withClient(async (client) => {
    const base = { model: "stories260K", prompt: STORY, max_tokens: 8, temperature: 0 } as const;
    const plain = await client.completions.create({ ...base, logprobs: 2 });
    const echoed = await client.completions.create({ ...base, logprobs: 2, echo: true });
    const c = echoed.choices[0];
    assert.equal(c.text, STORY + plain.choices[0].text);
    const lp = logprobsOf(c);
    const promptIds = model.tokenizer.encode(STORY, { addBos: true });
    const genLp = logprobsOf(plain.choices[0]);
    assert.equal(lp.tokens.length, promptIds.length + genLp.tokens.length);
    assert.deepEqual(lp.tokens.slice(promptIds.length), genLp.tokens);
    assert.deepEqual(lp.token_logprobs.slice(promptIds.length), genLp.token_logprobs);
    assert.equal(lp.text_offset[promptIds.length], STORY.length, "the continuation's offsets start after the echoed prompt");
    assert.deepEqual(lp.text_offset.slice(promptIds.length).map((o) => o - STORY.length), genLp.text_offset);
    assert.equal(lp.token_logprobs[0], null);
    lp.top_logprobs.slice(1).forEach((t) => assert.equal(Object.keys(t!).length >= 1, true));
    // Without logprobs: the text only.
    const bare = await client.completions.create({ ...base, echo: true });
    assert.equal(bare.choices[0].text, c.text);
    assert.equal(bare.choices[0].logprobs, null);
    assert.equal(echoed.usage!.completion_tokens, plain.usage!.completion_tokens);
    // Streamed: the echoed prompt comes first, and the chunks add up to the same text and log probabilities.
    for (const logprobs of [2, undefined]) {
      const stream = await client.completions.create({ ...base, echo: true, stream: true, ...(logprobs ? { logprobs } : {}) });
      const texts: string[] = [];
      const tokenLps: (number | null)[] = [];
      for await (const chunk of stream) {
        for (const ch of chunk.choices) {
          if (ch.text) texts.push(ch.text);
          if (ch.logprobs) tokenLps.push(...logprobsOf(ch).token_logprobs);
        }
      }
      assert.equal(texts[0], STORY, "the first chunk is the prompt");
      assert.equal(texts.join(""), c.text);
      assert.deepEqual(tokenLps, logprobs ? lp.token_logprobs : []);
    }
    // Scoring only, streamed: the prompt and a final chunk, nothing generated.
    const stream = await client.completions.create({ ...base, echo: true, max_tokens: 0, logprobs: 1, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(...chunk.choices);
    assert.deepEqual(chunks.map((ch) => ch.text), [STORY, ""]);
    assert.equal(chunks[1].finish_reason, "length");
    assert.equal(logprobsOf(chunks[0]).tokens.length, promptIds.length);
  });
});

test("/v1/completions with an array of prompts answers each, n choices apiece, in prompt order", async () => {
  await withClient(async (client) => {
    const one = async (prompt: string) => (await client.completions.create({ model: "stories260K", prompt, max_tokens: 6, temperature: 0 })).choices[0].text;
    const want = [await one(STORY), await one(OTHER)];
    const r = await client.completions.create({ model: "stories260K", prompt: [STORY, OTHER], max_tokens: 6, temperature: 0, n: 2 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    assert.deepEqual(r.choices.map((c) => c.text), [want[0], want[0], want[1], want[1]]);
    const tokens = [STORY, OTHER].map((t) => model.tokenizer.encode(t, { addBos: true }).length);
    assert.equal(r.usage!.prompt_tokens, tokens[0] + tokens[1], "each prompt counted once");
    // Streamed: every choice's chunks name its index, and each adds up to its text.
    const stream = await client.completions.create({ model: "stories260K", prompt: [STORY, OTHER], max_tokens: 6, temperature: 0, stream: true });
    const texts = ["", ""];
    for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.text;
    assert.deepEqual(texts, want);
  });
});

test("/v1/completions best_of returns the generation with the highest log probability per token", async () => {
  await withClient(async (client) => {
    const base = { model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 1.2, seed: 42 } as const;
    // Choice i samples with seed + i: the same three generations, one by one.
    const each = await Promise.all([0, 1, 2].map((i) => client.completions.create({ ...base, seed: 42 + i, logprobs: 0 })));
    const mean = (c: (typeof each)[number]["choices"][number]) => {
      const l = logprobsOf(c).token_logprobs as number[];
      return l.reduce((a, b) => a + b, 0) / l.length;
    };
    const ranked = each.map((r) => r.choices[0]).sort((a, b) => mean(b) - mean(a));
    assert.notEqual(new Set(ranked.map((c) => c.text)).size, 1, "the seeds give different generations");
    const best = await client.completions.create({ ...base, best_of: 3 });
    assert.equal(best.choices.length, 1);
    assert.equal(best.choices[0].text, ranked[0].text);
    assert.equal(best.choices[0].logprobs, null, "log probabilities only when asked");
    assert.equal(best.usage!.completion_tokens, each.reduce((n, r) => n + r.usage!.completion_tokens, 0), "every generation is counted");
    const two = await client.completions.create({ ...base, best_of: 3, n: 2, logprobs: 1 });
    assert.deepEqual(two.choices.map((c) => c.text), ranked.slice(0, 2).map((c) => c.text));
    assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  });
});

test("/v1/completions refuses max_tokens 0 without echo, best_of below n or streamed, and too many prompts", async () => {
  await withClient(async (_client, url) => {
    const post = async (body: Record<string, unknown>) => {
      const res = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", ...body }) });
      return { status: res.status, error: ((await res.json()) as { error: { message: string; param: string | null } }).error };
    };
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ prompt: "Hi", max_tokens: 0 }, "max_tokens", /^A max_tokens of 0 generates nothing; it is only allowed with echo = true/],
      [{ prompt: "Hi", best_of: 1, n: 2 }, "best_of", /^The best_of must be at least n, got best_of = 1 and n = 2$/],
      [{ prompt: "Hi", best_of: 2, stream: true }, "best_of", /^A best_of of 2 cannot be streamed/],
      [{ prompt: "Hi", best_of: 17 }, "best_of", /^The best_of must be from 1 to 16, got best_of = 17$/],
      [{ prompt: Array.from({ length: 129 }, () => "Hi") }, "prompt", /at most 128 prompts per request are supported, got 129/],
      [{ prompt: Array.from({ length: 20 }, () => "Hi"), n: 16 }, "prompt", /^A request may ask for at most 256 generations, got 20 prompts × 16 each$/],
      [{ prompt: ["Hi", [1, 2]] }, "prompt[1]", /the prompts must all be of one kind/],
      [{ prompt: [[1, 2], []] }, "prompt[1]", /the prompt's token id array is empty/],
      [{ prompt: ["Hi", "x".repeat(4000)] }, "prompt[1]", /^The prompt has (at least )?\d+ tokens/],
    ];
    for (const [body, param, message] of cases) {
      const r = await post(body);
      assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${JSON.stringify(r.error)}`);
      assert.equal(r.error.param, param, JSON.stringify(body).slice(0, 80));
      assert.match(r.error.message, message);
    }
  });
});

type PromptLogprobs = (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[];

/** Checks one prompt's vLLM `prompt_logprobs` against its token ids: keys, ranks, at most `top` alternatives. */
function checkPromptLogprobs(got: PromptLogprobs, ids: readonly number[], top: number): void {
  assert.equal(got.length, ids.length);
  assert.equal(got[0], null, "nothing predicts the first token");
  for (let i = 1; i < ids.length; i++) {
    const entry = got[i]!;
    const own = entry[ids[i]];
    assert.ok(own, `position ${i} holds its own token ${ids[i]}`);
    assert.equal(own.decoded_token, tokenTextOf(model.tokenizer, ids[i]));
    const others = Object.entries(entry).filter(([id]) => Number(id) !== ids[i]);
    assert.ok(Object.keys(entry).length <= top + 1, `position ${i}: ${Object.keys(entry).length} entries for top ${top}`);
    // Its rank counts the likelier tokens, which the alternatives list when it is among them.
    const likelier = Object.values(entry).filter((e) => e.logprob > own.logprob).length;
    if (own.rank <= top) assert.equal(own.rank, 1 + likelier, `position ${i}'s rank`);
    else assert.equal(Object.keys(entry).length, top + 1, "outside the top: all alternatives listed");
    for (const [id, e] of others) assert.ok(e.rank >= 1 && e.rank <= top && e.logprob <= 0 && e.decoded_token === tokenTextOf(model.tokenizer, Number(id)));
  }
}

test("prompt_logprobs (vLLM's) give each prompt token's log probability, rank and alternatives on completions and chat", async () => {
  await withClient(async (client) => {
    const ids = model.tokenizer.encode(STORY, { addBos: true });
    // Echo with logprobs 1 and prompt_logprobs 3 share one engine ask, each cut to its own count.
    const c = await client.completions.create({ model: "stories260K", prompt: ids, max_tokens: 2, temperature: 0, echo: true, logprobs: 1, prompt_logprobs: 3 } as OpenAI.CompletionCreateParamsNonStreaming);
    const choice = c.choices[0] as OpenAI.CompletionChoice & { prompt_logprobs: PromptLogprobs };
    checkPromptLogprobs(choice.prompt_logprobs, ids, 3);
    const echoed = logprobsOf(choice);
    for (let i = 1; i < ids.length; i++) {
      assert.ok(Math.abs(choice.prompt_logprobs[i]![ids[i]].logprob - echoed.token_logprobs[i]!) < 1e-6, `position ${i} as echo scored it`);
      // Logprobs 1: the likeliest token, and the prompt token when it is not that one (up to logprobs + 1).
      assert.equal(Object.keys(echoed.top_logprobs[i]!).length, choice.prompt_logprobs[i]![ids[i]].rank === 1 ? 1 : 2, "echo's alternatives stay at logprobs 1");
      const best = Math.max(...Object.values(choice.prompt_logprobs[i]!).map((e) => e.logprob));
      assert.equal(choice.prompt_logprobs[i]![ids[i]].rank === 1, echoed.token_logprobs[i] === best, `position ${i}: rank 1 iff likeliest`);
    }
    assert.ok(ids.slice(1).some((_, i) => choice.prompt_logprobs[i + 1]![ids[i + 1]].rank > 1), "a story is not all greedy");
    const plain = await client.completions.create({ model: "stories260K", prompt: ids, max_tokens: 2, temperature: 0 });
    assert.equal(plain.choices[0].text, choice.text.slice(STORY.length), "asking changes nothing generated");
    assert.equal((plain.choices[0] as { prompt_logprobs?: unknown }).prompt_logprobs, undefined, "none unless asked");

    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 2, n: 2, prompt_logprobs: 0 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const scored = (chat as OpenAI.ChatCompletion & { prompt_logprobs: PromptLogprobs }).prompt_logprobs;
    assert.equal(scored.length, chat.usage!.prompt_tokens, "one per prompt token, beside the choices");
    assert.ok(scored.slice(1).every((e) => Object.keys(e!).length === 1), "0 alternatives: the prompt token alone");

    for (const [body, what] of [[{ stream: true, prompt_logprobs: 1 }, /cannot be streamed, got prompt_logprobs = 1 with stream = true/], [{ prompt_logprobs: 21 }, /prompt_logprobs/]] as const) {
      const r = await fetch(`${client.baseURL}/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: STORY, max_tokens: 2, ...body }) });
      assert.equal(r.status, 400);
      const err = (await r.json()) as { error: { message: string; param: string } };
      assert.match(err.error.message, what);
      assert.equal(err.error.param, "prompt_logprobs");
    }
  });
});

test("/v1/completions and chat with n > 1 score each prompt once and give every choice the same prompt log probabilities", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256 });
  try {
    // The app calls the engine through this object: record what each request asks.
    const asked: (number | undefined)[] = [];
    const submit = s.engine.submit.bind(s.engine);
    s.engine.submit = (req) => {
      asked.push(req.promptLogprobs);
      return submit(req);
    };
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const body = { model: "stories260K", prompt: [STORY, OTHER], max_tokens: 3, temperature: 0.9, seed: 7, n: 3, echo: true, logprobs: 2, prompt_logprobs: 1 };
    const r = await client.completions.create(body as OpenAI.CompletionCreateParamsNonStreaming);
    assert.deepEqual(asked, [2, undefined, undefined, 2, undefined, undefined], "the first generation of each prompt scores it");
    assert.equal(r.choices.length, 6);
    for (const c of r.choices) {
      const first = r.choices[Math.floor(c.index / 3) * 3];
      const echoed = (x: typeof c) => logprobsOf(x).token_logprobs.slice(0, logprobsOf(first).tokens.length - 3);
      assert.ok(echoed(c).length > 5 && echoed(c).slice(1).every((v) => typeof v === "number"), "the echoed prompt is scored");
      assert.deepEqual(echoed(c), echoed(first), `choice ${c.index} echoes its prompt's scores`);
      const own = (c as unknown as { prompt_logprobs: unknown[] }).prompt_logprobs;
      assert.deepEqual(own, (first as unknown as { prompt_logprobs: unknown[] }).prompt_logprobs);
      assert.equal(own.length, logprobsOf(first).tokens.length - 3, "one entry per prompt token");
    }
    asked.length = 0;
    const chat = await client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: STORY }], max_tokens: 3, n: 2, prompt_logprobs: 0 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    assert.deepEqual(asked, [0, undefined]);
    assert.ok(((chat as unknown as { prompt_logprobs: unknown[] }).prompt_logprobs).length > 5);
    // Streamed, each choice echoes with its own request's scores.
    asked.length = 0;
    const stream = await client.completions.create({ model: "stories260K", prompt: STORY, max_tokens: 2, n: 2, echo: true, logprobs: 1, stream: true });
    for await (const _ of stream) { /* drain */ }
    assert.deepEqual(asked, [1, 1]);
  } finally {
    await s.shutdown();
  }
});

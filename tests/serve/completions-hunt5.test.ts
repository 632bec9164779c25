/**
 * /v1/completions through the real server and the `openai` client: `text_offset` when characters
 * are spread over several tokens (byte-fallback pieces of an emoji or a symbol), in the echoed
 * prompt and in the generated text, whole and streamed.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

/** Runs `fn` against a fresh server and an `openai` client of it. */
async function withClient(fn: (client: OpenAI, maxModelLen: number) => Promise<void>): Promise<void> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }), s.engine.maxModelLen);
  } finally {
    await s.shutdown();
  }
}

type Logprobs = { tokens: string[]; text_offset: number[] };
type Params = OpenAI.CompletionCreateParamsNonStreaming & Record<string, unknown>;

/** The whole answer's text and logprobs, and the streamed one's joined. */
async function wholeAndStreamed(client: OpenAI, ask: Params): Promise<{ whole: { text: string } & Logprobs; streamed: { text: string } & Logprobs }> {
  const w = (await client.completions.create(ask)).choices[0];
  const streamed = { text: "", tokens: [] as string[], text_offset: [] as number[] };
  for await (const c of await client.completions.create({ ...ask, stream: true } as OpenAI.CompletionCreateParamsStreaming)) {
    const ch = c.choices[0];
    if (!ch) continue;
    streamed.text += ch.text;
    streamed.tokens.push(...(ch.logprobs?.tokens ?? []));
    streamed.text_offset.push(...(ch.logprobs?.text_offset ?? []));
  }
  const lp = w.logprobs as Logprobs;
  return { whole: { text: w.text, tokens: lp.tokens, text_offset: lp.text_offset }, streamed };
}

/**
 * Offsets never go back nor past the text; a token with text of its own starts at its offset (the
 * first may have lost its leading space); a piece of a character (U+FFFD) sits at that character.
 */
function checkOffsets(text: string, lp: Logprobs): void {
  const where = (i: number) => `token ${i} ${JSON.stringify(lp.tokens[i])} at ${lp.text_offset[i]} in ${JSON.stringify(text)}: ${lp.text_offset}`;
  assert.equal(lp.text_offset.length, lp.tokens.length);
  lp.tokens.forEach((t, i) => {
    const at = lp.text_offset[i];
    assert.ok(at >= (i === 0 ? 0 : lp.text_offset[i - 1]) && at <= text.length, where(i));
    if (t.includes("\uFFFD")) assert.ok(text.codePointAt(at)! > 0x7f, where(i));
    else assert.ok(text.startsWith(t, at) || (at === 0 && text.startsWith(t.trimStart())), where(i));
  });
}

test("completions echo text_offset: a prompt's characters spread over byte tokens count once, every token at its text, whole and streamed", async () => {
  await withClient(async (client) => {
    const prompt = "Tom saw é and ☕ and 😀 ok";
    const ask = { model: "stories260K", prompt, max_tokens: 3, temperature: 0, ignore_eos: true, echo: true, logprobs: 0 };
    const { whole, streamed } = await wholeAndStreamed(client, ask);
    assert.ok(whole.text.startsWith(prompt));
    assert.equal(whole.tokens.filter((t) => t === "\uFFFD").length, 7, "☕ is three byte tokens, 😀 four");
    checkOffsets(whole.text, whole);
    // Every piece of a character sits where the character starts.
    const pieces = whole.tokens.flatMap((t, i) => (t === "\uFFFD" ? [whole.text_offset[i]] : []));
    const cup = prompt.indexOf("☕"), smile = prompt.indexOf("😀");
    assert.deepEqual(pieces, [cup, cup, cup, smile, smile, smile, smile]);
    assert.equal(streamed.text, whole.text);
    assert.deepEqual(streamed.tokens, whole.tokens);
    assert.deepEqual(streamed.text_offset, whole.text_offset);
  });
});

test("completions text_offset: generated characters spread over byte tokens (and broken ones) keep later tokens at their text, whole and streamed", async () => {
  await withClient(async (client) => {
    const t = model.tokenizer;
    // ☕'s three byte tokens (raised to be as likely as " a") and " a", sampled: broken pieces and words mixed.
    const cup = t.encode("☕", { addBos: false }).slice(1);
    const word = t.encode(" a", { addBos: false }).slice(1);
    assert.equal(cup.length, 3);
    const ask = { model: "stories260K", prompt: "Tom saw", max_tokens: 40, temperature: 1, seed: 5, ignore_eos: true, logprobs: 0, allowed_token_ids: [...cup, ...word],
      logit_bias: Object.fromEntries(cup.map((id) => [String(id), 15])) };
    const { whole, streamed } = await wholeAndStreamed(client, ask);
    assert.ok(whole.tokens.some((s) => s.includes("\uFFFD")) && whole.tokens.some((s) => s === " a"), JSON.stringify(whole.tokens));
    checkOffsets(whole.text, whole);
    assert.equal(streamed.text, whole.text);
    assert.deepEqual(streamed.tokens, whole.tokens);
    assert.deepEqual(streamed.text_offset, whole.text_offset);
  });
});

test("completions echo text_offset: a token-id prompt ending inside a character echoes it as U+FFFD, its pieces there and the answer after it", async () => {
  await withClient(async (client) => {
    // BOS, then the first two of ☕'s three byte tokens.
    const cup = model.tokenizer.encode("☕", { addBos: false }).slice(1);
    const ask = { model: "stories260K", prompt: [1, cup[0], cup[1]], max_tokens: 1, temperature: 0, echo: true, logprobs: 0 };
    const { whole, streamed } = await wholeAndStreamed(client, ask);
    assert.ok(whole.text.startsWith("\uFFFD") && !whole.text.startsWith("\uFFFD\uFFFD"), JSON.stringify(whole.text));
    assert.deepEqual(whole.text_offset, [0, 0, 0, 1]);
    checkOffsets(whole.text, whole);
    assert.deepEqual(streamed.text_offset, whole.text_offset);
  });
});

test("completions: min_tokens past max_tokens, and stop_token_ids or allowed_token_ids outside the vocabulary, are 400s naming the field", async () => {
  await withClient(async (client) => {
    const base = { model: "stories260K", prompt: "Once upon a time", max_tokens: 2 };
    const cases: [Record<string, unknown>, string][] = [
      [{ min_tokens: 5 }, "min_tokens"],
      // Left out, max_tokens is 16.
      [{ max_tokens: undefined, min_tokens: 17 }, "min_tokens"],
      [{ stop_token_ids: [2, 99999] }, "stop_token_ids"],
      [{ allowed_token_ids: [99999] }, "allowed_token_ids"],
    ];
    for (const [extra, param] of cases) {
      for (const stream of [false, true]) {
        await assert.rejects(client.completions.create({ ...base, ...extra, stream } as Params), (e: InstanceType<typeof OpenAI.APIError>) => {
          assert.equal(e.status, 400, `${JSON.stringify(extra)}: ${e.message}`);
          assert.equal(e.param, param, `${JSON.stringify(extra)}: ${e.message}`);
          return true;
        });
      }
    }
    // At the limit they are fine.
    const ok = await client.completions.create({ ...base, min_tokens: 2, stop_token_ids: [2], allowed_token_ids: [511, 2] } as Params);
    assert.equal(ok.choices.length, 1);
  });
});

test("completions: a max_tokens the context has no room for beside a prompt that fits is a 400 naming max_tokens; a prompt too long names the prompt", async () => {
  await withClient(async (client, limit) => {
    const refused = async (ask: Record<string, unknown>, param: string, message: RegExp) => {
      for (const stream of [false, true]) {
        await assert.rejects(client.completions.create({ model: "stories260K", ...ask, stream } as Params), (e: InstanceType<typeof OpenAI.APIError>) => {
          assert.equal(e.status, 400, e.message);
          assert.deepEqual([e.param, e.code], [param, "context_length_exceeded"], e.message);
          assert.match(e.message, message);
          return true;
        });
      }
    };
    const room = limit - 3;
    await refused({ prompt: [1, 2, 3], max_tokens: room + 1 }, "max_tokens", new RegExp(`max_tokens can be at most ${room}, got max_tokens = ${room + 1}`));
    await refused({ prompt: [[1], [1, 2, 3]], max_tokens: room + 1 }, "max_tokens", /prompt\[1\]/);
    await refused({ prompt: Array(limit).fill(100), max_tokens: 1 }, "prompt", new RegExp(`The prompt has ${limit} tokens`));
    // Filling the context exactly is fine (EOS, the only token allowed, ends it at once).
    const full = await client.completions.create({ model: "stories260K", prompt: [1, 2, 3], max_tokens: room, allowed_token_ids: [2] } as Params);
    assert.equal(full.choices[0].finish_reason, "stop");
  });
});

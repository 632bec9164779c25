/**
 * vLLM's stop_token_ids and min_tokens through the real server with the `openai` client, on the
 * looper model (tests/serve/looper-model.ts: " a b a b …" after "~", "Done." then EOS after ".").
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { model, modelPath } from "./looper-model.ts";

type Extra = OpenAI.ChatCompletionCreateParamsNonStreaming & { stop_token_ids?: number[]; min_tokens?: number };

test("chat completions take stop_token_ids (the answer ends there, without it) and min_tokens (no end before)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    const ask = (content: string, extra: Partial<Extra>) => client.chat.completions.create({ model: "looper", messages: [{ role: "user", content }], max_tokens: 6, temperature: 0, ...extra } as Extra);
    const b = model.tokenizer.encode(" b", { addBos: false })[0];
    const stopped = await ask("Go~", { stop_token_ids: [b] });
    assert.deepEqual([stopped.choices[0].message.content, stopped.choices[0].finish_reason], [" a", "stop"]);
    const done = await ask("Go.", {});
    assert.deepEqual([done.choices[0].message.content, done.usage!.completion_tokens], ["Done.", 2]);
    // More stop strings than OpenAI's 4 (vLLM takes any number): the sixth is the one that matches.
    const many = await ask("Go~", { stop: ["x", "y", "z", "w", "v", " b"] });
    assert.deepEqual([many.choices[0].message.content, many.choices[0].finish_reason], [" a", "stop"]);
    const held = await ask("Go.", { min_tokens: 3 });
    assert.equal(held.usage!.completion_tokens, 4, "three tokens, then EOS");
    assert.ok(held.choices[0].message.content!.startsWith("Done."));
    for (const extra of [{ stop_token_ids: [1 << 20] }, { min_tokens: -1 }]) {
      const err = await ask("Go.", extra).then(() => null, (e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 400, `${JSON.stringify(extra)}: ${err}`);
    }
  } finally {
    await s.shutdown();
  }
});

test("completions take allowed_token_ids (only those are sampled) and bad_words (never written), and refuse ids outside the vocabulary", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    type Rules = OpenAI.CompletionCreateParamsNonStreaming & { allowed_token_ids?: number[]; bad_words?: string[] };
    const ask = (extra: Partial<Rules>) => client.completions.create({ model: "looper", prompt: "Go~", max_tokens: 6, temperature: 0, ...extra } as Rules);
    assert.equal((await ask({})).choices[0].text, " a b a b a b");
    // " b" barred: the model's second choice comes instead, and never " b".
    const banned = (await ask({ bad_words: ["b"] })).choices[0].text;
    assert.ok(!banned.includes(" b"), banned);
    const a = model.tokenizer.encode(" a", { addBos: false })[0];
    const x = model.tokenizer.encode("x", { addBos: false })[0];
    const kept = (await ask({ allowed_token_ids: [a, x], max_tokens: 4 })).choices[0].text;
    assert.match(kept, /^( a|x)+$/, "only the allowed tokens");
    const err = await ask({ allowed_token_ids: [1 << 20] }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof OpenAI.APIError && err.status === 400 && /allowed_token_ids/.test(err.message), String(err));
  } finally {
    await s.shutdown();
  }
});

test("stopReason() gives choices vLLM's stop_reason: the stop string or stop token that ended them, null at EOS or max_tokens, streamed too", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
    type Body = OpenAI.CompletionCreateParamsNonStreaming & { stop_token_ids?: number[] };
    type Choice = OpenAI.CompletionChoice & { stop_reason?: string | number | null };
    const b = model.tokenizer.encode(" b", { addBos: false })[0];
    const cases: [Partial<Body>, string, string, string | number | null][] = [
      [{ prompt: "Go~", stop: [" b a"] }, " a", "stop", " b a"],
      [{ prompt: "Go~", stop_token_ids: [b] }, " a", "stop", b],
      [{ prompt: "Go." }, "Done.", "stop", null],
      [{ prompt: "Go~" }, " a b a b a b", "length", null],
    ];
    for (const [extra, text, finish, reason] of cases) {
      const body = { model: "looper", max_tokens: 6, temperature: 0, prompt: "", ...extra } as Body;
      const one = (await client.completions.create(body)).choices[0] as Choice;
      assert.deepEqual([one.text, one.finish_reason, one.stop_reason], [text, finish, reason], JSON.stringify(extra));
      let last: Choice | undefined;
      for await (const c of await client.completions.create({ ...body, stream: true })) if (c.choices[0]?.finish_reason) last = c.choices[0] as Choice;
      assert.deepEqual([last?.finish_reason, last?.stop_reason], [finish, reason], `streamed ${JSON.stringify(extra)}`);
      const chat = await client.chat.completions.create({ model: "looper", messages: [{ role: "user", content: body.prompt as string }], max_tokens: 6, temperature: 0, ...(extra.stop ? { stop: extra.stop } : {}), ...(extra.stop_token_ids ? { stop_token_ids: extra.stop_token_ids } : {}) } as OpenAI.ChatCompletionCreateParamsNonStreaming);
      assert.equal((chat.choices[0] as OpenAI.ChatCompletion.Choice & { stop_reason?: unknown }).stop_reason, reason, `chat ${JSON.stringify(extra)}`);
    }
  } finally {
    await s.shutdown();
  }
});

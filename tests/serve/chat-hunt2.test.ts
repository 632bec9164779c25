/**
 * Chat and completions outputs through the real server and the `openai` client: vLLM's chat `echo`
 * (whole and streamed), `stream_options` without `stream`, and OpenAI's legacy `functions`, audio
 * output and web search, which would otherwise be ignored without a word.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);

/** Runs `fn` against a fresh server and an `openai` client of it. */
async function withClient(fn: (client: OpenAI) => Promise<void>): Promise<void> {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    await fn(new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

type Params = OpenAI.ChatCompletionCreateParamsNonStreaming & Record<string, unknown>;
type StreamParams = OpenAI.ChatCompletionCreateParamsStreaming & Record<string, unknown>;

const PREFILLED: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Tell me a story" }, { role: "assistant", content: "Once upon a time" }];
const base = { model: "stories260K", max_tokens: 6, temperature: 0, ignore_eos: true };

/** The concatenated content of each streamed choice, and the roles each choice's chunks carried. */
async function streamed(client: OpenAI, params: StreamParams): Promise<{ content: string[]; roles: string[][] }> {
  const content: string[] = [];
  const roles: string[][] = [];
  for await (const c of await client.chat.completions.create(params)) {
    for (const ch of c.choices) {
      content[ch.index] = (content[ch.index] ?? "") + (ch.delta.content ?? "");
      (roles[ch.index] ??= []).push(ch.delta.role ?? "-");
    }
  }
  return { content, roles };
}

test("chat echo (vLLM's) puts the continued assistant message before each choice's content, whole and streamed, and only that", async () => {
  await withClient(async (client) => {
    const continued = { ...base, messages: PREFILLED, continue_final_message: true, add_generation_prompt: false, n: 2 };
    const plain = await client.chat.completions.create(continued as Params);
    const generated = plain.choices[0].message.content ?? "";
    assert.ok(generated.length > 0, "the model continues the message");
    const echoed = await client.chat.completions.create({ ...continued, echo: true } as Params);
    assert.deepEqual(echoed.choices.map((c) => c.message.content), [`Once upon a time${generated}`, `Once upon a time${generated}`]);
    assert.equal(echoed.usage?.completion_tokens, plain.usage?.completion_tokens, "the echo is not counted as generated");

    const s = await streamed(client, { ...continued, echo: true, stream: true } as StreamParams);
    assert.deepEqual(s.content, [`Once upon a time${generated}`, `Once upon a time${generated}`]);
    for (const r of s.roles) assert.deepEqual(r.slice(0, 2), ["assistant", "-"], "the role comes in the first chunk of each choice only");
    assert.ok(s.roles.every((r) => r.slice(1).every((x) => x === "-")));

    // A last message that is the user's is not the answering role's: nothing is echoed.
    const ask = { ...base, messages: [{ role: "user" as const, content: "Once upon a time" }] };
    const unechoed = await client.chat.completions.create({ ...ask, echo: true } as Params);
    assert.equal(unechoed.choices[0].message.content, (await client.chat.completions.create(ask as Params)).choices[0].message.content);
  });
});

test("stream_options without stream is a 400 naming it, as OpenAI and vLLM answer; null and {} pass", async () => {
  await withClient(async (client) => {
    const ask = { ...base, messages: [{ role: "user" as const, content: "Hi" }] };
    await assert.rejects(client.chat.completions.create({ ...ask, stream_options: { include_usage: true } } as Params), (e: unknown) => {
      assert.ok(e instanceof OpenAI.APIError && e.status === 400, String(e));
      assert.equal((e.error as { param?: string }).param, "stream_options");
      assert.match(e.message, /stream_options.*stream/);
      return true;
    });
    await assert.rejects(client.completions.create({ model: "stories260K", prompt: "Hi", max_tokens: 2, stream: false, stream_options: { include_usage: true } }), /stream_options/);
    for (const nothing of [null, {}]) {
      const ok = await client.chat.completions.create({ ...ask, stream_options: nothing } as Params);
      assert.equal(ok.choices.length, 1);
    }
  });
});

test("OpenAI's legacy functions and function_call, audio output and web search are refused naming the field, not ignored", async () => {
  await withClient(async (client) => {
    const ask = { ...base, messages: [{ role: "user" as const, content: "Weather in Paris?" }] };
    const functions = [{ name: "get_weather", parameters: { type: "object", properties: {} } }];
    const asks = [{ functions }, { function_call: { name: "get_weather" } }, { modalities: ["text", "audio"] }, { audio: { voice: "alloy", format: "wav" } }, { web_search_options: {} }];
    for (const extra of asks) {
      await assert.rejects(client.chat.completions.create({ ...ask, ...extra } as Params), (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError && e.status === 400, String(e));
        assert.equal((e.error as { param?: string }).param, Object.keys(extra)[0]);
        assert.match((e.error as { message: string }).message, /^(The |This server)/, "sentence case");
        return true;
      });
    }
    // Empty or null, they ask for nothing.
    const ok = await client.chat.completions.create({ ...ask, functions: [], function_call: "auto", modalities: ["text"], audio: null } as Params);
    assert.equal(ok.choices.length, 1);
  });
});

test("completions echo with logprobs: every token's text_offset points at that token in the text, whole and streamed", async () => {
  await withClient(async (client) => {
    const ask = { model: "stories260K", prompt: "Once upon a", max_tokens: 4, temperature: 0, ignore_eos: true, echo: true, logprobs: 1 };
    /** Each token with text found at its offset (the first ones may have lost their leading space in the text). */
    const check = (text: string, lp: { tokens: string[]; text_offset: number[] }) => {
      lp.tokens.forEach((t, i) => {
        const at = lp.text_offset[i];
        assert.ok(text.startsWith(t, at) || (at === 0 && text.startsWith(t.trimStart())), `token ${i} ${JSON.stringify(t)} at ${at} in ${JSON.stringify(text)}: ${lp.text_offset}`);
      });
    };
    const whole = await client.completions.create(ask);
    check(whole.choices[0].text, whole.choices[0].logprobs as { tokens: string[]; text_offset: number[] });
    let text = "";
    const tokens: string[] = [];
    const offsets: number[] = [];
    for await (const c of await client.completions.create({ ...ask, stream: true })) {
      const ch = c.choices[0];
      text += ch.text;
      tokens.push(...(ch.logprobs?.tokens ?? []));
      offsets.push(...(ch.logprobs?.text_offset ?? []));
    }
    assert.equal(text, whole.choices[0].text);
    check(text, { tokens, text_offset: offsets });
  });
});

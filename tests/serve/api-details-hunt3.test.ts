/**
 * API surface details, through the real server and the real `openai` / `@anthropic-ai/sdk` clients:
 * vLLM's continuous usage counted per choice, reasoning effort taken as OpenAI takes it and mapped
 * alike on all three APIs, every Responses `include` value OpenAI knows, and an overloaded Messages
 * server answering 529 (which the Anthropic client retries).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { test } from "../harness.ts";
import { writeScriptedModel } from "../model/scripted-model.ts";
import { model as looper, modelPath as looperPath } from "./looper-model.ts";

type ServerOptions = Parameters<typeof startServer>[0];
type Running = Awaited<ReturnType<typeof startServer>>;

async function withServer(o: Pick<ServerOptions, "model" | "modelPath">, fn: (s: Running, client: OpenAI) => Promise<void>) {
  const s = await startServer({ host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 256, ...o });
  try {
    await fn(s, new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 }));
  } finally {
    await s.shutdown();
  }
}

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };
type Chunk = { choices: { index: number }[]; usage?: Usage | null };

test("continuous_usage_stats counts each chunk's own choice (vLLM's previous_num_tokens[i]), the final usage all of them", async () => {
  await withServer({ model: looper, modelPath: looperPath }, async (_, client) => {
    type Opts = OpenAI.ChatCompletionCreateParamsStreaming & { stream_options: { include_usage: boolean; continuous_usage_stats: boolean } };
    const stream = await client.chat.completions.create({
      model: "looper", messages: [{ role: "user", content: "Go~" }], n: 2, max_tokens: 6, temperature: 0, stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
    } as Opts);
    const chunks: Chunk[] = [];
    for await (const c of stream) chunks.push(c as unknown as Chunk);
    const final = chunks[chunks.length - 1];
    assert.deepEqual(final.choices, []);
    assert.equal(final.usage!.completion_tokens, 12, "the final usage sums both choices");
    const prompt = final.usage!.prompt_tokens;
    for (const index of [0, 1]) {
      const counts = chunks.filter((c) => c.choices[0]?.index === index).map((c) => {
        assert.equal(c.usage!.prompt_tokens, prompt);
        assert.equal(c.usage!.total_tokens, prompt + c.usage!.completion_tokens);
        return c.usage!.completion_tokens;
      });
      assert.equal(counts[0], 0, "the role chunk comes before any token");
      assert.ok(counts.every((n, i) => i === 0 || n >= counts[i - 1]), `choice ${index} never shrinks: ${counts}`);
      assert.equal(Math.max(...counts), 6, `choice ${index} counts its own 6 tokens, not the other's: ${counts}`);
    }
  });
});

test("continuous_usage_stats on completions gives each chunk its own prompt's length, the final usage their sum", async () => {
  await withServer({ model: looper, modelPath: looperPath }, async (_, client) => {
    const prompts = ["a~", "a much longer prompt than that~"];
    const lengths = await Promise.all(prompts.map(async (prompt) => (await client.completions.create({ model: "looper", prompt, max_tokens: 1 })).usage!.prompt_tokens));
    assert.notEqual(lengths[0], lengths[1]);
    type Opts = OpenAI.CompletionCreateParamsStreaming & { stream_options: { include_usage: boolean; continuous_usage_stats: boolean } };
    const stream = await client.completions.create({
      model: "looper", prompt: prompts, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true },
    } as Opts);
    const chunks: Chunk[] = [];
    for await (const c of stream) chunks.push(c as unknown as Chunk);
    for (const c of chunks.slice(0, -1)) {
      const i = c.choices[0].index;
      assert.equal(c.usage!.prompt_tokens, lengths[i], `choice ${i}'s chunk counts its own prompt`);
      assert.ok(c.usage!.completion_tokens <= 4, `choice ${i} counts only its own tokens: ${c.usage!.completion_tokens}`);
    }
    const { prompt_tokens, completion_tokens, total_tokens } = chunks[chunks.length - 1].usage!;
    assert.deepEqual({ prompt_tokens, completion_tokens, total_tokens }, { prompt_tokens: lengths[0] + lengths[1], completion_tokens: 8, total_tokens: lengths[0] + lengths[1] + 8 });
  });
});

// A model that says which effort and thinking switch its template was given: the generation prompt
// ends in a digit for each (digits are their own pre-tokens), and the model answers that digit's piece.
const EFFORT_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant" +
  "{% if reasoning_effort is not defined %}0{% elif reasoning_effort == 'low' and enable_thinking is defined and not enable_thinking %}2" +
  "{% elif reasoning_effort == 'low' and enable_thinking %}1{% elif reasoning_effort == 'medium' and enable_thinking %}3" +
  "{% elif reasoning_effort == 'high' and enable_thinking %}4{% elif reasoning_effort == 'xhigh' %}5{% else %}9{% endif %}{% endif %}";
const ANSWERS = ["unset", "low/on", "low/off", "medium/on", "high/on", "xhigh/raw"];
const dir = mkdtempSync(`${tmpdir()}/api-details-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const effortPath = `${dir}/effort.gguf`;
await writeScriptedModel(effortPath, {
  pieces: [...ANSWERS, "other"],
  next: [...ANSWERS.map((a, i): [string, string] => [String(i), a]), ["9", "other"]],
  chatTemplate: EFFORT_TEMPLATE,
});
const effortModel = await loadModel(effortPath);

test("reasoning effort: OpenAI's seven levels on chat and Responses, Anthropic's on Messages, mapped alike to the template's low/medium/high", async () => {
  await withServer({ model: effortModel, modelPath: effortPath }, async (s, client) => {
    type Effort = OpenAI.ReasoningEffort;
    const chat = async (effort: Effort | undefined, kwargs?: Record<string, unknown>) => (await client.chat.completions.create({
      model: "effort", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0,
      ...(effort ? { reasoning_effort: effort } : {}), ...(kwargs ? { chat_template_kwargs: kwargs } : {}),
    } as OpenAI.ChatCompletionCreateParamsNonStreaming)).choices[0].message.content;
    const efforts: Effort[] = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];
    const expected = ["low/off", "low/on", "low/on", "medium/on", "high/on", "high/on", "high/on"];
    assert.deepEqual(await Promise.all(efforts.map((e) => chat(e))), expected);
    assert.equal(await chat(undefined), "unset");
    // chat_template_kwargs say last and pass as written: a template that knows xhigh gets it so.
    assert.equal(await chat("high", { reasoning_effort: "xhigh" }), "xhigh/raw");
    assert.equal(await chat("high", { enable_thinking: false }), "other");

    const responses = await Promise.all(efforts.map(async (effort) => (await client.responses.create({ model: "effort", input: "Hi", max_output_tokens: 4, temperature: 0, reasoning: { effort } })).output_text));
    assert.deepEqual(responses, expected);

    const anthropic = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 0 });
    const messages = await Promise.all((["low", "medium", "high", "xhigh", "max"] as const).map(async (effort) => {
      const m = await anthropic.messages.create({ model: "effort", max_tokens: 4, messages: [{ role: "user", content: "Hi" }], output_config: { effort } });
      return (m.content[0] as Anthropic.TextBlock).text;
    }));
    assert.deepEqual(messages, ["low/on", "medium/on", "high/on", "high/on", "high/on"]);

    // A level OpenAI does not know is still a 400 naming it, on both OpenAI APIs.
    for (const ask of [
      () => client.chat.completions.create({ model: "effort", messages: [{ role: "user", content: "Hi" }], reasoning_effort: "ultra" as Effort }),
      () => client.responses.create({ model: "effort", input: "Hi", reasoning: { effort: "ultra" as Effort } }),
    ]) {
      await assert.rejects(ask(), (e: unknown) => e instanceof OpenAI.BadRequestError && /reasoning/.test(String(e.param)) && e.message.includes('"ultra"'));
    }
  });
});

test("Responses include: every value OpenAI knows is accepted (hosted tools' outputs are no-ops), logprobs honoured, an unknown one a 400 naming it", async () => {
  await withServer({ model: looper, modelPath: looperPath }, async (_, client) => {
    const hosted: OpenAI.Responses.ResponseIncludable[] = [
      "web_search_call.action.sources", "web_search_call.results", "file_search_call.results", "code_interpreter_call.outputs",
      "computer_call_output.output.image_url", "message.input_image.image_url", "reasoning.encrypted_content",
    ];
    const ask = { model: "looper", input: "Hi.", temperature: 0, tools: [{ type: "web_search" as const }] };
    const plain = await client.responses.create({ ...ask, include: hosted });
    assert.equal(plain.output_text, "Done.");
    const text = (r: OpenAI.Responses.Response) => (r.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    assert.deepEqual(text(plain).logprobs, [], "no log probabilities unless asked");
    const scored = await client.responses.create({ ...ask, include: [...hosted, "message.output_text.logprobs"] });
    assert.equal(scored.output_text, "Done.");
    assert.equal(text(scored).logprobs!.length, 1, "the answer's one token, scored");
    assert.equal(text(scored).logprobs![0].token, "Done.");

    const bad = await client.responses.create({ ...ask, include: ["message.output_text.logprobs", "web_search_call.sources" as OpenAI.Responses.ResponseIncludable] }).then(() => null, (e: unknown) => e);
    assert.ok(bad instanceof OpenAI.BadRequestError, String(bad));
    assert.equal(bad.param, "include[1]");
    assert.match(bad.message, /"web_search_call\.sources"/);
    assert.match(bad.message, /"web_search_call\.action\.sources"/, "the message lists what is accepted");
  });
});

test("an overloaded Messages server answers 529 overloaded_error, which the Anthropic client retries (the OpenAI APIs keep 503)", async () => {
  await withServer({ model: looper, modelPath: looperPath }, async (s) => {
    assert.equal(await s.drain(1000), 0);
    let calls = 0;
    const counting: typeof fetch = (input, init) => (calls++, fetch(input, init));
    const anthropic = new Anthropic({ baseURL: s.url, apiKey: "none", maxRetries: 1, fetch: counting });
    const err = await anthropic.messages.create({ model: "looper", max_tokens: 4, messages: [{ role: "user", content: "Hi." }] }).then(() => null, (e: unknown) => e);
    assert.ok(err instanceof Anthropic.OverloadedError, String(err));
    assert.equal(err.status, 529);
    assert.equal((err.error as { error: { type: string } }).error.type, "overloaded_error");
    assert.equal(calls, 2, "retried once, as the client retries an overloaded Anthropic API");
    const chat = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "looper", messages: [{ role: "user", content: "Hi." }] }) });
    assert.equal(chat.status, 503);
    assert.equal(chat.headers.get("retry-after"), "1");
  });
});
